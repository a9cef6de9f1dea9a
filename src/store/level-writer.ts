// The LevelDB adapter's write queue: every write of the process goes through it (see "Why writes
// are serialised" in level.ts). Rounds group-commit the queued jobs into one atomic batch; the
// row and counter caches hold exactly what is on disk for what they know, so a commit costs one
// LevelDB round-trip; prefetches read ahead what a coming write will need.
import {
  COUNT_KEY_START,
  META_CURSOR,
  META_SEQ,
  RECORD_KEY_START,
  indexCountKey,
  kindCountKey,
  parse,
  recordKey,
  writeBatch,
  type BatchOp,
  type Db,
  type Row,
} from './level-keys.js';
import { LevelCache } from './level-cache.js';
import { coalesceRound } from './level-coalesce.js';
import { stageRecordOps } from './level-record-ops.js';
import { newRoundPostings, stageEvents, stagePostings, type RoundPostings } from './level-events.js';
import type { CommitEvents, CommitOps, EventInput, OnSwallowed, RecordIndexes, StoredEvent, Versioned, WriteOp } from './store.js';

export interface RecordJob {
  type: 'records';
  /** A function is called when the round takes the job (Store.commit). */
  ops: CommitOps;
  /** Store.commitWithEvents: appended in the same batch, only if every op applies (a function: called right after `ops`). */
  events?: CommitEvents;
  /** The events as stored (with their cursors), called right before `resolve`. */
  stored?(events: StoredEvent[]): void;
  resolve(v: Array<Versioned<unknown> | null>): void;
  reject(e: unknown): void;
}
export interface EventJob {
  type: 'events';
  events: EventInput[];
  resolve(v: StoredEvent[]): void;
  reject(e: unknown): void;
}
/**
 * Resolves, once every job queued before it is written, with the last cursor handed out to those
 * jobs: retention covers exactly the events appended by calls made before it.
 */
export interface BarrierJob {
  type: 'barrier';
  resolve(lastCursor: number): void;
  reject(e: unknown): void;
}
export type Job = RecordJob | EventJob | BarrierJob;

const NO_INDEXES: Readonly<Record<string, string>> = Object.freeze({});

/** Soft cap on batch operations per group-commit round (a single job is never split). */
const ROUND_OPS = 20_000;

/**
 * A queue of at least this many jobs, whose first half are all appends, met while no round is being
 * written is split in two rounds (see flush): each half still shares one write among 64 or more
 * calls, and the halves' staging and writing overlap.
 */
const SPLIT_JOBS = 128;

/** A round's write failed with this. */
interface WriteFailure {
  failed: unknown;
}

/** A round handed to LevelDB. */
interface InFlight {
  /** Settles when the round has been written and answered (or failed): never rejects. */
  done: Promise<WriteFailure | undefined>;
  landed: boolean;
  /** Once landed: how its write failed, if it did. */
  failure: WriteFailure | undefined;
}

/** A round staged and waiting for its write (see LevelWriter.flush). */
interface StagedRound {
  jobs: Job[];
  batch: BatchOp[];
  /** Answers the callers, in job order, once the batch is written. */
  settle: Array<() => void>;
}

/** Appends staged while a round is being written, to be written right after it (LevelWriter.flush). */
interface OpenRound extends StagedRound {
  postings: RoundPostings;
  /** The last cursor handed out before it. */
  cursorBefore: number;
  /** Its batch operations as the round cap counts them (ROUND_OPS). */
  ops: number;
}

/** A job's batch operations as the round cap counts them (a guess made before staging). */
const jobOps = (j: Job): number =>
  j.type === 'events'
    ? j.events.length * 6
    : j.type === 'records'
      ? (Array.isArray(j.ops) ? j.ops.length : 2) * 8 + (j.events === undefined ? 0 : Array.isArray(j.events) ? j.events.length : 1) * 6
      : 0;

export interface LevelWriterOptions {
  sync: boolean;
  rowCacheSize: number;
  /** Last record seq / event cursor ever assigned, as read at open (m\0seq, m\0cursor). */
  lastSeq: number;
  lastCursor: number;
  /** A failed prefetch (the write reads the keys itself then): see OnSwallowed. */
  onSwallowed?: OnSwallowed;
}

export class LevelWriter {
  private lastSeq: number;
  private lastCursor: number;
  private queue: Job[] = [];
  private flushing = false;
  /** Set while the write loop, with a round being written and an empty queue, waits: a job wakes it up. */
  private wake: (() => void) | null = null;
  /** Group-commit rounds written with fsync (diagnostics: LevelStore.stats). */
  syncedRounds = 0;
  /** The row and counter caches and the reads issued ahead of writes (src/store/level-cache.ts). */
  readonly cache: LevelCache;
  constructor(
    private readonly db: Db,
    private readonly opts: LevelWriterOptions,
  ) {
    this.lastSeq = opts.lastSeq;
    this.lastCursor = opts.lastCursor;
    this.cache = new LevelCache(opts.rowCacheSize, opts.onSwallowed);
  }

  enqueue(job: Job): void {
    this.queue.push(job);
    if (!this.flushing) {
      this.flushing = true;
      void this.flush();
    } else if (this.wake) {
      this.wake();
      this.wake = null;
    }
  }

  /**
   * Each round starts on a setImmediate, not at once nor on a microtask: everything the process
   * does in the current turn of the event loop (a run's machine taking several transitions whose
   * promise actors resolve within microtasks, the continuations of the jobs the previous round
   * just acknowledged) joins the round. A short run's final record, snapshot, events and session
   * history then go in one batch instead of one round each; the cost is one event-loop turn
   * (tens of microseconds) before a write starts.
   *
   * Rounds are pipelined, two deep: while round N's batch is being written (LevelDB's work, on a
   * thread of libuv's pool), the appends that come are staged on the main thread (cursors,
   * postings, JSON) into round N+1 as they come, each turn (the open round), and N+1 is handed to
   * LevelDB in the turn N lands, so LevelDB gets the batches one at a time and in order, and N+1
   * still holds everything that queued during N's write, as before. Commits are not staged while a
   * write is in flight (their compare-and-swap checks read the rows and counters the caches hold,
   * which learn a batch only once it is on disk): a commit at the head of the queue, and whatever
   * queued behind it, is staged when N lands and joins the open round then. If N's write fails,
   * the open round (staged on top of it, its callers not answered) fails whole with the same
   * error: nothing of it is written, the caches learn nothing from it, its cursor numbers, like
   * N's, are skipped (never reused); the rounds after go on.
   *
   * Callers that each wait for their write before sending the next (1,000 concurrent single-event
   * appends) all come back when a round lands and would form every round together, so staging and
   * writing would alternate; a round started while nothing is being written therefore takes only
   * half of a long queue of appends (SPLIT_JOBS), and the other half is staged while the first half
   * is written: from then on two cohorts of callers take turns.
   */
  private async flush(): Promise<void> {
    // The round being written, and the appends staged to be written after it.
    let writing: InFlight | null = null;
    let open: OpenRound | null = null;
    /** `writing` landed: the open round, with the commits queued behind it, is written next. */
    const landed = async (): Promise<void> => {
      const before = writing!.failure;
      writing = null;
      if (open === null) return; // what is queued is taken as by an idle queue
      const round = open;
      open = null;
      if (before === undefined && this.queue.length > 0 && this.queue[0].type === 'records') {
        const staged = await this.stage(this.take(this.queue.length));
        if (staged !== null) {
          for (const j of staged.jobs) round.jobs.push(j);
          for (const op of staged.batch) round.batch.push(op); // no spread: rounds can hold 20k ops
          for (const f of staged.settle) round.settle.push(f);
        }
      }
      writing = this.issue(this.seal(round), before);
    };
    try {
      for (;;) {
        await new Promise<void>((resolve) => setImmediate(resolve));
        if (writing?.landed) await landed();
        if (this.queue.length === 0) {
          if (writing === null) break;
          // Wait for the write to land (its callers' next jobs come then), or for a job.
          await Promise.race([writing.done, new Promise<void>((resolve) => (this.wake = resolve))]);
          this.wake = null;
          if (writing.landed) await landed();
          continue;
        }
        if (writing === null) {
          // Idle. With a long queue of appends: half now, the other half staged while this half is written.
          const half = this.queue.length >> 1;
          const staged = await this.stage(this.take(this.queue.length >= SPLIT_JOBS && this.appendsFirst(half) ? half : this.queue.length));
          if (staged !== null) writing = this.issue(staged, undefined);
          continue;
        }
        if (this.queue[0].type !== 'records' && (open === null || open.ops < ROUND_OPS)) {
          // Appends (and barriers) while a write is in flight: staged into the round written after it.
          open ??= this.openRound();
          let n = 0;
          for (; n < this.queue.length && (n === 0 || open.ops < ROUND_OPS); n++) {
            const j = this.queue[n];
            if (j.type === 'records') break;
            this.stageInto(open, j);
          }
          this.queue.splice(0, n);
          continue;
        }
        // A commit (or a full open round): after the landing.
        await writing.done;
        await landed();
      }
    } finally {
      this.flushing = false;
    }
  }

  /** Takes up to `cap` jobs off the queue for one round (at least one; ROUND_OPS bounds it). */
  private take(cap: number): Job[] {
    let ops = 0;
    let n = 0;
    while (n < cap && (n === 0 || ops < ROUND_OPS)) ops += jobOps(this.queue[n++]);
    return this.queue.splice(0, n);
  }

  /** Whether the first `n` queued jobs are all event appends. */
  private appendsFirst(n: number): boolean {
    for (let i = 0; i < n; i++) if (this.queue[i].type !== 'events') return false;
    return true;
  }

  /** Hands `round` to LevelDB now, in this turn (`before`: the round ahead of it failed so). */
  private issue(round: StagedRound, before: WriteFailure | undefined): InFlight {
    const f: InFlight = { landed: false, failure: undefined, done: this.land(round, before).then((r) => ((f.landed = true), (f.failure = r), r)) };
    return f;
  }

  private openRound(): OpenRound {
    return { jobs: [], batch: [], settle: [], postings: newRoundPostings(), cursorBefore: this.lastCursor, ops: 0 };
  }

  /** Stages an append or a barrier into the open round, as stage() would. */
  private stageInto(open: OpenRound, job: EventJob | BarrierJob): void {
    open.jobs.push(job);
    open.ops += jobOps(job);
    if (job.type === 'barrier') {
      const last = this.lastCursor;
      open.settle.push(() => job.resolve(last));
      return;
    }
    try {
      const stored = stageEvents(job.events, this.lastCursor + 1, open.batch, open.postings);
      this.lastCursor += stored.length;
      open.settle.push(() => job.resolve(stored));
    } catch (e) {
      open.settle.push(() => job.reject(e)); // e.g. a value JSON cannot encode
    }
  }

  /** The open round's batch completed: its postings and the last cursor it handed out. */
  private seal(open: OpenRound): StagedRound {
    stagePostings(open.postings, open.batch);
    if (this.lastCursor !== open.cursorBefore) open.batch.push({ type: 'put', key: META_CURSOR, value: String(this.lastCursor) });
    return open;
  }

  /**
   * Stages a round: loads what its commits need, applies its jobs in order and builds its batch.
   * Null when it failed before any job was staged (a disk read): its jobs are rejected then.
   */
  private async stage(jobs: Job[]): Promise<StagedRound | null> {
    const db = this.db; // open: close() waits for in-flight callers, which include these jobs
    const settle: Array<() => void> = [];
    // 0. Jobs that gave a function get their ops now, in queue order (Store.commit).
    const opsOf = new Map<RecordJob, WriteOp[]>();
    const eventsOf = new Map<RecordJob, EventInput[]>();
    const failed = new Map<RecordJob, unknown>();
    for (const j of jobs) {
      if (j.type !== 'records') continue;
      try {
        opsOf.set(j, typeof j.ops === 'function' ? j.ops() : j.ops);
        if (j.events) eventsOf.set(j, typeof j.events === 'function' ? j.events() : j.events);
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
      // Every record op of the round and its row's key, in order (stageRecordOps reads them here).
      const recOps: WriteOp[] = [];
      const opKeys: string[] = [];
      for (const j of jobs) {
        if (j.type !== 'records') continue;
        for (const op of opsOf.get(j)!) {
          const key = recordKey(op.kind, op.id);
          recOps.push(op);
          opKeys.push(key);
          recKeys.add(key);
        }
      }
      const rows = new Map<string, Row | null>();
      const counters = new Map<string, number>();
      if (recKeys.size) {
        // Take the round's rows from the cache and the disk directly. Never read them back from the
        // cache after filling it: caching the misses may evict this very round's hits.
        const missing: string[] = [];
        for (const k of recKeys) {
          const row = this.cache.stagedRow(k);
          if (row === undefined) missing.push(k);
          else rows.set(k, row);
        }
        // The counters the round's ops can move: each op's kind's, and those of the index values
        // it changes against the rows known so far (stageRecordOps moves no other: a value an op
        // keeps keeps its count, so a run's row rewritten with five of its eight values unchanged
        // loads three pairs, not eight). A row not loaded yet counts all the op's new values; once
        // it is (the second call), the old ones that change. Several ops on one record in a round:
        // a value one of them moves differs from the loaded row's, or is the loaded row's own and
        // then differs from some op's new value, so it is counted either way.
        // (Loops with `in` and no copies: this runs for every op of every round.)
        const counterKeys = (): Set<string> => {
          const ckeys = new Set<string>();
          for (let i = 0; i < recOps.length; i++) {
            const op = recOps[i];
            const key = opKeys[i];
            ckeys.add(kindCountKey(op.kind));
            const known = rows.has(key);
            const oldIx = rows.get(key)?.ix ?? NO_INDEXES;
            // An update naming no indexes keeps the row's (it moves none); a holders op may delete the row (all of its old values).
            if (op.op === 'update' && !op.indexes) continue;
            const newIx: RecordIndexes = op.op === 'create' || op.op === 'update' ? (op.indexes ?? NO_INDEXES) : NO_INDEXES;
            for (const name in oldIx) if (newIx[name] !== oldIx[name]) ckeys.add(indexCountKey(op.kind, name, oldIx[name]));
            for (const name in newIx) {
              const v = newIx[name];
              if (typeof v === 'string' && (!known || oldIx[name] !== v)) ckeys.add(indexCountKey(op.kind, name, v));
            }
          }
          return ckeys;
        };
        const uncachedCounters = (ckeys: Set<string>): string[] => {
          const ck: string[] = [];
          for (const k of ckeys) {
            if (counters.has(k)) continue;
            const n = this.cache.counters.get(k);
            if (n === undefined) ck.push(k);
            else counters.set(k, n);
          }
          return ck;
        };
        const setCounters = (ck: string[], texts: Array<string | undefined>) =>
          ck.forEach((k, i) => {
            const n = parse<number>(texts[i]) ?? 0;
            counters.set(k, n);
            this.cache.counters.set(k, n);
          });
        let ck = uncachedCounters(counterKeys());
        if (missing.length || ck.length) {
          const loaded = await this.cache.readKeys(db, [...missing, ...ck]);
          missing.forEach((k, i) => {
            const text = loaded[i] ?? null;
            rows.set(k, text === null ? null : (JSON.parse(text) as Row));
            this.cache.cacheRow(k, text);
          });
          setCounters(ck, loaded.slice(missing.length));
        }
        if (missing.length) {
          ck = uncachedCounters(counterKeys());
          if (ck.length) setCounters(ck, await this.cache.readKeys(db, ck));
        }
      }

      // 2. Apply the jobs in order. Each stages its changes; they join the round only if all of
      //    the job's checks pass.
      const batch: BatchOp[] = [];
      // The counters the round moves, with their values before it (one moved back is not written).
      const dirtyCounters = new Map<string, number>();
      const seqBefore = this.lastSeq;
      const cursorBefore = this.lastCursor;
      const postings = newRoundPostings(); // one posting per indexed value per round
      let keysAt = 0; // the first of the job's keys in opKeys
      for (const job of jobs) {
        if (job.type === 'barrier') {
          const last = this.lastCursor;
          settle.push(() => job.resolve(last));
          continue;
        }
        if (job.type === 'events') {
          try {
            const stored = stageEvents(job.events, this.lastCursor + 1, batch, postings);
            this.lastCursor += stored.length;
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
        const jobWrites = opsOf.get(job)!;
        const from = keysAt;
        keysAt += jobWrites.length;
        try {
          const staged = stageRecordOps(jobWrites, opKeys, from, rows, counters, this.lastSeq);
          // The job's events join the batch only now that every op applies; stageEvents throws
          // (a value JSON cannot encode) before it stages anything, so the job fails whole.
          const jobEvents = eventsOf.get(job);
          if (jobEvents?.length) {
            const stored = stageEvents(jobEvents, this.lastCursor + 1, batch, postings);
            this.lastCursor += stored.length;
            settle.push(() => job.stored?.(stored));
          }
          this.lastSeq = staged.seq;
          for (const op of staged.batch) batch.push(op); // no spread: rounds can hold 20k ops
          // (forEach: no entry pair per row and counter of every job.)
          staged.rows.forEach((v, k) => rows.set(k, v));
          staged.counters.forEach((v, k) => {
            if (!dirtyCounters.has(k)) dirtyCounters.set(k, counters.get(k)!);
            counters.set(k, v);
          });
          settle.push(() => job.resolve(staged.results));
        } catch (e) {
          settle.push(() => job.reject(e));
        }
      }
      dirtyCounters.forEach((was, k) => {
        const v = counters.get(k)!;
        if (v === was) return; // e.g. an index entry put and deleted in this round
        batch.push(v > 0 ? { type: 'put', key: k, value: String(v) } : { type: 'del', key: k });
      });
      if (this.lastSeq !== seqBefore) batch.push({ type: 'put', key: META_SEQ, value: String(this.lastSeq) });
      stagePostings(postings, batch);
      if (this.lastCursor !== cursorBefore) batch.push({ type: 'put', key: META_CURSOR, value: String(this.lastCursor) });

      return { jobs, batch: coalesceRound(batch, recOps.length, recKeys.size), settle };
    } catch (e) {
      // Nothing of this round was staged. Numbers handed out are simply skipped (never reused).
      for (const j of jobs) j.reject(e);
      return null;
    }
  }

  /**
   * Writes a staged round, whose predecessor has landed (`before`: that one's write failed); then
   * its callers hear back. Resolves with the write's failure ({ failed }) when its own write
   * failed, else undefined (also when it failed because its predecessor did): never rejects. The
   * batch is handed to LevelDB before the first await.
   */
  private async land(round: StagedRound, before: WriteFailure | undefined): Promise<WriteFailure | undefined> {
    const { jobs, batch, settle } = round;
    if (before !== undefined) {
      // Staged on a batch that was never written: it fails whole, and teaches the caches nothing.
      for (const j of jobs) j.reject(before.failed);
      return undefined;
    }
    try {
      // One atomic batch; only then does anybody hear back.
      if (batch.length) {
        await writeBatch(this.db, batch, this.opts.sync);
        this.cache.writesDone++;
        if (this.opts.sync) this.syncedRounds++;
      }
      this.cache.dropStalePrefetches(batch);
      // On disk now: the caches may learn it.
      for (const op of batch) {
        if (op.key.startsWith(RECORD_KEY_START)) this.cache.cacheRow(op.key, op.type === 'put' ? op.value : null, op.type === 'put' ? op.head : undefined);
        else if (op.key.startsWith(COUNT_KEY_START)) this.cache.counters.set(op.key, op.type === 'put' ? Number(op.value) : 0);
        else continue;
        if (op.type === 'put') this.cache.absent.learn(op.key); // (src/store/level-absent.ts)
      }
      if (this.cache.counters.size > 200_000) this.cache.counters.clear();
    } catch (e) {
      // Nothing of this round was written. Numbers handed out are simply skipped (never reused).
      for (const j of jobs) j.reject(e);
      return { failed: e };
    }
    for (const s of settle) s();
    return undefined;
  }
}
