// On a store only this process writes, a run's end hands its concurrency key's slot on as soon as
// the end is queued for the store, not once it is durable (src/runtime/run-host.ts, onSnapshot):
// the next queued run of the key reaches the model while every commit is held back. The store
// below holds commits behind a gate, in arrival order (first in, first out, as LevelDB's queue).
import { afterAll, beforeAll, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { configFromObject } from '../../src/config.js';
import { Runtime } from '../../src/composition-root.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { CommitEvents, CommitOps } from '../../src/store/store.js';
import { readVersion } from '../../src/version.js';
import { createLogger, silentLogger } from '../../src/telemetry/logger.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, tempDir } from '../helpers/server.js';

class GatedStore extends MemoryStore {
  gate: Promise<void> | null = null;
  override async commit(input: CommitOps) {
    if (this.gate) await this.gate;
    return super.commit(input);
  }
  override async commitWithEvents(input: CommitOps, events: CommitEvents) {
    if (this.gate) await this.gate;
    return super.commitWithEvents(input, events);
  }
}

let model: ScriptedOpenAI;
let store: GatedStore;
let runtime: Runtime;
let close: () => Promise<void>;
let url: string;
/** Lets the held commits through (also in afterAll, so a failing test does not hang the shutdown). */
let openGate: () => void = () => {};

beforeAll(async () => {
  model = await startScriptedOpenAI();
  store = new GatedStore();
  await store.open();
  const cfg = configFromObject(
    {
      server: { port: 0 },
      agent: { model: { provider: 'openai-compatible', base_url: model.url, model: 'scripted' } },
      runs: { orphan_sweep: { interval_seconds: 3600 } },
    },
    { dataDir: tempDir(), env: {} },
  );
  runtime = await Runtime.create(cfg, store, { logger: silentLogger });
  const app = await buildApp({
    config: cfg,
    store,
    runtime,
    version: readVersion(),
    logger: createLogger({ level: 'warn' }),
    logRequests: false,
    authEnabled: false,
  });
  url = await app.listen({ host: '127.0.0.1', port: 0 });
  await runtime.start();
  close = async () => {
    runtime.runs.lifecycle.beginShutdown();
    await runtime.close(0);
    await app.close();
  };
});
afterAll(async () => {
  openGate();
  store.gate = null;
  await close();
  await model.close();
});

const queryOf = (body: { messages: Array<{ role: string; content?: unknown }> }): string =>
  String(body.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '');

it("the next queued run of a key reaches the model before the previous run's end is stored", async () => {
  let answerFirst!: () => void;
  const firstAnswered = new Promise<void>((r) => (answerFirst = r));
  model.setDefault((req) => {
    if (queryOf(req) !== 'first') return { text: 'second done' };
    // Every commit from now on waits, the first run's end among them.
    return { text: 'first done', holdUntil: firstAnswered.then(() => void (store.gate = new Promise<void>((r) => (openGate = r)))) };
  });
  const key = { key: 'prompt', limit: 1 };
  const first = postJson(`${url}/run/sync`, { query: 'first', concurrency: key });
  await model.waitForRequests(1);
  const second = postJson(`${url}/run/sync`, { query: 'second', concurrency: key });
  await eventually(async () => (await getJson(`${url}/runs?status=queued`)).body.runs.length === 1);
  answerFirst();
  // The second run's model call, while no commit has gone through since the first's answer.
  await model.waitForRequests(2);
  expect(store.gate).not.toBeNull();
  expect(model.requests.map(queryOf)).toEqual(['first', 'second']);
  openGate();
  store.gate = null;
  expect((await first).body.status).toBe('success');
  expect((await second).body.status).toBe('success');
});

it('a run admitted from the queue starts without waiting for the commit of the run admitted before it', async () => {
  // A holds the key; B and C queue. With every commit held from A's answer on, B starts (its
  // create commit held), ends at once, and hands the slot to C: C must reach the model while B's
  // first commit is still held (it used to wait for B's start() to return, a commit round).
  let answerA!: () => void;
  const aAnswered = new Promise<void>((r) => (answerA = r));
  model.setDefault((req) => {
    const q = queryOf(req);
    if (q !== 'A') return { text: `${q} done` };
    return { text: 'A done', holdUntil: aAnswered.then(() => void (store.gate = new Promise<void>((r) => (openGate = r)))) };
  });
  const seen = model.requests.length;
  const key = { key: 'chained', limit: 1 };
  const a = postJson(`${url}/run/sync`, { query: 'A', concurrency: key });
  await model.waitForRequests(seen + 1);
  const b = postJson(`${url}/run/sync`, { query: 'B', concurrency: key });
  await eventually(async () => (await getJson(`${url}/runs?status=queued`)).body.runs.length === 1);
  const c = postJson(`${url}/run/sync`, { query: 'C', concurrency: key });
  await eventually(async () => (await getJson(`${url}/runs?status=queued`)).body.runs.length === 2);
  answerA();
  await model.waitForRequests(seen + 3);
  expect(store.gate).not.toBeNull();
  expect(model.requests.slice(seen).map(queryOf)).toEqual(['A', 'B', 'C']);
  openGate();
  store.gate = null;
  const [, , cDone] = await Promise.all([a, b, c]);
  for (const r of [await a, await b, cDone]) expect(r.body.status).toBe('success');
  // C's user_message says when its key admitted it (after it was queued).
  const events = (await getJson(`${url}/telemetry/events?session_id=${cDone.body.session_id}&limit=50`)).body.events as Array<{
    event_type: string;
    metadata?: { queue?: { enqueued_at: string; admitted_at: string } };
  }>;
  const queue = events.find((e) => e.event_type === 'user_message')?.metadata?.queue;
  expect(queue).toBeDefined();
  expect(Date.parse(queue!.admitted_at)).toBeGreaterThanOrEqual(Date.parse(queue!.enqueued_at));
});
