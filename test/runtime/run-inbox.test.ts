// The run inbox (src/runtime/run-inbox.ts) and the session gate's holder, on the memory store:
// what a boundary read hands over, the bounds, and concurrent senders.
import { describe, expect, it } from 'vitest';
import { MemoryStore } from '../../src/store/memory.js';
import { LocalChanges } from '../../src/store/changes.js';
import { CHANGE_CHANNELS, type FeedState } from '../../src/store/change-feed.js';
import { FEED_SETTLE_MS, MAX_EARLY_HINTS, MAX_STEERS_PER_RUN, RunInbox, frameSteer } from '../../src/runtime/run-inbox.js';
import { SessionGate } from '../../src/runtime/session-gate.js';
import { ActorSystem } from '../../src/runtime/system.js';

async function inbox() {
  const store = new MemoryStore();
  await store.open();
  return new RunInbox(store, () => '2026-01-01T00:00:00.000Z');
}

describe('RunInbox', () => {
  it('hands over what the run has not taken, framed as from the sender', async () => {
    const box = await inbox();
    expect(await box.read('r1', [], null)).toEqual({ messages: [], interrupt_id: null });
    const a = await box.queueSteer('r1', 'alice', 'use metric');
    const b = await box.queueSteer('r1', 'bob', 'and be brief');
    const all = await box.read('r1', [], null);
    expect(all.messages).toEqual([
      { message_id: a.message_id, content: frameSteer('alice', 'use metric') },
      { message_id: b.message_id, content: frameSteer('bob', 'and be brief') },
    ]);
    expect(all.messages[0].content).toMatch(/^\[Message from alice, .*\]\nuse metric$/);
    expect((await box.read('r1', [a.message_id], null)).messages.map((m) => m.message_id)).toEqual([b.message_id]);
    expect((await box.read('other', [], null)).messages).toEqual([]);
  });

  it('an interrupt request is handed over until the run has stopped for it; a new one replaces it', async () => {
    const box = await inbox();
    const id = await box.requestInterrupt('r1', 'ops');
    expect((await box.read('r1', [], null)).interrupt_id).toBe(id);
    expect((await box.read('r1', [], id)).interrupt_id).toBeNull();
    const again = await box.requestInterrupt('r1', null);
    expect(again).not.toBe(id);
    expect((await box.read('r1', [], id)).interrupt_id).toBe(again);
    expect((await box.get('r1'))?.interrupt).toMatchObject({ interrupt_id: again, requested_by: null });
  });

  it('concurrent senders all land (compare-and-swap retries); the per-run bound answers 409', async () => {
    const box = await inbox();
    const sent = await Promise.all(Array.from({ length: 8 }, (_, i) => box.queueSteer('r1', 'u', `m${i}`)));
    expect((await box.get('r1'))!.messages.map((m) => m.message_id).sort()).toEqual(sent.map((s) => s.message_id).sort());
    for (let i = 8; i < MAX_STEERS_PER_RUN; i++) await box.queueSteer('r1', 'u', `m${i}`);
    await expect(box.queueSteer('r1', 'u', 'one too many')).rejects.toMatchObject({ code: 'Conflict' });
    await box.withdrawSteer('r1', sent[0].message_id);
    expect((await box.get('r1'))!.messages).toHaveLength(MAX_STEERS_PER_RUN - 1);
  });

  it('on a single-process store a run never written to is not read at all', async () => {
    const store = new MemoryStore();
    await store.open();
    let reads = 0;
    const get = store.getRecord.bind(store);
    store.getRecord = ((kind, id) => {
      if (kind === 'run_inbox') reads++;
      return get(kind, id);
    }) as typeof store.getRecord;
    const box = new RunInbox(store, () => '2026-01-01T00:00:00.000Z');
    await box.read('quiet', [], null);
    expect(reads).toBe(0);
    box.mark('resumed');
    await box.read('resumed', [], null);
    expect(reads).toBe(1);
  });
});

/** An in-process feed whose state the test sets (listening since long ago unless told otherwise). */
class TestFeed extends LocalChanges {
  state: FeedState | null = { generation: 1, sinceMs: -Infinity };
  override listening(): FeedState | null {
    return this.state;
  }
}

/** Two instances' inboxes over one shared store and feed; counts the inbox reads. */
async function sharedPair() {
  const store = new MemoryStore();
  const feed = new TestFeed();
  store.changes = feed;
  await store.open();
  const reads = { n: 0 };
  const get = store.getRecord.bind(store);
  store.getRecord = ((kind, id) => {
    if (kind === 'run_inbox') reads.n++;
    return get(kind, id);
  }) as typeof store.getRecord;
  const now = () => '2026-01-01T00:00:00.000Z';
  return { store, feed, reads, a: new RunInbox(store, now), b: new RunInbox(store, now) };
}

const delivered = () => new Promise<void>((r) => setImmediate(r));

describe('RunInbox on a store several instances share', () => {
  it('a run nobody wrote to is not read while the feed listens; a steer written through another instance is heard and read', async () => {
    const { a, b, reads } = await sharedPair();
    // Heard from the start, before this instance ever looked at the run.
    await b.queueSteer('run0', 'carol', 'early');
    await delivered();
    expect(a.mayHold('run0')).toBe(true);
    reads.n = 0;
    expect(a.mayHold('run1')).toBe(false);
    expect(await a.read('run1', [], null)).toEqual({ messages: [], interrupt_id: null });
    expect(reads.n).toBe(0);
    const sent = await b.queueSteer('run1', 'alice', 'use metric');
    await delivered();
    expect(a.mayHold('run1')).toBe(true);
    expect((await a.read('run1', [], null)).messages.map((m) => m.message_id)).toEqual([sent.message_id]);
    // An interrupt requested through the other instance, for a run not written to before.
    expect(a.mayHold('run2')).toBe(false);
    const id = await b.requestInterrupt('run2', 'ops');
    await delivered();
    expect((await a.read('run2', [], null)).interrupt_id).toBe(id);
  });

  it('reads whenever the feed cannot vouch: not listening, reconnected since the run was first seen, or only just connected', async () => {
    const { a, feed } = await sharedPair();
    expect(a.mayHold('quiet')).toBe(false);
    feed.state = null;
    expect(a.mayHold('quiet')).toBe(true);
    expect(a.mayHold('other')).toBe(true);
    // Back, on a new connection: what was sent meanwhile is lost, so 'quiet' keeps reading.
    feed.state = { generation: 2, sinceMs: performance.now() - 2 * FEED_SETTLE_MS };
    expect(a.mayHold('quiet')).toBe(true);
    expect(a.mayHold('fresh')).toBe(false);
    // A run first seen just after a reconnect may have become steerable while the feed was down.
    feed.state = { generation: 3, sinceMs: performance.now() };
    expect(a.mayHold('early')).toBe(true);
    feed.state = { generation: 3, sinceMs: performance.now() - 2 * FEED_SETTLE_MS };
    expect(a.mayHold('early')).toBe(true);
    a.forget('early');
    expect(a.mayHold('early')).toBe(false);
  });

  it('a run this instance creates while the feed listens is not read, even just after a (re)connect; a steer still is, and a reconnect makes it read', async () => {
    const { a, b, feed, reads } = await sharedPair();
    feed.state = { generation: 4, sinceMs: performance.now() };
    a.born('new');
    expect(a.mayHold('new')).toBe(false);
    // Not created here (resumed, or another instance's): within the margin it reads.
    expect(a.mayHold('other')).toBe(true);
    const sent = await b.queueSteer('new', 'alice', 'use metric');
    await delivered();
    reads.n = 0;
    expect((await a.read('new', [], null)).messages.map((m) => m.message_id)).toEqual([sent.message_id]);
    expect(reads.n).toBe(1);
    a.born('later');
    feed.state = { generation: 5, sinceMs: performance.now() };
    expect(a.mayHold('later')).toBe(true);
    // Born while the feed was down: nothing vouches for it.
    feed.state = null;
    a.born('blind');
    feed.state = { generation: 6, sinceMs: performance.now() };
    expect(a.mayHold('blind')).toBe(true);
  });

  it('remembers a bounded number of writes to runs it has not seen (most live on other instances and never end here)', async () => {
    const { a, feed } = await sharedPair();
    const n = MAX_EARLY_HINTS + 500;
    for (let i = 0; i < n; i++) await feed.notify(CHANGE_CHANNELS.inbox, JSON.stringify({ r: `elsewhere-${i}` }));
    await delivered();
    const held = a as unknown as { maybe: Set<string>; seen: Map<string, number>; early?: Set<string> };
    expect(held.maybe.size + held.seen.size + (held.early?.size ?? 0)).toBeLessThanOrEqual(MAX_EARLY_HINTS);
    // The newest are kept: a run of this instance heard of just before its first boundary reads.
    expect(a.mayHold(`elsewhere-${n - 1}`)).toBe(true);
    // A run seen here is remembered however many others were heard, until it ends.
    expect(a.mayHold('mine')).toBe(false);
    await feed.notify(CHANGE_CHANNELS.inbox, JSON.stringify({ r: 'mine' }));
    for (let i = 0; i < 200; i++) await feed.notify(CHANGE_CHANNELS.inbox, JSON.stringify({ r: `more-${i}` }));
    await delivered();
    expect(a.mayHold('mine')).toBe(true);
    a.forget('mine');
    expect(held.maybe.has('mine')).toBe(false);
  });
});

describe('SessionGate.holder', () => {
  it('names the run holding the session, solo or queued behind by an actor, and nobody once released', async () => {
    const system = new ActorSystem();
    const gate = new SessionGate(system);
    expect(gate.holder('s')).toBeNull();
    await gate.acquire('s', 'a');
    expect(gate.holder('s')).toBe('a');
    const b = gate.acquire('s', 'b');
    expect(gate.holder('s')).toBe('a');
    gate.release('s', 'a');
    await b;
    expect(gate.holder('s')).toBe('b');
    gate.release('s', 'b');
    expect(gate.holder('s')).toBeNull();
  });
});
