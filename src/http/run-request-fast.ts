// The body of POST /run and /run/sync when it names a concurrency key, checked without zod's
// parse of `concurrency` (docs/flow-control.md "What a key costs"): that nested strict object cost
// a keyed request about 600 B of allocation more than a plain one (`npm run bench -- profile-key`).
// The usual shape, exactly `{key, limit}` within ConcurrencySpec's bounds, is checked by hand; the
// rest of the body by RunRequest with `concurrency` taken as it is. Whatever the hand check does not
// accept, and any body that variant refuses, goes to RunRequest itself, so a valid body parses to
// what zod would give and every 422 is zod's own (`loc`, `msg`, `type`; test/flow/fast-body.test.ts).
import { z } from 'zod';
import { CONCURRENCY_KEY_CHARS, CONCURRENCY_KEY_MAX, CONCURRENCY_LIMIT_MAX, RunRequest } from '../schemas/index.js';

const RunRequestKeyChecked = RunRequest.extend({ concurrency: z.unknown() });

/** A plain object (what JSON.parse makes): no other prototype whose properties a `for…in` would see. */
function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== 'object' || v === null) return false;
  const proto = Object.getPrototypeOf(v) as unknown;
  return proto === Object.prototype || proto === null;
}

/** `{key, limit}` as ConcurrencySpec accepts it, and nothing else (a false answer only means: ask zod). */
function isConcurrencySpec(c: unknown): boolean {
  if (!isPlainObject(c)) return false;
  let n = 0;
  // Counted without Object.keys (no array per request); an own `__proto__` (JSON) is a third key.
  for (const k in c) {
    if (k !== 'key' && k !== 'limit') return false;
    n++;
  }
  if (n !== 2) return false;
  const { key, limit } = c;
  return (
    typeof key === 'string' &&
    key.length >= 1 &&
    key.length <= CONCURRENCY_KEY_MAX &&
    CONCURRENCY_KEY_CHARS.test(key) &&
    typeof limit === 'number' &&
    Number.isSafeInteger(limit) &&
    limit >= 1 &&
    limit <= CONCURRENCY_LIMIT_MAX
  );
}

/** The parsed body, or undefined: parse it with RunRequest (the body names no key, or not in the usual shape, or is invalid). */
export function runRequestFast(data: unknown): RunRequest | undefined {
  if (!isPlainObject(data) || data.concurrency == null || !isConcurrencySpec(data.concurrency)) return undefined;
  const r = RunRequestKeyChecked.safeParse(data);
  return r.success ? (r.data as RunRequest) : undefined;
}
