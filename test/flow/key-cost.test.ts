// What a concurrency key that has room costs a run's store writes (docs/flow-control.md "What a
// key costs"): on an embedded store nothing (the holders live in memory); on a shared store one
// commit before the run (the take, a holders op: no read of the key's record), and the release
// rides in the run's end commit. A change that added a round per keyed run fails here.
import { createHook } from 'node:async_hooks';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import type { CommitEvents, CommitOps, RecordKind, WriteOp } from '../../src/store/store.js';
import { isSharedStore } from '../../src/store/changes.js';

let model: ScriptedOpenAI;
let s: TestServer;
let counting = false;
const seen = { keyOps: [] as string[], keyReads: 0 };

beforeAll(async () => {
  model = await startScriptedOpenAI();
  model.setDefault(() => ({ text: 'ok' }));
  s = await startTestServer(
    { agent: { tools: { builtin: [] } }, background: { enabled: false } },
    {
      modelUrl: model.url,
      // Every run's writes fold into one commit however slow the host (its end flushes the window at
      // once): how many commits a run makes, and so how many promises, would otherwise depend on
      // whether the model answered within the 10 ms window (seen on a loaded CI host: 225 or 232).
      createFoldMs: 60_000,
    },
  );
  const store = s.store;
  const note = (ops: WriteOp[]): WriteOp[] => {
    if (counting) {
      for (const o of ops) if (o.id.startsWith('flow_key:')) seen.keyOps.push(`${o.op}${ops.length > 1 ? ' (in a run commit)' : ''}`);
    }
    return ops;
  };
  const take = (ops: CommitOps): CommitOps => (typeof ops === 'function' ? () => note(ops()) : note(ops));
  const commit = store.commit.bind(store);
  store.commit = (ops: CommitOps) => commit(take(ops));
  const withEvents = store.commitWithEvents.bind(store);
  store.commitWithEvents = (ops: CommitOps, events: CommitEvents) => withEvents(take(ops), events);
  const get = store.getRecord.bind(store);
  store.getRecord = <T>(kind: RecordKind, id: string) => {
    if (counting && id.startsWith('flow_key:')) seen.keyReads++;
    return get<T>(kind, id);
  };
});

afterAll(async () => {
  await s?.stop();
  s?.cleanup();
  await model?.close();
});

async function measure(body: Record<string, unknown>): Promise<typeof seen> {
  Object.assign(seen, { keyOps: [], keyReads: 0 });
  counting = true;
  const r = await postJson(`${s.url}/run/sync`, { query: 'hello', ...body });
  counting = false;
  expect(r.body.status).toBe('success');
  return { ...seen, keyOps: [...seen.keyOps] };
}

it('a key with room costs no store write on an embedded store; on a shared one its take is one commit (no read) and its release rides in the end commit', async () => {
  // (How many commits the run itself takes depends on timing: its steps may fold or not.)
  await measure({}); // warm
  const keyed = await measure({ concurrency: { key: 'cost', limit: 5 } });
  expect(keyed.keyReads).toBe(0);
  // Shared: the take inside the run's creating commit, the release inside its end commit. Embedded: nothing.
  expect(keyed.keyOps).toEqual(isSharedStore(s.store) ? ['holders (in a run commit)', 'holders (in a run commit)'] : []);
});

it('on an embedded store, a key with room costs a run no promise (the slot is taken and given back in the turn), and no stored field but the key', async () => {
  if (isSharedStore(s.store)) return; // a shared store's take and release are store ops (the test above)
  // Promises made while each run is served, plain and keyed alternately; the least per route (a
  // timer's or the previous run's tail lands in some). The take, the release and the options
  // once cost a keyed run ~10 promises more (an async take, awaits, a release chain); the last
  // one was the catch that gave the slot back when the start failed (now RunStarter.start's heldKey).
  const made = { plain: [] as number[], keyed: [] as number[] };
  let n = 0;
  const hook = createHook({
    init(_id, type) {
      if (type === 'PROMISE') n++;
    },
  });
  let keyedRun = '';
  for (let i = 0; i < 8; i++) {
    for (const route of i % 2 ? (['keyed', 'plain'] as const) : (['plain', 'keyed'] as const)) {
      n = 0;
      hook.enable();
      const r = await postJson(`${s.url}/run/sync`, { query: 'hello', ...(route === 'keyed' ? { concurrency: { key: 'promises', limit: 5 } } : {}) });
      hook.disable();
      expect(r.body.status).toBe('success');
      if (route === 'keyed') keyedRun = r.body.run_id as string;
      if (i > 1) made[route].push(n); // the first runs compile the keyed path
    }
  }
  expect(Math.min(...made.keyed) - Math.min(...made.plain), JSON.stringify(made)).toBeLessThanOrEqual(0);
  // The record holds the key (the view's `concurrency`, the end's release, a restart's retake);
  // priority 0 is the default the view fills in, not stored.
  const stored = (await s.store.getRecord<Record<string, unknown>>('runs', keyedRun))!.value;
  expect(stored.concurrency).toEqual({ key: 'promises', limit: 5 });
  expect('priority' in stored).toBe(false);
  const view = (await getJson(`${s.url}/runs/${keyedRun}`)).body as { concurrency: unknown; priority: number };
  expect(view).toMatchObject({ concurrency: { key: 'promises', limit: 5 }, priority: 0 });
});

it('a run its key refuses (at the limit) queues and leaves nothing of the refused try: one user_message, one trace', async () => {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  model.setDefault(() => ({ text: 'ok', holdUntil: gate }));
  const key = { key: 'refused', limit: 1 };
  const first = postJson(`${s.url}/run/sync`, { query: 'first', concurrency: key });
  await model.waitForRequests(model.requests.length + 1);
  const second = postJson(`${s.url}/run/sync`, { query: 'second', concurrency: key });
  await eventually(async () => (await getJson(`${s.url}/runs?status=queued`)).body.total === 1);
  release();
  const [a, b] = await Promise.all([first, second]);
  expect([a.body.status, b.body.status]).toEqual(['success', 'success']);
  const view = (await getJson(`${s.url}/runs/${b.body.run_id}`)).body as { trace_ids: string[]; session_id: string };
  expect(view.trace_ids).toHaveLength(1);
  const events = (await getJson(`${s.url}/telemetry/events?run_id=${b.body.run_id}&limit=100`)).body.events as Array<{ event_type: string }>;
  expect(events.filter((e) => e.event_type === 'user_message')).toHaveLength(1);
  model.setDefault(() => ({ text: 'ok' }));
});

it("a keyed run whose start fails (an agent that does not exist) gives its key's slot back: the key's next run starts at once", async () => {
  const key = { key: 'failed-start', limit: 1 };
  const refused = await postJson(`${s.url}/run/sync`, { query: 'nobody', agent_id: 'nope', concurrency: key });
  expect(refused.status).toBe(404);
  const before = model.requests.length;
  const next = postJson(`${s.url}/run/sync`, { query: 'next', concurrency: key });
  await eventually(async () => model.requests.length > before || (await getJson(`${s.url}/runs?status=queued`)).body.total > 0);
  expect((await getJson(`${s.url}/runs?status=queued`)).body.total).toBe(0);
  expect((await next).body.status).toBe('success');
});

it("on a shared store a keyed run's writes after its take fold into one commit with its end: two commits of its record, as a run without a key", async () => {
  if (!isSharedStore(s.store)) return; // embedded: the take is in memory and the creating write folds as any run's
  // Its own server with a fold window no run outlasts: the end hands the write over at once, so the
  // count does not depend on how fast the model answers. Before, the run's first write after its
  // take went alone (the run sends nothing before the take is stored, so nothing folds there): 3.
  const held = await startTestServer({ agent: { tools: { builtin: [] } }, background: { enabled: false } }, { modelUrl: model.url, createFoldMs: 60_000 });
  try {
    const commits = new Map<string, number>();
    const note = (ops: WriteOp[]): WriteOp[] => {
      for (const id of new Set(ops.filter((o) => o.kind === 'runs').map((o) => o.id))) commits.set(id, (commits.get(id) ?? 0) + 1);
      return ops;
    };
    const take = (ops: CommitOps): CommitOps => (typeof ops === 'function' ? () => note(ops()) : note(ops));
    const store = held.store;
    const commit = store.commit.bind(store);
    store.commit = (ops: CommitOps) => commit(take(ops));
    const withEvents = store.commitWithEvents.bind(store);
    store.commitWithEvents = (ops: CommitOps, events: CommitEvents) => withEvents(take(ops), events);
    const r = await postJson(`${held.url}/run/sync`, { query: 'fold', concurrency: { key: 'fold', limit: 5 } });
    expect(r.body.status).toBe('success');
    expect(commits.get(r.body.run_id as string)).toBe(2);
    const events = (await getJson(`${held.url}/telemetry/events?run_id=${r.body.run_id}&limit=100`)).body.events as Array<{ event_type: string }>;
    expect(events.map((e) => e.event_type)).toContain('user_message');
  } finally {
    await held.stop();
    held.cleanup();
  }
});
