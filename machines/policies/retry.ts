// Retry policy arithmetic (docs/contract.md §7; defaults from the spec: fixed, 30 s, max 300 s, 0 retries).

export type Backoff = 'fixed' | 'exponential';
export type RetryOn = 'exception' | 'timeout';
/** How an attempt ended; 'cancelled' is never retried. */
export type AttemptErrorKind = 'exception' | 'timeout' | 'cancelled';

/** The stored RetryPolicy; every field optional and nullable, defaults fill the gaps. */
export interface RetryPolicy {
  backoff?: Backoff | null;
  initial_delay_seconds?: number | null;
  max_delay_seconds?: number | null;
  max_retries?: number | null;
  retry_on?: readonly string[] | null;
}

export interface ResolvedRetryPolicy {
  backoff: Backoff;
  initial_delay_seconds: number;
  max_delay_seconds: number;
  max_retries: number;
  retry_on: readonly RetryOn[];
}

export const RETRY_DEFAULTS: ResolvedRetryPolicy = Object.freeze({
  backoff: 'fixed',
  initial_delay_seconds: 30,
  max_delay_seconds: 300,
  max_retries: 0,
  retry_on: Object.freeze(['exception', 'timeout'] as RetryOn[]),
});

export function resolveRetryPolicy(policy?: RetryPolicy | null): ResolvedRetryPolicy {
  const p = policy ?? {};
  return {
    backoff: p.backoff ?? RETRY_DEFAULTS.backoff,
    initial_delay_seconds: Math.max(0, p.initial_delay_seconds ?? RETRY_DEFAULTS.initial_delay_seconds),
    max_delay_seconds: Math.max(0, p.max_delay_seconds ?? RETRY_DEFAULTS.max_delay_seconds),
    max_retries: Math.max(0, Math.floor(p.max_retries ?? RETRY_DEFAULTS.max_retries)),
    // An explicit empty list means "retry on nothing"; unknown words are ignored.
    retry_on: p.retry_on == null ? RETRY_DEFAULTS.retry_on : p.retry_on.filter((v): v is RetryOn => v === 'exception' || v === 'timeout'),
  };
}

/**
 * Delay before the attempt after failed attempt n (1-based): fixed = initial, exponential =
 * initial * 2^(n-1); both capped at max_delay_seconds (a max is a max, even for fixed).
 */
export function retryDelaySeconds(policy: RetryPolicy | null | undefined, failedAttemptNumber: number): number {
  const p = resolveRetryPolicy(policy);
  const n = Math.max(1, Math.floor(failedAttemptNumber));
  // 2 ** n is Infinity for huge n, and min() then gives the cap: no overflow to worry about.
  const raw = p.backoff === 'exponential' ? p.initial_delay_seconds * 2 ** (n - 1) : p.initial_delay_seconds;
  return Math.min(raw, p.max_delay_seconds);
}

/** max_retries + 1. */
export function maxAttempts(policy: RetryPolicy | null | undefined): number {
  return resolveRetryPolicy(policy).max_retries + 1;
}

export interface RetryInput {
  policy: RetryPolicy | null | undefined;
  /** The attempt that just failed, 1-based. */
  attemptNumber: number;
  errorKind: AttemptErrorKind;
  /** The run already made a non-idempotent call whose outcome is success or unknown. */
  hasUnsafeSideEffects: boolean;
}

export type RetryDecision =
  | { retry: true; delaySeconds: number; nextAttemptNumber: number }
  | { retry: false; reason: 'cancelled' | 'unsafe_side_effects' | 'not_retryable' | 'attempts_exhausted' };

export function retryDecision(input: RetryInput): RetryDecision {
  const p = resolveRetryPolicy(input.policy);
  if (input.errorKind === 'cancelled') return { retry: false, reason: 'cancelled' };
  // Retrying from scratch would repeat a call the world may already have seen (§6.3, §7): the run
  // ends failed with metadata.side_effects instead.
  if (input.hasUnsafeSideEffects) return { retry: false, reason: 'unsafe_side_effects' };
  if (!p.retry_on.includes(input.errorKind)) return { retry: false, reason: 'not_retryable' };
  if (input.attemptNumber >= p.max_retries + 1) return { retry: false, reason: 'attempts_exhausted' };
  return {
    retry: true,
    delaySeconds: retryDelaySeconds(input.policy, input.attemptNumber),
    nextAttemptNumber: input.attemptNumber + 1,
  };
}

export function shouldRetry(input: RetryInput): boolean {
  return retryDecision(input).retry;
}
