// An embedded store's key holders in memory (src/flow/key-slots.ts MemoryKeySlots): a Map per key
// with a count per limit instead of a list copied and scanned per take. The same rules as a
// shared store's record (machines/policies/flow.ts): the lowest limit among the newcomer's and the
// holders' wins, a holder taking again keeps its slot, the holders list in the order they took.
import { describe, expect, it } from 'vitest';
import { MemoryKeySlots } from '../../src/flow/key-slots.js';
import { ConcurrencyQueue } from '../../src/flow/concurrency.js';
import { ManualClock } from '../../src/clock.js';
import { MemoryStore } from '../../src/store/memory.js';

const ids = async (s: MemoryKeySlots, key: string) => (await s.holders(key)).map((h) => h.run_id);

describe('MemoryKeySlots', () => {
  it('admits up to the limit, in the caller turn; a holder taking again keeps its slot', () => {
    const s = new MemoryKeySlots();
    expect(s.takeNow('k', 2, 'a', 1)).toBe(true);
    expect(s.takeNow('k', 2, 'b', 2)).toBe(true);
    expect(s.takeNow('k', 2, 'c', 3)).toBe(false);
    expect(s.takeNow('k', 2, 'a', 4)).toBe(true);
    expect(s.takeNow('other', 1, 'c', 5)).toBe(true); // keys are independent
  });

  it('the lowest limit among the holders and the newcomer wins, and stops winning once its holders let go', async () => {
    const s = new MemoryKeySlots();
    expect(s.takeNow('k', 1, 'narrow', 1)).toBe(true);
    expect(s.takeNow('k', 5, 'wide', 2)).toBe(false); // held under 1
    expect(s.releaseNow('k', 'narrow')).toBe(true);
    for (const id of ['w1', 'w2', 'w3']) expect(s.takeNow('k', 5, id, 3)).toBe(true);
    expect(s.takeNow('k', 3, 'x', 4)).toBe(false); // a newcomer's lower limit counts too
    expect(s.takeNow('k', 4, 'x', 4)).toBe(true);
    expect(s.takeNow('k', 5, 'y', 5)).toBe(false); // 'x' holds under 4
    expect(s.releaseNow('k', 'x')).toBe(true);
    expect(s.takeNow('k', 5, 'y', 6)).toBe(true);
    expect(await ids(s, 'k')).toEqual(['w1', 'w2', 'w3', 'y']);
  });

  it('lists the holders in the order they took their slots; a release of a run holding none changes nothing; an empty key is gone', async () => {
    const s = new MemoryKeySlots();
    for (const id of ['a', 'b', 'c', 'd']) s.takeNow('k', 10, id, 0);
    expect(s.releaseNow('k', 'b')).toBe(true);
    expect(s.releaseNow('k', 'b')).toBe(false);
    s.takeNow('k', 10, 'e', 1);
    expect(await ids(s, 'k')).toEqual(['a', 'c', 'd', 'e']);
    const since = (await s.holders('k')).find((h) => h.run_id === 'e');
    expect(since).toEqual({ run_id: 'e', since: 1, limit: 10 });
    for (const id of ['a', 'c', 'd', 'e']) await s.release('k', id);
    expect(await s.holders('k')).toEqual([]);
    expect(s.takeNow('k', 1, 'f', 2)).toBe(true); // a fresh key: no limit left over from before
  });

  it('hands a freed slot over in one step, and prunes the holders the caller says are gone', async () => {
    const s = new MemoryKeySlots();
    s.takeNow('k', 1, 'a', 0);
    expect(await s.handOver('k', 'a', { run_id: 'b', limit: 1 }, 1)).toEqual({ held: true, took: true });
    expect(await s.handOver('k', 'a', { run_id: 'c', limit: 1 }, 2)).toEqual({ held: false, took: false });
    s.takeNow('j', 3, 'x', 0);
    s.takeNow('j', 3, 'y', 0);
    expect(await s.prune('j', async (hs) => new Set(hs.filter((h) => h.run_id === 'x').map((h) => h.run_id)))).toBe(1);
    expect(await ids(s, 'j')).toEqual(['y']);
  });

  it('a take and a release cost the same with ten thousand holders as with one (no list copied or scanned)', async () => {
    const s = new MemoryKeySlots();
    for (let i = 0; i < 10_000; i++) expect(s.takeNow('hot', 20_000, `r${i}`, i)).toBe(true);
    // Were the holders a list copied per take, these 20,000 would each copy 10,000 entries.
    const spread = Array.prototype[Symbol.iterator];
    let copies = 0;
    Array.prototype[Symbol.iterator] = function (this: unknown[]) {
      copies++;
      return spread.call(this);
    };
    try {
      for (let i = 0; i < 10_000; i++) {
        s.releaseNow('hot', `r${i}`);
        s.takeNow('hot', 20_000, `n${i}`, i);
      }
    } finally {
      Array.prototype[Symbol.iterator] = spread;
    }
    expect(copies).toBe(0);
    expect((await s.holders('hot')).length).toBe(10_000);
  });
});

describe('ConcurrencyQueue on an embedded store', () => {
  it('takes and gives back a key with room in the caller turn (no promise); a key with waiters goes the usual way', async () => {
    const q = new ConcurrencyQueue(new MemoryStore(), new ManualClock(), { pollMs: 60_000 });
    expect(q.tryTakeNow('k', 1, 'a')).toBe(true);
    expect(q.tryTakeNow('k', 1, 'b')).toBe(false);
    const waiting = q.wait({ run_id: 'b', key: 'k', limit: 1, priority: 0, enqueued_at: 1 });
    await new Promise((r) => setImmediate(r));
    expect(q.tryTakeNow('other', 5, 'c')).toBe(true);
    expect(q.releaseNow('other', 'c')).toBe(true);
    // A waiter on the key: nobody overtakes it, and its freed slot is handed on by release.
    expect(q.tryTakeNow('k', 5, 'd')).toBe(false);
    expect(q.releaseNow('k', 'a')).toBe(false);
    await q.release('k', 'a');
    expect(await waiting).toBe('admitted');
    expect(q.releaseNow('k', 'b')).toBe(true);
    expect(await q.slots.holders('k')).toEqual([]);
    q.close();
  });
});
