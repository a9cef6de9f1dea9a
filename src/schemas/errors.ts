// Error bodies (docs/contract.md §15, §2) and the translation of zod issues into
// the HTTPValidationError `detail` items that every 422 carries, for body, query and path alike.
import { z } from 'zod';
import { DOMAIN_ERRORS, ERROR_CODES, type DomainCode, type ErrorCode } from '../errors.js';

const ERROR_CODE_NAMES = Object.keys(ERROR_CODES) as [ErrorCode, ...ErrorCode[]];
const DOMAIN_CODE_NAMES = Object.keys(DOMAIN_ERRORS) as [DomainCode, ...DomainCode[]];

/** The stable AGT_ERR_* code every error body carries beside its spec shape. */
export const ErrorCodeField = z.enum(DOMAIN_CODE_NAMES).describe('Stable machine-readable error code (AGT_ERR_*); see docs/errors.md.');

export const ErrorResponse = z
  .object({
    error: z.enum(ERROR_CODE_NAMES).describe('Error type (the HTTP family); see docs/errors.md.'),
    code: ErrorCodeField,
    message: z.string(),
    detail: z.string().nullable().optional(),
  })
  .meta({ id: 'ErrorResponse' });
export type ErrorResponse = z.infer<typeof ErrorResponse>;

export const HttpErrorResponse = z
  .object({ detail: z.unknown(), code: ErrorCodeField.optional() })
  .meta({ id: 'HttpErrorResponse', description: 'Error whose `detail` may be of any type (workspace routes).' });
export type HttpErrorResponse = z.infer<typeof HttpErrorResponse>;

export const ValidationErrorItem = z
  .object({
    loc: z.array(z.union([z.string(), z.number()])),
    msg: z.string(),
    type: z.string(),
    ctx: z.record(z.string(), z.unknown()).optional(),
    input: z.unknown().optional(),
  })
  .meta({ id: 'ValidationError' });
export type ValidationErrorItem = z.infer<typeof ValidationErrorItem>;

export const HTTPValidationError = z
  .object({ detail: z.array(ValidationErrorItem), code: z.literal('AGT_ERR_VALIDATION').optional().describe('Always AGT_ERR_VALIDATION; see docs/errors.md.') })
  .meta({ id: 'HTTPValidationError' });
export type HTTPValidationError = z.infer<typeof HTTPValidationError>;

export const RunWaitTimeoutDetail = z
  .object({
    message: z.string(),
    run_id: z.string(),
    task_id: z.string(),
    status: z.string(),
    request_timeout_seconds: z.number().nullable(),
    wait_timeout_seconds: z.number().nullable(),
  })
  .meta({ id: 'RunWaitTimeoutDetail' });
export type RunWaitTimeoutDetail = z.infer<typeof RunWaitTimeoutDetail>;

export const RunWaitTimeoutResponse = z
  .object({ detail: RunWaitTimeoutDetail, code: z.literal('AGT_ERR_RUN_WAIT_TIMEOUT').optional() })
  .meta({ id: 'RunWaitTimeoutResponse', description: 'HTTP 504: a run started with `wait` did not end within the wait budget; it goes on.' });
export type RunWaitTimeoutResponse = z.infer<typeof RunWaitTimeoutResponse>;

// ---------------------------------------------------------------------------------------------
// zod issue -> HTTPValidationError item
//
// Mapping (pydantic/FastAPI names, so clients written against the original service keep working):
//   invalid_type, value absent ........ missing                "Field required"
//   invalid_type ...................... string_type | int_type | number_type | bool_type |
//                                       dict_type | list_type | type_error
//   unrecognized_keys (one item per key, loc ends with the key)
//                                       extra_forbidden        "Extra inputs are not permitted"
//   too_small string / array .......... string_too_short / too_short          ctx {min_length}
//   too_small number (>= / >) ......... greater_than_equal / greater_than    ctx {ge} / {gt}
//   too_big string / array ............ string_too_long / too_long            ctx {max_length}
//   too_big number (<= / <) ........... less_than_equal / less_than          ctx {le} / {lt}
//   invalid_value, several values ..... enum                   ctx {expected}
//   invalid_value, one value .......... literal_error          ctx {expected}
//   invalid_format datetime ........... datetime_parsing
//   invalid_format regex .............. string_pattern_mismatch ctx {pattern}
//   invalid_format url ................ url_parsing
//   invalid_format (other) ............ value_error
//   not_multiple_of ................... multiple_of            ctx {multiple_of}
//   invalid_union ..................... type_error when every branch failed on the type itself,
//                                       else the items of the branch that came closest
//   invalid_key / invalid_element ..... the nested issues, located at the key
//   custom (refinements) .............. value_error, or `params.type` when the refinement set one
//                                       (schedule rules use `missing` for a required field);
//                                       `params.ctx` becomes ctx
// ---------------------------------------------------------------------------------------------

export type LocPrefix = 'body' | 'query' | 'path' | 'header';
type Issue = z.core.$ZodIssue;
type PathKey = string | number;

const TYPE_NAMES: Record<string, [type: string, msg: string]> = {
  string: ['string_type', 'Input should be a valid string'],
  int: ['int_type', 'Input should be a valid integer'],
  number: ['number_type', 'Input should be a valid number'],
  boolean: ['bool_type', 'Input should be a valid boolean'],
  object: ['dict_type', 'Input should be a valid object'],
  record: ['dict_type', 'Input should be a valid object'],
  array: ['list_type', 'Input should be a valid list'],
  null: ['none_required', 'Input should be null'],
};

const quote = (v: unknown): string => (typeof v === 'string' ? `'${v}'` : (JSON.stringify(v) ?? String(v)));

function humanList(values: readonly unknown[]): string {
  const q = values.map(quote);
  if (q.length <= 1) return q.join('');
  return `${q.slice(0, -1).join(', ')} or ${q[q.length - 1]}`;
}

const plural = (n: number | bigint, word: string): string => `${n} ${word}${Number(n) === 1 ? '' : 's'}`;

function toPathKeys(path: readonly PropertyKey[]): PathKey[] {
  return path.map((k) => (typeof k === 'number' ? k : String(k)));
}

function valueAt(data: unknown, path: readonly PathKey[]): unknown {
  let cur: unknown = data;
  for (const k of path) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<PathKey, unknown>)[k];
  }
  return cur;
}

interface Ctx {
  prefix: LocPrefix;
  data: unknown;
  hasData: boolean;
}

function issueInput(issue: Issue, absPath: PathKey[], ctx: Ctx): { known: boolean; value: unknown } {
  if (ctx.hasData) return { known: true, value: valueAt(ctx.data, absPath) };
  if ('input' in issue) return { known: true, value: issue.input };
  return { known: false, value: undefined };
}

function item(
  ctx: Ctx,
  absPath: PathKey[],
  type: string,
  msg: string,
  extra: { ctx?: Record<string, unknown>; input?: { known: boolean; value: unknown } } = {},
): ValidationErrorItem {
  const out: ValidationErrorItem = { loc: [ctx.prefix, ...absPath], msg, type };
  if (extra.ctx && Object.keys(extra.ctx).length > 0) out.ctx = extra.ctx;
  if (extra.input?.known && extra.input.value !== undefined) out.input = extra.input.value;
  return out;
}

/**
 * A required field that is absent. Exact when the validated data is at hand; otherwise only an
 * invalid_type issue can tell (its default message names `undefined`).
 */
function isMissing(issue: Issue, absPath: PathKey[], ctx: Ctx): boolean {
  if (issue.code === 'invalid_type' && issue.expected === 'nonoptional') return true;
  if (ctx.hasData) return valueAt(ctx.data, absPath) === undefined;
  if ('input' in issue && issue.input !== undefined) return false;
  return issue.code === 'invalid_type' && /received undefined/.test(issue.message);
}

function convert(issue: Issue, base: PathKey[], ctx: Ctx, out: ValidationErrorItem[]): void {
  const absPath = [...base, ...toPathKeys(issue.path)];
  const input = issueInput(issue, absPath, ctx);
  switch (issue.code) {
    case 'invalid_type': {
      if (isMissing(issue, absPath, ctx)) {
        out.push(item(ctx, absPath, 'missing', 'Field required'));
        return;
      }
      const named = TYPE_NAMES[issue.expected];
      const [type, msg] = named ?? ['type_error', `Input should be of type ${issue.expected}`];
      out.push(item(ctx, absPath, type, msg, { input }));
      return;
    }
    case 'unrecognized_keys':
      for (const key of issue.keys) {
        const keyPath = [...absPath, key];
        const value = ctx.hasData
          ? { known: true, value: valueAt(ctx.data, keyPath) }
          : issue.input && typeof issue.input === 'object'
            ? { known: true, value: (issue.input as Record<string, unknown>)[key] }
            : { known: false, value: undefined };
        out.push(item(ctx, keyPath, 'extra_forbidden', 'Extra inputs are not permitted', { input: value }));
      }
      return;
    case 'too_small': {
      const min = issue.minimum;
      if (issue.origin === 'string') {
        out.push(item(ctx, absPath, 'string_too_short', `String should have at least ${plural(min, 'character')}`, { ctx: { min_length: min }, input }));
      } else if (issue.origin === 'array' || issue.origin === 'set') {
        out.push(item(ctx, absPath, 'too_short', `List should have at least ${plural(min, 'item')}`, { ctx: { min_length: min }, input }));
      } else if (issue.inclusive) {
        out.push(item(ctx, absPath, 'greater_than_equal', `Input should be greater than or equal to ${min}`, { ctx: { ge: min }, input }));
      } else {
        out.push(item(ctx, absPath, 'greater_than', `Input should be greater than ${min}`, { ctx: { gt: min }, input }));
      }
      return;
    }
    case 'too_big': {
      const max = issue.maximum;
      if (issue.origin === 'string') {
        out.push(item(ctx, absPath, 'string_too_long', `String should have at most ${plural(max, 'character')}`, { ctx: { max_length: max }, input }));
      } else if (issue.origin === 'array' || issue.origin === 'set') {
        out.push(item(ctx, absPath, 'too_long', `List should have at most ${plural(max, 'item')}`, { ctx: { max_length: max }, input }));
      } else if (issue.inclusive) {
        out.push(item(ctx, absPath, 'less_than_equal', `Input should be less than or equal to ${max}`, { ctx: { le: max }, input }));
      } else {
        out.push(item(ctx, absPath, 'less_than', `Input should be less than ${max}`, { ctx: { lt: max }, input }));
      }
      return;
    }
    case 'invalid_value': {
      if (isMissing(issue, absPath, ctx)) {
        out.push(item(ctx, absPath, 'missing', 'Field required'));
        return;
      }
      const expected = humanList(issue.values);
      if (issue.values.length === 1) {
        out.push(item(ctx, absPath, 'literal_error', `Input should be ${expected}`, { ctx: { expected }, input }));
      } else {
        out.push(item(ctx, absPath, 'enum', `Input should be ${expected}`, { ctx: { expected }, input }));
      }
      return;
    }
    case 'invalid_format': {
      // A message set on the schema (ids, dates) says more than the generic one.
      const custom = !/^Invalid /.test(issue.message) ? issue.message : null;
      if (issue.format === 'datetime') {
        out.push(item(ctx, absPath, 'datetime_parsing', custom ?? 'Input should be a valid ISO-8601 date-time with a timezone', { input }));
      } else if (issue.format === 'regex') {
        out.push(
          item(ctx, absPath, 'string_pattern_mismatch', custom ?? `String should match pattern '${issue.pattern}'`, { ctx: { pattern: issue.pattern }, input }),
        );
      } else if (issue.format === 'url') {
        out.push(item(ctx, absPath, 'url_parsing', custom ?? 'Input should be a valid URL', { input }));
      } else {
        out.push(item(ctx, absPath, 'value_error', custom ?? `Input should be a valid ${issue.format}`, { input }));
      }
      return;
    }
    case 'not_multiple_of':
      out.push(item(ctx, absPath, 'multiple_of', `Input should be a multiple of ${issue.divisor}`, { ctx: { multiple_of: issue.divisor }, input }));
      return;
    case 'invalid_union': {
      const branches = issue.errors;
      const typeOnly = branches.length > 0 && branches.every((b) => b.length === 1 && b[0].code === 'invalid_type' && b[0].path.length === 0);
      if (typeOnly) {
        const expected = branches.map((b) => (b[0] as Extract<Issue, { code: 'invalid_type' }>).expected);
        if (isMissing(branches[0][0], absPath, ctx)) {
          out.push(item(ctx, absPath, 'missing', 'Field required'));
        } else {
          out.push(item(ctx, absPath, 'type_error', `Input should be ${expected.join(' or ')}`, { ctx: { expected: expected.join(' or ') }, input }));
        }
        return;
      }
      if (branches.length === 0) {
        out.push(item(ctx, absPath, 'value_error', issue.message, { input }));
        return;
      }
      // The branch with the fewest complaints is most likely the one the client meant.
      const best = branches.reduce((a, b) => (b.length < a.length ? b : a));
      for (const sub of best) convert(sub, absPath, ctx, out);
      return;
    }
    case 'invalid_key':
    case 'invalid_element':
      for (const sub of issue.issues) convert(sub, absPath, ctx, out);
      return;
    case 'custom': {
      const params = issue.params ?? {};
      const type = typeof params.type === 'string' ? params.type : 'value_error';
      const extraCtx = params.ctx && typeof params.ctx === 'object' ? (params.ctx as Record<string, unknown>) : undefined;
      if (type === 'missing') {
        out.push(item(ctx, absPath, 'missing', issue.message));
      } else {
        out.push(item(ctx, absPath, type, issue.message, { ctx: extraCtx, input }));
      }
      return;
    }
    default: {
      const unknownIssue = issue as Issue;
      out.push(item(ctx, absPath, 'value_error', unknownIssue.message, { input }));
    }
  }
}

/**
 * Turns zod issues into HTTPValidationError `detail` items: `loc` starts with the prefix, `type`
 * is a pydantic-style name (see the table above) and `msg` reads as a sentence. Pass `data` (what
 * was validated) to get `input` on every item and an exact "missing" test; without it, `input` is
 * taken from the issue when zod reported it (`reportInput: true`).
 */
export function zodIssuesToDetail(issues: readonly z.core.$ZodIssue[], locPrefix: LocPrefix, data?: unknown): ValidationErrorItem[] {
  const ctx: Ctx = { prefix: locPrefix, data, hasData: arguments.length >= 3 };
  const out: ValidationErrorItem[] = [];
  for (const issue of issues) convert(issue, [], ctx, out);
  return out;
}

export type RequestParseResult<T> = { success: true; data: T } | { success: false; detail: ValidationErrorItem[] };

/** Validates one part of a request and returns either the parsed value or the 422 `detail`. */
export function safeParseRequest<S extends z.ZodType>(schema: S, data: unknown, locPrefix: LocPrefix): RequestParseResult<z.output<S>> {
  const r = schema.safeParse(data, { reportInput: true });
  if (r.success) return { success: true, data: r.data };
  return { success: false, detail: zodIssuesToDetail(r.error.issues, locPrefix, data) };
}
