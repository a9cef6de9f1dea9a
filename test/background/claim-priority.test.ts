// Background runs are claimed by priority, then arrival (docs/flow-control.md "Background tasks"):
// with one worker busy, the queued run of the higher-priority task runs next, and runs of equal
// priority run in the order they were queued. The scripted model holds each run's call until the
// test lets it go, so the order in which runs reach the model is the order they were claimed.
// Runs on the embedded store, and on PostgreSQL with AGENTD_TEST_STORE=postgres (its claim
// statement); the last case always runs two instances on one PostgreSQL database.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, tempDir, type TestServer } from '../helpers/server.js';
import { repos } from '../../src/store/repos/index.js';
import { QUEUE_ORDER_INDEX } from '../../src/store/repos/bg-runs.js';
import { runRowIndexes } from '../../src/background/types.js';
import { QUEUE_ORDER_MARKER } from '../../src/background/queue-order.js';
import { waitFor } from '../helpers/wait.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { api, waitRun, type Api } from './helpers.js';

let model: ScriptedOpenAI;
let server: TestServer;
let a: Api;
/** Queries in the order their first model call arrived, and the lever that answers each. */
const started: string[] = [];
const levers = new Map<string, () => void>();

beforeAll(async () => {
  model = await startScriptedOpenAI();
  model.setDefault((req) => {
    const q = String(req.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '');
    started.push(q);
    return { text: `ok ${q}`, holdUntil: new Promise<void>((r) => levers.set(q, r)) };
  });
  server = await startTestServer(
    { background: { poll_interval_ms: 25, lease_seconds: 30, concurrency: 1 }, server: { request_timeout_seconds: 30 } },
    { modelUrl: model.url },
  );
  a = api(server.url);
  for (const [task_id, priority] of [
    ['busy', 0],
    ['low', -10],
    ['normal', null],
    ['high', 50],
  ] as const) {
    const r = await a.post('/background/tasks', {
      task_id,
      query: 'x',
      schedule: { type: 'manual' },
      overlap_policy: 'allow_parallel',
      session_policy: { mode: 'run' },
      ...(priority === null ? {} : { priority }),
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  }
});

afterAll(async () => {
  for (const lever of levers.values()) lever();
  await server.stop();
  server.cleanup();
  await model.close();
});

async function trigger(taskId: string, query: string): Promise<string> {
  const r = await a.post(`/background/tasks/${taskId}/run`, { query });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  expect(r.body.status).toBe('queued');
  return r.body.run_id as string;
}

/** The run that reached the model after the `n` first: its query. */
const nth = (n: number) => waitFor(() => started.length > n && started[n], { what: `model call #${n + 1}`, timeoutMs: 20_000 });

/** Lets the run of `query` answer and end; resolves once it completed. */
async function finish(query: string, runId: string, via: Api = a): Promise<void> {
  await waitFor(() => levers.get(query), { what: `${query} at the model` });
  levers.get(query)!();
  expect((await waitRun(via, runId, undefined, 20_000)).status).toBe('completed');
}

it('claims the higher-priority run next, equal priorities first come first served, a later higher one before earlier lower ones', async () => {
  const ids = new Map<string, string>();
  ids.set('busy#0', await trigger('busy', 'busy#0'));
  expect(await nth(0)).toBe('busy#0');
  // The one worker is busy: these wait queued, low first, high last.
  for (const [task, q] of [
    ['low', 'low#1'],
    ['normal', 'normal#1'],
    ['low', 'low#2'],
    ['normal', 'normal#2'],
    ['high', 'high#1'],
  ]) {
    ids.set(q, await trigger(task, q));
  }
  await finish('busy#0', ids.get('busy#0')!);
  expect(await nth(1)).toBe('high#1');
  await finish('high#1', ids.get('high#1')!);
  expect(await nth(2)).toBe('normal#1');
  // A claim pass listed the queue (normal#2, low#1, low#2 after the running normal#1): a run of
  // higher priority queued now still goes before them.
  ids.set('high#2', await trigger('high', 'high#2'));
  await finish('normal#1', ids.get('normal#1')!);
  expect(await nth(3)).toBe('high#2');
  await finish('high#2', ids.get('high#2')!);
  expect(await nth(4)).toBe('normal#2');
  await finish('normal#2', ids.get('normal#2')!);
  expect(await nth(5)).toBe('low#1');
  await finish('low#1', ids.get('low#1')!);
  expect(await nth(6)).toBe('low#2');
  await finish('low#2', ids.get('low#2')!);
  expect(started).toEqual(['busy#0', 'high#1', 'normal#1', 'high#2', 'normal#2', 'low#1', 'low#2']);
  expect((await a.get(`/background/runs/${ids.get('high#1')}`)).body.priority).toBe(50);
});

it('claims runs queued by an agentd without the claim-order index (no queue_order entry; no priority counts as 0)', async () => {
  // While the one worker is busy, runs are queued; their rows are then made as an older agentd
  // wrote them (no `queue_order` entry, no marker that the queue was indexed).
  const dataDir = tempDir('agentd-bg-legacy-');
  const config = { background: { poll_interval_ms: 25, lease_seconds: 30, concurrency: 1 } };
  const first = await startTestServer(config, { modelUrl: model.url, dataDir });
  const b = api(first.url);
  for (const [task_id, priority] of [
    ['old', 0],
    ['old_high', 20],
  ] as const) {
    expect((await b.post('/background/tasks', { task_id, query: 'x', schedule: { type: 'manual' }, overlap_policy: 'allow_parallel', priority })).status).toBe(
      200,
    );
  }
  const before = started.length;
  const busy = (await b.post('/background/tasks/old/run', { query: 'old#busy' })).body.run_id as string;
  expect(await nth(before)).toBe('old#busy');
  const ids: string[] = [];
  for (const [task, q] of [
    ['old', 'old#1'],
    ['old_high', 'old_high#1'],
    ['old', 'old#2'],
  ]) {
    const r = await b.post(`/background/tasks/${task}/run`, { query: q });
    expect(r.body.status, JSON.stringify(r.body)).toBe('queued');
    ids.push(r.body.run_id);
  }
  const r = repos(first.store);
  for (const id of ids) {
    const row = (await r.bgRuns.get(id))!;
    const indexes = runRowIndexes(row.value);
    delete indexes[QUEUE_ORDER_INDEX];
    await r.bgRuns.update(id, row.value, row.version, indexes);
  }
  await r.meta.delete(QUEUE_ORDER_MARKER);
  expect((await r.bgRuns.list({ sortedBy: QUEUE_ORDER_INDEX })).items).toEqual([]);
  levers.get('old#busy')!();
  expect((await waitRun(b, busy, undefined, 20_000)).status).toBe('completed');
  await first.stop();

  // The next agentd on that data claims them, in priority order.
  const second = await startTestServer(config, { modelUrl: model.url, dataDir });
  try {
    const c = api(second.url);
    const order: string[] = [];
    for (let i = 1; i <= 3; i++) {
      const q = await nth(before + i);
      order.push(q);
      levers.get(q)!();
    }
    expect(order).toEqual(['old_high#1', 'old#1', 'old#2']);
    for (const id of ids) expect((await waitRun(c, id, undefined, 20_000)).status).toBe('completed');
    expect(await repos(second.store).meta.get(QUEUE_ORDER_MARKER)).not.toBeNull();
  } finally {
    await second.stop();
    second.cleanup();
  }
});

describe('two instances on PostgreSQL', () => {
  let db: TestDatabase;
  let x: TestServer;
  let y: TestServer;
  beforeAll(async () => {
    db = await createTestDatabase('agentd_prio');
    const cfg = { store: { kind: 'postgres', url: db.url }, background: { poll_interval_ms: 25, lease_seconds: 30, concurrency: 1 } };
    x = await startTestServer(cfg, { modelUrl: model.url });
    y = await startTestServer(cfg, { modelUrl: model.url });
  });
  afterAll(async () => {
    for (const lever of levers.values()) lever();
    await Promise.all([x?.stop(), y?.stop()]);
    x?.cleanup();
    y?.cleanup();
    await db?.drop();
  });

  it('the next free worker of either instance claims the highest-priority run, whichever instance queued it', async () => {
    const ax = api(x.url);
    const ay = api(y.url);
    for (const [task_id, priority] of [
      ['pg_busy', 0],
      ['pg_low', -10],
      ['pg_high', 50],
    ] as const) {
      const r = await ax.post('/background/tasks', { task_id, query: 'x', schedule: { type: 'manual' }, overlap_policy: 'allow_parallel', priority });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    }
    const before = started.length;
    const queue = async (b: Api, task: string, q: string) => {
      const r = await b.post(`/background/tasks/${task}/run`, { query: q });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      return r.body.run_id as string;
    };
    // One worker each: both busy.
    const busy1 = await queue(ax, 'pg_busy', 'pg_busy#1');
    const busy2 = await queue(ay, 'pg_busy', 'pg_busy#2');
    await nth(before + 1);
    // Queued on y first (low: more than a claim statement's page of 4 at one free worker), on x later (high).
    const lows: string[] = [];
    for (let i = 1; i <= 5; i++) lows.push(await queue(ay, 'pg_low', `pg_low#${i}`));
    const high = await queue(ax, 'pg_high', 'pg_high#1');
    expect(started.slice(before).sort()).toEqual(['pg_busy#1', 'pg_busy#2']);
    await finish('pg_busy#1', busy1, ax);
    expect(await nth(before + 2)).toBe('pg_high#1');
    await finish('pg_high#1', high, ax);
    await finish('pg_busy#2', busy2, ax);
    // Two free workers now take the low ones at once: each claim statement skips the rows the
    // other's pass holds (a page of up to 4 for a few milliseconds), so their order across the
    // two instances is not asserted, only that every one runs once.
    for (let i = 1; i <= 5; i++) {
      const q = await nth(before + 2 + i);
      expect(q).toMatch(/^pg_low#/);
      await finish(q, lows[Number(q.split('#')[1]) - 1]!, ay);
    }
    expect(new Set(started.slice(before + 3))).toEqual(new Set(lows.map((_, i) => `pg_low#${i + 1}`)));
  });
});
