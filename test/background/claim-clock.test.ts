// Unit test: a claim pass judges `not_before` and the advisory claim holds of a shared store on
// the lease clock (src/lease-clock.ts: the store's clock on PostgreSQL), not on this process's
// clock, so instances whose clocks disagree agree on when a row is due and when a hold lapsed.
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import { LeaseClock } from '../../src/lease-clock.js';
import { Claimer, type ClaimerHost } from '../../src/background/claimer.js';
import type { BackgroundDeps, TimerRef } from '../../src/background/host-types.js';
import { MemoryStore } from '../../src/store/memory.js';
import type { QueueClaimQuery, StoreCapabilities, Versioned } from '../../src/store/store.js';

/** A store whose queue claims (as PostgreSQL's) record what each pass asked. */
class ClaimingStore extends MemoryStore {
  readonly asked: QueueClaimQuery[] = [];
  nextDueAt: number | null = null;
  override get capabilities(): StoreCapabilities {
    return {
      ...super.capabilities,
      sharedByInstances: true,
      queueClaims: {
        claimQueued: async (q: QueueClaimQuery) => {
          this.asked.push(q);
          return { items: [] as Versioned<unknown>[], nextDueAt: this.nextDueAt };
        },
        release: async () => {},
      },
    };
  }
}

describe('claim passes on the lease clock', () => {
  it('asks for due rows and holds them by the store clock, and wakes for the next not_before by it', async () => {
    const clock = new ManualClock(Date.parse('2026-01-01T00:00:00Z'));
    const leases = new LeaseClock(clock);
    // The database's clock runs 90 s ahead of this process's.
    const SKEW = 90_000;
    await leases.sync({ serverTimeMs: async () => clock.now() + SKEW });
    const store = new ClaimingStore();
    await store.open();
    store.nextDueAt = clock.now() + SKEW + 5_000;
    const wakes: number[] = [];
    const host = {
      handles: new Map(),
      heldCount: () => 0,
      mirrorFull: () => false,
      timers: {
        setTimer: (_fn: () => void, ms: number) => {
          wakes.push(ms);
          return 1 as unknown as TimerRef;
        },
        clearTimer: () => {},
      },
    } as unknown as ClaimerHost;
    const deps = {
      store,
      clock,
      leases,
      config: { background: { concurrency: 4 } },
      logger: { error: () => {}, warn: () => {}, info: () => {} },
      workerId: 'w1',
    } as unknown as BackgroundDeps;
    const claimer = new Claimer(deps, host);
    claimer.accepting = true;
    await claimer.claimPass();
    expect(store.asked).toHaveLength(1);
    expect(store.asked[0].now).toBe(clock.now() + SKEW);
    expect(store.asked[0].holdUntil).toBe(clock.now() + SKEW + 10_000);
    // The next row is due 5 s from now on the store's clock: the wake-up is 5 s away, not 95.
    expect(wakes).toEqual([5_000]);
    // A kick for an instant on the lease clock that is already past there claims now (no timer).
    claimer.kick(clock.now() + 1_000);
    expect(wakes).toEqual([5_000]);
    await store.close();
  });
});
