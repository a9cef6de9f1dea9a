import type { FastifySchemaCompiler } from 'fastify';
import type { ZodType } from 'zod';
import { RequestValidationError } from '../errors.js';
import { RunRequest } from '../schemas/index.js';
import { runRequestFast } from './run-request-fast.js';

// Where a validation error came from, in the words of HTTPValidationError `loc[0]`.
const LOC_PREFIX: Record<string, 'body' | 'query' | 'path' | 'header'> = {
  body: 'body',
  querystring: 'query',
  params: 'path',
  headers: 'header', // Idempotency-Key (src/http/idempotent.ts)
};

// Validation errors: defined in src/errors.ts so that services below the HTTP layer (the
// background manager, the JSON body parser) can raise them too.
export { HttpValidationFailure, RequestValidationError } from '../errors.js';

/**
 * Hand-written checks of hot request bodies, by route schema: a value when the body is valid,
 * undefined to parse it with the schema (which then makes any 422).
 */
const FAST_PATHS = new Map<ZodType, (data: unknown) => unknown>([[RunRequest, runRequestFast]]);

/**
 * Our own validator compiler instead of the type provider's: it keeps zod's issues intact so the
 * error handler can give every failure a precise `loc`, and it parses with `safeParse` so defaults
 * are filled in the value the handler sees.
 */
export const zodValidatorCompiler: FastifySchemaCompiler<ZodType> = ({ schema, httpPart }) => {
  const part = LOC_PREFIX[httpPart ?? 'body'] ?? 'body';
  const fast = part === 'body' ? FAST_PATHS.get(schema) : undefined;
  return (data: unknown) => {
    const value = fast?.(data);
    if (value !== undefined) return { value };
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
