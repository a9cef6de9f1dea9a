// Time is an input (architecture habit 2): everything that needs "now" takes a Clock, so tests
// can drive schedules, leases and expiries without sleeping.
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** A clock tests move by hand. */
export class ManualClock implements Clock {
  constructor(private ms: number = Date.parse('2026-01-01T00:00:00Z')) {}
  now(): number {
    return this.ms;
  }
  set(ms: number | string): void {
    this.ms = typeof ms === 'string' ? Date.parse(ms) : ms;
  }
  advance(ms: number): void {
    this.ms += ms;
  }
}

/**
 * `new Date(ms).toISOString()`, remembering the last answer: a run stamps its record, snapshot,
 * checkpoints and every event with "now", mostly within one millisecond (src/runtime/run-host.ts),
 * and formatting a date costs more than comparing a number.
 */
let lastMs = Number.NaN;
let lastIso = '';
export function isoAt(ms: number): string {
  if (ms !== lastMs) {
    lastIso = new Date(ms).toISOString(); // throws on an invalid time, as before (NaN never equals lastMs)
    lastMs = ms;
  }
  return lastIso;
}

/**
 * A timestamp as `new Date(s).toISOString()` gives it, or null when `s` is not a date: the one
 * isoAt formatted last is returned as it is (an event stamped by its emitter just now), any other
 * is parsed once.
 */
export function canonicalIso(s: string): string | null {
  if (s === lastIso && s !== '') return s;
  const ms = Date.parse(s);
  return Number.isNaN(ms) ? null : isoAt(ms);
}
