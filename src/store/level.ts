// The embedded default store, on LevelDB (`level` 10 / classic-level).
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
//   x\0<field>\0<value>\0<cursor16>             -> posting: the cursors of ONE group-commit round's
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
// Why writes are serialised: LevelDB has no transactions, and a compare-and-swap is a read followed
// by a write. Every write therefore goes through one in-process queue (the data dir lock guarantees
// this process is the only writer). The queue group-commits: all jobs waiting while a batch is
// being written are validated together, in order, against an overlay of the round's earlier jobs,
// and land in ONE LevelDB write batch (atomic). A job (a whole `commit`, a whole `appendEvents`
// call) is all-or-nothing: if any of its checks fails none of its operations enter the batch.
// Nobody hears back before the batch is written, so an acknowledged write is on disk (fsynced
// unless `sync: false`). Concurrent single-event appends cost one batch per round, not one each.
// Reads are not queued: they go straight to LevelDB, on a snapshot where a page needs several reads.
import { storedEventText } from './event-text.js';
import { Level } from 'level';
import {
  EVENT_INDEX_FIELDS,
  StoreError,
  decodeCursor,
  encodeCursor,
  type EventIndexField,
  type EventInput,
  type EventPage,
  type EventQuery,
  type EventTextPage,
  type ListQuery,
  type Page,
  type RecordIndexes,
  type RecordKind,
  type Store,
  type StoredEvent,
  type Versioned,
  type WriteOp,
  type CommitOps,
} from './store.js';

export interface LevelStoreOptions {
  /** Data directory (created when missing). Only one process can hold it open. */
  path: string;
  /**
   * fsync every batch (default true): a resolved write survives power loss, not just a process
   * crash. With false a resolved write survives a process crash (LevelDB hands every batch to the
   * OS before answering) but the last writes may be lost when the machine itself goes down.
   */
  sync?: boolean;
  /** Rows the write queue keeps in memory (default 2000). Tests make it tiny. */
  rowCacheSize?: number;
}

interface Row {
  value: unknown;
  version: number;
  seq: number;
  ix: Record<string, string>;
}

// Values are JSON text we encode ourselves (utf8 value encoding) rather than `valueEncoding:
// 'json'`: each job serialises its own values while it is validated, so a value JSON cannot
// encode fails that job alone instead of the whole group-commit round.
type Db = Level<string, string>;
type BatchOp = { type: 'put'; key: string; value: string } | { type: 'del'; key: string };

const parse = <T>(text: string | undefined): T | undefined => (text === undefined ? undefined : (JSON.parse(text) as T));
const toVersioned = <T>(id: string, text: string | null | undefined): Versioned<T> | null => {
  if (text === null || text === undefined) return null;
  const row = JSON.parse(text) as Row;
  return { id, version: row.version, seq: row.seq, value: row.value as T };
};

/**
 * Writes `ops` as one atomic LevelDB batch. A chained batch, because `db.batch(array, options)`
 * copies the options into every operation and is an order of magnitude slower in abstract-level
 * 3 (measured); the chained form takes `sync` once, on write.
 */
async function writeBatch(db: Db, ops: BatchOp[], sync: boolean): Promise<void> {
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

const SEP = '\u0000';
/** Smallest string greater than every key that starts with `prefix` (which ends in SEP). */
const end = (prefix: string): string => prefix.slice(0, -1) + '\u0001';
// \x01 -> \x01\x02 first, then \x00 -> \x01\x01: injective, and the result contains no \x00.
const esc = (s: string): string => (/[\u0000\u0001]/.test(s) ? s.replace(/\u0001/g, '\u0001\u0002').replace(/\u0000/g, '\u0001\u0001') : s);

const recordKey = (kind: string, id: string) => `r${SEP}${esc(kind)}${SEP}${esc(id)}`;
const seqPrefix = (kind: string) => `s${SEP}${esc(kind)}${SEP}`;
const indexPrefix = (kind: string, name: string, value: string) => `i${SEP}${esc(kind)}${SEP}${esc(name)}${SEP}${esc(value)}${SEP}`;
const kindCountKey = (kind: string) => `n${SEP}${esc(kind)}`;
const indexCountKey = (kind: string, name: string, value: string) => `n${SEP}${esc(kind)}${SEP}${esc(name)}${SEP}${esc(value)}`;
const EVENT_PREFIX = `e${SEP}`;
const RECORD_KEY_START = `r${SEP}`;
const COUNT_KEY_START = `n${SEP}`;
/** Rows kept by the write queue's cache (a live run's record, snapshot and trace are rewritten often). */
const ROW_CACHE_SIZE = 2000;
const eventIndexPrefix = (field: string, value: string) => `x${SEP}${field}${SEP}${esc(value)}${SEP}`;
const META_SEQ = `m${SEP}seq`;
const META_CURSOR = `m${SEP}cursor`;
/** Keys end in a 16-digit number. */
const tailNumber = (key: string): string => key.slice(-16);

const clampLimit = (limit: number | undefined, dflt: number): number =>
  limit === undefined || !Number.isFinite(limit) ? dflt : Math.min(1000, Math.max(1, Math.floor(limit)));

const cleanIndexes = (ix: RecordIndexes | undefined): Record<string, string> => {
  const out: Record<string, string> = {};
  if (ix) for (const [k, v] of Object.entries(ix)) if (typeof v === 'string') out[k] = v;
  return out;
};

/** A string filter is one value; an array is an OR; an empty array puts no constraint. */
const normaliseFilters = (q: EventQuery): Array<[EventIndexField, string[]]> => {
  const out: Array<[EventIndexField, string[]]> = [];
  const f = q.filters ?? {};
  for (const field of EVENT_INDEX_FIELDS) {
    const v = f[field];
    const values = typeof v === 'string' ? [v] : Array.isArray(v) ? [...new Set(v.filter((x) => typeof x === 'string'))] : [];
    if (values.length > 0) out.push([field, values]);
  }
  return out;
};

/** Walk order for event queries: the first filtered field in this list drives the index walk. */
const WALK_PREFERENCE: EventIndexField[] = ['run_id', 'trace_id', 'task_id', 'session_id', 'event_type'];

/** Events whose timestamp cannot be parsed count as expired, so they can never pin retention. */
const isBefore = (timestamp: unknown, cutoffMs: number): boolean => {
  const t = typeof timestamp === 'string' ? Date.parse(timestamp) : NaN;
  return Number.isNaN(t) || t < cutoffMs;
};

/**
 * The stored JSON text of an event: the caller's object serialised once, with `"cursor"` spliced in
 * as the last key, which is exactly JSON.stringify({...e, cursor}) without copying the object
 * first. Objects with their own `cursor` or `toJSON` take the slow, obviously equal path.
 */
const eventText = (e: EventInput, cursor: string): string => {
  if (!Object.prototype.hasOwnProperty.call(e, 'cursor') && typeof (e as { toJSON?: unknown }).toJSON !== 'function') {
    const t = JSON.stringify(e);
    if (t.length > 2 && t.charCodeAt(0) === 123 && t.charCodeAt(t.length - 1) === 125) return `${t.slice(0, -1)},"cursor":"${cursor}"}`;
  }
  return JSON.stringify({ ...e, cursor });
};

const isLockError = (e: unknown): boolean => {
  for (let cur: unknown = e, depth = 0; cur && depth < 5; depth++) {
    const err = cur as { code?: unknown; message?: unknown; cause?: unknown };
    if (err.code === 'LEVEL_LOCKED') return true;
    if (typeof err.message === 'string' && /already held by process|LOCK: Resource temporarily unavailable/.test(err.message)) return true;
    cur = err.cause;
  }
  return false;
};

interface RecordJob {
  type: 'records';
  /** A function is called when the round takes the job (Store.commit). */
  ops: CommitOps;
  resolve(v: Array<Versioned<unknown> | null>): void;
  reject(e: unknown): void;
}
interface EventJob {
  type: 'events';
  events: EventInput[];
  resolve(v: StoredEvent[]): void;
  reject(e: unknown): void;
}
/**
 * Resolves, once every job queued before it is written, with the last cursor handed out to those
 * jobs: retention covers exactly the events appended by calls made before it.
 */
interface BarrierJob {
  type: 'barrier';
  resolve(lastCursor: number): void;
  reject(e: unknown): void;
}
type Job = RecordJob | EventJob | BarrierJob;

/** Soft cap on batch operations per group-commit round (a single job is never split). */
const ROUND_OPS = 20_000;

export class LevelStore implements Store {
  readonly adapter = 'level' as const;
  private readonly path: string;
  private readonly sync: boolean;
  private readonly rowCacheSize: number;
  private db: Db | null = null;
  private state: 'new' | 'opening' | 'open' | 'closing' | 'closed' = 'new';
  private lastSeq = 0;
  private lastCursor = 0;
  private queue: Job[] = [];
  private flushing = false;
  private inflight = 0;
  private drained: (() => void) | null = null;
  private retention: Promise<unknown> = Promise.resolve();
  /** Cursor of the newest event retention deleted (this process): the next pass starts after it. */
  private retainedFrom: string | null = null;
  /**
   * Committed state the write queue reads on every round, kept in memory so a commit is one
   * LevelDB round-trip (the write) instead of three (load rows, load counters, write). Safe
   * because this process is the only one that can open the directory and every write goes
   * through the queue; both caches are filled only from what is already on disk. Rows are kept
   * as their stored JSON text (so no caller can mutate a cached object), newest last, bounded.
   */
  private readonly rowCache = new Map<string, string | null>();
  /** Rounds whose batch was written: a prefetch is valid only while this has not moved. */
  private writesDone = 0;
  private readonly prefetched = new Map<string, { at: number; text: Promise<{ value: string | undefined } | null> }>();
  private readonly counterCache = new Map<string, number>();

  constructor(opts: LevelStoreOptions) {
    this.path = opts.path;
    this.sync = opts.sync ?? true;
    this.rowCacheSize = opts.rowCacheSize ?? ROW_CACHE_SIZE;
  }

  private transition: Promise<void> | null = null;

  /** Opens the data dir; StoreError 'locked' when another process (or store) holds it. */
  open(): Promise<void> {
    if (this.state === 'open') return Promise.resolve();
    if (this.state === 'opening') return this.transition!;
    if (this.state === 'closing') return this.transition!.then(() => this.open());
    this.state = 'opening';
    const t: Promise<void> = this.doOpen().finally(() => {
      if (this.transition === t) this.transition = null;
    });
    this.transition = t;
    return t;
  }

  private async doOpen(): Promise<void> {
    // Another process may have written the directory since we last had it open.
    this.rowCache.clear();
    this.counterCache.clear();
    this.prefetched.clear();
    const db: Db = new Level<string, string>(this.path, { keyEncoding: 'utf8', valueEncoding: 'utf8' });
    try {
      await db.open();
    } catch (e) {
      this.state = 'closed';
      if (isLockError(e)) throw new StoreError('locked', `data dir '${this.path}' is held by another process`);
      throw e;
    }
    try {
      const [seq, cursor] = (await db.getMany([META_SEQ, META_CURSOR])).map((t) => parse<number>(t));
      // The meta key is written in the same batch as the events, so it is never behind; reading
      // the newest event key as well costs one seek and guards against a hand-edited meta key.
      const [newest] = await db.keys({ gte: EVENT_PREFIX, lt: end(EVENT_PREFIX), reverse: true, limit: 1 }).all();
      this.lastSeq = seq ?? 0;
      this.lastCursor = Math.max(cursor ?? 0, newest ? Number(tailNumber(newest)) : 0);
    } catch (e) {
      await db.close().catch(() => undefined);
      this.state = 'closed';
      throw e;
    }
    this.db = db;
    this.retainedFrom = null;
    this.state = 'open';
  }

  /** Refuses new operations, waits for the ones under way (writes included), then closes. */
  close(): Promise<void> {
    if (this.state === 'closing') return this.transition!;
    if (this.state === 'opening')
      return this.transition!.then(
        () => this.close(),
        () => undefined,
      );
    if (this.state !== 'open') return Promise.resolve();
    this.state = 'closing';
    const t: Promise<void> = this.doClose().finally(() => {
      if (this.transition === t) this.transition = null;
    });
    this.transition = t;
    return t;
  }

  private async doClose(): Promise<void> {
    if (this.inflight > 0) await new Promise<void>((resolve) => (this.drained = resolve));
    const db = this.db;
    this.db = null;
    try {
      await db?.close();
    } finally {
      this.state = 'closed';
    }
  }

  isOpen(): boolean {
    return this.state === 'open';
  }

  /** Every public operation runs inside this, so close() knows when nothing is under way. */
  private async run<T>(fn: (db: Db) => Promise<T>): Promise<T> {
    if (this.state !== 'open' || !this.db) throw new StoreError('closed', 'store is not open');
    this.inflight++;
    try {
      return await fn(this.db);
    } finally {
      if (--this.inflight === 0 && this.drained) {
        this.drained();
        this.drained = null;
      }
    }
  }

  // ---------------------------------------------------------------- records

  // Reads consult the write queue's row cache first: it holds exactly what is on disk for the rows
  // it knows (filled only after a batch is written, or from a disk read), so a hit answers the
  // same as LevelDB would, without a trip to the I/O thread pool. A live run rereads its session,
  // trace and ledger rows this way on every step.
  getRecord<T>(kind: RecordKind, id: string): Promise<Versioned<T> | null> {
    return this.run(async (db) => {
      const key = recordKey(kind, id);
      const cached = this.rowCache.get(key);
      return toVersioned<T>(id, cached !== undefined ? cached : await db.get(key));
    });
  }

  getRecords<T>(kind: RecordKind, ids: string[]): Promise<Array<Versioned<T> | null>> {
    return this.run(async (db) => {
      if (ids.length === 0) return [];
      const keys = ids.map((id) => recordKey(kind, id));
      const texts: Array<string | null | undefined> = keys.map((k) => this.rowCache.get(k));
      const missing = keys.filter((_, i) => texts[i] === undefined);
      if (missing.length) {
        const loaded = await db.getMany(missing);
        let m = 0;
        texts.forEach((t, i) => {
          if (t === undefined) texts[i] = loaded[m++];
        });
      }
      return texts.map((t, i) => toVersioned<T>(ids[i], t));
    });
  }

  async createRecord<T>(kind: RecordKind, id: string, value: T, indexes?: RecordIndexes): Promise<Versioned<T>> {
    const [r] = await this.commit([{ op: 'create', kind, id, value, indexes }]);
    return r as Versioned<T>;
  }

  async updateRecord<T>(kind: RecordKind, id: string, value: T, expectedVersion: number, indexes?: RecordIndexes): Promise<Versioned<T>> {
    const [r] = await this.commit([{ op: 'update', kind, id, value, expectedVersion, indexes }]);
    return r as Versioned<T>;
  }

  async deleteRecord(kind: RecordKind, id: string, expectedVersion?: number): Promise<void> {
    await this.commit([{ op: 'delete', kind, id, expectedVersion }]);
  }

  commit(ops: CommitOps): Promise<Array<Versioned<unknown> | null>> {
    return this.run(async () => {
      if (Array.isArray(ops) && ops.length === 0) return [];
      return new Promise<Array<Versioned<unknown> | null>>((resolve, reject) => this.enqueue({ type: 'records', ops, resolve, reject }));
    });
  }

  listRecords<T>(kind: RecordKind, query: ListQuery = {}): Promise<Page<T>> {
    return this.run(async (db) => {
      const limit = clampLimit(query.limit, 100);
      const prefix = query.index ? indexPrefix(kind, query.index.name, query.index.value) : seqPrefix(kind);
      const after = query.cursor ? encodeCursor(decodeCursor(query.cursor)) : null;
      const range = query.reverse ? { gte: prefix, lt: after ? prefix + after : end(prefix) } : { gt: after ? prefix + after : prefix, lt: end(prefix) };
      // One snapshot for the index walk and the body fetch, so a concurrent update cannot make
      // the page disagree with itself.
      const snapshot = db.snapshot();
      try {
        const entries = (await db.iterator({ ...range, reverse: query.reverse === true, limit: limit + 1, snapshot }).all()) as Array<[string, string]>;
        const page = entries.slice(0, limit);
        const rows = page.length
          ? (
              await db.getMany(
                page.map(([, id]) => recordKey(kind, id)),
                { snapshot },
              )
            ).map((t) => parse<Row>(t))
          : [];
        const items: Versioned<T>[] = [];
        rows.forEach((row, i) => {
          if (row) items.push({ id: page[i][1], version: row.version, seq: row.seq, value: row.value as T });
        });
        return { items, next_cursor: entries.length > limit ? tailNumber(page[page.length - 1][0]) : null };
      } finally {
        await snapshot.close();
      }
    });
  }

  countRecords(kind: RecordKind, index?: { name: string; value: string }): Promise<number> {
    return this.run(async (db) => {
      const n = parse<number>(await db.get(index ? indexCountKey(kind, index.name, index.value) : kindCountKey(kind)));
      return n ?? 0;
    });
  }

  // ---------------------------------------------------------------- events

  appendEvents(events: EventInput[]): Promise<StoredEvent[]> {
    return this.run(async () => {
      if (events.length === 0) return [];
      return new Promise<StoredEvent[]>((resolve, reject) => this.enqueue({ type: 'events', events, resolve, reject }));
    });
  }

  async readEvents(query: EventQuery = {}): Promise<EventPage> {
    const page = await this.readEventsJson(query);
    return { events: page.events.map((t) => JSON.parse(t) as StoredEvent), next_cursor: page.next_cursor };
  }

  readEventsJson(query: EventQuery = {}): Promise<EventTextPage> {
    return this.run(async (db) => {
      const limit = clampLimit(query.limit, 200);
      const after = query.after ? encodeCursor(decodeCursor(query.after)) : null;
      const filters = normaliseFilters(query);
      const snapshot = db.snapshot();
      try {
        const page = filters.length === 0 ? await this.scanLog(db, snapshot, after, limit) : await this.walkIndex(db, snapshot, filters, after, limit);
        return { events: page.texts, next_cursor: page.texts.length === limit ? page.last : null };
      } finally {
        await snapshot.close();
      }
    });
  }

  private async scanLog(db: Db, snapshot: ReturnType<Db['snapshot']>, after: string | null, limit: number): Promise<{ texts: string[]; last: string | null }> {
    const entries = (await db.iterator({ gt: after ? EVENT_PREFIX + after : EVENT_PREFIX, lt: end(EVENT_PREFIX), limit, snapshot }).all()) as Array<
      [string, string]
    >;
    return { texts: entries.map(([, t]) => t), last: entries.length ? tailNumber(entries[entries.length - 1][0]) : null };
  }

  /**
   * Walks the index of the most selective filtered field (several values: the walks are merged in
   * cursor order), loads the bodies with getMany and checks the other filters on them. Only the
   * postings of the filtered values are read, never the whole log. Bodies are returned as stored
   * text; they are parsed only when another filter has to be checked on them.
   */
  private async walkIndex(
    db: Db,
    snapshot: ReturnType<Db['snapshot']>,
    filters: Array<[EventIndexField, string[]]>,
    after: string | null,
    limit: number,
  ): Promise<{ texts: string[]; last: string | null }> {
    const walked = WALK_PREFERENCE.find((f) => filters.some(([field]) => field === f))!;
    const prefixes = filters.find(([f]) => f === walked)![1].map((v) => eventIndexPrefix(walked, v));
    const rest = filters.filter(([f]) => f !== walked).map(([f, vs]) => [f, new Set(vs)] as const);
    const texts: string[] = [];
    let last: string | null = null;
    let pos = after;
    // Without other filters every index hit is a result, so fetch exactly what is missing;
    // otherwise read bigger chunks, growing while hits are sparse.
    let chunk = rest.length ? Math.max(limit, 128) : limit;
    while (texts.length < limit) {
      const want = rest.length ? chunk : limit - texts.length;
      // Each list: the next `want` cursors after `pos` under one value. Reading `want` postings
      // yields at least that many cursors unless the value has no more (a posting holds >= 1).
      const lists = await Promise.all(
        prefixes.map(async (p) => {
          const entries = (await db.iterator({ gt: pos ? p + pos : p, lt: end(p), limit: want, snapshot }).all()) as Array<[string, string]>;
          const out: string[] = [];
          for (const [key, value] of entries) {
            if (value === '') out.push(tailNumber(key));
            else for (let i = 0; i < value.length; i += 16) out.push(value.slice(i, i + 16));
          }
          // A posting may start at or before `pos` (it was cut short by the previous page).
          const fresh = pos === null ? out : out.filter((c) => c > pos!);
          return { cursors: fresh.length > want ? fresh.slice(0, want) : fresh, done: entries.length < want && fresh.length <= want };
        }),
      );
      let cursors: string[];
      let exhausted: boolean;
      if (lists.length === 1) {
        cursors = lists[0].cursors;
        exhausted = lists[0].done;
      } else {
        // Each list holds its own next `want` cursors, so the first `want` of their union are
        // exactly the next `want` cursors overall; the rest are read again next round.
        const all = [...new Set(lists.flatMap((l) => l.cursors))].sort();
        cursors = all.slice(0, want);
        exhausted = lists.every((l) => l.done) && all.length <= want;
      }
      if (cursors.length === 0) break;
      const bodies = await db.getMany(
        cursors.map((c) => EVENT_PREFIX + c),
        { snapshot },
      );
      for (let i = 0; i < bodies.length; i++) {
        const t = bodies[i];
        if (t === undefined) continue; // deleted by retention after the posting was read
        if (rest.length) {
          const e = JSON.parse(t) as StoredEvent;
          if (!rest.every(([f, vs]) => typeof e[f] === 'string' && vs.has(e[f] as string))) continue;
        }
        texts.push(t);
        last = cursors[i];
        if (texts.length === limit) break;
      }
      pos = cursors[cursors.length - 1];
      if (exhausted) break;
      chunk = Math.min(chunk * 2, 1000);
    }
    return { texts, last };
  }

  getEvent(cursor: string): Promise<StoredEvent | null> {
    return this.run(async (db) => {
      let c: string;
      try {
        c = encodeCursor(decodeCursor(cursor));
      } catch {
        return null;
      }
      return parse<StoredEvent>(await db.get(EVENT_PREFIX + c)) ?? null;
    });
  }

  lastEventCursor(): Promise<string | null> {
    return this.run(async (db) => {
      const [newest] = await db.keys({ gte: EVENT_PREFIX, lt: end(EVENT_PREFIX), reverse: true, limit: 1 }).all();
      return newest ? tailNumber(newest) : null;
    });
  }

  /**
   * Retention. Events are stored in cursor order and their timestamps mostly increase, so this
   * walks from the oldest event and stops at the first one that is not before `isoTime`; an older
   * event stored after a newer one waits for a later pass. Deletes go in batches of up to 500
   * events with their index postings. A posting can hold several events of one round, so it is
   * deleted with the batch that deletes its last event (the key's cursor): per value the batch
   * met, every posting whose key cursor is at most the last deleted cursor. Until then a posting
   * may name events already deleted; readers skip those. Calls are serialised with each other;
   * appends are not blocked.
   */
  deleteEventsBefore(isoTime: string): Promise<number> {
    return this.run(async (db) => {
      const cutoff = Date.parse(isoTime);
      if (Number.isNaN(cutoff)) throw new TypeError(`deleteEventsBefore: bad time '${isoTime}'`);
      // Call order, like the memory model: events appended by earlier calls are covered (even if
      // still queued), events appended by later calls are not.
      const bound = await new Promise<number>((resolve, reject) => this.enqueue({ type: 'barrier', resolve, reject }));
      const upTo = EVENT_PREFIX + encodeCursor(bound);
      const task = this.retention.then(async () => {
        let deleted = 0;
        for (;;) {
          // Resume after the last deleted cursor: seeking from the start of the log again would
          // step over every tombstone left so far (quadratic until compaction removes them).
          const floor = this.retainedFrom;
          const from = floor ? EVENT_PREFIX + floor : EVENT_PREFIX;
          const events = (await db.values({ gt: from, lte: upTo, limit: 500 }).all()).map((t) => JSON.parse(t) as StoredEvent);
          const ops: BatchOp[] = [];
          const prefixes = new Set<string>();
          let last: string | null = null;
          let stop = events.length < 500;
          for (const e of events) {
            if (!isBefore(e.timestamp, cutoff)) {
              stop = true;
              break;
            }
            ops.push({ type: 'del', key: EVENT_PREFIX + e.cursor });
            for (const field of EVENT_INDEX_FIELDS) {
              const v = e[field];
              if (typeof v === 'string') prefixes.add(eventIndexPrefix(field, v));
            }
            last = e.cursor;
            deleted++;
          }
          if (last) {
            // Postings ending after `floor` and at or before `last`: all of their events are gone
            // now (those up to `floor` went in earlier batches, which also took their postings).
            const lists = await Promise.all([...prefixes].map((p) => db.keys({ gt: floor ? p + floor : p, lte: p + last }).all()));
            for (const keys of lists) for (const key of keys) ops.push({ type: 'del', key });
            await writeBatch(db, ops, false); // losing a deletion only means redoing it
            this.retainedFrom = last;
          }
          if (stop) return deleted;
        }
      });
      this.retention = task.catch(() => undefined);
      return task;
    });
  }

  // ---------------------------------------------------------------- prefetch

  /**
   * A hint that these records are about to be written (created, mostly) with these index values:
   * their rows and the counters of those index values are read now, while the caller is still
   * busy, so the round that writes them need not wait for a disk read first (a new run's round
   * otherwise starts with one: its rows and its session's counters are in no cache). A read is
   * used only if no write landed after it was issued (`writesDone` unchanged), so it is exactly
   * what the disk holds; otherwise the round reads again.
   */
  prefetch(records: Array<{ kind: RecordKind; id: string; indexes?: RecordIndexes; fresh?: string[] }>): void {
    if (this.state !== 'open' || !this.db) return;
    const keys: string[] = [];
    const want = (k: string) => {
      if (!this.prefetched.has(k) && !keys.includes(k)) keys.push(k);
    };
    for (const r of records) {
      const rk = recordKey(r.kind, r.id);
      if (r.fresh) {
        // A just-generated id: known absent, and so are the postings of its own index values.
        // Both caches then hold exactly what the disk holds, as when filled from a read.
        if (!this.rowCache.has(rk) && !this.prefetched.has(rk)) this.cacheRow(rk, null);
        const ix = cleanIndexes(r.indexes);
        for (const name of r.fresh) {
          if (ix[name] === undefined) continue;
          const ik = indexCountKey(r.kind, name, ix[name]);
          if (!this.counterCache.has(ik) && !this.prefetched.has(ik)) this.counterCache.set(ik, 0);
        }
      }
      if (!this.rowCache.has(rk)) want(rk);
      const ck = kindCountKey(r.kind);
      if (!this.counterCache.has(ck)) want(ck);
      for (const [name, v] of Object.entries(cleanIndexes(r.indexes))) {
        const ik = indexCountKey(r.kind, name, v);
        if (!this.counterCache.has(ik)) want(ik);
      }
    }
    if (keys.length === 0) return;
    const at = this.writesDone;
    const texts = this.run((db) => db.getMany(keys)).catch(() => null);
    keys.forEach((k, i) => this.prefetched.set(k, { at, text: texts.then((t) => (t ? { value: t[i] } : null)) }));
  }

  /** `keys` from valid prefetches where there are some, the rest from the disk, in order. */
  private async readKeys(db: Db, keys: string[]): Promise<Array<string | undefined>> {
    const out: Array<string | undefined> = new Array(keys.length);
    const rest: number[] = [];
    const early: Array<Promise<void>> = [];
    keys.forEach((k, i) => {
      const p = this.prefetched.get(k);
      this.prefetched.delete(k);
      if (!p || p.at !== this.writesDone) return void rest.push(i);
      early.push(
        p.text.then((t) => {
          if (t && p.at === this.writesDone) out[i] = t.value;
          else rest.push(i); // the read failed, or a write landed while we waited
        }),
      );
    });
    await Promise.all(early);
    if (rest.length) {
      const loaded = await db.getMany(rest.map((i) => keys[i]));
      rest.forEach((i, j) => (out[i] = loaded[j]));
    }
    return out;
  }

  private dropStalePrefetches(): void {
    for (const [k, p] of this.prefetched) if (p.at !== this.writesDone) this.prefetched.delete(k);
  }

  // ---------------------------------------------------------------- write queue

  private cacheRow(key: string, text: string | null): void {
    this.rowCache.delete(key); // re-insert as newest
    this.rowCache.set(key, text);
    if (this.rowCache.size > this.rowCacheSize) this.rowCache.delete(this.rowCache.keys().next().value!);
  }

  private enqueue(job: Job): void {
    this.queue.push(job);
    if (!this.flushing) {
      this.flushing = true;
      void this.flush();
    }
  }

  /**
   * Each round starts on a setImmediate, not at once nor on a microtask: everything the process
   * does in the current turn of the event loop (a run's machine taking several transitions whose
   * promise actors resolve within microtasks, the continuations of the jobs the previous round
   * just acknowledged) joins the round. A short run's final record, snapshot, events and session
   * history then go in one batch instead of one round each; the cost is one event-loop turn
   * (tens of microseconds) before a write starts.
   */
  private async flush(): Promise<void> {
    try {
      for (;;) {
        await new Promise<void>((resolve) => setImmediate(resolve));
        if (this.queue.length === 0) break;
        let ops = 0;
        let n = 0;
        while (n < this.queue.length && (n === 0 || ops < ROUND_OPS)) {
          const j = this.queue[n++];
          ops += j.type === 'events' ? j.events.length * 6 : j.type === 'records' ? (Array.isArray(j.ops) ? j.ops.length : 2) * 8 : 0;
        }
        await this.round(this.queue.splice(0, n));
      }
    } finally {
      this.flushing = false;
    }
  }

  private async round(jobs: Job[]): Promise<void> {
    const db = this.db!; // open: close() waits for in-flight callers, which include these jobs
    const settle: Array<() => void> = [];
    // 0. Jobs that gave a function get their ops now, in queue order (Store.commit).
    const opsOf = new Map<RecordJob, WriteOp[]>();
    const failed = new Map<RecordJob, unknown>();
    for (const j of jobs) {
      if (j.type !== 'records') continue;
      try {
        opsOf.set(j, typeof j.ops === 'function' ? j.ops() : j.ops);
      } catch (e) {
        failed.set(j, e);
        opsOf.set(j, []);
      }
    }
    try {
      // 1. Load every record the round touches and every counter those records and the new index
      //    values touch (all known before any job runs). Rows and counters missing from the caches
      //    come in ONE disk read where possible: the counters of the kinds and of the new index
      //    values are known up front; only those of a loaded row's old index values need a
      //    second read, after the rows (an update that moves an index value not seen lately).
      const recKeys = new Set<string>();
      for (const j of jobs) if (j.type === 'records') for (const op of opsOf.get(j)!) recKeys.add(recordKey(op.kind, op.id));
      const rows = new Map<string, Row | null>();
      const counters = new Map<string, number>();
      if (recKeys.size) {
        // Take the round's rows from the cache and the disk directly. Never read them back from the
        // cache after filling it: caching the misses may evict this very round's hits.
        const missing: string[] = [];
        for (const k of recKeys) {
          const text = this.rowCache.get(k);
          if (text === undefined) missing.push(k);
          else rows.set(k, text === null ? null : (JSON.parse(text) as Row));
        }
        // The old index values of the rows known so far (a row not loaded yet adds none).
        const counterKeys = (): Set<string> => {
          const ckeys = new Set<string>();
          for (const j of jobs) {
            if (j.type !== 'records') continue;
            for (const op of opsOf.get(j)!) {
              ckeys.add(kindCountKey(op.kind));
              const row = rows.get(recordKey(op.kind, op.id));
              if (row) for (const [name, v] of Object.entries(row.ix)) ckeys.add(indexCountKey(op.kind, name, v));
              if (op.op !== 'delete') for (const [name, v] of Object.entries(cleanIndexes(op.indexes))) ckeys.add(indexCountKey(op.kind, name, v));
            }
          }
          return ckeys;
        };
        const uncachedCounters = (ckeys: Set<string>): string[] => {
          const ck: string[] = [];
          for (const k of ckeys) {
            if (counters.has(k)) continue;
            const n = this.counterCache.get(k);
            if (n === undefined) ck.push(k);
            else counters.set(k, n);
          }
          return ck;
        };
        const setCounters = (ck: string[], texts: Array<string | undefined>) =>
          ck.forEach((k, i) => {
            const n = parse<number>(texts[i]) ?? 0;
            counters.set(k, n);
            this.counterCache.set(k, n);
          });
        let ck = uncachedCounters(counterKeys());
        if (missing.length || ck.length) {
          const loaded = await this.readKeys(db, [...missing, ...ck]);
          missing.forEach((k, i) => {
            const text = loaded[i] ?? null;
            rows.set(k, text === null ? null : (JSON.parse(text) as Row));
            this.cacheRow(k, text);
          });
          setCounters(ck, loaded.slice(missing.length));
        }
        if (missing.length) {
          ck = uncachedCounters(counterKeys());
          if (ck.length) setCounters(ck, await this.readKeys(db, ck));
        }
      }

      // 2. Apply the jobs in order. Each stages its changes; they join the round only if all of
      //    the job's checks pass.
      const batch: BatchOp[] = [];
      const dirtyCounters = new Set<string>();
      const seqBefore = this.lastSeq;
      const cursorBefore = this.lastCursor;
      const postings = new Map<string, string[]>(); // event index prefix -> this round's cursors
      for (const job of jobs) {
        if (job.type === 'barrier') {
          const last = this.lastCursor;
          settle.push(() => job.resolve(last));
          continue;
        }
        if (job.type === 'events') {
          try {
            // Serialise every event first (the only step that can fail), then stage. Index
            // entries are collected per value over the whole round: one posting per value.
            const first = this.lastCursor + 1;
            const n = job.events.length;
            const cursors: string[] = new Array(n);
            const texts: string[] = new Array(n);
            for (let i = 0; i < n; i++) texts[i] = eventText(job.events[i], (cursors[i] = encodeCursor(first + i)));
            const stored: StoredEvent[] = new Array(n);
            for (let i = 0; i < n; i++) {
              const e = job.events[i];
              const c = cursors[i];
              batch.push({ type: 'put', key: EVENT_PREFIX + c, value: texts[i] });
              const s = Object.assign({}, e) as StoredEvent;
              s.cursor = c;
              stored[i] = s;
              storedEventText.set(s, texts[i]);
              for (const field of EVENT_INDEX_FIELDS) {
                const v = e[field];
                if (typeof v !== 'string') continue;
                const prefix = eventIndexPrefix(field, v);
                const list = postings.get(prefix);
                if (list) list.push(c);
                else postings.set(prefix, [c]);
              }
            }
            this.lastCursor += n;
            settle.push(() => job.resolve(stored));
          } catch (e) {
            settle.push(() => job.reject(e)); // e.g. a value JSON cannot encode
          }
          continue;
        }
        if (failed.has(job)) {
          settle.push(() => job.reject(failed.get(job)));
          continue;
        }
        try {
          const staged = this.applyRecordOps(opsOf.get(job)!, rows, counters);
          for (const op of staged.batch) batch.push(op); // no spread: rounds can hold 20k ops
          for (const [k, v] of staged.rows) rows.set(k, v);
          for (const [k, v] of staged.counters) {
            counters.set(k, v);
            dirtyCounters.add(k);
          }
          settle.push(() => job.resolve(staged.results));
        } catch (e) {
          settle.push(() => job.reject(e));
        }
      }
      for (const k of dirtyCounters) {
        const v = counters.get(k)!;
        batch.push(v > 0 ? { type: 'put', key: k, value: String(v) } : { type: 'del', key: k });
      }
      if (this.lastSeq !== seqBefore) batch.push({ type: 'put', key: META_SEQ, value: String(this.lastSeq) });
      for (const [prefix, cs] of postings) {
        batch.push({ type: 'put', key: prefix + cs[cs.length - 1], value: cs.length === 1 ? '' : cs.join('') });
      }
      if (this.lastCursor !== cursorBefore) batch.push({ type: 'put', key: META_CURSOR, value: String(this.lastCursor) });

      // 3. One atomic batch; only then does anybody hear back.
      if (batch.length) {
        await writeBatch(db, batch, this.sync);
        this.writesDone++;
      }
      this.dropStalePrefetches();
      // On disk now: the caches may learn it.
      for (const op of batch) {
        if (op.key.startsWith(RECORD_KEY_START)) this.cacheRow(op.key, op.type === 'put' ? op.value : null);
        else if (op.key.startsWith(COUNT_KEY_START)) this.counterCache.set(op.key, op.type === 'put' ? Number(op.value) : 0);
      }
      if (this.counterCache.size > 200_000) this.counterCache.clear();
    } catch (e) {
      // Nothing of this round was written. Numbers handed out are simply skipped (never reused).
      for (const j of jobs) j.reject(e);
      return;
    }
    for (const s of settle) s();
  }

  /** Validates `ops` against the round's view; returns the staged changes or throws StoreError. */
  private applyRecordOps(
    ops: WriteOp[],
    rows: Map<string, Row | null>,
    counters: Map<string, number>,
  ): { batch: BatchOp[]; rows: Map<string, Row | null>; counters: Map<string, number>; results: Array<Versioned<unknown> | null> } {
    const sRows = new Map<string, Row | null>();
    const sCounters = new Map<string, number>();
    const batch: BatchOp[] = [];
    const results: Array<Versioned<unknown> | null> = [];
    let seq = this.lastSeq;
    const bump = (key: string, d: number) => {
      const base = sCounters.get(key) ?? counters.get(key);
      // round() preloads every counter a job can touch; a miss would silently reset a count.
      if (base === undefined) throw new Error(`internal: counter ${JSON.stringify(key)} was not preloaded`);
      sCounters.set(key, base + d);
    };

    for (const op of ops) {
      const key = recordKey(op.kind, op.id);
      const cur = sRows.has(key) ? sRows.get(key)! : (rows.get(key) ?? null);
      let next: Row | null;
      if (op.op === 'create') {
        if (cur) throw new StoreError('conflict', `${op.kind} '${op.id}' already exists`);
        next = { value: op.value ?? null, version: 1, seq: ++seq, ix: cleanIndexes(op.indexes) };
      } else if (op.op === 'update') {
        if (op.expectedVersion !== null) {
          if (!cur) throw new StoreError('not_found', `${op.kind} '${op.id}' was not found`);
          if (cur.version !== op.expectedVersion) {
            throw new StoreError('stale_version', `${op.kind} '${op.id}' is at version ${cur.version}, expected ${op.expectedVersion}`);
          }
        }
        next = cur
          ? { value: op.value ?? null, version: cur.version + 1, seq: cur.seq, ix: op.indexes ? cleanIndexes(op.indexes) : cur.ix }
          : { value: op.value ?? null, version: 1, seq: ++seq, ix: cleanIndexes(op.indexes) };
      } else {
        if (!cur) throw new StoreError('not_found', `${op.kind} '${op.id}' was not found`);
        if (op.expectedVersion !== undefined && cur.version !== op.expectedVersion) {
          throw new StoreError('stale_version', `${op.kind} '${op.id}' is at version ${cur.version}, expected ${op.expectedVersion}`);
        }
        next = null;
      }

      // Index and counter maintenance: drop entries that go away, add the new ones.
      const oldIx = cur?.ix ?? {};
      const newIx = next?.ix ?? {};
      const s = encodeCursor((next ?? cur)!.seq);
      for (const [name, v] of Object.entries(oldIx)) {
        if (newIx[name] === v) continue;
        batch.push({ type: 'del', key: indexPrefix(op.kind, name, v) + s });
        bump(indexCountKey(op.kind, name, v), -1);
      }
      for (const [name, v] of Object.entries(newIx)) {
        if (oldIx[name] === v) continue;
        batch.push({ type: 'put', key: indexPrefix(op.kind, name, v) + s, value: op.id });
        bump(indexCountKey(op.kind, name, v), +1);
      }
      if (next) {
        batch.push({ type: 'put', key, value: JSON.stringify(next) });
        if (!cur) {
          batch.push({ type: 'put', key: seqPrefix(op.kind) + s, value: op.id });
          bump(kindCountKey(op.kind), +1);
        }
      } else {
        batch.push({ type: 'del', key }, { type: 'del', key: seqPrefix(op.kind) + s });
        bump(kindCountKey(op.kind), -1);
      }
      sRows.set(key, next);
      results.push(next ? { id: op.id, version: next.version, seq: next.seq, value: next.value } : null);
    }
    this.lastSeq = seq;
    return { batch, rows: sRows, counters: sCounters, results };
  }
}
