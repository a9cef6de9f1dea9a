// Background runs through HTTP against a real server in real time, the model behind the scripted
// OpenAI-compatible server (directives in each task query, see helpers.ts): the lifecycle and its
// events, workspaces, overlap policies, retries, timeouts, cancellation, waits and approvals.
import { readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, startTestServer, tempDir, type TestServer } from '../helpers/server.js';
import type { EventInput, WriteOp } from '../../src/store/store.js';
import {
  BackgroundRun,
  BackgroundRunAttemptsResponse,
  BackgroundRunEventsResponse,
  BackgroundRunWorkspaceResponse,
  RunWaitTimeoutResponse,
} from '../../src/schemas/index.js';
import { api, directModel, eventNames, TOOLS, waitRun, type Api } from './helpers.js';
import { repos } from '../../src/store/repos/index.js';
import type { RunRecord } from '../../src/runtime/run-record.js';
import { waitFor } from '../helpers/wait.js';

let model: ScriptedOpenAI;
let server: TestServer;
let a: Api;
let ledger: string;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  directModel(model);
  ledger = join(tempDir('agentd-bg-ledger-'), 'ledger.txt');
  writeFileSync(ledger, '');
  process.env.BG_LEDGER = ledger;
  delete process.env.BG_SLOW_MS;
  server = await startTestServer(serverConfig, { modelUrl: model.url });
  a = api(server.url);
});

afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
  delete process.env.BG_LEDGER;
});

let seq = 0;
const serverConfig = {
  agent: { tools: { local: TOOLS, builtin: ['workspace'] } },
  governance: { rules: [{ tools: ['bg_ask'], effect: 'ask' }] },
  background: { poll_interval_ms: 50, lease_seconds: 2, concurrency: 4 },
  // Shorter than the background lease, so an agent run that renewed a lease of its own would
  // do so between two of its background run's heartbeats ('one lease' below).
  runs: { lease_seconds: 1 },
  server: { request_timeout_seconds: 2 },
};
async function task(body: Record<string, unknown>): Promise<string> {
  const task_id = `t${++seq}`;
  const r = await a.post('/background/tasks', { task_id, schedule: { type: 'manual' }, ...body });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return task_id;
}

async function run(taskId: string, body: Record<string, unknown> = {}): Promise<any> {
  const r = await a.post(`/background/tasks/${taskId}/run`, body);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return BackgroundRun.parse(r.body);
}

async function events(runId: string): Promise<any[]> {
  const r = await a.get(`/background/runs/${runId}/events`);
  expect(r.status).toBe(200);
  const parsed = BackgroundRunEventsResponse.parse(r.body);
  expect(parsed.count).toBe(parsed.events.length);
  return parsed.events;
}

async function attempts(runId: string): Promise<any[]> {
  const body = (await a.get(`/background/runs/${runId}/attempts`)).body;
  BackgroundRunAttemptsResponse.parse(body);
  // The raw body: parsing would strip agent_run_id, which the attempt carries beyond the spec's fields.
  return body.attempts;
}

/** GET with the path sent byte for byte (fetch would normalise "..", "%2E%2E" before sending). */
function rawGet(path: string): Promise<{ status: number; body: string }> {
  const url = new URL(server.url);
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, path, method: 'GET' }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('a manual run, end to end', () => {
  it('runs with wait, records one attempt, and replays contiguous lifecycle events', async () => {
    const t = await task({ query: 'CALL workspace_write {"path": "out/report.txt", "content": "report body"}' });
    const r = await run(t, { wait: true });
    expect(r).toMatchObject({ status: 'completed', attempt: 1, max_attempts: 1, trigger_type: 'manual', lease_owner: null, error: null });
    expect(r.result_preview).toContain('done:');
    expect(r.finished_at).not.toBeNull();
    expect(r.session_id).toBe(`background:default:${t}`);

    const ev = await events(r.run_id);
    // Heartbeats come every lease/4 (500 ms here) while the run works: how many depends on the machine's load.
    expect(eventNames(ev).filter((n) => n !== 'background_run_heartbeat')).toEqual([
      'background_run_queued',
      'background_run_claimed',
      'background_run_started',
      'background_run_completed',
    ]);
    for (const e of ev) expect(e).toMatchObject({ run_id: r.run_id, task_id: t, agent_id: 'default', trace_id: expect.stringMatching(/^trace_/) });
    expect(new Set(ev.map((e) => e.trace_id)).size).toBe(1);
    expect(ev.at(-1)).toMatchObject({ status: 'completed', attempt: 1, lease_generation: 1 });

    const at = await attempts(r.run_id);
    expect(at).toEqual([
      expect.objectContaining({ attempt_number: 1, status: 'completed', reason: 'initial', agent_run_id: r.run_id, finished_at: expect.any(String) }),
    ]);

    // The same events are in telemetry, on the background run's own trace, in one background.run span.
    const tel = await a.get(`/telemetry/events?run_id=${r.run_id}&event_type=background_run_completed`);
    expect(tel.status).toBe(200);
    // Its sequence is its place in the run's lifecycle, heartbeats included (their count depends on load).
    const completedSeq = (ev.find((e) => e.event === 'background_run_completed') as { sequence: number }).sequence;
    expect(completedSeq).toBeGreaterThanOrEqual(4);
    expect(tel.body.events[0]).toMatchObject({
      trace_id: ev[0].trace_id,
      sequence: completedSeq,
      actor: { type: 'background' },
      metadata: { task_id: t, status: 'completed' },
    });
    const trace = await a.get(`/telemetry/traces/${ev[0].trace_id}`);
    expect(trace.status).toBe(200);
    const spans = JSON.stringify(trace.body);
    expect(spans).toContain('background.run');
    expect(trace.body.trace.events.map((e: any) => e.event_type)).toEqual(ev.map((e) => e.event));
  });

  it('creates a run without reading its new row or its trace counters from the disk (ids made up here are known absent)', async () => {
    const db = (server.store as unknown as { db?: { getMany(keys: string[], o?: unknown): Promise<unknown>; get(key: string): Promise<unknown> } }).db;
    if (!db) return; // the embedded store only (AGENTD_TEST_STORE=postgres has no LevelDB)
    const reads: string[] = [];
    const getMany = db.getMany.bind(db);
    const get = db.get.bind(db);
    db.getMany = (keys, o) => (reads.push(...keys), getMany(keys, o));
    db.get = (key) => (reads.push(key), get(key));
    let r: { run_id: string };
    try {
      r = await run(await task({ query: 'just answer', session_policy: { mode: 'run' } }), { wait: true });
    } finally {
      db.getMany = getMany;
      db.get = get;
    }
    expect(reads.filter((k) => k === `r\0bg_runs\0${r.run_id}` || k.startsWith(`n\0traces\0run_id\0${r.run_id}`))).toEqual([]);
    expect(reads.filter((k) => k.startsWith('n\0traces\0session_id\0') && k.includes(r.run_id))).toEqual([]);
  });

  it('stores lifecycle events in the row commits that cause them, and a run-mode session in the agent run\u2019s final commit', async () => {
    const store = server.store;
    if (!store.capabilities.atomicCommitEvents) return; // a store that would append them behind the commit instead
    const appended: string[][] = [];
    const commits: string[][] = [];
    const withEvents: string[][] = [];
    const { appendEvents, commit, commitWithEvents } = store;
    const noted = <T extends Array<{ op: string; kind: string }>>(list: T): T => (commits.push(list.map((o) => `${o.op}:${o.kind}`)), list);
    store.appendEvents = (events) => (appended.push(events.map((e) => e.event_type)), appendEvents.call(store, events));
    // A function form is called when the store takes the write (not here).
    store.commit = (ops) => commit.call(store, typeof ops === 'function' ? () => noted(ops()) : noted(ops));
    // Events may be a function too (called right after the ops, when the store takes the write).
    const notedEvents = (list: EventInput[]) => (withEvents.push(list.map((e) => e.event_type)), list);
    store.commitWithEvents = (ops, events) =>
      commitWithEvents.call(
        store,
        typeof ops === 'function' ? () => noted(ops()) : noted(ops),
        typeof events === 'function' ? () => notedEvents(events()) : notedEvents(events),
      );
    let r: { run_id: string; session_id: string };
    try {
      r = await run(await task({ query: 'just answer', session_policy: { mode: 'run' } }), { wait: true });
    } finally {
      store.appendEvents = appendEvents;
      store.commit = commit;
      store.commitWithEvents = commitWithEvents;
    }
    expect(appended.flat().filter((t) => t.startsWith('background_'))).toEqual([]);
    expect(withEvents.flat()).toEqual(
      expect.arrayContaining(['background_run_queued', 'background_run_claimed', 'background_run_started', 'background_run_completed']),
    );
    // The session is created with the agent run's record, not in a commit of its own.
    const sessionCommits = commits.filter((c) => c.includes('create:sessions'));
    expect(sessionCommits).toHaveLength(1);
    // (create:runs when the whole agent run fit in its creating write's fold window, else update:runs)
    expect(sessionCommits[0].some((op) => op === 'create:runs' || op === 'update:runs')).toBe(true);
    const history = await a.get(`/sessions/${encodeURIComponent(r!.session_id)}/history`);
    expect(history.status).toBe(200);
    expect(history.body.messages.map((m: { role: string }) => m.role)).toEqual(['user', 'assistant']);
    expect((await events(r!.run_id)).map((e) => e.sequence)).toEqual([1, 2, 3, 4]);
  });

  it('writes a completed run\u2019s end in its agent run\u2019s final commit: three commits per run, the completion with the agent run\u2019s record', async () => {
    // On a store several instances share (PostgreSQL) too: a background run's agent run's creating
    // write is held back there as well (its id was out before it existed: src/runtime/run-host.ts),
    // so it is not a commit of its own (four commits per run before).
    if (!server.store.capabilities.atomicCommitEvents) return;
    // The agent run's creating write folds with its end only while the fold window (10 ms by
    // default, src/runtime/run-host.ts) is open: a server of its own holds it open, so a loaded
    // machine cannot split the creation into a commit of its own.
    const held = await startTestServer(serverConfig, { modelUrl: model.url, createFoldMs: 60_000 });
    const shared = a;
    a = api(held.url);
    const store = held.store;
    // Every commit the run's writes make, each with its ops and the events it carries.
    const writes: Array<{ ops: string[]; events: string[] }> = [];
    const { commit, commitWithEvents } = store;
    const entry = () => {
      const w = { ops: [] as string[], events: [] as string[] };
      writes.push(w);
      return w;
    };
    const opsOf = (w: { ops: string[] }, ops: Parameters<typeof commit>[0]) => {
      const list = (l: WriteOp[]) => (w.ops.push(...l.map((o) => `${o.op}:${o.kind}`)), l);
      return typeof ops === 'function' ? () => list(ops()) : list(ops);
    };
    store.commit = (ops) => commitWithEvents.call(store, opsOf(entry(), ops), []).then((r) => r.records);
    store.commitWithEvents = (ops, events) => {
      const w = entry();
      const list = (l: EventInput[]) => (w.events.push(...l.map((e) => e.event_type)), l);
      return commitWithEvents.call(store, opsOf(w, ops), typeof events === 'function' ? () => list(events()) : list(events));
    };
    let r: { run_id: string; status: string };
    try {
      try {
        r = await run(await task({ query: 'just answer', session_policy: { mode: 'run' } }), { wait: true });
      } finally {
        store.commit = commit;
        store.commitWithEvents = commitWithEvents;
      }
      expect(r!.status).toBe('completed');
      const mine = writes.filter((w) => w.ops.some((o) => o.endsWith(':bg_runs') || o.endsWith(':runs')));
      // enqueue, claim + start, and the agent run's final commit carrying the completion
      expect(mine.map((w) => w.events.filter((e) => e.startsWith('background_')))).toEqual([
        ['background_run_queued'],
        ['background_run_claimed', 'background_run_started'],
        ['background_run_completed'],
      ]);
      const final = mine[2];
      expect(final.ops).toEqual(expect.arrayContaining(['update:bg_runs', 'update:bg_attempts', 'create:sessions']));
      expect(final.ops.some((o) => o === 'create:runs' || o === 'update:runs')).toBe(true);
      // Nothing reads as changed: the run, its events 1..4, its task's counts.
      const got = await a.get(`/background/runs/${r!.run_id}`);
      expect(got.body).toMatchObject({ status: 'completed', attempt: 1 });
      expect((await events(r!.run_id)).map((e) => [e.sequence, e.event])).toEqual([
        [1, 'background_run_queued'],
        [2, 'background_run_claimed'],
        [3, 'background_run_started'],
        [4, 'background_run_completed'],
      ]);
    } finally {
      a = shared;
      await held.stop();
      held.cleanup();
    }
  });

  it('carries its agent run\u2019s events in the agent run\u2019s record writes: its first in the creating write, its last in the final one', async () => {
    const store = server.store;
    if (!store.capabilities.atomicCommitEvents) return; // a store that would append them behind the commit instead
    const appended: string[] = [];
    const carried: string[][] = [];
    const { appendEvents, commitWithEvents } = store;
    store.appendEvents = (events) => (appended.push(...events.map((e) => e.event_type)), appendEvents.call(store, events));
    store.commitWithEvents = (ops, events) =>
      commitWithEvents.call(store, ops, () => {
        const list = typeof events === 'function' ? events() : events;
        carried.push(list.map((e) => e.event_type));
        return list;
      });
    let r: { run_id: string; status: string };
    try {
      r = await run(await task({ query: 'just answer' }), { wait: true });
    } finally {
      store.appendEvents = appendEvents;
      store.commitWithEvents = commitWithEvents;
    }
    expect(r!.status).toBe('completed');
    // Whatever took a write of its own in between (a model call slower than the creating write's
    // fold window), the run's first event and its last rode in its record's writes.
    expect(appended).not.toContain('user_message');
    expect(appended).not.toContain('final_answer');
    expect(carried.some((c) => c.includes('user_message'))).toBe(true);
    // Its last word in the commit that ends it, with its background run's completion (on a store
    // several instances share, the completion rides in its background run row's own write).
    if (store.capabilities.sharedByInstances) {
      expect(carried.some((c) => c.includes('final_answer'))).toBe(true);
      expect(carried.some((c) => c.includes('background_run_completed'))).toBe(true);
      expect(appended).not.toContain('background_run_completed');
    } else expect(carried.some((c) => c.includes('final_answer') && c.includes('background_run_completed'))).toBe(true);
    // Served as before: the trace reads both.
    const trace = await a.get(`/telemetry/traces/${(await a.get(`/runs/${r!.run_id}`)).body.trace_id}`);
    expect(trace.status).toBe(200);
    expect(JSON.stringify(trace.body)).toContain('user_message');
    expect(JSON.stringify(trace.body)).toContain('final_answer');
    // In cursor order, the run's events keep their sequence order (none that rode overtook one appended).
    const listed = (await a.get(`/telemetry/events?run_id=${r!.run_id}&limit=100`)).body.events as Array<{ sequence: number; trace_id: string }>;
    const ours = listed.filter((e) => e.trace_id === trace.body.trace.trace_id).map((e) => e.sequence);
    expect(ours.length).toBeGreaterThan(2);
    expect(ours).toEqual([...ours].sort((x, y) => x - y));
  });

  it('writes run.json and events.jsonl, lists the workspace and downloads files, refusing traversal', async () => {
    const t = await task({ query: 'CALL workspace_write {"path": "notes/a.txt", "content": "hello file"}' });
    const r = await run(t, { wait: true });
    expect(r.status).toBe('completed');
    expect(r.workspace_path).toBe(`background/default/${t}/${r.run_id}`); // relative to the workspace root

    const ws = await a.get(`/background/runs/${r.run_id}/workspace`);
    expect(ws.status).toBe(200);
    const listing = BackgroundRunWorkspaceResponse.parse(ws.body);
    const paths = listing.files.map((f) => f.path);
    expect(paths).toEqual(expect.arrayContaining(['run.json', 'events.jsonl', 'notes', 'notes/a.txt']));
    expect(listing.files.find((f) => f.path === 'notes')).toMatchObject({ is_dir: true });
    expect(listing.files.find((f) => f.path === 'notes/a.txt')).toMatchObject({ name: 'a.txt', size: 10, is_dir: false });

    const runJson = JSON.parse(readFileSync(join(server.dataDir, 'workspaces', r.workspace_path, 'run.json'), 'utf8'));
    expect(runJson).toMatchObject({ run_id: r.run_id, status: 'completed' });
    const lines = readFileSync(join(server.dataDir, 'workspaces', r.workspace_path, 'events.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => l.sequence)).toEqual([1, 2, 3, 4]);
    expect(Object.keys(lines[0]).sort()).toEqual(
      ['agent_id', 'attempt', 'event', 'lease_generation', 'run_id', 'sequence', 'status', 'task_id', 'timestamp', 'worker_id'].sort(),
    );

    const file = await fetch(`${server.url}/background/runs/${r.run_id}/workspace/files/notes/a.txt`);
    expect(file.status).toBe(200);
    expect(await file.text()).toBe('hello file');
    for (const bad of [
      '../../../config.json',
      '..%2F..%2F..%2Fconfig.json',
      '%2E%2E/%2E%2E/x',
      'notes/../../../x',
      'notes/..%2F..%2F..%2Fx',
      '%2Fetc%2Fpasswd',
    ]) {
      const res = await rawGet(`/background/runs/${r.run_id}/workspace/files/${bad}`);
      expect(res.status, bad).toBe(400);
      expect(JSON.parse(res.body), bad).toEqual({ detail: expect.any(String), code: 'AGT_ERR_WORKSPACE_PATH_OUTSIDE' });
    }
    const missing = await fetch(`${server.url}/background/runs/${r.run_id}/workspace/files/nope.txt`);
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({ detail: expect.any(String), code: 'AGT_ERR_WORKSPACE_FILE_NOT_FOUND' });
    expect((await fetch(`${server.url}/background/runs/bgrun_nope/workspace/files/run.json`)).status).toBe(404);
    expect((await a.get('/background/runs/bgrun_nope/workspace')).status).toBe(404);
  });

  it('writes no workspace files when the policy says so', async () => {
    const t = await task({ query: 'hi', workspace_policy: { write_events_jsonl: false, write_run_json: false } });
    const r = await run(t, { wait: true });
    expect(r.status).toBe('completed');
    expect((await a.get(`/background/runs/${r.run_id}/workspace`)).body.files).toEqual([]);
    expect((await events(r.run_id)).length).toBe(4);
  });

  it('applies a one-off query override and lists runs by task and status', async () => {
    const t = await task({ query: 'FAIL' });
    const r = await run(t, { wait: true, query: 'hello instead' });
    expect(r).toMatchObject({ status: 'completed', query_snapshot: 'hello instead', trigger_metadata: { query_override: true } });
    const list = await a.get(`/background/runs?task_id=${t}&status=completed`);
    expect(list.body).toMatchObject({ total: 1, runs: [expect.objectContaining({ run_id: r.run_id })] });
    expect((await a.get(`/background/runs?task_id=${t}&status=failed`)).body.total).toBe(0);
    expect((await a.get('/background/runs?status=nonsense')).status).toBe(422);
  });
});

describe('schedules in real time', () => {
  it('an interval task at 1 s produces scheduled runs', async () => {
    const t = await task({ query: 'tick', schedule: { type: 'interval', seconds: 1 }, overlap_policy: 'allow_parallel' });
    const runs = await eventually(async () => {
      const r = await a.get(`/background/runs?task_id=${t}&status=completed`);
      return r.body.runs.length >= 2 ? r.body.runs : null;
    }, 10_000);
    await a.post(`/background/tasks/${t}/pause`);
    for (const r of runs.slice(0, 2)) {
      expect(r).toMatchObject({ trigger_type: 'interval', occurrence_id: expect.stringMatching(/^interval:1:/), due_at: expect.any(String) });
      const names = eventNames(await events(r.run_id));
      expect(names.slice(0, 2)).toEqual(['background_task_scheduled', 'background_run_queued']);
      expect(names.at(-1)).toBe('background_run_completed');
    }
    // Consecutive occurrences one second apart, each dispatched once.
    const due = runs.map((r: any) => Date.parse(r.due_at)).sort((x: number, y: number) => x - y);
    expect(due[1] - due[0], JSON.stringify(runs)).toBe(1000);
    expect(new Set(runs.map((r: any) => r.occurrence_id)).size).toBe(runs.length);
    const st = (await a.get(`/background/tasks/${t}/status`)).body;
    expect(st.schedule_state).toMatchObject({ paused: true, last_due_at: expect.any(String), last_dispatched_at: expect.any(String) });
    await a.del(`/background/tasks/${t}?delete_runs=true`);
    expect((await a.get(`/background/runs?task_id=${t}`)).body.total).toBe(0);
  });

  it('runs a once task at its time, not claimable before its deterministic jitter', async () => {
    const runAt = new Date(Date.now() + 1000).toISOString();
    const t = await task({ query: 'once', schedule: { type: 'once', run_at: runAt, jitter_seconds: 2 } });
    const runs = await eventually(async () => {
      const r = await a.get(`/background/runs?task_id=${t}&status=completed`);
      return r.body.runs.length === 1 ? r.body.runs : null;
    }, 10_000);
    const r = runs[0];
    expect(r).toMatchObject({ trigger_type: 'once', due_at: runAt, occurrence_id: `once:1:${runAt}` });
    const planned = Date.parse(r.trigger_metadata.run_at);
    expect(planned - Date.parse(runAt)).toBeGreaterThanOrEqual(0);
    expect(planned - Date.parse(runAt)).toBeLessThanOrEqual(2000);
    expect(Date.parse(r.claimed_at)).toBeGreaterThanOrEqual(planned);
    const st = (await a.get(`/background/tasks/${t}/status`)).body;
    expect(st.schedule_state).toMatchObject({ last_due_at: runAt, next_due_at: null });
  });
});

describe('overlap policies', () => {
  it('skip_if_running stores the second run skipped', async () => {
    const t = await task({ query: 'CALL bg_slow {"ms": 800}' });
    const first = await run(t);
    const second = await run(t);
    expect(second.status).toBe('skipped');
    expect(second.error).toContain('skip_if_running');
    expect(eventNames(await events(second.run_id))).toEqual(['background_run_skipped']);
    expect((await waitRun(a, first.run_id)).status).toBe('completed');
    const st = (await a.get(`/background/tasks/${t}/status`)).body;
    expect(st.status_counts).toMatchObject({ completed: 1, skipped: 1 });
  });

  it('queue_next runs strictly one at a time in FIFO order', async () => {
    const t = await task({ query: 'CALL bg_slow {"ms": 300}', overlap_policy: 'queue_next' });
    const ids = [(await run(t)).run_id, (await run(t)).run_id, (await run(t)).run_id];
    const done = await Promise.all(ids.map((id) => waitRun(a, id)));
    expect(done.map((r) => r.status)).toEqual(['completed', 'completed', 'completed']);
    for (let i = 1; i < done.length; i++) {
      expect(Date.parse(done[i].claimed_at)).toBeGreaterThanOrEqual(Date.parse(done[i - 1].finished_at));
    }
  });

  it('cancel_previous cancels the running run promptly, then runs the new one', async () => {
    const t = await task({ query: 'CALL bg_slow {"ms": 20000}', overlap_policy: 'cancel_previous' });
    const first = await run(t);
    await waitRun(a, first.run_id, (r) => r.status === 'running');
    const second = await run(t, { query: 'quick one' });
    const cancelled = await waitRun(a, first.run_id, undefined, 5000);
    expect(cancelled.status).toBe('cancelled');
    expect(eventNames(await events(first.run_id)).at(-1)).toBe('background_run_cancelled');
    expect((await attempts(first.run_id))[0]).toMatchObject({ status: 'cancelled' });
    expect((await waitRun(a, second.run_id)).status).toBe('completed');
  });

  it('allow_parallel runs at the same time', async () => {
    const t = await task({ query: 'CALL bg_slow {"ms": 700}', overlap_policy: 'allow_parallel', session_policy: { mode: 'run' } });
    const r1 = await run(t);
    const r2 = await run(t);
    expect(r2.status).toBe('queued');
    const [d1, d2] = await Promise.all([waitRun(a, r1.run_id), waitRun(a, r2.run_id)]);
    expect([d1.status, d2.status]).toEqual(['completed', 'completed']);
    expect(d1.session_id).not.toBe(d2.session_id);
    expect(Date.parse(d2.started_at)).toBeLessThan(Date.parse(d1.finished_at));
  });
});

describe('retries and timeouts', () => {
  it('retries a failed attempt after the delay; the retry starts a fresh agent run', async () => {
    const t = await task({ query: 'FAILONCE:retry-a hello', retry_policy: { max_retries: 2, initial_delay_seconds: 1 } });
    const r = await run(t);
    expect(r.max_attempts).toBe(3);
    const done = await waitRun(a, r.run_id);
    expect(done).toMatchObject({ status: 'completed', attempt: 2, error: null });
    const at = await attempts(r.run_id);
    expect(at).toEqual([
      expect.objectContaining({
        attempt_number: 1,
        status: 'failed',
        reason: 'initial',
        retry_delay_seconds: 1,
        agent_run_id: r.run_id,
        error: expect.stringContaining('scripted failure'),
      }),
      expect.objectContaining({ attempt_number: 2, status: 'completed', reason: 'retry', agent_run_id: `${r.run_id}.a2` }),
    ]);
    expect(Date.parse(at[1].started_at) - Date.parse(at[0].finished_at)).toBeGreaterThanOrEqual(1000);
    expect(eventNames(await events(r.run_id))).toEqual([
      'background_run_queued',
      'background_run_claimed',
      'background_run_started',
      'background_run_retrying',
      'background_run_queued',
      'background_run_claimed',
      'background_run_started',
      'background_run_completed',
    ]);
  });

  it('backs off exponentially and fails once the attempts are used up', async () => {
    const t = await task({ query: 'FAIL', retry_policy: { max_retries: 2, initial_delay_seconds: 1, backoff: 'exponential' } });
    const r = await run(t);
    const done = await waitRun(a, r.run_id, undefined, 15_000);
    expect(done).toMatchObject({ status: 'failed', attempt: 3, error: expect.stringContaining('scripted failure') });
    const at = await attempts(r.run_id);
    expect(at.map((x) => [x.status, x.retry_delay_seconds])).toEqual([
      ['failed', 1],
      ['failed', 2],
      ['failed', null],
    ]);
    const names = eventNames(await events(r.run_id));
    expect(names.filter((n) => n === 'background_run_retrying')).toHaveLength(2);
    expect(names.at(-1)).toBe('background_run_failed');
  });

  it('does not retry from scratch after a non-idempotent call succeeded', async () => {
    const t = await task({ query: 'CALL bg_mark {"tag": "once"} THENFAIL', retry_policy: { max_retries: 3, initial_delay_seconds: 1 } });
    const done = await run(t, { wait: true });
    expect(done.status).toBe('failed');
    expect(done.metadata.side_effects).toEqual([expect.objectContaining({ tool_name: 'bg_mark', outcome: 'success' })]);
    expect(await attempts(done.run_id)).toHaveLength(1);
    expect(
      readFileSync(ledger, 'utf8')
        .split('\n')
        .filter((l) => l.startsWith(`mark:once:${done.run_id}`)),
    ).toHaveLength(1);
  });

  it('stops an attempt at timeout_seconds, with heartbeats while it ran', async () => {
    const t = await task({ query: 'CALL bg_slow {"ms": 20000}', timeout_seconds: 1 });
    const r = await run(t);
    const done = await waitRun(a, r.run_id, undefined, 8000);
    expect(done).toMatchObject({ status: 'timeout', error: expect.stringContaining('timeout') });
    expect((await attempts(r.run_id))[0]).toMatchObject({ status: 'timeout' });
    const names = eventNames(await events(r.run_id));
    expect(names.at(-1)).toBe('background_run_timeout');
    expect(names).toContain('background_run_heartbeat');
  });

  it('retries a timed-out attempt when retry_on includes timeout', async () => {
    const t = await task({
      query: 'CALL bg_slow {"ms": 20000}',
      timeout_seconds: 1,
      retry_policy: { max_retries: 1, initial_delay_seconds: 0, retry_on: ['timeout'] },
    });
    const r = await run(t);
    const done = await waitRun(a, r.run_id, undefined, 10_000);
    expect(done).toMatchObject({ status: 'timeout', attempt: 2 });
    const names = eventNames(await events(r.run_id));
    expect(names.filter((n) => n === 'background_run_timeout')).toHaveLength(2);
    expect(names).toContain('background_run_retrying');
  });
});

describe('one lease', () => {
  it('a running agent run holds no lease and writes no heartbeat of its own: its background run\u2019s lease is the only one', async () => {
    const r = await run(await task({ query: 'CALL bg_slow {"ms": 20000}' }));
    const runs = repos(server.store).runs;
    // Inside its tool call: nothing of the run's own moves its record until the call ends.
    const before = await waitFor(
      async () => {
        const rec = await runs.get<RunRecord>(r.run_id);
        return rec?.value.machine_state === 'executing' ? rec : null;
      },
      { what: 'the agent run inside its tool call' },
    );
    expect(before.value).toMatchObject({ kind: 'background', status: 'running', lease_expires_at: null });
    const beats = async () => eventNames(await events(r.run_id)).filter((n) => n === 'background_run_heartbeat').length;
    const seen = await beats();
    // Two heartbeats of the background run (one every 0.5 s): more than the 1 s an agent run's
    // own lease would last, so it would have renewed it (every 1/3 s) in between.
    await waitFor(async () => (await beats()) >= seen + 2, { what: 'two background heartbeats' });
    const after = await runs.get<RunRecord>(r.run_id);
    expect(after?.version).toBe(before.version);
    expect(after?.value).toMatchObject({ status: 'running', lease_expires_at: null, heartbeat_at: before.value.heartbeat_at });
    expect((await a.post(`/background/runs/${r.run_id}/cancel`)).status).toBe(200);
    expect((await waitRun(a, r.run_id, undefined, 5000)).status).toBe('cancelled');
  });
});

describe('cancellation and waiting', () => {
  it('cancels a queued run and a running run', async () => {
    const t = await task({ query: 'CALL bg_slow {"ms": 20000}', overlap_policy: 'queue_next' });
    const first = await run(t);
    const second = await run(t);
    await waitRun(a, first.run_id, (r) => r.status === 'running');
    expect((await a.get(`/background/runs/${second.run_id}`)).body.status).toBe('queued');

    expect((await a.post(`/background/runs/${second.run_id}/cancel`)).body).toEqual({ status: 'cancel_requested' });
    expect((await a.get(`/background/runs/${second.run_id}`)).body).toMatchObject({ status: 'cancelled', cancel_requested_at: expect.any(String) });
    expect(eventNames(await events(second.run_id))).toEqual(['background_run_queued', 'background_run_cancelled']);

    expect((await a.post(`/background/runs/${first.run_id}/cancel`)).body).toEqual({ status: 'cancel_requested' });
    const done = await waitRun(a, first.run_id, undefined, 5000);
    expect(done.status).toBe('cancelled');
    expect((await a.post(`/background/runs/${first.run_id}/cancel`)).status).toBe(409);
    expect((await a.post('/background/runs/bgrun_nope/cancel')).status).toBe(404);
  });

  it('answers 504 with the run-wait-timeout body when the wait budget runs out; the run goes on', async () => {
    const t = await task({ query: 'CALL bg_slow {"ms": 20000}' });
    const r = await a.post(`/background/tasks/${t}/run`, { wait: true });
    expect(r.status).toBe(504);
    const body = RunWaitTimeoutResponse.parse(r.body);
    expect(body.detail).toMatchObject({ task_id: t, status: 'running', request_timeout_seconds: 2, wait_timeout_seconds: 2 });
    expect((await a.get(`/background/runs/${body.detail.run_id}`)).body.status).toBe('running');
    await a.post(`/background/runs/${body.detail.run_id}/cancel`);
    expect((await waitRun(a, body.detail.run_id)).status).toBe('cancelled');
  });

  it('answers at once when the run pauses for a person, and goes on after the approval', async () => {
    const t = await task({ query: 'CALL bg_ask {}' });
    const r = await run(t, { wait: true });
    expect(r.status).toBe('awaiting_approval');
    expect((await a.post(`/background/runs/${r.run_id}/resume`)).status).toBe(409); // nobody decided yet
    const agentRun = (await a.get(`/runs/${r.run_id}`)).body;
    const approval = agentRun.approvals.find((x: any) => x.status === 'pending');
    const decided = await a.post(`/runs/${r.run_id}/approvals/${approval.approval_id}`, { decision: 'approve', approver: 'ops' });
    expect(decided.status).toBe(200);
    // Decided, its agent run still goes on only under its background run's lease: never through /runs.
    expect((await a.post(`/runs/${r.run_id}/resume`)).body).toMatchObject({ code: 'AGT_ERR_RUN_IS_BACKGROUND', detail: 'background' });
    const done = await waitRun(a, r.run_id);
    expect(done).toMatchObject({ status: 'completed', attempt: 1 });
    expect(done.result_preview).toContain('approved_and_ran');
    const at = await attempts(r.run_id);
    expect(at).toEqual([expect.objectContaining({ attempt_number: 1, status: 'completed' })]);
    const names = eventNames(await events(r.run_id));
    expect(names.at(-1)).toBe('background_run_completed');
    expect(names).toContain('background_run_queued');
    expect((await a.post(`/background/runs/${r.run_id}/resume`)).status).toBe(409);
  });

  it('cancels a run that waits for a person', async () => {
    const t = await task({ query: 'CALL bg_ask {}' });
    const r = await run(t, { wait: true });
    expect(r.status).toBe('awaiting_approval');
    expect((await a.post(`/background/runs/${r.run_id}/cancel`)).status).toBe(200);
    expect((await waitRun(a, r.run_id)).status).toBe('cancelled');
    expect(
      (
        await eventually(async () => {
          const ag = await a.get(`/runs/${r.run_id}`);
          return ag.body.status === 'cancelled' ? ag.body : null;
        })
      ).status,
    ).toBe('cancelled');
  });

  it('a waiting agent run cancelled through POST /runs/{id}/cancel cancels its background run in the same write', async () => {
    const t = await task({ query: 'CALL bg_ask {}' });
    const r = await run(t, { wait: true });
    expect(r.status).toBe('awaiting_approval');
    expect((await a.post(`/runs/${r.run_id}/cancel`)).status).toBe(200);
    // Read at once, no waiting: the background run's CANCEL rode in the agent run's cancel commit.
    expect((await a.get(`/runs/${r.run_id}`)).body.status).toBe('cancelled');
    expect((await a.get(`/background/runs/${r.run_id}`)).body).toMatchObject({ status: 'cancelled' });
    const at = await attempts(r.run_id);
    expect(at).toEqual([expect.objectContaining({ attempt_number: 1, status: 'cancelled' })]);
    expect(eventNames(await events(r.run_id)).at(-1)).toBe('background_run_cancelled');
  });

  it('refuses POST /runs/{id}/resume and /interrupt of a background run\u2019s agent run, waiting or running: its background run owns it', async () => {
    const waiting = await run(await task({ query: 'CALL bg_ask {}' }), { wait: true });
    expect(waiting.status).toBe('awaiting_approval');
    const refused = await a.post(`/runs/${waiting.run_id}/resume`);
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ code: 'AGT_ERR_RUN_IS_BACKGROUND', detail: 'background' });
    expect((await a.get(`/runs/${waiting.run_id}`)).body.status).toBe('awaiting_approval');
    expect((await a.get(`/background/runs/${waiting.run_id}`)).body.status).toBe('awaiting_approval');

    const running = await run(await task({ query: 'CALL bg_slow {"ms": 20000}' }));
    await eventually(async () => ((await a.get(`/runs/${running.run_id}`)).body.status === 'running' ? true : null));
    for (const verb of ['resume', 'interrupt']) {
      const r = await a.post(`/runs/${running.run_id}/${verb}`);
      expect(r.status, verb).toBe(409);
      expect(r.body, verb).toMatchObject({ code: 'AGT_ERR_RUN_IS_BACKGROUND' });
    }
    expect((await a.get(`/background/runs/${running.run_id}`)).body.status).toBe('running');
    await a.post(`/background/runs/${running.run_id}/cancel`);
    await a.post(`/background/runs/${waiting.run_id}/cancel`);
    expect((await waitRun(a, running.run_id, undefined, 5000)).status).toBe('cancelled');
  });

  it('cancelling a running background agent run through POST /runs/{id}/cancel goes through its background run', async () => {
    const t = await task({ query: 'CALL bg_slow {"ms": 20000}' });
    const r = await run(t);
    await eventually(async () => ((await a.get(`/runs/${r.run_id}`)).body.status === 'running' ? true : null));
    expect((await a.post(`/runs/${r.run_id}/cancel`)).status).toBe(200);
    // The background run took the CANCEL before the answer (its actor then stops its child): the
    // request is on its row at once, not only once the agent run's end arrives.
    expect((await a.get(`/background/runs/${r.run_id}`)).body.cancel_requested_at).toEqual(expect.any(String));
    const bg = await waitRun(a, r.run_id, undefined, 5000);
    expect(bg.status).toBe('cancelled');
    const agentRun = (await eventually(async () => {
      const ag = (await a.get(`/runs/${r.run_id}`)).body;
      return ag.status === 'cancelled' ? ag : null;
    })) as { ended_at: string };
    // Asked before its agent run ended (the agent run's end alone would have stamped it after); the
    // stamps have millisecond resolution, so on a fast host both can fall in the same millisecond.
    expect(Date.parse(bg.cancel_requested_at)).toBeLessThanOrEqual(Date.parse(agentRun.ended_at));
  });
});
