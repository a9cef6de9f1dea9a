import { toModelCallError } from './errors.js';
import { ModelCallError, type ModelCallRequest, type ModelCallResult, type ModelProvider } from './types.js';
import { reportSwallowed } from '../../telemetry/swallowed.js';

export interface RetryOptions {
  /** Retries after the first attempt (so at most maxRetries + 1 calls). Default 3. */
  maxRetries?: number;
  /** Backoff base: attempt n waits up to baseDelayMs * 2^(n-1). Default 500. */
  baseDelayMs?: number;
  /** Cap on any single wait, Retry-After included. Default 10000. */
  maxDelayMs?: number;
  /** In [0, 1). Default Math.random; tests pass a fixed one. */
  random?: () => number;
  /** Resolves after ms, rejects (or resolves early) when signal aborts. Default: setTimeout. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Called once per failed attempt (attempt is 1-based), before any wait. Must not throw. */
  onError?: (err: ModelCallError, attempt: number, willRetry: boolean, delayMs: number) => void;
}

export function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(new ModelCallError('aborted', 'model call aborted'));
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(new ModelCallError('aborted', 'model call aborted'));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Full-jitter exponential backoff (random * min(max, base * 2^(attempt-1))), with the server's
 * Retry-After as a floor and maxDelayMs as the ceiling for both.
 */
export function retryDelayMs(attempt: number, err: ModelCallError, opts: { baseDelayMs: number; maxDelayMs: number; random: () => number }): number {
  const exp = Math.min(opts.maxDelayMs, opts.baseDelayMs * 2 ** (attempt - 1));
  let delay = Math.floor(opts.random() * exp);
  if (err.retryAfterMs !== undefined) delay = Math.max(delay, err.retryAfterMs);
  return Math.min(delay, opts.maxDelayMs);
}

/**
 * Wraps a provider with retries for transient failures (429, 5xx, connection, timeout).
 *
 * Streaming and retries: deltas are passed straight through, so the user sees text as it comes.
 * An attempt that fails after it already streamed text is NOT retried: a retry would stream the
 * answer again after the partial one the caller already showed. Such an error is thrown with
 * `partialOutput: true` and `retryable: false`, and onError reports it with willRetry false.
 * A failure before any text (the common case: 429/5xx/reset on connect) is retried invisibly.
 */
export function withRetries(provider: ModelProvider, options: RetryOptions = {}): ModelProvider {
  const maxRetries = options.maxRetries ?? 3;
  const baseDelayMs = options.baseDelayMs ?? 500;
  const maxDelayMs = options.maxDelayMs ?? 10_000;
  const random = options.random ?? Math.random;
  const sleep = options.sleep ?? abortableSleep;
  const onError = options.onError;

  const report = (err: ModelCallError, attempt: number, willRetry: boolean, delay: number): void => {
    if (!onError) return;
    try {
      onError(err, attempt, willRetry, delay);
    } catch (err) {
      // A telemetry hook must never change the outcome of the call.
      reportSwallowed('model.retry_hook', err);
    }
  };

  return {
    provider: provider.provider,
    model: provider.model,
    ...(provider.temperature !== undefined ? { temperature: provider.temperature } : {}),
    estimateInputTokens: (messages, tools) => provider.estimateInputTokens(messages, tools),
    async call(req: ModelCallRequest): Promise<ModelCallResult> {
      for (let attempt = 1; ; attempt++) {
        if (req.signal?.aborted) throw new ModelCallError('aborted', 'model call aborted');
        let streamed = false;
        const attemptReq: ModelCallRequest = req.onDelta
          ? {
              ...req,
              onDelta: (t: string) => {
                if (t.length > 0) streamed = true;
                req.onDelta?.(t);
              },
            }
          : req;
        try {
          return await provider.call(attemptReq);
        } catch (raw) {
          const err = toModelCallError(raw, req.signal);
          if (streamed) {
            err.partialOutput = true;
            err.retryable = false;
          }
          const willRetry = err.retryable && err.kind !== 'aborted' && attempt <= maxRetries && !req.signal?.aborted;
          const delay = willRetry ? retryDelayMs(attempt, err, { baseDelayMs, maxDelayMs, random }) : 0;
          report(err, attempt, willRetry, delay);
          if (!willRetry) throw err;
          try {
            await sleep(delay, req.signal);
          } catch (sleepErr) {
            throw toModelCallError(sleepErr, req.signal);
          }
          if (req.signal?.aborted) throw new ModelCallError('aborted', 'model call aborted');
        }
      }
    },
  };
}
