// The runs of this process waiting for a concurrency key's slot (docs/flow-control.md). The
// durable part of a waiting run is its run record (status `queued`, written by the run service);
// the key's holders are a record of their own (key-slots.ts). What lives here is only who waits
// in this process, in admission order (machines/policies/flow.ts: priority, then arrival), and
// the pump that hands a freed slot to the first of them.
//
// A key's slot frees when a run of this process lets go of it (at once), or in another instance
// of a shared store (its release notifies the change feed's `flow` channel; a poll every
// `pollMs` covers a lost notification). Keys are pumped independently: one key's backlog never
// delays another key's run (docs/contract.md §3.4).
//
// On a store that orders a key's waiters itself (StoreCapabilities.ordersKeyWaiters: PostgreSQL),
// this process does not choose who gets a freed slot: the write that frees it gives it to the
// key's first waiter across every instance and names it on the change feed (`{k, a: [run ids]}`);
// the pump here only reads the key's holders, admits its own waiters found there, and, when the
// key has room nobody took, makes the store fill it (a take, which the store turns into its order).
import { holdersHaveRoom, insertInOrder, type WaitingEntry } from '../../machines/policies/flow.js';
import type { Clock } from '../clock.js';
import { CHANGE_CHANNELS, type StoreChanges } from '../store/change-feed.js';
import type { Store } from '../store/store.js';
import { CasExhaustedError } from '../store/cas.js';
import { isSharedStore } from '../store/changes.js';
import { KeySlots, MemoryKeySlots, type KeyHolders } from './key-slots.js';

export type AdmitOutcome = 'admitted' | 'dropped';

interface Waiter extends WaitingEntry {
  key: string;
  limit: number;
  resolve: (outcome: AdmitOutcome) => void;
}

export interface ConcurrencyQueueOptions {
  /** How often a key with waiters here re-reads its holders when nothing told it a slot freed. */
  pollMs?: number;
  /** Runs whose holder entry is gone for good (ended, missing): dropped from a full key before waiting on it. */
  deadHolders?: (runIds: string[]) => Promise<Set<string>>;
  onError?: (site: string, err: unknown) => void;
}

export class ConcurrencyQueue {
  readonly slots: KeyHolders;
  /** The holders when they live in this process's memory (an embedded store): takes and releases that need no promise. */
  private readonly memory: MemoryKeySlots | null;
  private readonly waiting = new Map<string, Waiter[]>();
  private readonly byRun = new Map<string, Waiter>();
  /** Keys being pumped now (one pump per key at a time) and keys to pump again once it ends. */
  private readonly pumping = new Set<string>();
  private readonly again = new Set<string>();
  private readonly polls = new Map<string, NodeJS.Timeout>();
  private seq = 0;
  private readonly pollMs: number;
  private unsubscribe: (() => void) | null = null;
  private closed = false;
  /** The store hands freed slots to the key's waiters in its own, global order (see the top). */
  private readonly ordered: boolean;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly opts: ConcurrencyQueueOptions = {},
  ) {
    this.memory = isSharedStore(store) ? null : new MemoryKeySlots();
    this.slots = this.memory ?? new KeySlots(store);
    this.pollMs = opts.pollMs ?? 250;
    this.ordered = store.capabilities.ordersKeyWaiters === true;
    const changes: StoreChanges | undefined = store.changes;
    if (changes) {
      this.unsubscribe = changes.subscribe(CHANGE_CHANNELS.flow, (payload) => {
        try {
          const { k: key, a: got } = JSON.parse(payload) as { k?: unknown; a?: unknown };
          if (typeof key !== 'string' || !this.waiting.has(key)) return;
          // The store gave these runs a slot: the ones waiting here start, without a read.
          if (this.ordered && Array.isArray(got)) this.admitHeld(key, got);
          else this.pump(key);
        } catch {
          // a malformed hint is no hint: the poll covers it
        }
      });
    }
  }

  /** Runs waiting here. */
  get size(): number {
    return this.byRun.size;
  }

  /** Runs waiting here on `key`. */
  waitingOn(key: string): number {
    return this.waiting.get(key)?.length ?? 0;
  }

  /**
   * Takes a slot of `key` at once when nobody here waits on it and the key is under its limit.
   * False: the run must be queued (and then `wait`).
   */
  async tryTake(key: string, limit: number, runId: string): Promise<boolean> {
    if (this.waitingOn(key) > 0) return false;
    try {
      return await this.slots.take(key, limit, runId, this.clock.now());
    } catch (err) {
      // A hot key's record kept changing (several instances): the run queues, and the pump tries again.
      if (err instanceof CasExhaustedError) return false;
      throw err;
    }
  }

  /**
   * tryTake in the caller's turn, where the holders live in memory (an embedded store): true when
   * nobody here waits on `key` and it had room (the slot is the run's now), false when the run must
   * be queued. Null on a shared store: its take is a store write (tryTake, or a holders op in the
   * run's creating commit).
   */
  tryTakeNow(key: string, limit: number, runId: string): boolean | null {
    if (!this.memory) return null;
    return this.waitingOn(key) === 0 && this.memory.takeNow(key, limit, runId, this.clock.now());
  }

  /**
   * release in the caller's turn when nothing is to be handed on (an embedded store, nobody
   * waiting here on `key`): true when done. False: call release (a waiter gets the slot).
   */
  releaseNow(key: string, runId: string): boolean {
    if (!this.memory || this.waiting.has(key)) return false;
    if (this.memory.releaseNow(key, runId) && this.store.changes) void this.store.changes.notify(CHANGE_CHANNELS.flow, JSON.stringify({ k: key }));
    return true;
  }

  /** Resolves 'admitted' once the run holds a slot of its key, 'dropped' when `drop` took it out (a cancel). */
  wait(entry: { run_id: string; key: string; limit: number; priority: number; enqueued_at: number }): Promise<AdmitOutcome> {
    const existing = this.byRun.get(entry.run_id);
    if (existing) return new Promise((resolve) => (existing.resolve = chain(existing.resolve, resolve)));
    return new Promise((resolve) => {
      const w: Waiter = { ...entry, seq: this.seq++, resolve };
      let list = this.waiting.get(entry.key);
      if (!list) this.waiting.set(entry.key, (list = []));
      insertInOrder(list, w);
      this.byRun.set(entry.run_id, w);
      this.pump(entry.key);
    });
  }

  /** 1-based place of a run waiting here among this process's waiters on its key; null when it does not wait here. */
  localPosition(runId: string): number | null {
    const w = this.byRun.get(runId);
    if (!w) return null;
    return (this.waiting.get(w.key)?.indexOf(w) ?? -1) + 1 || null;
  }

  isWaiting(runId: string): boolean {
    return this.byRun.has(runId);
  }

  /** Takes a waiting run out (cancelled while queued): its wait resolves 'dropped'. */
  drop(runId: string): boolean {
    const w = this.byRun.get(runId);
    if (!w) return false;
    this.remove(w);
    w.resolve('dropped');
    // The store may have handed it a slot already (its notice still on its way): it goes back.
    if (this.ordered) void this.release(w.key, runId).catch((err) => this.opts.onError?.('flow.release', err));
    return true;
  }

  /** Lets go of `runId`'s slot of `key` and hands it on (here at once; other instances through the feed). */
  async release(key: string, runId: string): Promise<void> {
    // The store's write that lets go of the slot gives it to the key's first waiter and says so.
    if (this.ordered) {
      await this.slots.release(key, runId);
      return;
    }
    const head = this.pumping.has(key) ? undefined : this.waiting.get(key)?.[0];
    if (head) return this.handOver(key, runId, head);
    const held = await this.slots.release(key, runId);
    if (!held) return;
    if (this.waiting.has(key)) this.pump(key);
    if (this.store.changes) void this.store.changes.notify(CHANGE_CHANNELS.flow, JSON.stringify({ k: key }));
  }

  /** `key` has a slot free: its holder let go in a commit of its own (a run's end or park, RunHost). */
  released(key: string): void {
    // The end's commit handed the slot on already, and its notice names who got it.
    if (this.ordered) return;
    if (this.waiting.has(key)) this.pump(key);
    if (this.store.changes) void this.store.changes.notify(CHANGE_CHANNELS.flow, JSON.stringify({ k: key }));
  }

  /**
   * A slot freed while this process has a waiter on the key: the waiter gets it in the same write
   * that lets go of it (one compare-and-set of the key's record on a shared store), without a
   * pump's second round, and it is admitted in this turn. Runs as the key's pump, so no pump
   * takes for the same waiter meanwhile.
   */
  private async handOver(key: string, runId: string, head: Waiter): Promise<void> {
    this.pumping.add(key);
    let outcome = { held: false, took: false };
    try {
      outcome = await this.slots.handOver(key, runId, head, this.clock.now());
      if (outcome.took) {
        if (this.byRun.get(head.run_id) === head) {
          this.remove(head);
          head.resolve('admitted');
        } else await this.slots.release(key, head.run_id); // dropped (cancelled) meanwhile: the slot goes back
      }
    } catch (err) {
      this.opts.onError?.('flow.hand_over', err);
    } finally {
      this.pumping.delete(key);
      // The key may have more room (a limit above 1, a hand-off that did not take): the usual pump.
      // A hand-off that took filled the slot it freed: only the poll is due.
      if (this.again.delete(key) || (outcome.held && !outcome.took)) this.pump(key);
      else if (this.waiting.has(key)) this.schedule(key);
    }
    if (outcome.held && !outcome.took && this.store.changes) void this.store.changes.notify(CHANGE_CHANNELS.flow, JSON.stringify({ k: key }));
  }

  /** Stops the polls and the feed subscription; waiters stay unresolved (their runs stay stored `queued`). */
  close(): void {
    this.closed = true;
    this.unsubscribe?.();
    for (const t of this.polls.values()) clearTimeout(t);
    this.polls.clear();
  }

  private remove(w: Waiter): void {
    this.byRun.delete(w.run_id);
    const list = this.waiting.get(w.key);
    if (!list) return;
    const i = list.indexOf(w);
    if (i >= 0) list.splice(i, 1);
    if (list.length === 0) {
      this.waiting.delete(w.key);
      const t = this.polls.get(w.key);
      if (t) clearTimeout(t);
      this.polls.delete(w.key);
    }
  }

  /** Admits the key's first waiters while the key has room; one pump per key at a time. */
  private pump(key: string): void {
    if (this.closed) return;
    if (this.pumping.has(key)) {
      this.again.add(key);
      return;
    }
    this.pumping.add(key);
    void (this.ordered ? this.pumpOrdered(key) : this.pumpKey(key))
      .catch((err) => this.opts.onError?.('flow.pump', err))
      .finally(() => {
        this.pumping.delete(key);
        if (this.again.delete(key)) this.pump(key);
        else if (this.waiting.has(key)) this.schedule(key);
      });
  }

  private async pumpKey(key: string): Promise<void> {
    let pruned = false;
    for (;;) {
      const head = this.waiting.get(key)?.[0];
      if (!head) return;
      const took = await this.slots.take(key, head.limit, head.run_id, this.clock.now());
      if (!took) {
        // Full. A holder may be a run that ended without letting go (a crash between its end
        // and its release): checked once per pump, only when the key is full.
        if (!pruned && this.opts.deadHolders) {
          pruned = true;
          const dead = this.opts.deadHolders;
          if ((await this.slots.prune(key, (holders) => dead(holders.map((h) => h.run_id)))) > 0) continue;
        }
        return;
      }
      // Dropped meanwhile (cancelled): the slot goes back.
      if (this.byRun.get(head.run_id) !== head) {
        await this.slots.release(key, head.run_id);
        continue;
      }
      this.remove(head);
      head.resolve('admitted');
    }
  }

  /** Waiters of `key` here that the store gave a slot (`runIds`, from its notice): admitted. */
  private admitHeld(key: string, runIds: unknown[]): void {
    for (const id of runIds) {
      const w = typeof id === 'string' ? this.byRun.get(id) : undefined;
      if (!w || w.key !== key) continue;
      this.remove(w);
      w.resolve('admitted');
    }
  }

  /**
   * The pump on a store that orders the waiters (see the top): admits the waiters here that hold
   * a slot; when the key has room, one take makes the store fill it in its order (whoever it picks
   * is told, this process included), and the holders are read once more.
   */
  private async pumpOrdered(key: string): Promise<void> {
    let poked = false;
    let pruned = false;
    for (;;) {
      if (!this.waiting.get(key)?.length) return;
      const holders = await this.slots.holders(key);
      this.admitHeld(
        key,
        holders.map((h) => h.run_id),
      );
      const head = this.waiting.get(key)?.[0];
      if (!head || poked) return;
      if (holdersHaveRoom(holders, head.limit, head.run_id)) {
        poked = true;
        await this.slots.take(key, head.limit, head.run_id, this.clock.now());
        continue;
      }
      // Full: a holder may be a run that ended without letting go (as in pumpKey); the write that
      // drops it fills the key.
      if (pruned || !this.opts.deadHolders) return;
      pruned = true;
      const dead = this.opts.deadHolders;
      if ((await this.slots.prune(key, (hs) => dead(hs.map((h) => h.run_id)))) === 0) return;
    }
  }

  /** The next look at a key with waiters: soon after a hint, else after pollMs. */
  private schedule(key: string): void {
    const prev = this.polls.get(key);
    if (prev) clearTimeout(prev);
    const t = setTimeout(() => {
      this.polls.delete(key);
      if (this.waiting.has(key)) this.pump(key);
    }, this.pollMs);
    t.unref();
    this.polls.set(key, t);
  }
}

function chain(a: (o: AdmitOutcome) => void, b: (o: AdmitOutcome) => void): (o: AdmitOutcome) => void {
  return (o) => {
    a(o);
    b(o);
  };
}
