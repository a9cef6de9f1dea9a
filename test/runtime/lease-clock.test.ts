// The lease clock (src/lease-clock.ts): leases are written and judged on the store's clock where
// the store has one, the process's otherwise; the offset is measured once, so a clock moved by
// hand moves the lease clock with it.
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import { LeaseClock } from '../../src/lease-clock.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');

describe('LeaseClock', () => {
  it('is the process clock on a store with no clock of its own', async () => {
    const clock = new ManualClock(T0);
    const leases = new LeaseClock(clock);
    await leases.sync({});
    expect(leases.skewMs).toBe(0);
    expect(leases.expiresAt(30_000)).toBe('2026-01-01T00:00:30.000Z');
    expect(leases.lapsed('2026-01-01T00:00:00.000Z')).toBe(true);
    expect(leases.lapsed('2026-01-01T00:00:00.001Z')).toBe(false);
    expect(leases.lapsed(null)).toBe(true);
  });

  it('writes and judges leases on the store clock, ten minutes behind this process here', async () => {
    const clock = new ManualClock(T0);
    const leases = new LeaseClock(clock);
    await leases.sync({ serverTimeMs: async () => T0 - 600_000 });
    expect(leases.skewMs).toBe(-600_000);
    expect(leases.expiresAt(30_000)).toBe('2025-12-31T23:50:30.000Z');
    // A lease another instance wrote on the store clock, 30 s from the store's now: not lapsed,
    // though this process's own clock is far past it.
    expect(leases.lapsed('2025-12-31T23:50:30.000Z')).toBe(false);
    clock.advance(30_000);
    expect(leases.lapsed('2025-12-31T23:50:30.000Z')).toBe(true);
  });

  it('takes the store time as read half-way through the round trip', async () => {
    const clock = new ManualClock(T0);
    const leases = new LeaseClock(clock);
    await leases.sync({
      serverTimeMs: async () => {
        clock.advance(100); // the round trip: 100 ms each way
        const server = clock.now() + 5_000;
        clock.advance(100);
        return server;
      },
    });
    expect(leases.skewMs).toBe(5_000);
  });

  it('counts a difference within half the round trip as none', async () => {
    const clock = new ManualClock(T0);
    const leases = new LeaseClock(clock);
    await leases.sync({
      serverTimeMs: async () => {
        clock.advance(100);
        const server = clock.now() + 80; // within the 100 ms either way the trip allows
        clock.advance(100);
        return server;
      },
    });
    expect(leases.skewMs).toBe(0);
  });

  it('answers which instance owns a run in one place: the lease owner while the lease holds, on the store clock', async () => {
    const clock = new ManualClock(T0);
    const leases = new LeaseClock(clock);
    await leases.sync({ serverTimeMs: async () => T0 - 600_000 });
    const until = '2025-12-31T23:50:30.000Z'; // 30 s from the store's now
    expect(leases.heldElsewhere('b', until, 'a')).toBe(true);
    expect(leases.heldElsewhere('a', until, 'a')).toBe(false); // its own
    expect(leases.heldElsewhere(null, until, 'a')).toBe(false); // nobody's
    clock.advance(30_000);
    expect(leases.heldElsewhere('b', until, 'a')).toBe(false); // lapsed: whoever takes it by a CAS owns it
  });
});
