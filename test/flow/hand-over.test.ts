// A freed slot of a concurrency key goes straight to this process's first waiter
// (src/flow/concurrency.ts handOver): in the same write that lets go of it, and the waiter is
// admitted before release() returns, without a pump's second take of the key's record.
import { describe, expect, it, vi } from 'vitest';
import { ConcurrencyQueue } from '../../src/flow/concurrency.js';
import { ManualClock } from '../../src/clock.js';
import { MemoryStore } from '../../src/store/memory.js';

const settledNow = async <T>(p: Promise<T>): Promise<T | 'pending'> => Promise.race([p, Promise.resolve('pending' as const)]);

describe('hand-over of a freed slot', () => {
  it('admits the first waiter (in admission order) in the release itself, with one write of the key', async () => {
    const q = new ConcurrencyQueue(new MemoryStore(), new ManualClock(), { pollMs: 60_000 });
    expect(await q.tryTake('k', 1, 'a')).toBe(true);
    const low = q.wait({ run_id: 'low', key: 'k', limit: 1, priority: 0, enqueued_at: 1 });
    const high = q.wait({ run_id: 'high', key: 'k', limit: 1, priority: 10, enqueued_at: 2 });
    await new Promise((r) => setImmediate(r)); // the pumps wait() started have found the key full
    const take = vi.spyOn(q.slots, 'take');
    const handOver = vi.spyOn(q.slots, 'handOver');
    await q.release('k', 'a');
    expect(await settledNow(high)).toBe('admitted');
    expect(await settledNow(low)).toBe('pending');
    expect(handOver).toHaveBeenCalledTimes(1);
    expect(take).not.toHaveBeenCalled();
    expect((await q.slots.holders('k')).map((h) => h.run_id)).toEqual(['high']);
    await q.release('k', 'high');
    expect(await settledNow(low)).toBe('admitted');
    q.close();
  });

  it('a waiter dropped (cancelled) meanwhile does not keep the slot', async () => {
    const q = new ConcurrencyQueue(new MemoryStore(), new ManualClock(), { pollMs: 60_000 });
    await q.tryTake('k', 1, 'a');
    const b = q.wait({ run_id: 'b', key: 'k', limit: 1, priority: 0, enqueued_at: 1 });
    expect(q.drop('b')).toBe(true);
    expect(await b).toBe('dropped');
    await q.release('k', 'a');
    expect(await q.slots.holders('k')).toEqual([]);
    q.close();
  });
});
