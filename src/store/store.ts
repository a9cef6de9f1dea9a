// The one store interface (architecture habit 7). Every adapter (memory for unit tests, LevelDB
// embedded default, PostgreSQL for several instances on one database) implements exactly this,
// and `test/store/store.contract.ts` runs the same suite, error codes included, against each.
//
// Two families of data:
//  1. Versioned records grouped by `kind` (runs, snapshots, background tasks, ...). Every write is a
//     compare-and-swap on `version`, so a stale writer (an owner whose lease was taken over) is
//     refused instead of overwriting newer state (fencing, docs/contract.md §6.1).
//  2. An append-only event log. Each appended event gets a cursor that increases monotonically and
//     is never reused; secondary indexes serve the telemetry filters without scanning.

import type { StoreChanges } from './change-feed.js';

export type RecordKind =
  | 'runs'
  | 'snapshots'
  | 'sessions'
  | 'budget_ledger'
  | 'outcomes'
  | 'bg_agents'
  | 'bg_tasks'
  | 'bg_schedule'
  | 'bg_runs'
  | 'bg_attempts'
  | 'bg_occurrences'
  | 'traces'
  /** Steer messages and interrupt requests of a run (src/runtime/run-inbox.ts). */
  | 'run_inbox'
  | 'meta'
  /** Idempotency-Key records (src/integrations/idempotency.ts). */
  | 'idempotency'
  /** Webhook outbox: one record per delivery (src/integrations/webhooks.ts). */
  | 'webhook_deliveries'
  /** Per-request webhook URLs, by run id. */
  | 'webhook_subs'
  /** Evaluations over past runs, and one record per evaluated run (src/runtime/evals/). */
  | 'evals'
  | 'eval_items';

/** Secondary index values of a record: index name -> value. Null/undefined means "not indexed". */
export type RecordIndexes = Record<string, string | null | undefined>;

export interface Versioned<T> {
  id: string;
  /** 1 on create, +1 on every update. */
  version: number;
  /** Creation order, assigned by the store; lists are ordered by it (oldest first). */
  seq: number;
  value: T;
}

export interface ListQuery {
  /** Only records whose index `name` currently has `value`. */
  index?: { name: string; value: string };
  /** Opaque cursor returned as `next_cursor` by the previous page. */
  cursor?: string | null;
  /** Page size; adapters cap it at 1000. Default 100. */
  limit?: number;
  /** Newest first instead of oldest first. */
  reverse?: boolean;
  /**
   * Instead of `index`: every record that has a value for index `sortedBy`, ordered by that value,
   * then by creation order (a queue by rank: the background runs' `queue_order`). Portable order
   * only for values of one length made of ASCII digits and letters (PostgreSQL compares text in
   * its collation). Cursors are sortedCursor()'s, in every adapter.
   */
  sortedBy?: string;
}

export interface Page<T> {
  items: Versioned<T>[];
  /** Null when there is nothing after this page. */
  next_cursor: string | null;
}

/** What `commit` takes: the ops, or a function giving them when the store takes the write. */
export type CommitOps = WriteOp[] | (() => WriteOp[]);

/**
 * The events of a `commitWithEvents`: a list, or a function giving it, called once right after
 * the ops (a function's, when the store takes the write), so a write not yet taken can still
 * gain events (RecordWriter folds a background run's completion into an agent run's final commit).
 */
export type CommitEvents = EventInput[] | (() => EventInput[]);

/** One operation of an atomic `commit`. */
export type WriteOp =
  | { op: 'create'; kind: RecordKind; id: string; value: unknown; indexes?: RecordIndexes }
  /** expectedVersion null = create-or-replace without a check (used only for caches, never for fenced state). */
  | { op: 'update'; kind: RecordKind; id: string; value: unknown; expectedVersion: number | null; indexes?: RecordIndexes }
  | { op: 'delete'; kind: RecordKind; id: string; expectedVersion?: number }
  | HoldersOp;

/** One holder: who, since when (ms), under which limit. */
export interface HolderEntry {
  run_id: string;
  since: number;
  limit?: number;
}

/**
 * An atomic edit of a record listing the holders of a few slots (src/store/holders-op.ts): no
 * version check; the commit fails with 'full' only when `add` would exceed the limit. Created with
 * its first holder, deleted with its last; unindexed. Its result in the commit's answer is null.
 */
export interface HoldersOp {
  op: 'holders';
  kind: RecordKind;
  id: string;
  /** Holders to let go (absent ones are ignored). Applied before `add`. */
  remove?: string[];
  /** A holder to add unless present: fails the commit ('full') when the record is at its limit. */
  add?: HolderEntry & { limit: number };
  /** Other fields of the record's value (kept from the stored one when absent). */
  fields?: Record<string, unknown>;
}

/**
 * Throws the StoreError a commit fails with when `op` does not fit the record as it stands (`cur`,
 * null when there is none): a create of one that exists, a checked update or a delete of one that
 * does not, a version other than the expected one. The in-process stores check every op with this.
 */
export function assertOpApplies(op: WriteOp, cur: { version: number } | null): void {
  // A holders op checks its limit instead (src/store/holders-op.ts holdersAsWrite).
  if (op.op === 'holders') return;
  if (op.op === 'create') {
    if (cur) throw new StoreError('conflict', `${op.kind} '${op.id}' already exists`);
    return;
  }
  // An unchecked update (expectedVersion null) creates or replaces whatever is there.
  if (op.op === 'update' && op.expectedVersion === null) return;
  if (!cur) throw new StoreError('not_found', `${op.kind} '${op.id}' was not found`);
  if (op.expectedVersion !== undefined && cur.version !== op.expectedVersion) {
    throw new StoreError('stale_version', `${op.kind} '${op.id}' is at version ${cur.version}, expected ${op.expectedVersion}`);
  }
}

/** Fields of the event log that have a secondary index. */
export const EVENT_INDEX_FIELDS = ['trace_id', 'run_id', 'session_id', 'task_id', 'event_type'] as const;
export type EventIndexField = (typeof EVENT_INDEX_FIELDS)[number];

/** What a caller appends: any JSON object; index values are read from these top-level fields. */
export interface EventInput {
  event_id: string;
  event_type: string;
  timestamp: string;
  trace_id?: string | null;
  run_id?: string | null;
  session_id?: string | null;
  task_id?: string | null;
  [key: string]: unknown;
}

export interface StoredEvent extends EventInput {
  /** Store cursor: a fixed-width decimal string, so string order == numeric order. */
  cursor: string;
}

export interface EventQuery {
  /** All filters must match (AND). Adapters walk the most selective index and check the rest. */
  filters?: Partial<Record<EventIndexField, string | string[]>>;
  /** Only events strictly after this cursor. */
  after?: string | null;
  /** Default 200, capped at 1000. */
  limit?: number;
}

export interface EventPage {
  events: StoredEvent[];
  /** Cursor of the last returned event when more may follow, else null. */
  next_cursor: string | null;
}

/** An EventPage whose events are their stored JSON text (what readEvents would return, serialised). */
export interface EventTextPage {
  events: string[];
  next_cursor: string | null;
}

export type StoreErrorCode =
  | 'not_found'
  | 'conflict' // create of an existing id
  | 'stale_version' // CAS failed: somebody wrote since you read
  | 'closed'
  | 'locked' // another process holds the data dir
  | 'unavailable' // the database does not answer (PostgreSQL: connection lost, database gone); transient
  | 'full'; // a `holders` op's add would exceed its limit (src/store/holders-op.ts)

export interface StoreHealth {
  ok: boolean;
  /** Why the last check failed (never holds credentials). */
  error?: string;
}

export class StoreError extends Error {
  constructor(
    readonly code: StoreErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'StoreError';
  }
}

export const isStoreError = (e: unknown, code?: StoreErrorCode): e is StoreError => e instanceof StoreError && (code === undefined || e.code === code);

/**
 * Where an adapter reports an error it catches and does not propagate: closing a pool or a
 * connection, a ROLLBACK or RESET after a failed migration, a failed prefetch, a change-feed
 * listener's fault. `site` is a stable dotted name (`store.pg.pool_end`). src/store may not import
 * telemetry, so the composition root passes reportSwallowed (src/main.ts, through openStore): one
 * warn line and agentd_swallowed_errors_total{site}. Without it the error is dropped.
 */
export type OnSwallowed = (site: string, err: unknown) => void;

/** A `.catch()` handler that reports the error to `hook` at `site` and resolves undefined. */
export const dropTo =
  (hook: OnSwallowed | undefined, site: string) =>
  (err: unknown): undefined => {
    hook?.(site, err);
    return undefined;
  };

/**
 * What an adapter can do beyond the interface. Runtime code asks these, never the adapter's name,
 * so a new adapter states its properties instead of being matched by name.
 */
export interface StoreCapabilities {
  /**
   * Several processes (instances) share this store: a record may change without this process
   * writing it, and a record a process holds may belong to another live process (PostgreSQL; a
   * memory store with an in-process change feed in tests). False: one process owns the data, so
   * whatever a dead process held at start-up is free.
   */
  readonly sharedByInstances: boolean;
  /**
   * Claims queued background runs in one statement, skipping rows another claimer holds
   * (PostgreSQL: FOR UPDATE SKIP LOCKED). Absent: BgRunRepo scans the `queue_order` index, which is
   * enough for a store one process owns.
   */
  readonly queueClaims?: QueueClaims;
  /**
   * commitWithEvents writes the commit and its events in one atomic write, in one round (every
   * adapter today). Absent: the events would follow in a later round, so a caller on a hot path
   * would rather commit and append the events behind it itself (the background run row's outbox
   * keeps them for a crash in between).
   */
  readonly atomicCommitEvents?: boolean;
  /**
   * The store itself hands a concurrency key's free slots to the key's queued runs, in admission
   * order across every instance, within the write that frees them, and tells their instances on
   * the change feed (PostgreSQL: src/store/migrations/006_flow_key_order.sql). Absent: the
   * instances' own queues take the slots (src/flow/concurrency.ts).
   */
  readonly ordersKeyWaiters?: boolean;
}

/** One claim pass of one claimer over the queued background runs (src/store/repos/bg-runs.ts). */
export interface QueueClaimQuery {
  /** At most this many rows. */
  limit: number;
  /** Now on the lease clock (epoch ms; src/lease-clock.ts): rows whose `internal.not_before` is later are not due, holds until then have lapsed. */
  now: number;
  /** Names the pass: its holds are released by it. */
  token: string;
  /** Returned rows are held for this pass until then (epoch ms, same clock). */
  holdUntil: number;
}

export interface QueueClaims {
  /**
   * Due queued `bg_runs` rows in queue order (index `queue_order`: higher priority first, then
   * oldest first), not held by another pass (or whose hold lapsed),
   * held for this one: two concurrent calls never return the same row. `nextDueAt`: the earliest
   * `not_before` of a queued row not due yet, when fewer than `limit` rows were due.
   */
  claimQueued(q: QueueClaimQuery): Promise<{ items: Versioned<unknown>[]; nextDueAt: number | null }>;
  /** Ends the pass's holds on these rows (those it did not claim stay queued for anyone). */
  release(token: string, ids: string[]): Promise<void>;
}

export interface Store {
  readonly adapter: 'memory' | 'level' | 'postgres';
  readonly capabilities: StoreCapabilities;
  /**
   * Optional change feed of a store several processes share (src/store/changes.ts): the
   * PostgreSQL adapter's LISTEN/NOTIFY. Absent on the embedded stores (one process each).
   */
  changes?: StoreChanges;
  open(): Promise<void>;
  close(): Promise<void>;
  isOpen(): boolean;

  getRecord<T>(kind: RecordKind, id: string): Promise<Versioned<T> | null>;
  getRecords<T>(kind: RecordKind, ids: string[]): Promise<Array<Versioned<T> | null>>;
  /** Throws StoreError('conflict') when the id exists. */
  createRecord<T>(kind: RecordKind, id: string, value: T, indexes?: RecordIndexes): Promise<Versioned<T>>;
  /**
   * Compare-and-swap: succeeds only when the stored version equals `expectedVersion`
   * (StoreError 'stale_version' otherwise, 'not_found' when missing). Replaces the index values
   * when `indexes` is given, else keeps the previous ones.
   */
  updateRecord<T>(kind: RecordKind, id: string, value: T, expectedVersion: number, indexes?: RecordIndexes): Promise<Versioned<T>>;
  /** 'not_found' when missing; 'stale_version' when expectedVersion is given and differs. */
  deleteRecord(kind: RecordKind, id: string, expectedVersion?: number): Promise<void>;
  listRecords<T>(kind: RecordKind, query?: ListQuery): Promise<Page<T>>;
  /** Count of a kind, or of one index value. Must not load record bodies. */
  countRecords(kind: RecordKind, index?: { name: string; value: string }): Promise<number>;
  /**
   * Atomic multi-record write: every check passes and every op is written, or nothing is
   * (the budget ledger reserves on several keys this way). Returns the written records
   * (deletes return null) in op order.
   *
   * `ops` may be a function: the store calls it once, when it takes the write (the LevelDB
   * adapter: when the group-commit round that holds it starts; the memory adapter: at once),
   * and writes what it returns; if it throws, this commit fails with that error. Commits are
   * taken in call order. A caller can so keep folding later changes into a write that has not
   * started yet (RecordWriter merges an actor's transitions this way).
   */
  commit(ops: CommitOps): Promise<Array<Versioned<unknown> | null>>;
  /**
   * A commit that also appends `events` (in order, cursors as appendEvents gives them): the events
   * are stored only if every op applies, never without the records. Every adapter writes both in
   * the same atomic write (one group-commit round; PostgreSQL: one statement and transaction,
   * src/store/migrations/005_commit_events.sql): a crash leaves both or neither. Rejects when the
   * commit fails (nothing written). Durable when the promise resolves. `events` may be a function
   * (CommitEvents): called once, right after the ops are taken.
   */
  commitWithEvents(ops: CommitOps, events: CommitEvents): Promise<{ records: Array<Versioned<unknown> | null>; events: StoredEvent[] }>;
  /**
   * Optional hint: these records are about to be written, with these index values. An adapter
   * may read what that write will need now, off the caller's path (LevelStore does). Never
   * changes what any operation returns.
   *
   * `fresh`: the caller generated this id just now (newId: 126 random bits), so no row exists, and
   * no record holds the values of the index names listed (they are as new as the id: a run's new
   * session id). An adapter may take that as read instead of reading it.
   */
  prefetch?(records: Array<{ kind: RecordKind; id: string; indexes?: RecordIndexes; fresh?: string[] }>): void;

  /**
   * Optional: whether the backing database answers (PostgreSQL: the last query or background
   * probe succeeded). Synchronous, for /ready. An adapter without it is healthy while open.
   */
  healthStatus?(): StoreHealth;

  /**
   * Optional: the time on the database server's clock (ms since the epoch), for a store several
   * instances share. Leases are written and judged on it (src/lease-clock.ts, docs/architecture.md
   * "Which instance owns a run"), so instances whose clocks disagree still agree on who owns a run.
   * An embedded store (one process) has no clock of its own: the process's clock is the store's.
   */
  serverTimeMs?(): Promise<number>;

  /** Appends in order; the returned events carry their cursors. Durable when the promise resolves. */
  appendEvents(events: EventInput[]): Promise<StoredEvent[]>;
  readEvents(query?: EventQuery): Promise<EventPage>;
  /** readEvents, each event as its JSON text (`cursor` included): lets GET /telemetry/events skip parse + stringify. */
  readEventsJson(query?: EventQuery): Promise<EventTextPage>;
  getEvent(cursor: string): Promise<StoredEvent | null>;
  /** Cursor of the newest event, or null on an empty log. Must not scan the log. */
  lastEventCursor(): Promise<string | null>;
  /** Retention: deletes events whose timestamp is before `isoTime`, index entries included. Returns how many. */
  deleteEventsBefore(isoTime: string): Promise<number>;
}

/** Fixed-width cursor encoding shared by adapters: 16 digits keep lexical == numeric order. */
// Zero runs by length, made once: padStart built a filler string for every call (a cursor is encoded
// for every appended event, and its allocations were a visible share of the ingest path's).
const ZEROS = Array.from({ length: 17 }, (_, k) => '0'.repeat(k));
export const encodeCursor = (n: number): string => {
  const s = String(n);
  return s.length < 16 ? ZEROS[16 - s.length] + s : s;
};
/** The cursor of a `sortedBy` list: the seq of the entry (16 digits), then its index value. */
export const sortedCursor = (value: string, seq: number): string => encodeCursor(seq) + value;
export const decodeSortedCursor = (c: string): { value: string; seq: number } => ({ seq: decodeCursor(c.slice(0, 16)), value: c.slice(16) });
export const decodeCursor = (c: string): number => {
  const n = Number(c);
  if (!/^\d{1,16}$/.test(c) || !Number.isSafeInteger(n)) throw new StoreError('not_found', `bad cursor '${c}'`);
  return n;
};
