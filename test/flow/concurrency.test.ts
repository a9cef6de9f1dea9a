// Concurrency keys over HTTP against a real server (docs/flow-control.md, docs/contract.md §3.4):
// the scripted model counts the calls it answers at once; the tests decide when calls end
// (holdUntil), never sleep for correctness.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { useScriptedOpenAI } from '../helpers/scripted-model.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { readSse, type Frame } from '../helpers/sse.js';
import { RunView } from '../../src/schemas/index.js';

let model: ScriptedOpenAI;
useScriptedOpenAI((m) => (model = m));

/** A POST /run stream whose first frames were read: `session`, and `queued` when the run waits. */
async function openRun(url: string, body: Record<string, unknown>): Promise<{ run_id: string; queued: Frame | null; rest: Promise<Frame[]> }> {
  const res = await fetch(`${url}/run`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  expect(res.status).toBe(200);
  const it = readSse(res)[Symbol.asyncIterator]();
  const first = (await it.next()).value as Frame;
  expect(first.event).toBe('session');
  const run_id = first.data.run_id as string;
  const frames: Frame[] = [first];
  let queued: Frame | null = null;
  // The second frame is `queued` for a waiting run; anything else belongs to a started run.
  const second = await it.next();
  if (!second.done) {
    frames.push(second.value);
    if (second.value.event === 'queued') queued = second.value;
  }
  const rest = (async () => {
    for (;;) {
      const n = await it.next();
      if (n.done) return frames;
      frames.push(n.value);
    }
  })().catch(() => [...frames, { event: 'cut', data: null }]); // the server went away mid-stream
  return { run_id, queued, rest };
}

const queryOf = (body: { messages: Array<{ role: string; content?: unknown }> }): string =>
  String(body.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '');

describe('concurrency keys', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ flow: { max_queued: 60 } }, { modelUrl: model.url });
  });
  afterAll(async () => {
    await server.stop();
    server.cleanup();
  });
  beforeEach(() => model.setDefault({ text: 'done' }));

  it('40 runs on one key with limit 2: never more than 2 at the model, all complete, FIFO within a priority; another key starts at once', async () => {
    let releaseFirst!: () => void;
    const firstTwo = new Promise<void>((r) => (releaseFirst = r));
    // The first two calls hold until the test lets them go; later ones answer after a short
    // hold of their own, so that calls overlap whenever the limit would let them.
    model.setDefault((req) => (queryOf(req).startsWith('other') ? { text: 'other' } : { text: 'done', holdUntil: Promise.all([firstTwo, tick()]) }));
    const runs: Array<{ run_id: string; queued: Frame | null; rest: Promise<Frame[]> }> = [];
    for (let i = 0; i < 40; i++) runs.push(await openRun(server.url, { query: `job ${i}`, concurrency: { key: 'customer:1', limit: 2 } }));
    expect(runs.slice(0, 2).every((r) => r.queued === null)).toBe(true);
    expect(runs.slice(2).map((r) => r.queued?.data.position)).toEqual(Array.from({ length: 38 }, (_, i) => i + 1));
    // Its place is on the run view too, and the queued runs are listed by status.
    const view = await getJson(`${server.url}/runs/${runs[5]!.run_id}`);
    expect(RunView.parse(view.body).status).toBe('queued');
    expect(view.body.queue).toEqual({ key: 'customer:1', position: 4 });
    const listed = await getJson(`${server.url}/runs?status=queued&limit=500`);
    expect(listed.body.total).toBe(38);

    // Another key's run is not held up by this key's backlog.
    const other = await postJson(`${server.url}/run/sync`, { query: 'other key', concurrency: { key: 'customer:2', limit: 2 } });
    expect(other.status).toBe(200);
    expect(other.body.status).toBe('success');
    await eventually(() => model.inFlight() === 2, 5000, "the other key's call ended");
    expect(model.maxInFlight()).toBe(3); // two of customer:1 and the other key's, at once
    model.resetPeak();

    releaseFirst();
    const ends = await Promise.all(runs.map((r) => r.rest));
    for (const frames of ends) expect(frames.at(-1)!.event).toBe('complete');
    expect(ends.every((f) => f.at(-1)!.data.status === 'success')).toBe(true);
    expect(model.maxInFlight()).toBeLessThanOrEqual(2);
    // FIFO: the model saw the jobs in the order they were queued.
    const seen = model.requests.map(queryOf).filter((q) => q.startsWith('job '));
    expect(seen).toEqual(Array.from({ length: 40 }, (_, i) => `job ${i}`));
    expect((await getJson(`${server.url}/runs?status=queued`)).body.total).toBe(0);
  });

  it('a higher priority gets the next free slot; equal priorities stay FIFO', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    model.setDefault({ text: 'done', holdUntil: gate });
    const key = { key: 'prio', limit: 1 };
    const head = await openRun(server.url, { query: 'head', concurrency: key });
    const low1 = await openRun(server.url, { query: 'low 1', concurrency: key });
    const low2 = await openRun(server.url, { query: 'low 2', concurrency: key, priority: 0 });
    const high = await openRun(server.url, { query: 'high', concurrency: key, priority: 50 });
    expect(high.queued?.data.position).toBe(1);
    expect((await getJson(`${server.url}/runs/${low2.run_id}`)).body.queue.position).toBe(3);
    release();
    await Promise.all([head, low1, low2, high].map((r) => r.rest));
    expect(model.requests.map(queryOf)).toEqual(['head', 'high', 'low 1', 'low 2']);
  });

  it('a queued run can be cancelled: it ends cancelled and never reaches the model', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    model.setDefault({ text: 'done', holdUntil: gate });
    const key = { key: 'cancel-me', limit: 1 };
    const head = await openRun(server.url, { query: 'head', concurrency: key });
    const waiting = await openRun(server.url, { query: 'waiting', concurrency: key });
    expect(waiting.queued).not.toBeNull();
    const cancel = await postJson(`${server.url}/runs/${waiting.run_id}/cancel`, {});
    expect(cancel.status).toBe(200);
    const frames = await waiting.rest;
    expect(frames.at(-1)!.event).toBe('complete');
    expect(frames.at(-1)!.data.status).toBe('cancelled');
    expect((await getJson(`${server.url}/runs/${waiting.run_id}`)).body.status).toBe('cancelled');
    release();
    await head.rest;
    expect(model.requests.map(queryOf)).toEqual(['head']);
  });

  it('the queue is bounded: past flow.max_queued a run gets 503 with Retry-After', async () => {
    const small = await startTestServer({ flow: { max_queued: 1 } }, { modelUrl: model.url });
    try {
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      model.setDefault({ text: 'done', holdUntil: gate });
      const key = { key: 'bounded', limit: 1 };
      const head = await openRun(small.url, { query: 'head', concurrency: key });
      const one = await openRun(small.url, { query: 'one', concurrency: key });
      expect(one.queued).not.toBeNull();
      const refused = await postJson(`${small.url}/run`, { query: 'two', concurrency: key });
      expect(refused.status).toBe(503);
      expect(refused.body.code).toBe('AGT_ERR_RUN_QUEUE_FULL');
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
      release();
      await Promise.all([head.rest, one.rest]);
    } finally {
      await small.stop();
      small.cleanup();
    }
  });

  it('POST /run/sync still queued at the request timeout gets the run-wait timeout body; the run stays queued and runs later', async () => {
    const quick = await startTestServer({ server: { request_timeout_seconds: 1 } }, { modelUrl: model.url });
    try {
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      model.setDefault((req) => (queryOf(req) === 'waits' ? { text: 'later' } : { text: 'done', holdUntil: gate }));
      const key = { key: 'sync-timeout', limit: 1 };
      // The head's own timeout (the same 1 s) frees the slot first: the next run takes it and
      // holds it, so the sync run is still queued when its request times out.
      const head = await openRun(quick.url, { query: 'head', concurrency: key });
      const next = await openRun(quick.url, { query: 'next', concurrency: key });
      const sync = await postJson(`${quick.url}/run/sync`, { query: 'waits', concurrency: key });
      expect(sync.status).toBe(504);
      expect(sync.body.code).toBe('AGT_ERR_RUN_TIMEOUT');
      // Still queued (behind `next`, which may still be queued too when the head's timeout was late).
      const queued = await getJson(`${quick.url}/runs?status=queued`);
      const ids = (queued.body.runs as Array<{ run_id: string }>).map((r) => r.run_id).filter((r) => r !== next.run_id);
      expect(ids).toHaveLength(1);
      const id = ids[0]!;
      release();
      await Promise.all([head.rest, next.rest]);
      await eventually(async () => (await getJson(`${quick.url}/runs/${id}`)).body.status === 'completed', 10_000, 'the queued run completes');
    } finally {
      await quick.stop();
      quick.cleanup();
    }
  });

  it('a queued run keeps its place across a restart and runs once', async () => {
    const first = await startTestServer({}, { modelUrl: model.url });
    const dataDir = first.dataDir;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    model.setDefault((req) => (queryOf(req) === 'head' ? { text: 'done', holdUntil: gate } : { text: 'after restart' }));
    const key = { key: 'restart', limit: 1 };
    const head = await openRun(first.url, { query: 'head', concurrency: key });
    const waiting = await openRun(first.url, { query: 'survivor', concurrency: key });
    expect(waiting.queued).not.toBeNull();
    // Stopped while the survivor still waits (the head's model call is held): the restart must
    // find it queued, behind the head that died running, and start it exactly once. (Releasing
    // the head first would race the stop against the survivor's own model call, which a stop may
    // interrupt and a restart then rightly sends again.)
    await first.stop();
    void head.rest;
    const second = await startTestServer({}, { modelUrl: model.url, dataDir });
    try {
      release();
      await eventually(async () => (await getJson(`${second.url}/runs/${waiting.run_id}`)).body.status === 'completed', 10_000, 'the survivor completes');
      expect(model.requests.map(queryOf).filter((q) => q === 'survivor')).toHaveLength(1);
    } finally {
      await second.stop();
      second.cleanup();
    }
  });
});

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));
