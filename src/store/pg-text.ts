// Text encoding shared by the PostgreSQL adapter's modules (postgres.ts, pg-writer.ts,
// pg-events.ts, pg-claim.ts).
import type pg from 'pg';
import type { RecordIndexes, Versioned } from './store.js';

const MAX_LIMIT = 1000;
export const MAX_BIGINT = '9223372036854775807';

export const clampLimit = (limit: number | undefined, dflt: number): number =>
  limit === undefined || !Number.isFinite(limit) ? dflt : Math.min(MAX_LIMIT, Math.max(1, Math.floor(limit)));

// PostgreSQL text cannot hold NUL: ids and index values are stored with `\` and NUL escaped
// (`\\`, `\0`), a bijection, so distinct strings stay distinct and ids read back exactly.
const NEEDS_ESC = /[\\\u0000]/;
export const escText = (s: string): string => (NEEDS_ESC.test(s) ? s.replace(/[\\\u0000]/g, (c) => (c === '\\' ? '\\\\' : '\\0')) : s);
export const unescText = (s: string): string => (s.includes('\\') ? s.replace(/\\([\\0])/g, (_m, c: string) => (c === '0' ? '\u0000' : '\\')) : s);

/** Index values as the JSON object text the commit function takes: strings only, escaped. */
export const indexJson = (ix: RecordIndexes | undefined): string | null => {
  if (!ix) return null;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(ix)) if (typeof v === 'string') out[escText(k)] = escText(v);
  return JSON.stringify(out);
};

/** JSON text of an event body with its cursor added last (the stored body has none). */
export const withCursor = (body: string, cursor: string): string =>
  body.length <= 2 ? `{"cursor":"${cursor}"}` : `${body.slice(0, -1)},"cursor":"${cursor}"}`;

export const cursorText = (c: string | number): string => String(c).padStart(16, '0');

/** What the adapter's modules run their statements through (PgQueries in pg-query.ts: retries, health). */
export interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(q: pg.QueryConfig<unknown[]>, idempotent: boolean): Promise<pg.QueryResult<R>>;
}

export const recordView = <T>(id: string, version: number, seq: string | number, json: string): Versioned<T> => ({
  id,
  version,
  seq: Number(seq),
  value: JSON.parse(json) as T,
});

/** A record just written: its value is parsed from the text sent only when (and if) it is read. */
export const lazyRecordView = <T>(id: string, version: number, seq: string | number, json: string): Versioned<T> => {
  let parsed = false;
  let value: T;
  return {
    id,
    version,
    seq: Number(seq),
    get value(): T {
      if (!parsed) {
        value = JSON.parse(json) as T;
        parsed = true;
      }
      return value;
    },
    set value(v: T) {
      value = v;
      parsed = true;
    },
  };
};
