// One compare-and-set loop for the whole code base: read a record, work out its next value, write
// it on the version read; on a lost race (the version moved) read again and retry, with jittered
// backoff, a bounded number of times. Replaces the hand-written loops that retried 5, 10 or 20
// times with no pause between attempts.
import { isStoreError, StoreError, type StoreErrorCode } from './store.js';

/** Every attempt lost its race: the record kept changing under us. */
export class CasExhaustedError extends Error {
  constructor(
    readonly attempts: number,
    readonly lastError: unknown,
  ) {
    super(`the record changed too often to update (${attempts} attempts)`);
    this.name = 'CasExhaustedError';
  }
}

export interface CasOptions {
  /** Most attempts (reads and writes), default 10. */
  attempts?: number;
  /** Backoff before the second attempt in ms, doubled after each further loss (capped by maxDelayMs); default 2. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Store error codes that mean "lost the race, read again"; default `stale_version`. */
  retryOn?: readonly StoreErrorCode[];
  /** Injected for tests: the pause between attempts. Default a timer. */
  sleep?: (ms: number) => Promise<void>;
  /** Injected for tests: a number in [0, 1). Default Math.random. */
  random?: () => number;
}

/**
 * Runs `attempt` until it returns without a retryable store error. `attempt(i)` does one read →
 * mutate → conditional write (i counts from 0); whatever it returns is the result. Any other
 * error is thrown as is. Throws CasExhaustedError when every attempt lost.
 */
export async function casUpdate<T>(attempt: (i: number) => Promise<T>, opts: CasOptions = {}): Promise<T> {
  const attempts = opts.attempts ?? 10;
  const retryOn = opts.retryOn ?? ['stale_version'];
  const sleep = opts.sleep ?? defaultSleep;
  const random = opts.random ?? Math.random;
  const base = opts.baseDelayMs ?? 2;
  const max = opts.maxDelayMs ?? 50;
  let last: unknown = null;
  for (let i = 0; i < attempts; i++) {
    if (i > 0) {
      // Full jitter: racing writers spread out instead of colliding again in lockstep.
      const cap = Math.min(max, base * 2 ** (i - 1));
      await sleep(random() * cap);
    }
    try {
      return await attempt(i);
    } catch (err) {
      if (!(err instanceof StoreError) || !retryOn.some((code) => isStoreError(err, code))) throw err;
      last = err;
    }
  }
  throw new CasExhaustedError(attempts, last);
}

const defaultSleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
