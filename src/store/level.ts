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
//   e\0<cursor16>                              -> StoredEvent
//   x\0<field>\0<value>\0<cursor16>             -> ''    event index (trace_id, run_id, ...)
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
  type ListQuery,
  type Page,
  type RecordIndexes,
  type RecordKind,
  type Store,
  type StoredEvent,
  type Versioned,
  type WriteOp,
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

const eventIndexKeys = (e: StoredEvent): string[] => {
  const keys: string[] = [];
  for (const field of EVENT_INDEX_FIELDS) {
    const v = e[field];
    if (typeof v === 'string') keys.push(eventIndexPrefix(field, v) + e.cursor);
  }
  return keys;
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
  ops: WriteOp[];
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
    if (this.state === 'opening') return this.transition!.then(() => this.close(), () => undefined);
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

  getRecord<T>(kind: RecordKind, id: string): Promise<Versioned<T> | null> {
    return this.run(async (db) => {
      const row = parse<Row>(await db.get(recordKey(kind, id)));
      return row ? { id, version: row.version, seq: row.seq, value: row.value as T } : null;
    });
  }

  getRecords<T>(kind: RecordKind, ids: string[]): Promise<Array<Versioned<T> | null>> {
    return this.run(async (db) => {
      if (ids.length === 0) return [];
      const rows = (await db.getMany(ids.map((id) => recordKey(kind, id)))).map((t) => parse<Row>(t));
      return rows.map((row, i) => (row ? { id: ids[i], version: row.version, seq: row.seq, value: row.value as T } : null));
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

  commit(ops: WriteOp[]): Promise<Array<Versioned<unknown> | null>> {
    return this.run(async () => {
      if (ops.length === 0) return [];
      return new Promise<Array<Versioned<unknown> | null>>((resolve, reject) => this.enqueue({ type: 'records', ops, resolve, reject }));
    });
  }

  listRecords<T>(kind: RecordKind, query: ListQuery = {}): Promise<Page<T>> {
    return this.run(async (db) => {
      const limit = clampLimit(query.limit, 100);
      const prefix = query.index ? indexPrefix(kind, query.index.name, query.index.value) : seqPrefix(kind);
      const after = query.cursor ? encodeCursor(decodeCursor(query.cursor)) : null;
      const range = query.reverse
        ? { gte: prefix, lt: after ? prefix + after : end(prefix) }
        : { gt: after ? prefix + after : prefix, lt: end(prefix) };
      // One snapshot for the index walk and the body fetch, so a concurrent update cannot make
      // the page disagree with itself.
      const snapshot = db.snapshot();
      try {
        const entries = (await db.iterator({ ...range, reverse: query.reverse === true, limit: limit + 1, snapshot }).all()) as Array<[string, string]>;
        const page = entries.slice(0, limit);
        const rows = page.length
          ? (await db.getMany(page.map(([, id]) => recordKey(kind, id)), { snapshot })).map((t) => parse<Row>(t))
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

  readEvents(query: EventQuery = {}): Promise<EventPage> {
    return this.run(async (db) => {
      const limit = clampLimit(query.limit, 200);
      const after = query.after ? encodeCursor(decodeCursor(query.after)) : null;
      const filters = normaliseFilters(query);
      const snapshot = db.snapshot();
      try {
        const events = filters.length === 0 ? await this.scanLog(db, snapshot, after, limit) : await this.walkIndex(db, snapshot, filters, after, limit);
        return { events, next_cursor: events.length === limit ? events[events.length - 1].cursor : null };
      } finally {
        await snapshot.close();
      }
    });
  }

  private async scanLog(db: Db, snapshot: ReturnType<Db['snapshot']>, after: string | null, limit: number): Promise<StoredEvent[]> {
    const texts = await db.values({ gt: after ? EVENT_PREFIX + after : EVENT_PREFIX, lt: end(EVENT_PREFIX), limit, snapshot }).all();
    return texts.map((t) => JSON.parse(t) as StoredEvent);
  }

  /**
   * Walks the index of the most selective filtered field (several values: the walks are merged in
   * cursor order), loads the bodies with getMany and checks the other filters on them. Only the
   * keys of matching index entries are read, never the whole log.
   */
  private async walkIndex(
    db: Db,
    snapshot: ReturnType<Db['snapshot']>,
    filters: Array<[EventIndexField, string[]]>,
    after: string | null,
    limit: number,
  ): Promise<StoredEvent[]> {
    const walked = WALK_PREFERENCE.find((f) => filters.some(([field]) => field === f))!;
    const prefixes = filters.find(([f]) => f === walked)![1].map((v) => eventIndexPrefix(walked, v));
    const rest = filters.filter(([f]) => f !== walked).map(([f, vs]) => [f, new Set(vs)] as const);
    const out: StoredEvent[] = [];
    let pos = after;
    // Without other filters every index hit is a result, so fetch exactly what is missing;
    // otherwise read bigger chunks, growing while hits are sparse.
    let chunk = rest.length ? Math.max(limit, 128) : limit;
    while (out.length < limit) {
      const want = rest.length ? chunk : limit - out.length;
      const lists = await Promise.all(
        prefixes.map(async (p) => (await db.keys({ gt: pos ? p + pos : p, lt: end(p), limit: want, snapshot }).all()).map(tailNumber)),
      );
      let cursors: string[];
      let exhausted: boolean;
      if (lists.length === 1) {
        cursors = lists[0];
        exhausted = cursors.length < want;
      } else {
        // Each list holds its own next `want` cursors, so the first `want` of their union are
        // exactly the next `want` cursors overall; the rest are read again next round.
        const all = [...new Set(lists.flat())].sort();
        cursors = all.slice(0, want);
        exhausted = lists.every((l) => l.length < want) && all.length <= want;
      }
      if (cursors.length === 0) break;
      const bodies = (await db.getMany(cursors.map((c) => EVENT_PREFIX + c), { snapshot })).map((t) => parse<StoredEvent>(t));
      for (const e of bodies) {
        if (e && rest.every(([f, vs]) => typeof e[f] === 'string' && vs.has(e[f] as string))) {
          out.push(e);
          if (out.length === limit) break;
        }
      }
      pos = cursors[cursors.length - 1];
      if (exhausted) break;
      chunk = Math.min(chunk * 2, 1000);
    }
    return out;
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
   * event stored after a newer one waits for a later pass. Deletes go in batches of 500 events
   * with their index entries. Calls are serialised with each other; appends are not blocked.
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
          const from = this.retainedFrom ? EVENT_PREFIX + this.retainedFrom : EVENT_PREFIX;
          const events = (await db.values({ gt: from, lte: upTo, limit: 500 }).all()).map((t) => JSON.parse(t) as StoredEvent);
          const ops: BatchOp[] = [];
          let last: string | null = null;
          let stop = events.length < 500;
          for (const e of events) {
            if (!isBefore(e.timestamp, cutoff)) {
              stop = true;
              break;
            }
            ops.push({ type: 'del', key: EVENT_PREFIX + e.cursor });
            for (const k of eventIndexKeys(e)) ops.push({ type: 'del', key: k });
            last = e.cursor;
            deleted++;
          }
          if (last) {
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
      // A microtask, not now: every write issued in the same tick joins the first round.
      queueMicrotask(() => void this.flush());
    }
  }

  private async flush(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        let ops = 0;
        let n = 0;
        while (n < this.queue.length && (n === 0 || ops < ROUND_OPS)) {
          const j = this.queue[n++];
          ops += j.type === 'events' ? j.events.length * 6 : j.type === 'records' ? j.ops.length * 8 : 0;
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
    try {
      // 1. Load every record the round touches, then every counter those records and the new
      //    index values touch (both sets are known before any job runs).
      const recKeys = new Set<string>();
      for (const j of jobs) if (j.type === 'records') for (const op of j.ops) recKeys.add(recordKey(op.kind, op.id));
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
        if (missing.length) {
          const loaded = await db.getMany(missing);
          missing.forEach((k, i) => {
            const text = loaded[i] ?? null;
            rows.set(k, text === null ? null : (JSON.parse(text) as Row));
            this.cacheRow(k, text);
          });
        }
        const ckeys = new Set<string>();
        for (const j of jobs) {
          if (j.type !== 'records') continue;
          for (const op of j.ops) {
            ckeys.add(kindCountKey(op.kind));
            const row = rows.get(recordKey(op.kind, op.id));
            if (row) for (const [name, v] of Object.entries(row.ix)) ckeys.add(indexCountKey(op.kind, name, v));
            if (op.op !== 'delete') for (const [name, v] of Object.entries(cleanIndexes(op.indexes))) ckeys.add(indexCountKey(op.kind, name, v));
          }
        }
        const ck: string[] = [];
        for (const k of ckeys) {
          const n = this.counterCache.get(k);
          if (n === undefined) ck.push(k);
          else counters.set(k, n);
        }
        if (ck.length) {
          const cv = (await db.getMany(ck)).map((t) => parse<number>(t));
          ck.forEach((k, i) => {
            counters.set(k, cv[i] ?? 0);
            this.counterCache.set(k, cv[i] ?? 0);
          });
        }
      }

      // 2. Apply the jobs in order. Each stages its changes; they join the round only if all of
      //    the job's checks pass.
      const batch: BatchOp[] = [];
      const dirtyCounters = new Set<string>();
      const seqBefore = this.lastSeq;
      const cursorBefore = this.lastCursor;
      for (const job of jobs) {
        if (job.type === 'barrier') {
          const last = this.lastCursor;
          settle.push(() => job.resolve(last));
          continue;
        }
        if (job.type === 'events') {
          try {
            const first = this.lastCursor + 1;
            const stored = job.events.map((e, i) => ({ ...e, cursor: encodeCursor(first + i) }) as StoredEvent);
            const ops: BatchOp[] = [];
            for (const e of stored) {
              ops.push({ type: 'put', key: EVENT_PREFIX + e.cursor, value: JSON.stringify(e) });
              for (const k of eventIndexKeys(e)) ops.push({ type: 'put', key: k, value: '' });
            }
            this.lastCursor += stored.length;
            for (const op of ops) batch.push(op);
            settle.push(() => job.resolve(stored));
          } catch (e) {
            settle.push(() => job.reject(e)); // e.g. a value JSON cannot encode
          }
          continue;
        }
        try {
          const staged = this.applyRecordOps(job.ops, rows, counters);
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
      if (this.lastCursor !== cursorBefore) batch.push({ type: 'put', key: META_CURSOR, value: String(this.lastCursor) });

      // 3. One atomic batch; only then does anybody hear back.
      if (batch.length) await writeBatch(db, batch, this.sync);
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
      const cur = sRows.has(key) ? sRows.get(key)! : rows.get(key) ?? null;
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
