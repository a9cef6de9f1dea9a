// The embedded default store, on LevelDB (`level` 10 / classic-level). The key layout is in
// level-keys.ts, the write queue in level-writer.ts, the event reads in level-events.ts.
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
  EVENT_PREFIX,
  META_CURSOR,
  META_SEQ,
  ROW_CACHE_SIZE,
  clampLimit,
  end,
  eventIndexPrefix,
  indexCountKey,
  kindCountKey,
  listKeys,
  parse,
  recordKey,
  tailNumber,
  toVersioned,
  writeBatch,
  type BatchOp,
  type Db,
  type Row,
} from './level-keys.js';
import { isBefore, readEventsPage } from './level-events.js';
import { LevelWriter, type EventJob } from './level-writer.js';
import {
  EVENT_INDEX_FIELDS,
  StoreError,
  decodeCursor,
  dropTo,
  encodeCursor,
  type CommitEvents,
  type CommitOps,
  type EventInput,
  type EventPage,
  type EventQuery,
  type EventTextPage,
  type ListQuery,
  type OnSwallowed,
  type Page,
  type RecordIndexes,
  type RecordKind,
  type Store,
  type StoreCapabilities,
  type StoredEvent,
  type Versioned,
} from './store.js';
import { RecordWrites } from './record-writes.js';
import { LEVEL_OPTIONS } from './level-tuning.js';

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
  /** Errors caught and dropped (a close after a failed open, a failed prefetch): see OnSwallowed. */
  onSwallowed?: OnSwallowed;
}

const isLockError = (e: unknown): boolean => {
  for (let cur: unknown = e, depth = 0; cur && depth < 5; depth++) {
    const err = cur as { code?: unknown; message?: unknown; cause?: unknown };
    if (err.code === 'LEVEL_LOCKED') return true;
    if (typeof err.message === 'string' && /already held by process|LOCK: Resource temporarily unavailable/.test(err.message)) return true;
    cur = err.cause;
  }
  return false;
};

export class LevelStore extends RecordWrites implements Store {
  readonly adapter = 'level' as const;
  /** One process owns the data directory (it is locked): nothing is shared, claims scan. */
  readonly capabilities: StoreCapabilities = { sharedByInstances: false, atomicCommitEvents: true };
  private readonly path: string;
  private readonly sync: boolean;
  private readonly rowCacheSize: number;
  private readonly onSwallowed: OnSwallowed | undefined;
  private db: Db | null = null;
  /** The write queue of the current open (null while closed). */
  private writer: LevelWriter | null = null;
  private state: 'new' | 'opening' | 'open' | 'closing' | 'closed' = 'new';
  private inflight = 0;
  private drained: (() => void) | null = null;
  private retention: Promise<unknown> = Promise.resolve();
  /** fsync'd group-commit rounds of the writers of earlier opens (see stats). */
  private closedRounds = 0;
  /** Cursor of the newest event retention deleted (this process): the next pass starts after it. */
  private retainedFrom: string | null = null;

  constructor(opts: LevelStoreOptions) {
    super();
    this.path = opts.path;
    this.sync = opts.sync ?? true;
    this.rowCacheSize = opts.rowCacheSize ?? ROW_CACHE_SIZE;
    this.onSwallowed = opts.onSwallowed;
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
    const db: Db = new Level<string, string>(this.path, LEVEL_OPTIONS);
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
      // A new write queue (and caches) per open: another process may have written the directory since.
      this.writer = new LevelWriter(db, {
        sync: this.sync,
        rowCacheSize: this.rowCacheSize,
        onSwallowed: this.onSwallowed,
        lastSeq: seq ?? 0,
        lastCursor: Math.max(cursor ?? 0, newest ? Number(tailNumber(newest)) : 0),
      });
    } catch (e) {
      await db.close().catch(dropTo(this.onSwallowed, 'store.level.close_failed_open'));
      this.state = 'closed';
      throw e;
    }
    this.db = db;
    this.retainedFrom = null;
    this.state = 'open';
    // In the background: until it is built, the filter knows nothing absent (every key is read).
    const writer = this.writer;
    void writer.cache.absent.build(db).catch((err: unknown) => this.writer === writer && this.onSwallowed?.('store.level.absent_scan', err));
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
    this.closedRounds += this.writer?.syncedRounds ?? 0;
    this.writer = null;
    try {
      await db?.close();
    } finally {
      this.state = 'closed';
    }
  }

  /** Diagnostics: group-commit rounds written with fsync since this store object was made (the bench's profile counts them per run). */
  get stats(): { groupCommitRounds: number } {
    return { groupCommitRounds: this.closedRounds + (this.writer?.syncedRounds ?? 0) };
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
      this.settled();
    }
  }

  /** Made once: a job per appendEvents call would otherwise carry two closures of its own. */
  private readonly onEventsSettled = (): void => this.settled();

  private settled(): void {
    if (--this.inflight === 0 && this.drained) {
      this.drained();
      this.drained = null;
    }
  }

  // ---------------------------------------------------------------- records

  // Reads consult the write queue's row cache first: it holds exactly what is on disk for the rows
  // it knows (filled only after a batch is written, or from a disk read), so a hit answers the
  // same as LevelDB would, without a trip to the I/O thread pool. A live run rereads its session,
  // trace and ledger rows this way on every step.
  // A miss read from the disk teaches the cache (LevelWriter.learnRow): a row read once per run
  // (the agent's registration, a session before its run) is then not read from the disk again.
  getRecord<T>(kind: RecordKind, id: string): Promise<Versioned<T> | null> {
    return this.run(async (db) => {
      const key = recordKey(kind, id);
      const writer = this.writer!;
      const hit = writer.cache.cachedRow(key); // or what a prefetch of it in flight reads
      const cached = hit !== undefined ? hit : await writer.cache.prefetchedRow(key);
      if (cached !== undefined) return toVersioned<T>(id, cached);
      const epoch = writer.cache.epoch;
      const text = await db.get(key);
      writer.cache.learnRow(key, text ?? null, epoch);
      return toVersioned<T>(id, text);
    });
  }

  getRecords<T>(kind: RecordKind, ids: string[]): Promise<Array<Versioned<T> | null>> {
    return this.run(async (db) => {
      if (ids.length === 0) return [];
      const keys = ids.map((id) => recordKey(kind, id));
      const texts: Array<string | null | undefined> = keys.map((k) => this.writer!.cache.cachedRow(k));
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

  commit(ops: CommitOps): Promise<Array<Versioned<unknown> | null>> {
    return this.run(async () => {
      if (Array.isArray(ops) && ops.length === 0) return [];
      return new Promise<Array<Versioned<unknown> | null>>((resolve, reject) => this.writer!.enqueue({ type: 'records', ops, resolve, reject }));
    });
  }

  commitWithEvents(ops: CommitOps, events: CommitEvents): Promise<{ records: Array<Versioned<unknown> | null>; events: StoredEvent[] }> {
    return this.run(async () => {
      let stored: StoredEvent[] = [];
      const records = await new Promise<Array<Versioned<unknown> | null>>((resolve, reject) =>
        this.writer!.enqueue({ type: 'records', ops, events, stored: (s) => (stored = s), resolve, reject }),
      );
      return { records, events: stored };
    });
  }

  listRecords<T>(kind: RecordKind, query: ListQuery = {}): Promise<Page<T>> {
    return this.run(async (db) => {
      const limit = clampLimit(query.limit, 100);
      const { range, matches, cursorOf } = listKeys(kind, query);
      // One snapshot for the index walk and the body fetch, so a concurrent update cannot make
      // the page disagree with itself.
      const snapshot = db.snapshot();
      try {
        const entries = (await db.iterator({ ...range, reverse: query.reverse === true, limit: limit + 1, snapshot }).all()) as Array<[string, string]>;
        const page = entries.slice(0, limit);
        // A body the write queue's cache holds is what the disk holds now: used when it still is
        // the row the index entry points at (same seq, still under the listed index value), so
        // the item is current and matches. The others come from the snapshot. A claim pass lists
        // queued runs this process just created: their bodies need no disk read.
        const rows: Array<Row | undefined> = new Array(page.length);
        const missing: number[] = [];
        page.forEach(([key, id], i) => {
          const text = this.writer?.cache.cachedRow(recordKey(kind, id));
          const row = text ? (JSON.parse(text) as Row) : undefined;
          if (row && matches(row, key)) rows[i] = row;
          else missing.push(i);
        });
        if (missing.length) {
          const loaded = await db.getMany(
            missing.map((i) => recordKey(kind, page[i][1])),
            { snapshot },
          );
          missing.forEach((i, j) => (rows[i] = parse<Row>(loaded[j])));
        }
        const items: Versioned<T>[] = [];
        rows.forEach((row, i) => {
          if (row) items.push({ id: page[i][1], version: row.version, seq: row.seq, value: row.value as T });
        });
        return { items, next_cursor: entries.length > limit ? cursorOf(page[page.length - 1][0]) : null };
      } finally {
        await snapshot.close();
      }
    });
  }

  // A count is one counter key: the write queue's counter cache answers it when it knows it (it
  // holds exactly what is on disk), and a disk read teaches it (status pages poll the same counts).
  countRecords(kind: RecordKind, index?: { name: string; value: string }): Promise<number> {
    return this.run(async (db) => {
      const key = index ? indexCountKey(kind, index.name, index.value) : kindCountKey(kind);
      const writer = this.writer!;
      const cached = writer.cache.cachedCounter(key);
      if (cached !== undefined) return cached;
      const epoch = writer.cache.epoch;
      const n = parse<number>(await db.get(key)) ?? 0;
      writer.cache.learnCounter(key, n, epoch);
      return n;
    });
  }

  // ---------------------------------------------------------------- events

  /**
   * Not through run(): on the ingest path (thousands of one-event calls a second) its async frame
   * and the promises around the job's own were a large share of the call's garbage. The job is
   * counted in flight from here until it settles, as run() would.
   */
  appendEvents(events: EventInput[]): Promise<StoredEvent[]> {
    if (this.state !== 'open' || !this.db) return Promise.reject(new StoreError('closed', 'store is not open'));
    if (events.length === 0) return Promise.resolve([]);
    this.inflight++;
    const job = new EventAppend(events, this.onEventsSettled);
    const done = new Promise<StoredEvent[]>((resolve, reject) => {
      job.ok = resolve;
      job.fail = reject;
    });
    this.writer!.enqueue(job);
    return done;
  }

  async readEvents(query: EventQuery = {}): Promise<EventPage> {
    const page = await this.readEventsJson(query);
    return { events: page.events.map((t) => JSON.parse(t) as StoredEvent), next_cursor: page.next_cursor };
  }

  readEventsJson(query: EventQuery = {}): Promise<EventTextPage> {
    return this.run((db) => readEventsPage(db, query));
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
      const bound = await new Promise<number>((resolve, reject) => this.writer!.enqueue({ type: 'barrier', resolve, reject }));
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
      // Not a swallow: the caller gets the task's failure; this copy only orders the next pass after it.
      this.retention = task.catch(() => undefined);
      return task;
    });
  }

  // ---------------------------------------------------------------- prefetch

  /** See Store.prefetch: the write queue reads now what the coming write of these records will need. */
  prefetch(records: Array<{ kind: RecordKind; id: string; indexes?: RecordIndexes; fresh?: string[] }>): void {
    if (this.state !== 'open' || !this.db || !this.writer) return;
    this.writer.cache.prefetch(records, (keys) => this.run((db) => db.getMany(keys)));
  }
}

/**
 * One appendEvents call in the write queue. A class, so that the per-call garbage is this object,
 * the promise and its executor: its resolve/reject are methods, not two closures per call.
 */
class EventAppend implements EventJob {
  readonly type = 'events';
  ok: (stored: StoredEvent[]) => void = noop;
  fail: (e: unknown) => void = noop;

  constructor(
    readonly events: EventInput[],
    private readonly settled: () => void,
  ) {}

  resolve(stored: StoredEvent[]): void {
    this.settled();
    this.ok(stored);
  }

  reject(e: unknown): void {
    this.settled();
    this.fail(e);
  }
}

const noop = (): void => {};
