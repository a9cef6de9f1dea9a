import { describe, it, expect } from 'vitest';
import { maxAttempts, resolveRetryPolicy, retryDecision, retryDelaySeconds, shouldRetry, type RetryInput } from '../../machines/policies/retry.js';

describe('retryDelaySeconds', () => {
  it('defaults: fixed 30 s', () => {
    expect([1, 2, 5].map((n) => retryDelaySeconds(undefined, n))).toEqual([30, 30, 30]);
    expect(retryDelaySeconds({}, 3)).toBe(30);
  });

  it('fixed = initial, capped at max', () => {
    expect(retryDelaySeconds({ backoff: 'fixed', initial_delay_seconds: 10 }, 4)).toBe(10);
    expect(retryDelaySeconds({ backoff: 'fixed', initial_delay_seconds: 600, max_delay_seconds: 120 }, 1)).toBe(120);
  });

  it('exponential = initial * 2^(n-1), capped at max', () => {
    const p = { backoff: 'exponential' as const, initial_delay_seconds: 10, max_delay_seconds: 100 };
    expect([1, 2, 3, 4, 5, 6].map((n) => retryDelaySeconds(p, n))).toEqual([10, 20, 40, 80, 100, 100]);
    expect(retryDelaySeconds({ backoff: 'exponential' }, 4)).toBe(240);
    expect(retryDelaySeconds({ backoff: 'exponential' }, 5)).toBe(300);
    expect(retryDelaySeconds(p, 5000)).toBe(100);
  });

  it('null fields take the defaults', () => {
    expect(resolveRetryPolicy({ backoff: null, initial_delay_seconds: null, max_delay_seconds: null, max_retries: null, retry_on: null })).toEqual({
      backoff: 'fixed',
      initial_delay_seconds: 30,
      max_delay_seconds: 300,
      max_retries: 0,
      retry_on: ['exception', 'timeout'],
    });
  });
});

describe('maxAttempts', () => {
  it('is max_retries + 1', () => {
    expect(maxAttempts(undefined)).toBe(1);
    expect(maxAttempts({ max_retries: 3 })).toBe(4);
  });
});

describe('shouldRetry', () => {
  const base: RetryInput = { policy: { max_retries: 2 }, attemptNumber: 1, errorKind: 'exception', hasUnsafeSideEffects: false };

  it('retries an exception or a timeout while attempts remain', () => {
    expect(shouldRetry(base)).toBe(true);
    expect(shouldRetry({ ...base, errorKind: 'timeout', attemptNumber: 2 })).toBe(true);
    expect(retryDecision({ ...base, policy: { max_retries: 2, backoff: 'exponential', initial_delay_seconds: 5 }, attemptNumber: 2 })).toEqual({
      retry: true,
      delaySeconds: 10,
      nextAttemptNumber: 3,
    });
  });

  it('stops when attempts are used up', () => {
    expect(retryDecision({ ...base, attemptNumber: 3 })).toEqual({ retry: false, reason: 'attempts_exhausted' });
    expect(shouldRetry({ ...base, policy: undefined })).toBe(false); // default max_retries 0
  });

  it('never after a cancel', () => {
    expect(retryDecision({ ...base, errorKind: 'cancelled' })).toEqual({ retry: false, reason: 'cancelled' });
  });

  it('never when a non-idempotent call already ran (success or unknown)', () => {
    expect(retryDecision({ ...base, hasUnsafeSideEffects: true })).toEqual({ retry: false, reason: 'unsafe_side_effects' });
  });

  it('honours retry_on', () => {
    const onlyTimeout = { max_retries: 2, retry_on: ['timeout'] };
    expect(retryDecision({ ...base, policy: onlyTimeout })).toEqual({ retry: false, reason: 'not_retryable' });
    expect(shouldRetry({ ...base, policy: onlyTimeout, errorKind: 'timeout' })).toBe(true);
    expect(shouldRetry({ ...base, policy: { max_retries: 2, retry_on: [] }, errorKind: 'timeout' })).toBe(false);
  });
});
