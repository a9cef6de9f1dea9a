// The claimer of a store this process owns keeps the queued runs a pass listed for the next passes
// (QueuedRunBuffer, src/store/repos/bg-runs.ts): claiming one run must not list the queue again,
// while the order and the claim's checks stay as they were. One worker (concurrency 1), so the
// order of claims is the order of runs.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { repos } from '../../src/store/repos/index.js';
import { QUEUE_ORDER_INDEX } from '../../src/store/repos/bg-runs.js';
import type { ListQuery } from '../../src/store/store.js';
import { recordKey } from '../../src/store/level-keys.js';
import { attemptRecordId } from '../../src/background/types.js';
import { TOOLS, api, directModel, waitRun, type Api } from './helpers.js';

let model: ScriptedOpenAI;
let server: TestServer;
let a: Api;
/** Listings of the queue (bg_runs in claim order: queue_order) since the test began. */
let listings = 0;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  directModel(model);
  server = await startTestServer(
    {
      agent: { tools: { local: TOOLS, builtin: ['workspace'] } },
      governance: { rules: [{ tools: ['bg_ask'], effect: 'ask' }] },
      background: { poll_interval_ms: 50, lease_seconds: 30, concurrency: 1 },
    },
    { modelUrl: model.url },
  );
  a = api(server.url);
  const store = server.store;
  const kind = repos(store).bgRuns.kind;
  const listRecords = store.listRecords.bind(store);
  store.listRecords = ((k: string, q?: ListQuery) => {
    if (k === kind && q?.sortedBy === QUEUE_ORDER_INDEX) listings++;
    return listRecords(k as never, q);
  }) as typeof store.listRecords;
});

afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
});

/** The buffer is for a store this process owns; a shared one (PostgreSQL) claims with its own statement. */
const buffered = () => !server.store.capabilities.sharedByInstances && !server.store.capabilities.queueClaims;

let seq = 0;
async function task(body: Record<string, unknown>): Promise<string> {
  const task_id = `cb${++seq}`;
  const r = await a.post('/background/tasks', { task_id, schedule: { type: 'manual' }, overlap_policy: 'allow_parallel', ...body });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return task_id;
}

async function run(taskId: string): Promise<string> {
  const r = await a.post(`/background/tasks/${taskId}/run`, {});
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.run_id as string;
}

const status = (s: string) => (r: any) => r.status === s;

/** A run that holds the one worker until it is cancelled. */
async function occupyWorker(): Promise<string> {
  const id = await run(await task({ query: 'CALL bg_slow {"ms": 20000}' }));
  await waitRun(a, id, status('running'));
  return id;
}

describe('claims from the buffer of queued runs', () => {
  it('claims 40 queued runs with a few listings of the queue, not one per claimed run', async () => {
    const busy = await occupyWorker();
    const t = await task({ query: 'just answer' });
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) ids.push(await run(t));
    const before = listings;
    const started = Date.now();
    await a.post(`/background/runs/${busy}/cancel`);
    for (const id of ids) expect((await waitRun(a, id)).status).toBe('completed');
    // Before: a claim pass listed the queue for each run it claimed (40 and more). Now: a listing
    // per 32 runs, one from the head of the queue each second the drain took (the buffer's age
    // bound; a slow machine takes more seconds, so the bound counts them), and one by each pass
    // that finds the buffer empty once the queue is (it must look for new runs).
    const seconds = Math.ceil((Date.now() - started) / 1000);
    if (buffered()) expect(listings - before).toBeLessThanOrEqual(Math.ceil(40 / 32) + 4 + 2 * seconds);
  });

  it('never runs a run cancelled after a pass buffered it', async () => {
    const busy = await occupyWorker();
    const slow = await run(await task({ query: 'CALL bg_slow {"ms": 20000}' }));
    const t = await task({ query: 'just answer' });
    const cancelled = await run(t);
    const last = await run(t);
    await a.post(`/background/runs/${busy}/cancel`);
    // The pass that claimed `slow` listed the two runs behind it too.
    await waitRun(a, slow, status('running'));
    expect((await a.post(`/background/runs/${cancelled}/cancel`)).status).toBe(200);
    expect((await waitRun(a, cancelled)).status).toBe('cancelled');
    await a.post(`/background/runs/${slow}/cancel`);
    expect((await waitRun(a, last)).status).toBe('completed');
    const c = (await a.get(`/background/runs/${cancelled}`)).body;
    expect(c).toMatchObject({ status: 'cancelled', attempt: 0, started_at: null, claimed_at: null });
  });

  it('claims a run that came back to the queue before runs queued after it, though a pass had buffered those', async () => {
    // Waits for a person, its worker free meanwhile.
    const parked = await run(await task({ query: 'CALL bg_ask {}' }));
    await waitRun(a, parked, status('awaiting_approval'));
    const busy = await occupyWorker();
    const slow = await run(await task({ query: 'CALL bg_slow {"ms": 20000}' }));
    const later = await run(await task({ query: 'just answer' }));
    await a.post(`/background/runs/${busy}/cancel`);
    await waitRun(a, slow, status('running')); // that pass buffered `later`
    // The decision puts `parked` back in the queue, at its old place: before `later`.
    const agentRun = (await a.get(`/runs/${parked}`)).body;
    const approval = agentRun.approvals.find((x: any) => x.status === 'pending');
    expect((await a.post(`/runs/${parked}/approvals/${approval.approval_id}`, { decision: 'approve', approver: 'ops' })).status).toBe(200);
    await waitRun(a, parked, status('queued'));
    // The decision moved the background run on, not its agent run: the agent run goes on only
    // under its background run's next claim (one lease owns both), so with the one worker busy it
    // is still parked, decided.
    expect((await a.get(`/runs/${parked}`)).body.status).toBe('awaiting_approval');
    await a.post(`/background/runs/${slow}/cancel`);
    const p = await waitRun(a, parked);
    const l = await waitRun(a, later);
    expect(p.status).toBe('completed');
    expect(l.status).toBe('completed');
    // One worker: `parked` was claimed, and ran to its end, before `later` was claimed.
    expect(Date.parse(l.claimed_at)).toBeGreaterThanOrEqual(Date.parse(p.finished_at));
  });

  it("knows a new run's first-attempt rows absent from its creation: its claim and agent start read none from the disk", async () => {
    const writer = (server.store as unknown as { writer?: { cache: { cachedRow(key: string): string | null | undefined } } }).writer;
    if (server.store.adapter !== 'level' || !writer) return; // the LevelDB row cache
    const busy = await occupyWorker();
    const t = await task({ query: 'just answer', session_policy: { mode: 'run' } });
    const id = await run(t);
    const { session_id } = (await a.get(`/background/runs/${id}`)).body;
    const r = repos(server.store);
    // Still queued (the one worker is busy): what its claim and its agent run will read is known absent.
    for (const [kind, key] of [
      [r.bgAttempts.kind, attemptRecordId(id, 1)],
      [r.runs.kind, id],
      [r.snapshots.kind, id],
      [r.sessions.kind, session_id],
    ] as const)
      expect(writer.cache.cachedRow(recordKey(kind, key)), `${kind} ${key}`).toBeNull();
    await a.post(`/background/runs/${busy}/cancel`);
    expect((await waitRun(a, id)).status).toBe('completed');
  });
});
