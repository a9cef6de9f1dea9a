// Admission lanes (src/runtime/slots.ts): recovered runs share the run slots with new ones under a
// cap, and new work always goes first. Pure: no store, no server.
import { describe, expect, it } from 'vitest';
import { Slots } from '../../src/runtime/slots.js';
import { recoveryConcurrency } from '../../src/composition-root.js';

const settled = async <T>(p: Promise<T>): Promise<'pending' | T> => Promise.race([p, new Promise<'pending'>((r) => setImmediate(() => r('pending')))]);

describe('Slots', () => {
  it('recovery never holds more than its cap; new runs take the slots it leaves', async () => {
    const slots = new Slots(4, 50, 1);
    const r1 = await slots.acquireRecovery();
    const r2 = slots.acquireRecovery();
    expect(await settled(r2)).toBe('pending');
    const news = await Promise.all([slots.acquire(), slots.acquire(), slots.acquire()]);
    expect(slots.inUse).toBe(4);
    expect(slots.recoveryInUse).toBe(1);
    // Full: a fifth new run gets 503 after the wait.
    await expect(slots.acquire()).rejects.toMatchObject({ code: 'ServerBusy' });
    // The recovered run ends: its slot goes to the next recovered run (recovery is under its cap again).
    r1();
    const r2release = await r2;
    expect(slots.recoveryInUse).toBe(1);
    r2release();
    for (const n of news) n();
    expect(slots.inUse).toBe(0);
  });

  it('a freed slot goes to a waiting new run before a waiting recovery', async () => {
    const slots = new Slots(2, 1_000, 1);
    const a = await slots.acquire();
    const b = await slots.acquire();
    const recovery = slots.acquireRecovery();
    const fresh = slots.acquire();
    a();
    expect(await settled(fresh)).not.toBe('pending');
    expect(await settled(recovery)).toBe('pending');
    b();
    expect(await settled(recovery)).not.toBe('pending');
    expect(slots.recoveryInUse).toBe(1);
  });

  it('releasing twice frees one slot; cancelRecovery rejects the waiting recoveries', async () => {
    const slots = new Slots(1, 50, 1);
    const a = await slots.acquire();
    const waiting = slots.acquireRecovery();
    a();
    a();
    const r = await waiting;
    expect(slots.inUse).toBe(1);
    const more = slots.acquireRecovery();
    slots.cancelRecovery(new Error('shutting down'));
    await expect(more).rejects.toThrow('shutting down');
    r();
    expect(slots.inUse).toBe(0);
  });
});

describe('recoveryConcurrency', () => {
  it('defaults to a quarter of the run slots, at least 1, and always leaves new runs a slot', () => {
    expect(recoveryConcurrency(64, undefined)).toBe(16);
    expect(recoveryConcurrency(4, undefined)).toBe(1);
    expect(recoveryConcurrency(3, undefined)).toBe(1);
    expect(recoveryConcurrency(1, undefined)).toBe(1);
    expect(recoveryConcurrency(8, 2)).toBe(2);
    expect(recoveryConcurrency(8, 8)).toBe(7);
    expect(recoveryConcurrency(8, 100)).toBe(7);
  });
});
