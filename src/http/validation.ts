import type { FastifySchemaCompiler } from 'fastify';
import type { ZodType, core } from 'zod';

// Where a validation error came from, in the words of HTTPValidationError `loc[0]`.
const LOC_PREFIX: Record<string, 'body' | 'query' | 'path' | 'header'> = {
  body: 'body',
  querystring: 'query',
  params: 'path',
  headers: 'header', // Idempotency-Key (src/http/idempotent.ts)
};

/** Carries zod's issues to the error handler, which renders them as HTTPValidationError. */
export class RequestValidationError extends Error {
  readonly statusCode = 422;
  constructor(readonly part: 'body' | 'query' | 'path' | 'header', readonly issues: core.$ZodIssue[], readonly data: unknown) {
    super(`request ${part} is invalid`);
    this.name = 'RequestValidationError';
  }
}

// Validation errors found outside zod (the JSON body parser, services): defined in src/errors.ts
// so that services below the HTTP layer can raise them too.
export { HttpValidationFailure } from '../errors.js';

/**
 * Our own validator compiler instead of the type provider's: it keeps zod's issues intact so the
 * error handler can give every failure a precise `loc`, and it parses with `safeParse` so defaults
 * are filled in the value the handler sees.
 */
export const zodValidatorCompiler: FastifySchemaCompiler<ZodType> = ({ schema, httpPart }) => {
  const part = LOC_PREFIX[httpPart ?? 'body'] ?? 'body';
  return (data: unknown) => {
    const result = schema.safeParse(data);
    if (result.success) return { value: result.data };
    return { error: new RequestValidationError(part, result.error.issues, data) };
  };
};

/**
 * Responses are serialised with plain JSON.stringify: response schemas document the API (OpenAPI)
 * and are checked by the tests, but re-validating every response on the hot path would cost
 * throughput for no user-visible gain.
 */
export const jsonSerializerCompiler = () => (data: unknown) => JSON.stringify(data);
