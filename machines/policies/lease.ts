// The one lease rule, for both run kinds (a run's record and a background run's row): a lease
// with no expiry, or whose expiry is not after `nowMs`, has lapsed, and its holder is presumed
// gone. Everything that asks "may I take this run over?" asks this through the process's one
// LeaseClock (src/lease-clock.ts), on the store's clock where the store has one; docs/architecture.md
// "Which instance owns a run" says who asks.

/** True when a lease expiring at `expiresAt` (ISO 8601, or none) has lapsed at `nowMs`. */
export function leaseLapsed(expiresAt: string | null | undefined, nowMs: number): boolean {
  return !expiresAt || Date.parse(expiresAt) <= nowMs;
}
