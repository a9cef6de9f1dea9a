// A concurrency key's admission order across instances on PostgreSQL (docs/flow-control.md
// "Several instances"): among the runs waiting for a key on every instance, higher priority
// first, then arrival; a waiter whose instance was killed holds the key up no longer than its
// takeover. The order is read where runs start: the scripted model's requests.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import type { CommitEvents, CommitOps, WriteOp } from '../../src/store/store.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { useScriptedOpenAI } from '../helpers/scripted-model.js';
import { eventually, getJson, startTestServer, type TestServer } from '../helpers/server.js';
// The children's helper: a request timeout of our choosing (a queued /run/sync answers late).
import { postJson, waitForRunStatus } from '../crash/harness.js';

let model: ScriptedOpenAI;
useScriptedOpenAI((m) => (model = m));

const queryOf = (body: { messages: Array<{ role: string; content?: unknown }> }): string =>
  String(body.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '');

/** Posts a keyed /run/sync on `url` and waits until its run is stored `queued` (its arrival is then fixed). */
async function queue(
  url: string,
  query: string,
  key: { key: string; limit: number },
  priority: number,
): Promise<{ answer: Promise<{ body: Record<string, unknown> }> }> {
  const answer = postJson(`${url}/run/sync`, { query, session_id: `s-${query.replace(/\W/g, '-')}`, concurrency: key, priority }, 60_000);
  await eventually(
    async () => (await getJson(`${url}/runs?session_id=s-${query.replace(/\W/g, '-')}`)).body?.runs?.[0]?.status === 'queued',
    10_000,
    `${query} queued`,
  );
  // Wrapped: an async function would wait for the answer itself.
  return { answer };
}

describe('two instances on PostgreSQL: one admission order for a key', () => {
  let db: TestDatabase;
  let a: TestServer;
  let b: TestServer;
  beforeAll(async () => {
    db = await createTestDatabase('order33_flow');
    // A long poll: an admission must come from the slot's hand-over, not from a poll that happened to look first.
    const cfg = { store: { kind: 'postgres', url: db.url }, flow: { poll_ms: 5000 } };
    a = await startTestServer(cfg, { modelUrl: model.url });
    b = await startTestServer(cfg, { modelUrl: model.url });
    for (const server of [a, b]) countKeyWrites(server);
  });

  /** Per instance, the commits that write a key's holders record and nothing else (a round of the key's own). */
  const ownKeyCommits = new Map<TestServer, number>();
  function countKeyWrites(server: TestServer): void {
    const store = server.store;
    ownKeyCommits.set(server, 0);
    const note = (ops: WriteOp[]): WriteOp[] => {
      if (ops.length > 0 && ops.every((o) => o.id.startsWith('flow_key:'))) ownKeyCommits.set(server, ownKeyCommits.get(server)! + 1);
      return ops;
    };
    const take = (ops: CommitOps): CommitOps => (typeof ops === 'function' ? () => note(ops()) : note(ops));
    const commit = store.commit.bind(store);
    store.commit = (ops: CommitOps) => commit(take(ops));
    const withEvents = store.commitWithEvents.bind(store);
    store.commitWithEvents = (ops: CommitOps, events: CommitEvents) => withEvents(take(ops), events);
  }
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    a?.cleanup();
    b?.cleanup();
    await db?.drop();
  });

  it('runs queued alternately on A and B with mixed priorities start in (priority desc, arrival) order, one at a time', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    model.setDefault((body) => (queryOf(body) === 'head' ? { text: 'done', holdUntil: gate } : { text: 'done' }));
    model.resetPeak();
    const key = { key: 'global:order', limit: 1 };
    // The head holds the key's only slot on A; its end on A frees it.
    const head = postJson(`${a.url}/run/sync`, { query: 'head', concurrency: key }, 60_000);
    await model.waitForRequests(1);
    const plan: Array<[TestServer, string, number]> = [
      [a, 'a low 1', 0],
      [b, 'b high 1', 100],
      [a, 'a mid', 50],
      [b, 'b low 1', 0],
      [a, 'a high 2', 100],
      [b, 'b mid', 50],
      [a, 'a low 2', 0],
      [b, 'b high 2', 100],
    ];
    const answers: Array<Promise<{ body: Record<string, unknown> }>> = [];
    for (const [server, query, priority] of plan) answers.push((await queue(server.url, query, key, priority)).answer);
    // A position counts the waiters of both instances in that order, whichever instance is asked.
    const lastHigh = (await getJson(`${b.url}/runs?session_id=s-b-high-2`)).body.runs[0].run_id as string;
    expect((await getJson(`${a.url}/runs/${lastHigh}`)).body.queue).toEqual({ key: 'global:order', position: 3 });
    release();
    const done = await Promise.all([head, ...answers]);
    expect(done.map((d) => d.body.status)).toEqual(done.map(() => 'success'));
    // A, which freed the slot, and its own waiters do not go first: one order over both instances.
    expect(model.requests.map(queryOf)).toEqual(['head', 'b high 1', 'a high 2', 'b high 2', 'a mid', 'b mid', 'a low 1', 'b low 1', 'a low 2']);
    expect(model.maxInFlight()).toBe(1);
    // Each slot went on inside the commit that freed it (the run's end): no instance wrote the
    // key's record in a round of its own, to queue, take or hand over.
    expect([ownKeyCommits.get(a), ownKeyCommits.get(b)]).toEqual([0, 0]);
  }, 60_000);

  it('a new run does not take a slot its key freed while runs of the key wait on another instance', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    model.reset();
    model.setDefault((body) => (queryOf(body) === 'holder' ? { text: 'done', holdUntil: gate } : { text: 'done' }));
    const key = { key: 'global:newcomer', limit: 1 };
    const holder = postJson(`${a.url}/run/sync`, { query: 'holder', concurrency: key }, 60_000);
    await model.waitForRequests(1);
    const { answer: waiter } = await queue(b.url, 'waiter', key, 0);
    release();
    await holder;
    // The holder's end handed its slot to B's waiter in the same commit: a newcomer on A queues behind it.
    const late = await postJson(`${a.url}/run/sync`, { query: 'late', concurrency: key }, 60_000);
    expect((await waiter).body.status).toBe('success');
    expect(late.body.status).toBe('success');
    expect(model.requests.map(queryOf)).toEqual(['holder', 'waiter', 'late']);
  }, 60_000);
});

it('on PostgreSQL, the first waiter of a key on an instance killed with SIGKILL gets the slot once its runs are taken over; the key goes on after it', async () => {
  const { startCluster } = await import('../cluster/helpers.js');
  model.reset();
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  model.setDefault((body) => (queryOf(body) === 'holder' ? { text: 'done', holdUntil: gate } : { text: 'done' }));
  model.resetPeak();
  const cluster = await startCluster(2, model.url, { flow: { poll_ms: 100 } });
  try {
    const [a, b] = [cluster.instances[0]!, cluster.instances[1]!];
    const key = { key: 'global:crash', limit: 1 };
    void postJson(`${b.url}/run/sync`, { query: 'holder', session_id: 's-holder', concurrency: key }, 60_000).catch(() => undefined);
    await model.waitForRequests(1);
    // The key's first waiter is A's (priority 100), then B's own.
    void (await queue(a.url, 'orphan', key, 100)).answer.catch(() => undefined);
    const { answer: own } = await queue(b.url, 'own', key, 0);
    const orphan = (await getJson(`${b.url}/runs?session_id=s-orphan`)).body.runs[0].run_id as string;
    await a.kill('SIGKILL');
    // The holder ends on B: its slot goes to A's waiter, which B starts once it takes A's queued runs over.
    release();
    await waitForRunStatus(b.url, orphan, ['completed'], 40_000);
    expect((await own).body.status).toBe('success');
    const asked = model.requests.map(queryOf);
    expect(asked).toEqual(['holder', 'orphan', 'own']);
    expect(model.maxInFlight()).toBe(1);
  } finally {
    await cluster.destroy();
  }
}, 90_000);
