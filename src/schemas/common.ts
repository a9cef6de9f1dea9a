// Building blocks shared by every resource schema: ids, dates, free-form objects and the query
// string helpers. Schemas here carry no OpenAPI id unless they are worth a named component.
import { z } from 'zod';

/**
 * Ids of background tasks and agents (docs/contract.md §7). They become path segments of workspaces,
 * so "." and ".." are refused even though the character class allows them.
 */
export const BACKGROUND_ID_PATTERN = /^(?!\.{1,2}$)[A-Za-z0-9_.-]{1,128}$/;

export const BackgroundId = z
  .string()
  .regex(BACKGROUND_ID_PATTERN, {
    error: 'must be 1-128 characters of A-Z a-z 0-9 _ . - and not "." or ".."',
  })
  .meta({ id: 'BackgroundId', description: 'Id of a background task or agent: ^[A-Za-z0-9_.-]{1,128}$, not "." or "..".' });
export type BackgroundId = z.infer<typeof BackgroundId>;

/**
 * Any other id that reaches a path or a store key (run, approval, session, trace ids). Client
 * supplied session ids end up in URLs and workspace names, so separators, control characters and
 * ".." are refused up front rather than escaped everywhere they are used.
 */
// With the `u` flag a lone surrogate is a code point of its own, excluded below: it is not valid
// UTF-8, so such an id could never be sent back in a URL. Length counts code points.
// eslint-disable-next-line no-control-regex
export const SAFE_ID_PATTERN = /^(?!\.$)(?!.*\.\.)[^/\\\u0000-\u001f\u007f\ud800-\udfff]{1,256}$/u;

export const SafeId = z
  .string()
  .regex(SAFE_ID_PATTERN, {
    error: 'must be 1-256 characters without "/", "\\", "..", control characters or unpaired surrogates',
  })
  .meta({ id: 'SafeId', description: 'An id safe in a path: 1-256 characters, no "/", "\\", ".." or control characters.' });
export type SafeId = z.infer<typeof SafeId>;

/** ISO-8601 date-time with `Z` or an explicit offset; a bare local time is ambiguous, so refused. */
export const IsoDateTime = z.iso.datetime({
  offset: true,
  error: 'must be an ISO-8601 date-time with a timezone, e.g. 2026-01-01T09:00:00Z',
});
export type IsoDateTime = z.infer<typeof IsoDateTime>;

/** A free-form JSON object. */
export const JsonObject = z.record(z.string(), z.unknown());
export type JsonObject = z.infer<typeof JsonObject>;

/** `{type, message}` of an error carried inside a resource (run error, event error). */
export const ErrorInfo = z.object({ type: z.string(), message: z.string() }).meta({ id: 'ErrorInfo' });
export type ErrorInfo = z.infer<typeof ErrorInfo>;

/** Opaque store cursor passed back as `cursor` to get the next page. */
export const Cursor = z.string().min(1).max(256);

/** The cursor of a list held whole in one record (src/paging.ts): opaque to clients, a position here. */
export const OffsetCursor = z.string().regex(/^\d{1,9}$/, { error: 'expected a next_cursor of this list' });

/** A filter value in a query string (no path meaning, so only a length bound). */
export const QueryId = z.string().min(1).max(256);

/**
 * Integer query parameter with a range and a default. Query strings arrive as text, hence
 * z.coerce; "abc" coerces to NaN and is refused as not-a-number.
 */
export function queryInt(min: number, max: number, dflt: number) {
  return z.coerce.number().int().min(min).max(max).default(dflt);
}

/**
 * Boolean query parameter. z.coerce.boolean() would turn "false" into true (any non-empty string
 * is truthy), so this accepts true/false/1/0/yes/no/on/off as text, or a real boolean.
 */
export const QueryBool = z.union([z.boolean(), z.stringbool()]);

/** Query parameter that may be repeated: `?event_type=a&event_type=b` arrives as an array. */
export const RepeatableQueryString = z.union([QueryId, z.array(QueryId).min(1)]);

/** Normalises a repeatable query value to an array (undefined stays undefined). */
export function asArray<T>(v: T | T[] | undefined): T[] | undefined {
  if (v === undefined) return undefined;
  return Array.isArray(v) ? v : [v];
}

// --- list parameters shared by the lists (docs/contract.md §1) --------------------------------------
// One place for order and the time range, so every list parses them alike (src/runtime/list-scan.ts
// applies them).

/** `order` of a list: `asc` oldest first, `desc` newest first; each list keeps its documented default. */
export function listOrder(dflt: 'asc' | 'desc') {
  return z.enum(['asc', 'desc']).default(dflt).describe(`asc: oldest first; desc: newest first (default ${dflt}).`);
}

/** The time-range filter: created at or after `since`, before `until`. */
export const TimeRangeQuery = z.object({
  since: IsoDateTime.optional().describe('Only items created at or after this time (ISO 8601 with a timezone).'),
  until: IsoDateTime.optional().describe('Only items created before this time (ISO 8601 with a timezone).'),
});

/** Refuses a range that ends before it starts (422 at `until`). */
export function checkTimeRange(q: { since?: string; until?: string }, ctx: z.RefinementCtx): void {
  if (q.since && q.until && Date.parse(q.until) <= Date.parse(q.since)) {
    ctx.addIssue({ code: 'custom', path: ['until'], message: 'must be later than since' });
  }
}
