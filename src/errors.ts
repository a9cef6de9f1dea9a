// The error classes every route's failure goes through. The codes themselves (HTTP families and
// AGT_ERR_* domain codes) are registered in src/error-codes.ts. Every class here extends
// AgentdFailure, the one base of an error agentd answers on purpose; a plain `Error` that reaches
// an answer is a bug (500 AGT_ERR_INTERNAL), and ESLint refuses `throw new Error` outside the
// places that say why one cannot reach an answer (eslint.config.js, "Errors").

import type { core } from 'zod';

import { ERROR_CODES, type ErrorCode } from './error-codes.js';
export { ERROR_CODES, DOMAIN_ERRORS, type DomainCode, type ErrorCode } from './error-codes.js';
import { DOMAIN_ERRORS, FAMILY_DEFAULT_CODE, NOT_FOUND_CODES, formatMessage, type DomainCode, type MessageArgs, type NotFoundKind } from './error-codes.js';

/**
 * The one base class of agentd's answered errors: the HTTP status it is answered with and its
 * stable AGT_ERR_* code, whatever the body's shape (ErrorResponse, `{detail}` or 422
 * HTTPValidationError). Code that only needs "is this a refusal, and which" reads these two.
 */
export abstract class AgentdFailure extends Error {
  abstract readonly status: number;
  abstract readonly domainCode: DomainCode;
}

/**
 * An error answered in the ErrorResponse shape. `code` is the HTTP family (the body's `error`,
 * kept for the clients written against the spec); `domainCode` is the stable AGT_ERR_* code (the
 * body's `code`), which says which of the family's cases this is.
 */
export class AppError extends AgentdFailure {
  readonly status: number;
  readonly domainCode: DomainCode;
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly detail: string | null = null,
    readonly headers: Record<string, string> = {},
    domainCode?: DomainCode,
  ) {
    super(message);
    this.name = 'AppError';
    this.status = ERROR_CODES[code].status;
    this.domainCode = domainCode ?? FAMILY_DEFAULT_CODE[code];
  }

  toBody(): { error: ErrorCode; code: DomainCode; message: string; detail: string | null } {
    return { error: this.code, code: this.domainCode, message: this.message, detail: this.detail };
  }
}

/**
 * The one way to raise a registered domain error: its family and status come from the registry,
 * its message from the registry's template filled with `args` (one per `%s`, checked by the type).
 */
export function domainError<C extends DomainCode>(
  code: C,
  args: MessageArgs<(typeof DOMAIN_ERRORS)[C]['message']>,
  opts: { detail?: string | null; headers?: Record<string, string> } = {},
): AppError {
  const info = DOMAIN_ERRORS[code];
  // eslint-disable-next-line no-restricted-syntax -- a programming error (the code has no ErrorResponse family), met in tests
  if (info.error === null) throw new Error(`internal: ${code} is not an ErrorResponse code`);
  return new AppError(info.error, formatMessage(info.message, args as readonly unknown[]), opts.detail ?? null, opts.headers ?? {}, code);
}

/** `what` names the kind of resource, which picks the AGT_ERR_*_NOT_FOUND code. */
export const notFound = (what: NotFoundKind, id: string) => new AppError('NotFound', `${what} '${id}' was not found`, null, {}, NOT_FOUND_CODES[what]);
/**
 * A 409 with the generic AGT_ERR_CONFLICT code. Prefer domainError with a specific code; this is
 * left for src/runtime/runs.ts until its throws are ported.
 */
export const conflict = (message: string, detail: string | null = null) => new AppError('Conflict', message, detail);

/**
 * Errors whose spec answer is HttpErrorResponse `{detail}` (workspace routes, the run-wait
 * timeout) rather than ErrorResponse.
 */
export class HttpDetailError extends AgentdFailure {
  constructor(
    readonly status: number,
    readonly detail: unknown,
    readonly domainCode: DomainCode,
  ) {
    super(typeof detail === 'string' ? detail : `HTTP ${status}`);
    this.name = 'HttpDetailError';
  }
}

/**
 * Validation errors found outside zod (the JSON body parser, a service checking an input against
 * the configuration), already in HTTPValidationError items: answered 422 `{detail}`.
 */
export class HttpValidationFailure extends AgentdFailure {
  readonly statusCode = 422;
  readonly status = 422;
  readonly domainCode = 'AGT_ERR_VALIDATION';
  constructor(readonly detail: Array<{ loc: Array<string | number>; msg: string; type: string; ctx?: Record<string, unknown> }>) {
    super('request body is invalid');
    this.name = 'HttpValidationFailure';
  }
}

/** Carries zod's issues to the error handler, which renders them as HTTPValidationError. */
export class RequestValidationError extends AgentdFailure {
  readonly statusCode = 422;
  readonly status = 422;
  readonly domainCode = 'AGT_ERR_VALIDATION';
  constructor(
    readonly part: 'body' | 'query' | 'path' | 'header',
    readonly issues: core.$ZodIssue[],
    readonly data: unknown,
  ) {
    super(`request ${part} is invalid`);
    this.name = 'RequestValidationError';
  }
}
