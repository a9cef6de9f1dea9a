// The LevelDB adapter's key layout and row encoding (level.ts, level-writer.ts, level-events.ts).
//
// Key layout (every key is a string; `\0` separates components; components are escaped so they
// never contain `\0`, which keeps every `prefix\0` range exact):
//
//   r\0<kind>\0<id>                            -> {value, version, seq, ix} (JSON) the record and its
//                                                 current index values, kept together so an update
//                                                 knows which index keys to move
//   s\0<kind>\0<seq16>                         -> id    creation order of a kind
//   i\0<kind>\0<index>\0<value>\0<seq16>        -> id    secondary index, in creation order
//   n\0<kind>  /  n\0<kind>\0<index>\0<value>    -> count maintained in the same batch as the data,
//                                                 so countRecords is one get, never a scan
//   e\0<cursor16>                              -> StoredEvent (JSON text, `cursor` last)
//   x\0<field>\0<value>\0<cursor16>             -> posting: the cursors of ONE group-commit round's (or of
//                                                 one staged part of it: level-writer.ts, flush)
//                                                 events with that value, the key's cursor being the
//                                                 last of them; '' when that is the only one, else
//                                                 all of them as concatenated cursor16s. Event index
//                                                 for trace_id, run_id, session_id, task_id,
//                                                 event_type; only fields that are set get one
//   m\0seq, m\0cursor                          -> last record seq / event cursor ever assigned;
//                                                 written in every batch so start-up reads two
//                                                 keys instead of scanning, and numbers are never
//                                                 reused even after deletes and retention
//
// seq16 / cursor16 are fixed-width decimals (encodeCursor), so key order == numeric order.
//
import type { Level } from 'level';
import {
  EVENT_INDEX_FIELDS,
  decodeCursor,
  decodeSortedCursor,
  encodeCursor,
  sortedCursor,
  type ListQuery,
  type RecordIndexes,
  type Versioned,
} from './store.js';

export interface Row {
  value: unknown;
  version: number;
  seq: number;
  ix: Record<string, string>;
}

/** A row without its value: what staging a write over it needs (its CAS version, creation seq and index values). */
export type RowHead = Pick<Row, 'version' | 'seq' | 'ix'>;

// Values are JSON text we encode ourselves (utf8 value encoding) rather than `valueEncoding:
// 'json'`: each job serialises its own values while it is validated, so a value JSON cannot
// encode fails that job alone instead of the whole group-commit round.
export type Db = Level<string, string>;
// A record's put may carry its row's head (level-record-ops.ts): the write queue's cache keeps it
// with the text, so the next write over the row is staged without parsing that text again.
export type BatchOp = { type: 'put'; key: string; value: string; head?: RowHead } | { type: 'del'; key: string };

export const parse = <T>(text: string | undefined): T | undefined => (text === undefined ? undefined : (JSON.parse(text) as T));
export const toVersioned = <T>(id: string, text: string | null | undefined): Versioned<T> | null => {
  if (text === null || text === undefined) return null;
  const row = JSON.parse(text) as Row;
  return { id, version: row.version, seq: row.seq, value: row.value as T };
};

/**
 * Writes `ops` as one atomic LevelDB batch. A chained batch, because `db.batch(array, options)`
 * copies the options into every operation and is an order of magnitude slower in abstract-level
 * 3 (measured); the chained form takes `sync` once, on write.
 */
export async function writeBatch(db: Db, ops: BatchOp[], sync: boolean): Promise<void> {
  const b = db.batch();
  try {
    for (const op of ops) {
      if (op.type === 'put') b.put(op.key, op.value);
      else b.del(op.key);
    }
  } catch (e) {
    await b.close();
    throw e;
  }
  await b.write({ sync });
}

export const SEP = '\u0000';
/** Smallest string greater than every key that starts with `prefix` (which ends in SEP). */
export const end = (prefix: string): string => prefix.slice(0, -1) + '\u0001';
// \x01 -> \x01\x02 first, then \x00 -> \x01\x01: injective, and the result contains no \x00.
export const esc = (s: string): string => (/[\u0000\u0001]/.test(s) ? s.replace(/\u0001/g, '\u0001\u0002').replace(/\u0000/g, '\u0001\u0001') : s);

/** esc() undone. */
export const unesc = (s: string): string =>
  s.includes('\u0001') ? s.replace(/\u0001([\u0001\u0002])/g, (_m, c: string) => (c === '\u0001' ? '\u0000' : '\u0001')) : s;

export const recordKey = (kind: string, id: string) => `r${SEP}${esc(kind)}${SEP}${esc(id)}`;
const SEQ_PREFIXES = new Map<string, string>();
/** (Kept per kind, as kindCountKey: every create and delete of every round asks for its kind's.) */
export const seqPrefix = (kind: string): string => {
  let prefix = SEQ_PREFIXES.get(kind);
  if (prefix === undefined) SEQ_PREFIXES.set(kind, (prefix = `s${SEP}${esc(kind)}${SEP}`));
  return prefix;
};
export const indexPrefix = (kind: string, name: string, value: string): string => indexKeys(kind, name, value).prefix;
const KIND_COUNT_KEYS = new Map<string, string>();
/** (Kept per kind: every op of every round asks for its kind's.) */
export const kindCountKey = (kind: string): string => {
  let key = KIND_COUNT_KEYS.get(kind);
  if (key === undefined) KIND_COUNT_KEYS.set(kind, (key = `n${SEP}${esc(kind)}`));
  return key;
};
export const indexCountKey = (kind: string, name: string, value: string): string => indexKeys(kind, name, value).count;

/** An index value's entry prefix (`i\0…\0`) and count key (`n\0…`). */
interface IndexKeys {
  prefix: string;
  count: string;
}
type IndexKeyMemo = Map<string, Map<string, Map<string, IndexKeys>>>;
/**
 * The keys of the index values met lately, by kind, name and value: every write round looks up
 * the count keys of the values its ops touch (level-writer.ts counterKeys, twice when it reads
 * rows) and stageRecordOps builds the entry and count keys of those that move, so a key built
 * anew each time was a fifth of a round's staging allocation (four-part strings, most of them
 * for the same few values: a status, a task, a session). Two generations bound it: when the young
 * one holds IX_KEYS_GENERATION values it becomes the old one and the old one is dropped; a value
 * met in the old one moves up. Nested maps, so a lookup builds nothing.
 */
let ixYoung: IndexKeyMemo = new Map();
let ixOld: IndexKeyMemo = new Map();
let ixYoungSize = 0;
const IX_KEYS_GENERATION = 8192;
const memoGet = (m: IndexKeyMemo, kind: string, name: string, value: string): IndexKeys | undefined => m.get(kind)?.get(name)?.get(value);
function indexKeys(kind: string, name: string, value: string): IndexKeys {
  const hit = memoGet(ixYoung, kind, name, value);
  if (hit !== undefined) return hit;
  let keys = memoGet(ixOld, kind, name, value);
  if (keys === undefined) {
    const tail = `${esc(kind)}${SEP}${esc(name)}${SEP}${esc(value)}`;
    keys = { prefix: `i${SEP}${tail}${SEP}`, count: `n${SEP}${tail}` };
  }
  if (ixYoungSize >= IX_KEYS_GENERATION) {
    ixOld = ixYoung;
    ixYoung = new Map();
    ixYoungSize = 0;
  }
  let byName = ixYoung.get(kind);
  if (byName === undefined) ixYoung.set(kind, (byName = new Map()));
  let byValue = byName.get(name);
  if (byValue === undefined) byName.set(name, (byValue = new Map()));
  byValue.set(value, keys);
  ixYoungSize++;
  return keys;
}
export const EVENT_PREFIX = `e${SEP}`;
export const RECORD_KEY_START = `r${SEP}`;
export const COUNT_KEY_START = `n${SEP}`;
/** Rows kept by the write queue's cache (a live run's record, snapshot and trace are rewritten often). */
export const ROW_CACHE_SIZE = 2000;
export const eventIndexPrefix = (field: string, value: string) => `${eventIndexHead(field)}${esc(value)}${SEP}`;
const EVENT_INDEX_HEADS = new Map<string, string>(EVENT_INDEX_FIELDS.map((f) => [f, `x${SEP}${f}${SEP}`]));
/** `x\0<field>\0`, the start of a field's postings (made once per field: the ingest path builds a key per posting). */
export const eventIndexHead = (field: string): string => EVENT_INDEX_HEADS.get(field) ?? `x${SEP}${field}${SEP}`;
export const META_SEQ = `m${SEP}seq`;
export const META_CURSOR = `m${SEP}cursor`;
/** Keys end in a 16-digit number. */
export const tailNumber = (key: string): string => key.slice(-16);

export const clampLimit = (limit: number | undefined, dflt: number): number =>
  limit === undefined || !Number.isFinite(limit) ? dflt : Math.min(1000, Math.max(1, Math.floor(limit)));

export const cleanIndexes = (ix: RecordIndexes | undefined): Record<string, string> => {
  const out: Record<string, string> = {};
  if (ix)
    for (const k in ix) {
      const v = ix[k];
      if (typeof v === 'string') out[k] = v;
    }
  return out;
};

/**
 * The keys of a listRecords page: the range to walk, whether a row still is what its entry says
 * (same seq, same index value: a row whose index value changed since is skipped), and the page's
 * next cursor from its last entry. A `sortedBy` list walks every value of one index name: an
 * entry's key holds its value (escaped) between the name's prefix and `\0<seq16>`.
 */
export function listKeys(
  kind: string,
  query: ListQuery,
): { range: { gt?: string; gte?: string; lt: string }; matches(row: Row, key: string): boolean; cursorOf(key: string): string } {
  const sorted = query.sortedBy;
  let prefix: string;
  let after: string | null = null;
  if (sorted !== undefined) {
    prefix = `i${SEP}${esc(kind)}${SEP}${esc(sorted)}${SEP}`;
    const c = query.cursor ? decodeSortedCursor(query.cursor) : null;
    if (c) after = `${esc(c.value)}${SEP}${encodeCursor(c.seq)}`;
  } else {
    prefix = query.index ? indexPrefix(kind, query.index.name, query.index.value) : seqPrefix(kind);
    if (query.cursor) after = encodeCursor(decodeCursor(query.cursor));
  }
  const range = query.reverse ? { gte: prefix, lt: after ? prefix + after : end(prefix) } : { gt: after ? prefix + after : prefix, lt: end(prefix) };
  const valueOf = (key: string) => key.slice(prefix.length, -17);
  const ix = query.index;
  return {
    range,
    matches: (row, key) => {
      if (encodeCursor(row.seq) !== tailNumber(key)) return false;
      if (sorted !== undefined) return row.ix[sorted] !== undefined && esc(row.ix[sorted]) === valueOf(key);
      return !ix || row.ix[ix.name] === ix.value;
    },
    cursorOf: (key) => (sorted !== undefined ? sortedCursor(unesc(valueOf(key)), Number(tailNumber(key))) : tailNumber(key)),
  };
}
