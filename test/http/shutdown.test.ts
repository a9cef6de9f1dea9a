// Recovery admission and graceful shutdown, against real servers in
// this process on LevelDB in temp dirs, the model behind the scripted OpenAI-compatible server.
// The tools (test/fixtures/shutdown-tools.mjs) share `globalThis` with the test, which opens their
// gate and reads when their AbortSignal fired.
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { requestsOf, routeByTag, type TurnScript } from '../crash/harness.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { readSse, type Frame } from '../helpers/sse.js';
import { openGate, resetGates } from '../fixtures/shutdown-tools.mjs';
import { openStore } from '../../src/store/open.js';
import { runIndexes, type RunRecord } from '../../src/runtime/run-record.js';

const TOOLS = join(import.meta.dirname, '../fixtures/shutdown-tools.mjs');
const tools = { local: TOOLS, builtin: [] };

let model: ScriptedOpenAI;
const scripts = new Map<string, TurnScript>();
const servers: TestServer[] = [];

beforeAll(async () => {
  model = await startScriptedOpenAI();
  routeByTag(model, scripts);
});
afterEach(() => {
  // A gate left closed would hold a later test's tool forever.
  openGate();
});
afterAll(async () => {
  for (const s of servers) {
    await s.stop(0).catch(() => undefined);
    s.cleanup();
  }
  await model.close();
});

async function start(config: Record<string, unknown>, dataDir?: string): Promise<TestServer> {
  const s = await startTestServer(config, { modelUrl: model.url, dataDir });
  servers.push(s);
  return s;
}

/** Reads an SSE response to its end; `ended` says whether it ended cleanly or was cut. */
function follow(res: Response): { frames: Frame[]; done: Promise<'clean' | string> } {
  const frames: Frame[] = [];
  const done = (async () => {
    try {
      for await (const f of readSse(res)) frames.push(f);
      return 'clean' as const;
    } catch (err) {
      return `cut: ${String((err as Error).cause ?? err)}`;
    }
  })();
  return { frames, done };
}

describe('recovered runs leave room for new ones (finding 12)', () => {
  it('after a restart with 20 orphaned runs and 4 slots, a new run completes at once and every recovered run finishes', async () => {
    const gates = resetGates();
    let restarted = false;
    // Before the restart the orphans hang in their model call; after it, each waits at the gate
    // (holding its slot) and then answers.
    scripts.set('orphan', (turn) => (!restarted ? { hang: true } : turn === 0 ? { tool_calls: [{ name: 'gate', arguments: {} }] } : { text: 'recovered' }));
    scripts.set('new', () => ({ text: 'new run done' }));

    const first = await start({ server: { max_concurrent_runs: 32 }, agent: { tools } });
    for (let i = 0; i < 20; i++) void postJson(`${first.url}/run/sync`, { query: `[orphan] ${i}`, session_id: `orphan-${i}` }).catch(() => undefined);
    await eventually(() => requestsOf(model, 'orphan').length >= 20, 10_000, '20 model calls hanging');
    // A new run's creating write may wait a few ms to fold with what follows (CREATE_FOLD_MS,
    // docs/reliability.md), so the model can be called before the list shows the run.
    const ids = await eventually(
      async () => {
        const listed = ((await getJson(`${first.url}/runs?status=running&limit=100`)).body.runs as Array<{ run_id: string }>).map((r) => r.run_id);
        return listed.length === 20 ? listed : null;
      },
      10_000,
      '20 runs listed as running',
    );
    // An abrupt stop: no grace, every run saved `interrupted` where it was. Then half of them are
    // made to look like a SIGKILL's leftovers: `running`, owned by a dead worker whose lease has
    // not lapsed yet.
    await first.stop(0);
    const store = await openStore({ kind: 'level', path: first.dataDir });
    try {
      for (const id of ids.slice(0, 10)) {
        const rec = (await store.getRecord<RunRecord>('runs', id))!;
        const orphan: RunRecord = { ...rec.value, status: 'running', owner: 'worker_dead', lease_expires_at: new Date(Date.now() + 60_000).toISOString() };
        await store.updateRecord('runs', id, orphan, rec.version, runIndexes(orphan));
      }
    } finally {
      await store.close();
    }

    restarted = true;
    const second = await start({ server: { max_concurrent_runs: 4 }, agent: { tools } }, first.dataDir);
    // Recovery's share of 4 slots is 1 (a quarter): one recovered run holds it, at the gate.
    await eventually(() => gates.started.length >= 1, 10_000, 'a recovered run at the gate');

    const fresh = await postJson(`${second.url}/run/sync`, { query: '[new] hello', session_id: 'fresh' });
    expect(fresh.status).toBe(200);
    expect(fresh.body).toMatchObject({ status: 'success', response: 'new run done' });
    // Recovery never took more than its share while the gate was closed.
    expect(gates.started).toHaveLength(1);
    expect(requestsOf(model, 'orphan')).toHaveLength(20 + 1);
    expect((await getJson(`${second.url}/ready`)).body.ready).toBe(true);

    openGate();
    await eventually(
      async () => {
        const done = (await getJson(`${second.url}/runs?status=completed&limit=100`)).body.runs as Array<{ run_id: string }>;
        return ids.every((id) => done.some((r) => r.run_id === id));
      },
      20_000,
      'every recovered run completed',
    );
    for (const id of ids) {
      const run = (await getJson(`${second.url}/runs/${id}`)).body;
      expect(run).toMatchObject({ status: 'completed', response: 'recovered' });
    }
    await second.stop(0);
  }, 60_000);
});

describe('graceful shutdown (finding 13)', () => {
  it('/ready turns false as soon as close begins, while a run drains; /health stays healthy', async () => {
    const gates = resetGates();
    scripts.set('drain', (turn) => (turn === 0 ? { tool_calls: [{ name: 'gate', arguments: {} }] } : { text: 'drained' }));
    const s = await start({ agent: { tools } });
    void postJson(`${s.url}/run/sync`, { query: '[drain] a', session_id: 'drain-a' }).catch(() => undefined);
    await eventually(() => gates.started.length >= 1, 10_000, 'tool running');
    expect((await getJson(`${s.url}/ready`)).body.ready).toBe(true);

    const closing = s.close(10_000);
    const ready = await getJson(`${s.url}/ready`);
    expect(ready.status).toBe(200); // docs/contract.md §2: /ready is always HTTP 200; read `ready`
    expect(ready.body).toMatchObject({ ready: false, initialized: true });
    const health = await getJson(`${s.url}/health`);
    expect(health.status).toBe(200);
    expect(health.body.status).toBe('healthy');
    // Still draining: the run is inside its tool call.
    expect((await getJson(`${s.url}/ready`)).body.ready).toBe(false);
    // Nothing new starts while draining: neither a run nor an explicit resume (the run stays stored).
    expect((await postJson(`${s.url}/run/sync`, { query: 'late' })).status).toBe(503);
    const resume = await postJson(`${s.url}/runs/run_whatever/resume`, {});
    expect(resume.status).toBe(503);
    expect(resume.body.error).toBe('ServerBusy');
    openGate();
    await closing;
  }, 30_000);

  it('open follow streams end with a ServiceShuttingDown frame naming the last cursor, then a clean end', async () => {
    const gates = resetGates();
    scripts.set('follow', (turn) => (turn === 0 ? { tool_calls: [{ name: 'gate', arguments: {} }] } : { text: 'followed' }));
    const s = await start({ agent: { tools } });
    void postJson(`${s.url}/run/sync`, { query: '[follow] a', session_id: 'follow-a' }).catch(() => undefined);
    await eventually(() => gates.started.length >= 1, 10_000, 'tool running');
    const streams = [follow(await fetch(`${s.url}/events/follow-a`)), follow(await fetch(`${s.url}/telemetry/events/stream?session_id=follow-a`))];
    for (const st of streams) await eventually(() => st.frames.some((f) => f.event === 'tool_call'), 10_000, 'replayed tool_call');

    const closing = s.close(10_000);
    openGate();
    await closing;
    for (const st of streams) {
      expect(await st.done).toBe('clean');
      const last = st.frames.at(-1)!;
      expect(last.event).toBe('error');
      expect(last.data).toMatchObject({ error: 'ServiceShuttingDown', message: expect.stringMatching(/reconnect/i) });
      const lastId = st.frames.filter((f) => f.id !== undefined).at(-1)!.id;
      expect(last.data.last_cursor).toBe(lastId);
      // Everything the run stored before the shutdown reached the follower first.
      expect(st.frames.some((f) => f.event === 'tool_result')).toBe(true);
    }
  }, 30_000);

  it('tools that ignore step boundaries run until the grace period ends, then every one gets its AbortSignal at once and each run is saved interrupted', async () => {
    const gates = resetGates();
    scripts.set('stubborn', () => ({ tool_calls: [{ name: 'wait_for_abort', arguments: {} }] }));
    const s = await start({ agent: { tools } });
    for (const k of ['a', 'b', 'c']) void postJson(`${s.url}/run/sync`, { query: `[stubborn] ${k}`, session_id: `stubborn-${k}` }).catch(() => undefined);
    await eventually(() => gates.started.filter((g) => g.tool === 'wait_for_abort').length === 3, 10_000, 'three tools running');
    const runIds = gates.started.map((g) => g.run_id).sort();

    const graceMs = 1_500;
    const began = Date.now();
    await s.close(graceMs);
    const ended = Date.now();
    expect(gates.aborts.map((a) => a.run_id).sort()).toEqual(runIds);
    for (const a of gates.aborts) {
      // Not before the grace period ended (timers never fire early), and before close() returned.
      expect(a.at - began).toBeGreaterThanOrEqual(graceMs - 5);
      expect(a.at).toBeLessThanOrEqual(ended);
      // All at the deadline: the shutdown used to abort one run, save it, then abort the next,
      // so the last run's tools got their signal only after every other run was written.
      expect(a.aborted_by_next_turn).toBe(3);
    }

    const store = await openStore({ kind: 'level', path: s.dataDir });
    try {
      for (const id of runIds) {
        const run = (await store.getRecord<RunRecord>('runs', id))!.value;
        expect(run).toMatchObject({ status: 'interrupted', owner: null, lease_expires_at: null });
      }
    } finally {
      await store.close();
    }
  }, 30_000);
});
