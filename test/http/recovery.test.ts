// Durable runs (docs/contract.md §6): agentd runs in a CHILD process that the test kills for real
// (SIGKILL) or stops (SIGTERM), then restarts on the same data dir. The scripted model and the
// tool ledger live in this process, so they see every request and every real tool execution
// across the deaths of the service.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useCrashRig } from '../helpers/model-ledger.js';
import {
  crashConfig,
  eventually,
  getJson,
  getRun,
  launchRun,
  postJson,
  readLedger,
  requestsOf,
  startAgentd,
  waitForRunStatus,
  writeConfig,
  type AgentdChild,
  type TurnScript,
} from '../crash/harness.js';
import { readSse } from '../helpers/sse.js';
import { openStore } from '../../src/store/open.js';
import { runIndexes, sideEffectsOf, type RunRecord } from '../../src/runtime/run-record.js';

const scripts = new Map<string, TurnScript>();
const rig = useCrashRig(scripts);
const dir = () => rig.dir();
const env = () => ({ AGENTD_TEST_LEDGER: rig.ledger });
const linesOf = (runId: string, tool?: string) => readLedger(rig.ledger).filter((l) => l.run_id === runId && (!tool || l.tool === tool));

async function resumedEvents(url: string, runId: string) {
  const r = await getJson(`${url}/telemetry/events?run_id=${runId}&event_type=run_resumed`);
  expect(r.status).toBe(200);
  return r.body.events as Array<{ actor: { id: string }; metadata: Record<string, unknown> }>;
}

/** Reads stored run records while no agentd holds the data dir (the embedded store is single-process). */
async function storedRuns(dataDir: string, ids: string[]): Promise<RunRecord[]> {
  const store = await openStore({ kind: 'level', path: dataDir });
  try {
    return await Promise.all(ids.map(async (id) => (await store.getRecord<RunRecord>('runs', id))!.value));
  } finally {
    await store.close();
  }
}

describe('one data dir through SIGKILLs, a SIGTERM and restarts', () => {
  const dataDir = dir();
  let cfg: string;
  let child: AgentdChild;
  const ids: Record<string, string> = {};
  let releaseB = false;

  beforeAll(() => {
    cfg = writeConfig(dataDir, crashConfig(rig.model.url, { agent: { max_steps: 500 }, runs: { orphan_sweep: { interval_seconds: 3600 } } }));
    // a: a non-idempotent call that is still running when the process dies.
    scripts.set('a', (turn) => (turn === 0 ? { tool_calls: [{ name: 'ledger_write', arguments: { entry: 'pay-a', ms: 60_000 } }] } : { text: 'a: noted' }));
    // b: an idempotent call completes, then the process dies while the model is thinking.
    scripts.set('b', (turn) =>
      turn === 0 ? { tool_calls: [{ name: 'counted_echo', arguments: { text: 'b' } }] } : releaseB ? { text: 'b done' } : { hang: true },
    );
    // c: graceful stop during a tool call; the next step must not start.
    scripts.set('c', (turn) => (turn === 0 ? { tool_calls: [{ name: 'counted_echo', arguments: { text: 'c', ms: 1_500 } }] } : { text: 'c done' }));
    // d: never ends (short tool steps forever), so every restart recovers it again. Short steps,
    // not a hanging model call: a SIGTERM waits for live runs to reach a step boundary, and a
    // hanging call would hold the process for the whole 30 s grace period.
    scripts.set('d', (turn) => ({ tool_calls: [{ name: 'counted_echo', arguments: { text: `d${turn}`, ms: 300 } }] }));
  });
  afterAll(async () => {
    await child?.kill('SIGKILL');
  });

  it('SIGKILL with a non-idempotent call in flight, an idempotent call done, and a model call pending', async () => {
    child = await startAgentd({ configFile: cfg, dataDir, env: env() });
    ids.a = await launchRun(child.url, '[a] pay the invoice', 'sess-a');
    ids.b = await launchRun(child.url, '[b] echo then think', 'sess-b');
    ids.d = await launchRun(child.url, '[d] hang forever', 'sess-d');
    await eventually(() => linesOf(ids.a, 'ledger_write').some((l) => l.phase === 'started'), 10_000, 'a: ledger_write started');
    await eventually(() => requestsOf(rig.model, 'b').some((r) => r.turn === 1), 10_000, 'b: second model call sent');
    await eventually(() => requestsOf(rig.model, 'd').length >= 1, 10_000, 'd: model call sent');
    expect(linesOf(ids.b, 'counted_echo').filter((l) => l.phase === 'done')).toHaveLength(1);
    const exit = await child.kill('SIGKILL');
    expect(exit.signal).toBe('SIGKILL');
  });

  it('a: recovered at start-up; the non-idempotent call is not run again, it is `unknown` and the model is told', async () => {
    releaseB = true;
    child = await startAgentd({ configFile: cfg, dataDir, env: env() });
    const done = await waitForRunStatus(child.url, ids.a, ['completed', 'failed']);
    expect(done.status).toBe('completed');
    expect(done.response).toBe('a: noted');

    const [resumed, ...more] = await resumedEvents(child.url, ids.a);
    expect(more).toHaveLength(0);
    expect(resumed.metadata).toMatchObject({
      cause: 'recovered_after_lapsed_lease',
      trigger: 'orphan_sweep',
      previous_owner: expect.stringMatching(/^worker_/),
      lease_expired_at: expect.stringMatching(/Z$/),
      orphaned_seconds: expect.any(Number),
    });
    expect(resumed.metadata.previous_owner).not.toBe(resumed.actor.id); // a new process took it over
    expect(resumed.metadata.orphaned_seconds).toBeGreaterThanOrEqual(0);

    // Ran once, never finished, never ran again.
    expect(linesOf(ids.a, 'ledger_write').map((l) => l.phase)).toEqual(['started']);
    expect(done.tool_calls).toEqual([expect.objectContaining({ tool_name: 'ledger_write', idempotent: false, state: 'completed', outcome: 'unknown' })]);
    const told = requestsOf(rig.model, 'a').filter((r) => r.turn === 1);
    expect(told).toHaveLength(1);
    expect(told[0].toolMessages).toEqual([{ tool_call_id: done.tool_calls[0].tool_call_id, content: expect.stringMatching(/unknown.*not idempotent/s) }]);
    expect(sideEffectsOf(done)).toEqual([{ tool_call_id: done.tool_calls[0].tool_call_id, tool_name: 'ledger_write', outcome: 'unknown' }]);
  });

  it('b: the completed idempotent call does not run again; the lost model call is sent again', async () => {
    const done = await waitForRunStatus(child.url, ids.b, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', response: 'b done' });
    expect(linesOf(ids.b, 'counted_echo').filter((l) => l.phase === 'started')).toHaveLength(1);
    expect(done.tool_calls).toEqual([expect.objectContaining({ tool_name: 'counted_echo', outcome: 'success' })]);
    const second = requestsOf(rig.model, 'b').filter((r) => r.turn === 1);
    expect(second).toHaveLength(2); // once to the dead process, once after the recovery
    expect(second[1].toolMessages).toEqual(second[0].toolMessages);
    expect((await resumedEvents(child.url, ids.b)).map((e) => e.metadata.cause)).toEqual(['recovered_after_lapsed_lease']);
  });

  it('e: POST /runs/{id}/resume on a run this process is running answers 409', async () => {
    await eventually(async () => (await resumedEvents(child.url, ids.d)).length === 1, 10_000, 'd: recovered');
    const r = await postJson(`${child.url}/runs/${ids.d}/resume`, {});
    expect(r.status).toBe(409);
    expect(r.body.error).toBe('Conflict');
    expect((await getRun(child.url, ids.d)).status).toBe('running');
  });

  it('c: SIGTERM stops a live run at its next step boundary, saves it `interrupted`, exits 0', async () => {
    // c is streamed (POST /run): SIGTERM closes every connection, and a stream closed by the
    // shutdown must not count as the client giving up (it used to end the run `cancelled`).
    const res = await fetch(`${child.url}/run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: '[c] slow echo', session_id: 'sess-c' }),
    });
    const frames: Array<{ event: string; data: { run_id?: string; status?: string } }> = [];
    const reading = (async () => {
      try {
        for await (const f of readSse(res)) frames.push(f);
      } catch {
        // the server went away
      }
    })();
    ids.c = await eventually(() => frames.find((f) => f.event === 'session')?.data.run_id, 10_000, 'c: session frame');
    await eventually(() => linesOf(ids.c, 'counted_echo').some((l) => l.phase === 'started'), 10_000, 'c: echo started');
    const exit = await child.kill('SIGTERM');
    expect(exit).toEqual({ code: 0, signal: null });
    await reading;
    const complete = frames.find((f) => f.event === 'complete');
    if (complete) expect(complete.data.status).toBe('interrupted');
    const [c, d] = await storedRuns(dataDir, [ids.c, ids.d]);
    expect(c).toMatchObject({ status: 'interrupted', owner: null, lease_expires_at: null });
    expect(d).toMatchObject({ status: 'interrupted', owner: null, lease_expires_at: null });
    // The tool call in flight finished before the boundary; the next model call was not made.
    expect(linesOf(ids.c, 'counted_echo').map((l) => l.phase)).toEqual(['started', 'done']);
    expect(c.tool_calls).toEqual([expect.objectContaining({ state: 'completed', outcome: 'success' })]);
    expect(requestsOf(rig.model, 'c').filter((r) => r.turn === 1)).toHaveLength(0);
  });

  it('c: on restart the interrupted run resumes with cause `interrupted` and completes', async () => {
    child = await startAgentd({ configFile: cfg, dataDir, env: env() });
    const done = await waitForRunStatus(child.url, ids.c, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', response: 'c done' });
    expect((await resumedEvents(child.url, ids.c)).map((e) => [e.metadata.cause, e.metadata.trigger])).toEqual([['interrupted', 'orphan_sweep']]);
    expect(linesOf(ids.c, 'counted_echo').filter((l) => l.phase === 'started')).toHaveLength(1);
  });

  it('d: a run recovered 3 times and dying again is ended `failed`', async () => {
    // d was recovered after the SIGKILL (1) and resumed after the SIGTERM (2); two more deaths.
    for (let i = 0; i < 2; i++) {
      await eventually(async () => (await resumedEvents(child.url, ids.d)).length === i + 2, 10_000, `d: resumed ${i + 2} times`);
      const before = requestsOf(rig.model, 'd').length;
      await eventually(() => requestsOf(rig.model, 'd').length > before, 10_000, 'd: calling the model again');
      await child.kill('SIGKILL');
      child = await startAgentd({ configFile: cfg, dataDir, env: env() });
    }
    const failed = await waitForRunStatus(child.url, ids.d, ['failed', 'completed']);
    expect(failed).toMatchObject({ status: 'failed', termination_reason: 'internal_error', error: { type: 'TooManyRecoveries' } });
    expect((await resumedEvents(child.url, ids.d)).map((e) => e.metadata.cause)).toEqual([
      'recovered_after_lapsed_lease',
      'interrupted',
      'recovered_after_lapsed_lease',
    ]);
    expect((await postJson(`${child.url}/runs/${ids.d}/resume`, {})).status).toBe(409);
    expect(await child.kill('SIGTERM')).toEqual({ code: 0, signal: null });
  });
});

describe('explicit resume with the orphan sweep off', () => {
  const dataDir = dir();
  let cfg: string;
  let child: AgentdChild;
  const ids: Record<string, string> = {};

  beforeAll(() => {
    cfg = writeConfig(
      dataDir,
      crashConfig(rig.model.url, {
        runs: { lease_seconds: 1, orphan_sweep: { enabled: false } },
        governance: { rules: [{ tools: ['ask_*'], effect: 'ask' }] },
        budgets: { run: [{ meter: 'tool_calls', limit: 1 }] },
      }),
    );
    scripts.set('e', (turn) => (turn === 0 ? { tool_calls: [{ name: 'counted_echo', arguments: { text: 'e', ms: 800 } }] } : { text: 'e done' }));
    scripts.set('f', (turn) =>
      turn === 0 ? { tool_calls: [{ name: 'ledger_write', arguments: { entry: 'pay-f', ms: 60_000 } }] } : { status: 400, message: 'model refuses' },
    );
    scripts.set('g', () => ({ hang: true }));
    scripts.set('k', (turn) =>
      turn === 0
        ? {
            tool_calls: [
              { name: 'counted_echo', arguments: { text: 'k1' } },
              { name: 'counted_echo', arguments: { text: 'k2' } },
            ],
          }
        : { text: 'k done' },
    );
    scripts.set('h', (turn) => (turn === 0 ? { tool_calls: [{ name: 'ask_write', arguments: { entry: 'pay-h' } }] } : { text: 'h done' }));
  });
  afterAll(async () => {
    await child?.kill('SIGKILL');
  });

  it('e: an interrupted run stays interrupted until POST /runs/{id}/resume, which completes it', async () => {
    child = await startAgentd({ configFile: cfg, dataDir, env: env() });
    ids.e = await launchRun(child.url, '[e] echo slowly', 'sess-e');
    await eventually(() => linesOf(ids.e, 'counted_echo').some((l) => l.phase === 'started'), 10_000, 'e: echo started');
    expect(await child.kill('SIGTERM')).toEqual({ code: 0, signal: null });

    child = await startAgentd({ configFile: cfg, dataDir, env: env() });
    expect((await getRun(child.url, ids.e)).status).toBe('interrupted');
    const r = await postJson(`${child.url}/runs/${ids.e}/resume`, {});
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ run_id: ids.e, status: 'success', response: 'e done', side_effects: null });
    expect((await resumedEvents(child.url, ids.e)).map((e) => [e.metadata.cause, e.metadata.trigger])).toEqual([['interrupted', 'explicit']]);
    expect(linesOf(ids.e, 'counted_echo').filter((l) => l.phase === 'started')).toHaveLength(1);
    expect((await postJson(`${child.url}/runs/${ids.e}/resume`, {})).status).toBe(409); // ended
  });

  it('an orphaned run is resumable once its lease lapses; the answer lists the `unknown` side effect', async () => {
    ids.f = await launchRun(child.url, '[f] pay and fail', 'sess-f');
    ids.g = await launchRun(child.url, '[g] hang', 'sess-g');
    ids.h = await launchRun(child.url, '[h] pay after approval', 'sess-h');
    await waitForRunStatus(child.url, ids.h, ['awaiting_approval']);
    ids.k = await launchRun(child.url, '[k] two echoes on a one-call budget', 'sess-k');
    await waitForRunStatus(child.url, ids.k, ['awaiting_budget']);
    await eventually(() => linesOf(ids.f, 'ledger_write').some((l) => l.phase === 'started'), 10_000, 'f: ledger_write started');
    await eventually(() => requestsOf(rig.model, 'g').length >= 1, 10_000, 'g: model call sent');
    expect((await postJson(`${child.url}/runs/${ids.g}/resume`, {})).status).toBe(409); // live here
    await child.kill('SIGKILL');

    child = await startAgentd({ configFile: cfg, dataDir, env: env() });
    expect((await getRun(child.url, ids.f)).status).toBe('running'); // nobody swept it
    // 409 AGT_ERR_RUN_ALREADY_LIVE while the dead owner's lease (1 s) has not lapsed yet (the
    // restarted process does not take it: its orphan sweep is off), then the resume goes through.
    const r = await eventually(
      async () => {
        const res = await postJson(`${child.url}/runs/${ids.f}/resume`, {});
        return res.status === 409 && res.body.code === 'AGT_ERR_RUN_ALREADY_LIVE' ? null : res;
      },
      10_000,
      'f: resumable',
    );
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ status: 'error', termination_reason: 'provider_error' });
    expect(r.body.side_effects).toEqual([{ tool_call_id: expect.any(String), tool_name: 'ledger_write', outcome: 'unknown' }]);
    expect(linesOf(ids.f, 'ledger_write').map((l) => l.phase)).toEqual(['started']);
    expect(requestsOf(rig.model, 'f').filter((q) => q.turn === 1)[0].toolMessages[0].content).toMatch(/unknown/);
  });

  it('decisions survive a process that died halfway through applying them', async () => {
    // The store as a death in the middle of a decision leaves it, written by hand while no
    // process holds the data dir:
    // h: POST .../approvals decided it, the resume claimed it (record `running`, new attempt) and
    //    the process died before the restored actor wrote again: the snapshot still waits.
    // k: POST .../budget saved the grant on the run and died before adding it to the ledger.
    await child.kill('SIGKILL');
    const store = await openStore({ kind: 'level', path: dataDir });
    try {
      const now = new Date().toISOString();
      const h = (await store.getRecord<RunRecord>('runs', ids.h))!;
      const claimed: RunRecord = {
        ...h.value,
        status: 'running',
        owner: 'worker_dead',
        attempt: h.value.attempt + 1,
        decided_at: now,
        decision: 'approval',
        heartbeat_at: now,
        lease_expires_at: now,
        updated_at: now,
        approvals: h.value.approvals.map((a) => ({ ...a, status: 'approved' as const, approver: 'ann', decided_at: now })),
      };
      await store.updateRecord('runs', ids.h, claimed, h.version, runIndexes(claimed));
      const k = (await store.getRecord<RunRecord>('runs', ids.k))!;
      const granted = { ...k.value.budget_request!, status: 'granted' as const, approver: 'bob', decided_at: now, amount: 1 };
      const decided: RunRecord = { ...k.value, budget_request: granted, budget_requests: [granted], decided_at: now, decision: 'budget_grant' };
      await store.updateRecord('runs', ids.k, decided, k.version, runIndexes(decided));
    } finally {
      await store.close();
    }
    child = await startAgentd({ configFile: cfg, dataDir, env: env() });
    const r = await postJson(`${child.url}/runs/${ids.h}/resume`, {});
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ status: 'success', response: 'h done' });
    expect(linesOf(ids.h, 'ask_write').map((l) => l.phase)).toEqual(['started', 'done']);
    expect((await getRun(child.url, ids.h)).approvals).toEqual([expect.objectContaining({ status: 'used', approver: 'ann' })]);

    const rk = await postJson(`${child.url}/runs/${ids.k}/resume`, {});
    expect(rk.body).toMatchObject({ status: 'success', response: 'k done' });
    expect(linesOf(ids.k, 'counted_echo').filter((l) => l.phase === 'started')).toHaveLength(2);
    const budget = (await getJson(`${child.url}/runs/${ids.k}/budget`)).body;
    expect(budget.budgets).toEqual([expect.objectContaining({ meter: 'tool_calls', limit: 1, granted: 1, spent: 2, reserved: 0 })]);
    expect(budget.requests).toHaveLength(1);
    expect(await child.kill('SIGTERM')).toEqual({ code: 0, signal: null });
  });
});
