import {
  isStoreError,
  type EventInput,
  type RecordIndexes,
  type RecordKind,
  type Store,
  type StoredEvent,
  type Versioned,
  type WriteOp,
} from '../store/store.js';

/** Raised to the owner when a write names a version that is no longer current: someone else owns the record now. */
export class FencedError extends Error {
  constructor(
    readonly kind: RecordKind,
    readonly id: string,
  ) {
    super(`${kind}/${id} was written by another owner; this owner is fenced off`);
    this.name = 'FencedError';
  }
}

interface Waiter<T> {
  resolve: (v: Versioned<T>) => void;
  reject: (e: unknown) => void;
}

/**
 * What a write carries besides its own record (Store.commitWithEvents, on a store that writes them
 * atomically): events, and perhaps another writer's ops, stored only if every op of the write
 * applies, in the same atomic write. `stored` hears of the events with their cursors before the
 * write's callers do (and is called, with none, when only ops were carried).
 */
export interface CarriedEvents {
  events: EventInput[];
  /**
   * Another writer's ops that ride in this write, all or nothing with it: a background run's end
   * or park in its agent run's final commit (`CarriedWrite`).
   */
  ops?: WriteOp[];
  /**
   * The carrying write may go without this (with `ops`, on a store other instances share): when it
   * is refused (a CAS or a create missed), the refusal may be these ops', not the carrying
   * record's, so the write is tried once more without them (`failed` hears of it); a second
   * refusal is the record's own (fenced, as any). Without it a refusal fails both.
   */
  optional?: boolean;
  stored(events: StoredEvent[]): void;
  /** The carrying write was not written with this (its events and ops were not stored). */
  failed?(err?: unknown): void;
  /**
   * Asked when a write that takes this is made and has not gone to the store (`write`: a new
   * write, or the delayed creating one, the constructor's `delayMs`): a promise to hand it to the
   * store only once it resolves, so it can share a store round with another write (the next
   * background run's claim, src/background/write-join.ts), or null to send it now. A delayed
   * creating write still goes at its time at the latest.
   */
  hold?(write: 'new' | 'creating'): Promise<void> | null;
}

/**
 * A source of events that ride in whatever write of a RecordWriter the store takes next (a run's
 * telemetry, src/runtime/run-events.ts): asked when the store takes each write, so an event pushed
 * while a write waits for the store is stored in that write instead of an append of its own.
 */
export interface EventRider {
  /** The events to carry in the write the store is taking now, or null. */
  take(): CarriedEvents | null;
  /** A write failed before it could ask take(): whatever waits to ride goes on its own. */
  failed(): void;
}

/**
 * A write one writer hands to another writer's commit to carry: a background run's end or park in
 * its agent run's final commit (src/background/run-host.ts `RunHosts.foldInto`, asked through
 * `RunService.foldFinal`), or its RESUME / CANCEL in a decision's commit (run-decisions.ts), so
 * both are one atomic write. Its ops and events join the commit, which tells it how it went:
 * `stored` once it is durable with them, `failed` when it was not written with them.
 */
export type CarriedWrite = CarriedEvents & { ops: WriteOp[] };

/** Store refusals of a commit's ops (nothing was written): a CAS or a create missed, or the record went. */
const isOpsRefusal = (err: unknown): boolean => isStoreError(err, 'stale_version') || isStoreError(err, 'conflict') || isStoreError(err, 'not_found');

/** A write handed to the store and not yet taken by it: later updates fold into it. */
interface OpenWrite<T> {
  value: T;
  extra: Map<string, WriteOp>;
  carried: CarriedEvents[];
  waiters: Waiter<T>[];
}

/**
 * One serial writer per actor (xstate examples/mongodb-persisted-state TaskQueue, never
 * fire-and-forget). Every write is a compare-and-swap on the version the record has once the
 * writer's earlier writes are in, so once another process has taken the record over (orphan
 * sweep), our next write is refused and the writer goes `fenced`: the owner stops its actor
 * instead of clobbering newer state.
 *
 * Mutations apply at once, in call order, to the newest value (`value`). Each write is handed to
 * the store at once, as a commit whose ops are a function (Store.commit): until the store takes
 * it, later updates fold into it (the newest value, only the newest extra op of each kind/id), so
 * an actor's burst of transitions is one commit. Writes are pipelined: a new write does not wait
 * for the one in flight (the store takes commits in order and names the version it will have),
 * so a run's last transition joins the very next store round. Each caller's promise resolves
 * only when its mutation is durable.
 */
export class RecordWriter<T> {
  /**
   * Set when the writer was made with `create`: its first write creates the record (with the
   * create's extra ops, all-or-nothing), and resolves once that is durable. Updates made before
   * the store takes that write fold into it, so a run that gets far within one turn of the event
   * loop is created already in its later state.
   */
  readonly created: Promise<Versioned<T>> | null = null;
  private creating: { extra: WriteOp[]; beforeIssue?: () => void; replaces?: number } | null = null;
  /** The create's `after`: settled (null once it resolved), or the refusal that fences this writer off. */
  private after: { pending: Promise<unknown> | null; refused: boolean } | null = null;
  private head: T;
  /** The version the record has once every write the store has taken is in. */
  private takenVersion: number;
  private open: OpenWrite<T> | null = null;
  private createFailed: unknown = null;
  /** Writes handed to the store and not settled (drain waits for them). */
  private inflight: Array<Promise<unknown>> = [];
  private fenced = false;
  /** A write not handed to the store yet: a creating write (create.delayMs), or one a carried write holds (CarriedEvents.hold). */
  private deferredWrite: { timer: NodeJS.Timeout | null; issue: () => void } | null = null;
  /** A carried write holds the open write back (CarriedEvents.hold): flush() must not send it early. */
  private held = false;
  /** The open write, waiting for the create's `after` before it goes to the store. */
  private gated: OpenWrite<T> | null = null;
  /** Events that ride in this writer's writes (only on a store with capabilities.atomicCommitEvents). */
  rider: EventRider | null = null;

  constructor(
    private readonly store: Store,
    readonly kind: RecordKind,
    readonly id: string,
    private current: Versioned<T>,
    private readonly indexesOf: (value: T) => RecordIndexes,
    private readonly onFenced: (err: FencedError) => void = () => {},
    /**
     * Create the record (`current.value`, version unused) instead of updating an existing one.
     * `delayMs`: hand the creating write to the store only after this long (or at flush(), or
     * drain()), so a record that reaches its end meanwhile is created already ended, in one store
     * round instead of two. Until then nothing of it is durable. `replaces`: the record exists
     * already at this version (a run that waited `queued`, docs/contract.md §3.4) and the first
     * write is its compare-and-set update instead of a create (a cancel meanwhile fences it off).
     * `after`: the creating write goes to the store only once this resolves (updates fold into it
     * meanwhile); when it rejects, nothing is written and the writer is fenced off (StartOptions.after).
     */
    create?: { extra: WriteOp[]; delayMs?: number; beforeIssue?: () => void; replaces?: number; after?: Promise<unknown> },
  ) {
    this.head = current.value;
    this.takenVersion = current.version;
    if (create?.after) {
      const after = { pending: create.after as Promise<unknown> | null, refused: false };
      this.after = after;
      create.after.then(
        () => (after.pending = null),
        () => ((after.pending = null), (after.refused = true)),
      );
    }
    if (create) {
      this.creating = create;
      const open = this.openWrite(create.delayMs ?? 0);
      this.created = new Promise<Versioned<T>>((resolve, reject) => open.waiters.push({ resolve, reject }));
      // Nobody may await `created` (a caller that fails early); its failure reaches them through update().
      // Safe to drop here: the same failure rejects update() for whoever writes next.
      this.created.catch(() => undefined);
    }
  }

  /** The newest value: every mutation so far applied, durable or on its way. */
  get value(): T {
    return this.head;
  }

  /** The version of the last durable write. */
  get version(): number {
    return this.current.version;
  }

  get isFenced(): boolean {
    return this.fenced;
  }

  /**
   * Queues a mutation (and extra ops computed from the new value, e.g. the snapshot).
   * `beforeCommit` runs with the new value right after the mutation is folded into a write the
   * store has queued: a write it issues there lands in the same store round or the next, as its
   * own job (it may fail without failing, or fencing, this one).
   */
  update(
    mutate: (value: T) => T,
    extra: (value: T) => WriteOp[] = () => [],
    beforeCommit?: (value: T) => void,
    /** Events the write carries (only on a store with capabilities.atomicCommitEvents; see CarriedEvents). */
    carry?: () => CarriedEvents | null,
  ): Promise<Versioned<T>> {
    if (this.fenced) return Promise.reject(new FencedError(this.kind, this.id));
    let value: T;
    let ops: WriteOp[];
    let carried: CarriedEvents | null;
    try {
      value = mutate(this.head);
      ops = extra(value);
      carried = carry?.() ?? null;
      if (carried && this.store.capabilities.atomicCommitEvents !== true)
        // eslint-disable-next-line no-restricted-syntax -- an invariant: only the stores with atomicCommitEvents are given events to carry
        throw new Error('events can ride in a record write only on a store that writes them atomically');
    } catch (err) {
      return Promise.reject(err);
    }
    this.head = value;
    // A new write is filled before it is handed to the store: a store that takes it at once (the
    // memory store calls the ops function inside commit) must see this update's extra ops too.
    const fresh = this.open === null;
    const open = this.open ?? this.openWrite(0, false);
    open.value = value;
    for (const op of ops) open.extra.set(`${op.kind}/${op.id}`, op);
    if (carried) open.carried.push(carried);
    const done = new Promise<Versioned<T>>((resolve, reject) => open.waiters.push({ resolve, reject }));
    // A write not handed to the store yet (this new one, or a delayed creating one) may wait as
    // long as what it carries asks, to share another write's store round.
    const waiting = this.deferredWrite !== null || this.gated === open;
    const holding = (fresh || waiting) && !this.held ? (carried?.hold?.(fresh ? 'new' : 'creating') ?? null) : null;
    if (holding) {
      this.held = true;
      const go = () => {
        this.held = false;
        this.flush();
      };
      void holding.then(go, go);
      // This new write held back: what beforeCommit issues waits with it, to share its round.
      if (fresh)
        this.deferredWrite = {
          timer: null,
          issue: () => {
            this.issue(open);
            beforeCommit?.(value);
          },
        };
      else beforeCommit?.(value);
      return done;
    }
    if (fresh) this.issue(open);
    beforeCommit?.(value);
    return done;
  }

  /** The open write waits for what it carries (CarriedEvents.hold): it is not to be flushed now. */
  get holding(): boolean {
    return this.held;
  }

  /** A write is open: made (perhaps handed to the store) but not taken by the store yet, so updates still fold into it. */
  get hasOpenWrite(): boolean {
    return this.open !== null;
  }

  /** A delayed creating write (see the constructor) has not been handed to the store yet. */
  get deferred(): boolean {
    return this.deferredWrite !== null;
  }

  /** Hands a delayed creating write (see the constructor) to the store now. */
  flush(): void {
    const d = this.deferredWrite;
    if (!d) return;
    this.deferredWrite = null;
    if (d.timer) clearTimeout(d.timer);
    d.issue();
  }

  /**
   * Opens the next write now, handed to the store after `ms` (or at flush(), or drain()): the
   * updates and events that follow fold into it, as into a delayed creating write. A keyed run whose
   * creating commit had to be stored before it ran (src/runtime/run-start.ts) so writes the rest of
   * a short run in one commit, not two, and its first events ride in it rather than alone.
   */
  foldNext(ms: number): void {
    if (ms > 0 && !this.fenced && this.open === null && this.deferredWrite === null) this.openWrite(ms);
  }

  /** Resolves when everything queued so far is durable (or failed). */
  async drain(): Promise<void> {
    this.flush();
    while (this.inflight.length > 0) await Promise.allSettled(this.inflight);
  }

  /** `issueNow` false: the caller fills the write, then issues it. */
  private openWrite(delayMs = 0, issueNow = true): OpenWrite<T> {
    const open: OpenWrite<T> = { value: this.head, extra: new Map(), carried: [], waiters: [] };
    this.open = open;
    if (delayMs > 0) {
      // Updates fold into `open` meanwhile (it stays this.open until the store takes it).
      const before = this.creating?.beforeIssue;
      this.deferredWrite = {
        // Held by what it carries (CarriedEvents.hold: an end waiting for the next claim, which
        // bounds that wait itself, write-join.ts): it goes when that lets go, not at this bound.
        timer: setTimeout(() => this.held || this.flush(), delayMs),
        issue: () => {
          before?.();
          this.issue(open);
        },
      };
    } else if (issueNow) this.issue(open);
    return open;
  }

  /**
   * Resolves once this writer may write (at once unless its creating write waits for its `after`);
   * rejects with FencedError when what it waited for was refused. Writes a run makes outside its own
   * record (a budget reservation: src/runtime/run-effects.ts reserve) wait here, so a run fenced off
   * before its first write leaves nothing behind (a hold it made would never be settled: no end of
   * it is ever written).
   */
  async mayWrite(): Promise<void> {
    const after = this.after;
    if (!after) return;
    if (after.pending) await after.pending.catch(() => undefined);
    if (after.refused) throw new FencedError(this.kind, this.id);
  }

  private issue(open: OpenWrite<T>): void {
    // The creating write waits for its `after` (the constructor's create): updates fold into it
    // meanwhile, as into any write the store has not taken.
    const gate = this.after?.pending;
    if (gate) {
      this.gated = open;
      const go = () => {
        if (this.gated === open) this.gated = null;
        // Held meanwhile by what it carries (CarriedEvents.hold): it goes when that lets go (flush).
        if (this.held) this.deferredWrite = { timer: null, issue: () => this.issue(open) };
        else this.issue(open);
      };
      // In `inflight` meanwhile, so drain() waits for it (issue() adds the write itself before this settles).
      const waiting = gate.then(go, go);
      this.inflight.push(waiting);
      void waiting.then(() => this.inflight.splice(this.inflight.indexOf(waiting), 1));
      return;
    }
    const expected: { version: number; create: boolean; creating?: RecordWriter<T>['creating'] } = { version: 0, create: false };
    // Another writer's ops this write carries (CarriedEvents.ops) go last.
    const carriedOps = () => open.carried.flatMap((c) => c.ops ?? []);
    const ops = (): WriteOp[] => {
      // The store takes this write now: later updates start a new one.
      if (this.open === open) this.open = null;
      if (this.fenced) throw new FencedError(this.kind, this.id);
      // What the run waited for was refused (its background run's claim): it writes nothing, ever.
      if (this.after?.refused) throw new FencedError(this.kind, this.id);
      if (this.createFailed) throw this.createFailed;
      const creating = this.creating;
      if (creating) {
        // A created record has version 1 (Store contract); later writes build on that.
        this.creating = null;
        expected.create = true;
        expected.creating = creating;
        const replaces = creating.replaces;
        this.takenVersion = (replaces ?? 0) + 1;
        const first: WriteOp =
          replaces === undefined
            ? { op: 'create', kind: this.kind, id: this.id, value: open.value, indexes: this.indexesOf(open.value) }
            : { op: 'update', kind: this.kind, id: this.id, value: open.value, expectedVersion: replaces, indexes: this.indexesOf(open.value) };
        return [first, ...creating.extra, ...open.extra.values(), ...carriedOps()];
      }
      expected.version = this.takenVersion;
      this.takenVersion++;
      return [
        { op: 'update', kind: this.kind, id: this.id, value: open.value, expectedVersion: expected.version, indexes: this.indexesOf(open.value) },
        ...open.extra.values(),
        ...carriedOps(),
      ];
    };
    // On a store that writes events atomically with a commit, every write may carry some (an
    // update folded in later may add them, and the rider's go first, having been pushed before):
    // they are read when the store takes the write.
    let rode = false;
    const events = () => {
      rode = true;
      const riding = this.rider?.take();
      if (riding) open.carried.unshift(riding);
      return open.carried.flatMap((c) => c.events);
    };
    const written: Promise<Array<Versioned<unknown> | null>> =
      this.store.capabilities.atomicCommitEvents === true
        ? this.store.commitWithEvents(ops, events).then((r) => {
            let i = 0;
            for (const c of open.carried) {
              c.stored(r.events.slice(i, i + c.events.length));
              i += c.events.length;
            }
            return r.records;
          })
        : this.store.commit(ops);
    const settled = written.then(
      ([rec]) => {
        const w = rec as Versioned<T>;
        if (w.version > this.current.version) this.current = w;
        for (const p of open.waiters) p.resolve(w);
      },
      (err) => {
        if (this.retryWithout(open, expected, err)) return;
        for (const c of open.carried) c.failed?.(err);
        if (!rode) this.rider?.failed();
        if (err instanceof FencedError || isStoreError(err, 'stale_version')) {
          const fencedErr = err instanceof FencedError ? err : new FencedError(this.kind, this.id);
          const first = !this.fenced;
          this.fenced = true;
          for (const p of open.waiters) p.reject(fencedErr);
          if (first) this.onFenced(fencedErr);
          return;
        }
        // The record was never created: nothing later can be written.
        if (expected.create) this.createFailed ??= err;
        // Not written (e.g. the store failed the round): the next write names the same version
        // again, and carries this one's value with it (each write holds the whole record).
        if (expected.version > 0 && this.takenVersion === expected.version + 1) this.takenVersion = expected.version;
        else if (expected.version > 0) this.takenVersion = this.current.version;
        for (const p of open.waiters) p.reject(err);
      },
    );
    this.inflight.push(settled);
    void settled.then(() => {
      this.inflight.splice(this.inflight.indexOf(settled), 1);
    });
  }

  /**
   * A refused write that carried optional ops of another writer (CarriedEvents.optional): they
   * are left out (told so) and the same write goes again, naming the same version, so a refusal
   * that was theirs does not fence this record; a refusal of its own comes back and fences it as
   * any. Only while no later write of this record was made (the final write of an ending run):
   * false otherwise, and the refusal fails both.
   */
  private retryWithout(open: OpenWrite<T>, expected: { version: number; create: boolean; creating?: RecordWriter<T>['creating'] }, err: unknown): boolean {
    const optional = open.carried.filter((c) => c.optional);
    if (optional.length === 0 || !isOpsRefusal(err) || this.fenced || this.open !== null) return false;
    if (expected.create) {
      if (!expected.creating || this.creating !== null || this.takenVersion !== (expected.creating.replaces ?? 0) + 1) return false;
      this.creating = expected.creating;
    } else {
      if (this.takenVersion !== expected.version + 1) return false;
      this.takenVersion = expected.version;
    }
    open.carried = open.carried.filter((c) => !c.optional);
    for (const c of optional) c.failed?.(err);
    this.issue(open);
    return true;
  }
}
