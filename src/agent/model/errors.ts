import type { APICallError } from 'ai';

// The AI SDK tags its errors with Symbol.for('vercel.ai.error.<name>') (@ai-sdk/provider's
// hasMarker). Checking the tag here instead of importing the SDK's classes keeps the SDK (~150 ms
// to load) out of processes that never make a real model call; the retry wrapper every run uses
// imports this file.
const hasAiSdkMarker = (err: unknown, name: string): boolean => {
  const key = Symbol.for(`vercel.ai.error.${name}`);
  return err != null && typeof err === 'object' && key in err && (err as Record<symbol, unknown>)[key] === true;
};
const isApiCallError = (err: unknown): err is APICallError => hasAiSdkMarker(err, 'AI_APICallError');
const isLoadApiKeyError = (err: unknown): err is Error => hasAiSdkMarker(err, 'AI_LoadAPIKeyError');
import { ModelCallError, type ModelErrorKind } from './types.js';
import { errorSummary } from '../error-summary.js';

// Network error codes seen on Node's fetch (undici) and in the AI SDK's own list. A reset
// mid-stream surfaces as a TypeError('terminated') whose cause carries one of these.
const CONNECTION_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'ConnectionRefused',
  'ConnectionClosed',
  'FailedToOpenSocket',
]);
const TIMEOUT_CODES = new Set(['ETIMEDOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT']);

/**
 * Parses `retry-after-ms` (OpenAI) or `retry-after` (seconds or an HTTP date) into milliseconds.
 * `now` is only used for the HTTP-date form.
 */
export function parseRetryAfterMs(headers: Record<string, string> | undefined, now: number = Date.now()): number | undefined {
  if (!headers) return undefined;
  const get = (name: string): string | undefined => {
    for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() === name) return v;
    return undefined;
  };
  const ms = get('retry-after-ms');
  if (ms !== undefined && ms.trim() !== '' && Number.isFinite(Number(ms)) && Number(ms) >= 0) return Number(ms);
  const ra = get('retry-after');
  if (ra === undefined || ra.trim() === '') return undefined;
  const secs = Number(ra);
  if (Number.isFinite(secs)) return secs >= 0 ? Math.round(secs * 1000) : undefined;
  const at = Date.parse(ra);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}

function kindForStatus(status: number): ModelErrorKind {
  if (status === 429) return 'rate_limited';
  if (status === 408) return 'timeout';
  if (status === 401 || status === 403) return 'auth';
  if (status >= 500) return 'server';
  return 'bad_request';
}

function findCode(err: unknown): { code: string; kind: ModelErrorKind } | undefined {
  const seen = new Set<unknown>();
  let cur: unknown = err;
  while (cur instanceof Error && !seen.has(cur)) {
    seen.add(cur);
    const code = (cur as { code?: unknown }).code;
    if (typeof code === 'string') {
      if (TIMEOUT_CODES.has(code)) return { code, kind: 'timeout' };
      if (CONNECTION_CODES.has(code)) return { code, kind: 'connection' };
    }
    cur = cur.cause;
  }
  return undefined;
}

function isAbortLike(err: unknown): boolean {
  return err instanceof Error && (err.name === 'AbortError' || err.name === 'ResponseAborted');
}

/**
 * An HTTP error answer of the model API. `message` is the API's own error message (its JSON
 * `error.message`) or the status text; `headers` keys may be in any case. The body itself is
 * never quoted: the run and its events get the status and a short summary of the message
 * (errorSummary), so an endpoint that is not a model API cannot have its pages read back.
 */
export function httpStatusError(status: number, message: string, headers: Record<string, string> | undefined, cause?: unknown): ModelCallError {
  const kind = kindForStatus(status);
  const retryAfterMs = parseRetryAfterMs(headers);
  const summary = errorSummary(message);
  return new ModelCallError(kind, `model API returned ${status}${summary ? `: ${summary}` : ''}`, {
    status,
    ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
    ...(cause !== undefined ? { cause } : {}),
  });
}

/**
 * A socket failure of a model call (before the answer, or while its body streams), named as the
 * AI SDK's providers name it: `Cannot connect to API: …` / `Failed to process successful
 * response`, with the error code when one is found, and a retryable kind either way.
 */
export function connectionError(message: string, cause: unknown): ModelCallError {
  const found = findCode(cause);
  if (found) return new ModelCallError(found.kind, `${message} (${found.code})`, { cause });
  return new ModelCallError('connection', message, { cause });
}

/**
 * Maps whatever the AI SDK (or fetch underneath it) threw to a ModelCallError. `signal` tells a
 * caller's abort apart from a timeout: both surface as AbortError/TimeoutError.
 */
export function toModelCallError(err: unknown, signal?: AbortSignal): ModelCallError {
  if (err instanceof ModelCallError) return err;
  if (signal?.aborted) {
    // A caller that combines its signal with AbortSignal.timeout() gets a retryable timeout.
    const reason: unknown = signal.reason;
    if (reason instanceof Error && reason.name === 'TimeoutError') {
      return new ModelCallError('timeout', 'model call timed out', { cause: err });
    }
    return new ModelCallError('aborted', 'model call aborted', { cause: err });
  }
  if (err instanceof Error && err.name === 'TimeoutError') {
    return new ModelCallError('timeout', 'model call timed out', { cause: err });
  }
  if (isAbortLike(err)) return new ModelCallError('aborted', 'model call aborted', { cause: err });

  if (isApiCallError(err)) {
    const status = err.statusCode;
    // A body cut mid-stream arrives as "Failed to process successful response" with status 200
    // and the socket error in its causes: that is a connection failure, not an HTTP answer.
    if (status === undefined || status < 400) {
      const found = findCode(err);
      if (found) return new ModelCallError(found.kind, `${err.message} (${found.code})`, { cause: err });
    }
    if (status !== undefined && status >= 400) return httpStatusError(status, err.message, err.responseHeaders, err);
    if (status === undefined && err.isRetryable) return new ModelCallError('connection', errorSummary(err.message), { cause: err });
    return new ModelCallError('unknown', errorSummary(err.message), { cause: err, retryable: err.isRetryable, ...(status !== undefined ? { status } : {}) });
  }
  if (isLoadApiKeyError(err)) {
    return new ModelCallError('auth', err.message, { cause: err });
  }
  const found = findCode(err);
  if (found) {
    const msg = err instanceof Error ? err.message : String(err);
    return new ModelCallError(found.kind, `${msg} (${found.code})`, { cause: err });
  }
  // Node's fetch reports a body cut mid-stream as TypeError('terminated') (sometimes without a
  // code on the cause): a connection failure, not a bug on our side.
  if (err instanceof TypeError && /terminated|fetch failed|other side closed|socket/i.test(err.message)) {
    return new ModelCallError('connection', err.message, { cause: err });
  }
  // What the stream decoder or the SDK threw may quote the answer (`JSON parsing failed: Text: …`).
  const msg = err instanceof Error ? err.message : String(err);
  return new ModelCallError('unknown', errorSummary(msg), { cause: err });
}
