// The clock leases are written and judged on, for both run kinds: the store's clock where the
// store has one (PostgreSQL's, `Store.serverTimeMs`), the process's otherwise. Every lease expiry
// this process writes (a run's creation, resume and heartbeat; a background run's claim, recovery
// and heartbeat) and every "has this lease lapsed?" it asks go through one LeaseClock, so instances
// whose clocks disagree still agree on when a lease lapses (docs/architecture.md "Which instance
// owns a run"). The rule itself is machines/policies/lease.ts.
import { leaseLapsed } from '../machines/policies/lease.js';
import type { Clock } from './clock.js';

/** What a LeaseClock reads of the store: its server's clock, when it has one. */
interface StoreTime {
  serverTimeMs?(): Promise<number>;
}

export class LeaseClock {
  /** The store's clock minus this process's, measured by sync(); 0 on a store with no clock. */
  private offsetMs = 0;

  constructor(private readonly clock: Clock) {}

  /** Now on the store's clock. */
  now(): number {
    return this.clock.now() + this.offsetMs;
  }

  /** The expiry (ISO 8601) of a lease of `leaseMs` taken or renewed now. */
  expiresAt(leaseMs: number): string {
    return new Date(this.now() + leaseMs).toISOString();
  }

  /** Whether a lease expiring at `expiresAt` has lapsed now (the one rule, machines/policies/lease.ts). */
  lapsed(expiresAt: string | null | undefined): boolean {
    return leaseLapsed(expiresAt, this.now());
  }

  /**
   * Which instance owns a run (docs/architecture.md "Which instance owns a run"): the one named
   * by its lease while that lease holds. True when that is an instance other than `self`, so
   * `self` must leave the run to it (ask it, or wait for the lease to lapse); false when the run
   * is `self`'s or nobody's, and whoever takes it by a compare-and-swap write owns it.
   */
  heldElsewhere(owner: string | null | undefined, expiresAt: string | null | undefined, self: string): boolean {
    return !!owner && owner !== self && !this.lapsed(expiresAt);
  }

  /** How far the store's clock is ahead of this process's (ms; negative when behind). */
  get skewMs(): number {
    return this.offsetMs;
  }

  /**
   * Measures the store's clock against this process's (once, at start-up: the offset is then a
   * constant, so a clock a test moves by hand moves the lease clock with it). The store's time is
   * taken as read half-way through the round trip; a difference within half the round trip
   * cannot be told from the trip itself and counts as none (the database on this machine).
   */
  async sync(store: StoreTime): Promise<void> {
    if (!store.serverTimeMs) return;
    const before = this.clock.now();
    const server = await store.serverTimeMs();
    const after = this.clock.now();
    const skew = server - (before + after) / 2;
    this.offsetMs = Math.abs(skew) <= (after - before) / 2 ? 0 : Math.round(skew);
  }
}
