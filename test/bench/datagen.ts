// Data sets for the benchmarks, written straight through the store (no server): run records, cloned
// waiting runs, telemetry events.
import { ClassicLevel } from 'classic-level';
import { LevelStore } from '../../src/store/level.js';
import type { EventInput, RecordKind, Store, WriteOp } from '../../src/store/store.js';
import { newId, type IdPrefix } from '../../src/ids.js';
import { runIndexes, type RunRecord } from '../../src/runtime/run-record.js';

/** Writes `ops` in commits of `perCommit`, a few commits in flight (the store group-commits them). */
export async function writeOps(store: Store, ops: Iterable<WriteOp>, perCommit = 1000, inFlight = 4): Promise<number> {
  let batch: WriteOp[] = [];
  let pending: Promise<unknown>[] = [];
  let n = 0;
  for (const op of ops) {
    batch.push(op);
    n++;
    if (batch.length >= perCommit) {
      pending.push(store.commit(batch));
      batch = [];
      if (pending.length >= inFlight) {
        await Promise.all(pending);
        pending = [];
      }
    }
  }
  if (batch.length) pending.push(store.commit(batch));
  await Promise.all(pending);
  return n;
}

/** A completed run as runs.ts leaves it: one tool call, usage, a short answer. */
export function completedRun(i: number, at: Date): RunRecord {
  const iso = new Date(at.getTime() + i).toISOString();
  const run_id = newId('run');
  const trace_id = newId('trace');
  return {
    run_id,
    session_id: newId('session'),
    agent_name: 'assistant',
    agent_id: 'default',
    kind: 'sync',
    task_id: null,
    query: `What is the status of order ${i}? Please check the ledger and summarise.`,
    status: 'completed',
    step: 2,
    attempt: 1,
    trace_id,
    trace_ids: [trace_id],
    tool_calls: [
      {
        tool_call_id: `call_${i}`,
        tool_name: 'clock',
        source: 'builtin',
        idempotent: true,
        step: 1,
        state: 'completed',
        outcome: 'success',
        started_at: iso,
        ended_at: iso,
        result_content: '{"now":"2026-01-01T00:00:00.000Z","timezone":"UTC"}',
      },
    ],
    usage: { requests: 2, request_tokens: 180, response_tokens: 60, total_tokens: 240, estimated_cost_usd: 0 },
    approvals: [],
    budget_requests: [],
    budget_request: null,
    outcomes: [],
    error: null,
    response: `Order ${i} shipped on time; the ledger shows one entry and nothing outstanding. The clock tool says it is 2026-01-01T00:00:00Z.`,
    termination_reason: 'stop',
    guardrail_result: { allowed: true },
    machine_state: 'done',
    created_at: iso,
    updated_at: iso,
    heartbeat_at: iso,
    lease_seconds: 60,
    lease_expires_at: null,
    owner: null,
    recoveries: 0,
    decided_at: null,
    decision: null,
    ended_at: iso,
  };
}

export async function populateCompletedRuns(dir: string, n: number): Promise<void> {
  const store = new LevelStore({ path: dir });
  await store.open();
  try {
    const at = new Date('2026-01-01T00:00:00Z');
    function* ops(): Generator<WriteOp> {
      for (let i = 0; i < n; i++) {
        const r = completedRun(i, at);
        yield { op: 'create', kind: 'runs', id: r.run_id, value: r, indexes: runIndexes(r) };
      }
    }
    await writeOps(store, ops());
  } finally {
    await store.close();
  }
}

export interface RunTemplate {
  run: RunRecord;
  /** Raw JSON of each record kind of the run, keyed by kind. */
  records: Array<{ kind: RecordKind; id: string; json: string; indexes: Record<string, string | null> }>;
  ids: string[];
}

/** Reads a real run (record, snapshot, trace) to clone. */
export async function readRunTemplate(store: Store, runId: string): Promise<RunTemplate> {
  const run = (await store.getRecord<RunRecord>('runs', runId))!.value;
  const snap = await store.getRecord('snapshots', runId);
  const trace = await store.getRecord('traces', run.trace_id);
  if (!snap || !trace) throw new Error(`run ${runId} has no snapshot or trace to clone`);
  return {
    run,
    records: [
      { kind: 'runs', id: runId, json: JSON.stringify(run), indexes: runIndexes(run) },
      { kind: 'snapshots', id: runId, json: JSON.stringify(snap.value), indexes: {} },
      { kind: 'traces', id: run.trace_id, json: JSON.stringify(trace.value), indexes: { run_id: runId, session_id: run.session_id, task_id: run.task_id } },
    ],
    ids: [run.run_id, run.session_id, run.trace_id, ...run.approvals.map((a) => a.approval_id)],
  };
}

/** `n` copies of a run with fresh run/session/trace/approval ids; returns the new run ids. */
export async function cloneRuns(store: Store, t: RunTemplate, n: number): Promise<Array<{ run_id: string; session_id: string; approval_ids: string[] }>> {
  const made: Array<{ run_id: string; session_id: string; approval_ids: string[] }> = [];
  const prefixes = t.ids.map((id) => id.slice(0, id.indexOf('_')) as IdPrefix);
  const pattern = new RegExp(t.ids.map((id) => id.replace(/[.*+?^${}()|[\]\\-]/g, '\\$&')).join('|'), 'g');
  function* ops(): Generator<WriteOp> {
    for (let i = 0; i < n; i++) {
      const fresh = new Map(t.ids.map((id, k) => [id, newId(prefixes[k])]));
      const swap = (s: string) => s.replace(pattern, (m) => fresh.get(m)!);
      const run_id = fresh.get(t.run.run_id)!;
      made.push({ run_id, session_id: fresh.get(t.run.session_id)!, approval_ids: t.run.approvals.map((a) => fresh.get(a.approval_id)!) });
      for (const r of t.records) {
        const indexes = Object.fromEntries(Object.entries(r.indexes).map(([k, v]) => [k, typeof v === 'string' ? swap(v) : v]));
        yield { op: 'create', kind: r.kind, id: swap(r.id), value: JSON.parse(swap(r.json)), indexes };
      }
    }
  }
  await writeOps(store, ops(), 999);
  return made;
}

/** A telemetry event shaped like what runs.ts emits for a model call. */
export function telemetryEvent(i: number, runId: string, sessionId: string, traceId: string, timestamp: string): EventInput {
  const types = ['user_message', 'agent_step', 'model_call', 'model_response', 'tool_call', 'tool_result', 'final_answer'];
  return {
    event_id: newId('event'),
    event_type: types[i % types.length],
    trace_id: traceId,
    span_id: newId('span'),
    parent_span_id: null,
    sequence: i,
    timestamp,
    actor: { type: 'model', id: 'demo', name: 'demo' },
    input: { messages: 3, tools: ['clock'], last: { role: 'user', content: 'What time is it in Paris right now?' } },
    output: { text: 'It is 10:00 in Paris.', finish_reason: 'stop' },
    error: null,
    token_usage: { input_tokens: 80, output_tokens: 12, total_tokens: 92 },
    estimated_cost_usd: 0,
    duration_ms: 3,
    metadata: { run_id: runId, session_id: sessionId, agent_id: 'default', task_id: null, step: 1 },
    run_id: runId,
    session_id: sessionId,
    task_id: null,
  };
}

/** `total` events spread round-robin over `runs` run ids (and runs/10 sessions); returns the run ids. */
export async function populateEvents(dir: string, total: number, runs: number): Promise<string[]> {
  const store = new LevelStore({ path: dir, sync: false });
  await store.open();
  const runIds = Array.from({ length: runs }, (_, i) => `run_bench${String(i).padStart(6, '0')}`);
  const sessions = Array.from({ length: Math.max(1, runs / 10) }, (_, i) => `session_bench${String(i).padStart(6, '0')}`);
  const traces = runIds.map((r) => r.replace('run_', 'trace_'));
  try {
    const base = Date.now() - 3_600_000;
    const batch = 1000;
    let pending: Promise<unknown>[] = [];
    for (let i = 0; i < total; i += batch) {
      const events: EventInput[] = [];
      for (let j = i; j < Math.min(total, i + batch); j++) {
        const r = j % runs;
        events.push(telemetryEvent(Math.floor(j / runs), runIds[r], sessions[r % sessions.length], traces[r], new Date(base + j).toISOString()));
      }
      pending.push(store.appendEvents(events));
      if (pending.length >= 4) {
        await Promise.all(pending);
        pending = [];
      }
    }
    await Promise.all(pending);
  } finally {
    await store.close();
  }
  // A server that holds a million events gathered them over days, and LevelDB compacted them as
  // they came. Loaded in seconds, they sit in fresh level-0 files that the server's first minutes
  // would spend compacting, which is a measurement of the bulk load, not of the queries.
  const db = new ClassicLevel<string, string>(dir);
  await db.open();
  try {
    await db.compactRange('\u0000', '\uffff');
  } finally {
    await db.close();
  }
  return runIds;
}
