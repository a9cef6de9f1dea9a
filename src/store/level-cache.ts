// The LevelDB write queue's caches (src/store/level-writer.ts): stored rows and counters as the
// disk holds them, and reads issued ahead of a coming write (prefetches), with the rule that says
// when a read may be kept (the cache epoch: rounds written so far).
import { AbsentKeys } from './level-absent.js';
import { RECORD_KEY_START, indexCountKey, kindCountKey, parse, recordKey, type BatchOp, type Db, type Row, type RowHead } from './level-keys.js';
import { isStoreError, type OnSwallowed, type RecordIndexes, type RecordKind } from './store.js';

/** A prefetch not used within this many written rounds is dropped (its write never came). */
const PREFETCH_MAX_ROUNDS = 64;

interface Prefetch {
  /** `writesDone` when it was issued (its age). */
  at: number;
  /** A batch writing its key landed since it was issued: what it read may be old. */
  stale: boolean;
  text: Promise<{ value: string | undefined } | null>;
}

/** Keys prefetched in one turn of the event loop, read together (LevelCache.openPending). */
interface PrefetchBatch {
  keys: string[];
  entries: Prefetch[];
  texts: Promise<Array<string | undefined> | null>;
  /** Hands the batch to LevelDB (once; later prefetches start another batch). */
  go: () => void;
}

export class LevelCache {
  /**
   * Committed state the write queue reads on every round, kept in memory so a commit is one
   * LevelDB round-trip (the write) instead of three (load rows, load counters, write). Safe
   * because this process is the only one that can open the directory and every write goes
   * through the queue; both caches are filled only from what is already on disk. Rows are kept
   * as their stored JSON text (so no caller can mutate a cached object), newest last, bounded.
   * A writer lives from open to close: another process may write the directory in between.
   */
  readonly rows = new Map<string, string | null>();
  /**
   * The heads of cached rows this process wrote (level-record-ops.ts hands them over with the
   * text): a write over such a row is staged from its head, its text parsed only if its value is
   * asked for (a holders op). Kept with the text it describes, and used only while the cache still
   * holds that very text.
   */
  private readonly heads = new Map<string, { text: string; head: RowHead }>();
  /** Rounds whose batch was written (the cache epoch: see learnRow / learnCounter). */
  writesDone = 0;
  /**
   * Reads issued ahead of a write (prefetch). One is valid until a batch that writes its key is
   * written (`stale`): a batch that landed before the read was issued is in what it read; one in
   * flight when it was issued, or later, marks it stale when it lands. Unrelated writes (with 32
   * enqueue requests in flight there is always one) leave it valid.
   */
  private readonly prefetched = new Map<string, Prefetch>();
  readonly counters = new Map<string, number>();
  /**
   * What a run naming a session reads before it starts (its row, the counters of the session's
   * runs and traces: src/runtime/run-start.ts prefetch), known absent without a read when new.
   */
  readonly absent = new AbsentKeys({ rows: ['sessions'], counters: [indexCountKey('runs', 'session_id', ''), indexCountKey('traces', 'session_id', '')] });

  constructor(
    private readonly rowCacheSize: number,
    private readonly onSwallowed?: OnSwallowed,
  ) {}

  /** Changes whenever a round's batch is written: a read that began and ended in one epoch saw what the caches may hold. */
  get epoch(): number {
    return this.writesDone;
  }

  /** A counter's stored value as the cache knows it, undefined when not cached. */
  cachedCounter(key: string): number | undefined {
    return this.counters.get(key);
  }

  /**
   * A counter read from the disk outside the queue (countRecords): cached only if no batch was
   * written since the read was issued (`epoch` then), so the cache still holds exactly the disk.
   */
  learnCounter(key: string, value: number, epoch: number): void {
    if (epoch === this.writesDone && !this.counters.has(key)) this.counters.set(key, value);
  }

  /** A row read from the disk outside the queue (getRecord): cached only under the same rule as learnCounter. */
  learnRow(key: string, text: string | null, epoch: number): void {
    if (epoch === this.writesDone && !this.rows.has(key)) this.cacheRow(key, text);
  }

  /** The row's stored text as the cache knows it (null: known absent), undefined when not cached. */
  cachedRow(key: string): string | null | undefined {
    return this.rows.get(key);
  }

  /**
   * A hint that these records are about to be written (created, mostly) with these index values:
   * their rows and the counters of those index values are read now, while the caller is still
   * busy, so the round that writes them need not wait for a disk read first (a new run's round
   * otherwise starts with one: its rows and its session's counters are in no cache). A read is
   * used only if no batch writing its key landed after it was issued, so it is exactly what the
   * disk holds; otherwise the round reads again.
   */
  prefetch(
    records: Array<{ kind: RecordKind; id: string; indexes?: RecordIndexes; fresh?: string[] }>,
    read: (keys: string[]) => Promise<Array<string | undefined>>,
  ): void {
    const keys: string[] = [];
    const want = (k: string) => {
      if (!this.prefetched.has(k) && !keys.includes(k)) keys.push(k);
    };
    for (const r of records) {
      const rk = recordKey(r.kind, r.id);
      // A just-generated id (`fresh`) is known absent, and so are the postings of its own index
      // values; so is a key the absence filter never saw (a new session's). Both caches then hold
      // exactly what the disk holds, as when filled from a read.
      if (!this.rows.has(rk) && !this.prefetched.has(rk) && (r.fresh || this.absent.absent(rk))) this.cacheRow(rk, null);
      if (!this.rows.has(rk)) want(rk);
      const ck = kindCountKey(r.kind);
      if (!this.counters.has(ck)) want(ck);
      // Each index value's counter key built once (a loop with `in`: every run's start comes here).
      const ix = r.indexes;
      if (ix)
        for (const name in ix) {
          const v = ix[name];
          if (typeof v !== 'string') continue;
          const ik = indexCountKey(r.kind, name, v);
          if (this.counters.has(ik)) continue;
          if (!this.prefetched.has(ik) && (r.fresh?.includes(name) || this.absent.absent(ik))) this.counters.set(ik, 0);
          else want(ik);
        }
    }
    if (keys.length === 0) return;
    // Registered now (a batch writing a key that lands before the read goes out marks it stale
    // too: conservative), read together with every other prefetch of this turn of the event loop.
    const at = this.writesDone;
    const pending = (this.pending ??= this.openPending(read));
    const base = pending.keys.length;
    keys.forEach((k, i) => {
      const entry: Prefetch = { at, stale: false, text: pending.texts.then((t) => (t ? { value: t[base + i] } : null)) };
      pending.keys.push(k);
      pending.entries.push(entry);
      this.prefetched.set(k, entry);
    });
    // With no prefetch being read, nobody else is starting: read now rather than at the turn's
    // end (a lone run's start waits on this read).
    if (this.readsInFlight === 0) pending.go();
  }

  /**
   * The prefetches of one turn of the event loop, read in one getMany when the turn ends (or at
   * once when no prefetch is being read: a lone start would only wait for the turn). Every
   * LevelDB read takes the database's mutex on the main thread (classic-level makes a snapshot
   * for it) and a trip through libuv's pool; with 32 runs starting at once, one read per run kept
   * the main thread waiting on that mutex about a millisecond per read on a busy machine (measured
   * in the protocols benchmark: a named session's read), while one read for all of them pays it once.
   */
  private pending: PrefetchBatch | null = null;
  /** Prefetch reads handed to LevelDB and not answered yet. */
  private readsInFlight = 0;

  private openPending(read: (keys: string[]) => Promise<Array<string | undefined>>): PrefetchBatch {
    let open!: () => void;
    const issued = new Promise<void>((r) => (open = r));
    const batch: PrefetchBatch = {
      keys: [],
      entries: [],
      // The store closed before the turn ended: nothing to read, and nothing went wrong.
      texts: issued
        .then(() => read(batch.keys))
        .catch((err: unknown) => (isStoreError(err, 'closed') ? null : (this.onSwallowed?.('store.level.prefetch', err), null)))
        .finally(() => this.readsInFlight--),
      go: () => {
        if (this.pending !== batch) return; // gone already
        this.pending = null;
        this.readsInFlight++;
        open();
      },
    };
    // A read still valid when it lands is what the disk holds: the caches learn it then, so the
    // caller's own read of the row (a named session before its run) and the round that writes it
    // need no second disk read. A batch writing the key that is in flight now lands after this
    // and overwrites what was learnt (land()); one that landed first made the entry stale. Rounds
    // that stage commits run only while no batch is in flight, so none sees the old value then.
    // (Attached first: whoever awaits an entry's text finds the caches taught.)
    void batch.texts.then((t) => {
      if (!t) return;
      batch.keys.forEach((k, i) => !batch.entries[i].stale && this.learnPrefetched(k, t[i]));
    });
    setImmediate(batch.go);
    return batch;
  }

  private learnPrefetched(key: string, text: string | undefined): void {
    if (key.startsWith(RECORD_KEY_START)) {
      if (!this.rows.has(key)) this.cacheRow(key, text ?? null);
    } else if (!this.counters.has(key)) this.counters.set(key, parse<number>(text) ?? 0);
  }

  /**
   * The row's stored text as the cache knows it or, when a valid prefetch of it is in flight, as
   * that read finds it (null: known absent); undefined when neither knows it (read the disk).
   */
  async prefetchedRow(key: string): Promise<string | null | undefined> {
    const p = this.prefetched.get(key);
    if (p && !p.stale) await p.text;
    return this.rows.get(key);
  }

  /** `keys` from valid prefetches where there are some, the rest from the disk, in order. */
  async readKeys(db: Db, keys: string[]): Promise<Array<string | undefined>> {
    const out: Array<string | undefined> = new Array(keys.length);
    const rest: number[] = [];
    const early: Array<Promise<void>> = [];
    keys.forEach((k, i) => {
      const p = this.prefetched.get(k);
      this.prefetched.delete(k);
      if (!p || p.stale) return void rest.push(i);
      early.push(
        p.text.then((t) => {
          if (t && !p.stale) out[i] = t.value;
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

  /** After a batch landed: prefetches of its keys are stale; and one never used is dropped after a while. */
  dropStalePrefetches(batch: BatchOp[]): void {
    if (this.prefetched.size === 0) return;
    for (const op of batch) {
      const p = this.prefetched.get(op.key);
      if (!p) continue;
      p.stale = true;
      this.prefetched.delete(op.key);
    }
    for (const [k, p] of this.prefetched) {
      if (this.writesDone - p.at <= PREFETCH_MAX_ROUNDS) break; // oldest first
      p.stale = true;
      this.prefetched.delete(k);
    }
  }

  /** `head`: the row's head when this process staged `text` (level-record-ops.ts); else it is parsed when staged over. */
  cacheRow(key: string, text: string | null, head?: RowHead): void {
    this.rows.delete(key); // re-insert as newest
    this.rows.set(key, text);
    if (text !== null && head !== undefined) this.heads.set(key, { text, head });
    else this.heads.delete(key);
    if (this.rows.size > this.rowCacheSize) {
      const oldest = this.rows.keys().next().value!;
      this.rows.delete(oldest);
      this.heads.delete(oldest);
    }
  }

  /**
   * The cached row as a round stages a write over it (null: known absent; undefined: not cached).
   * From its head when the cache has one for this text: the value is then parsed only if read.
   */
  stagedRow(key: string): Row | null | undefined {
    const text = this.rows.get(key);
    if (text === undefined || text === null) return text;
    const h = this.heads.get(key);
    if (h === undefined || h.text !== text) return JSON.parse(text) as Row;
    const { version, seq, ix } = h.head;
    return {
      version,
      seq,
      ix,
      get value(): unknown {
        return (JSON.parse(text) as Row).value;
      },
    };
  }
}
