// One registry of error codes (architecture habit 5). Every non-validation error that leaves the
// service is an AppError with one of these codes; `docs/errors.md` is kept in step by a test.

import type { core } from 'zod';

export const ERROR_CODES = {
  BadRequest: { status: 400, retryable: false, description: 'The request could not be read (for example malformed JSON).' },
  Unauthorized: { status: 401, retryable: false, description: 'No valid API key was presented.' },
  Forbidden: { status: 403, retryable: false, description: "The API key's role does not allow this request." },
  NotFound: { status: 404, retryable: false, description: 'The named resource does not exist.' },
  RequestTimeout: {
    status: 408,
    retryable: true,
    description:
      'The request headers or body did not arrive within `server.headers_timeout_seconds` / `server.body_timeout_seconds`; the connection is closed.',
  },
  Conflict: { status: 409, retryable: false, description: 'The resource is not in a state that allows this request (already decided, exists, ended, ...).' },
  PayloadTooLarge: { status: 413, retryable: false, description: 'The body is larger than `server.max_body_bytes`.' },
  URITooLong: { status: 414, retryable: false, description: 'A path segment is longer than any id the API accepts (1,024 characters).' },
  UnsupportedMediaType: { status: 415, retryable: false, description: 'The body is not JSON.' },
  RequestHeaderFieldsTooLarge: {
    status: 431,
    retryable: false,
    description: "The request headers are larger than Node's limit (16 KiB); the connection is closed.",
  },
  TooManyRequests: { status: 429, retryable: true, description: 'Rate limited; retry after `Retry-After` seconds.' },
  InternalServerError: { status: 500, retryable: true, description: 'A bug. Never carries a stack trace or a credential.' },
  ServerBusy: {
    status: 503,
    retryable: true,
    description:
      'No run slot became free in time, the service is shutting down, or the database of its store does not answer (PostgreSQL); retry after `Retry-After` seconds.',
  },
  GatewayTimeout: { status: 504, retryable: true, description: 'The run did not finish within the request timeout; it goes on and can be inspected later.' },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

export class AppError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly detail: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'AppError';
    this.status = ERROR_CODES[code].status;
  }

  toBody(): { error: ErrorCode; message: string; detail: string | null } {
    return { error: this.code, message: this.message, detail: this.detail };
  }
}

export const notFound = (what: string, id: string) => new AppError('NotFound', `${what} '${id}' was not found`);
export const conflict = (message: string, detail: string | null = null) => new AppError('Conflict', message, detail);

/**
 * Errors whose spec answer is HttpErrorResponse `{detail}` (workspace routes, the run-wait
 * timeout) rather than ErrorResponse.
 */
export class HttpDetailError extends Error {
  constructor(
    readonly status: number,
    readonly detail: unknown,
  ) {
    super(typeof detail === 'string' ? detail : `HTTP ${status}`);
    this.name = 'HttpDetailError';
  }
}

/**
 * Validation errors found outside zod (the JSON body parser, a service checking an input against
 * the configuration), already in HTTPValidationError items: answered 422 `{detail}`.
 */
export class HttpValidationFailure extends Error {
  readonly statusCode = 422;
  constructor(readonly detail: Array<{ loc: Array<string | number>; msg: string; type: string; ctx?: Record<string, unknown> }>) {
    super('request body is invalid');
    this.name = 'HttpValidationFailure';
  }
}

/** Carries zod's issues to the error handler, which renders them as HTTPValidationError. */
export class RequestValidationError extends Error {
  readonly statusCode = 422;
  constructor(
    readonly part: 'body' | 'query' | 'path' | 'header',
    readonly issues: core.$ZodIssue[],
    readonly data: unknown,
  ) {
    super(`request ${part} is invalid`);
    this.name = 'RequestValidationError';
  }
}
