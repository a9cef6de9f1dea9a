// Several agentd instances on one store. Everything here is a hint layered on
// the store's change feed (src/store/changes.ts); the guarantees rest on CAS writes:
//  - live streams: the emitter stores events first, then this process notifies the cursor range it
//    appended (on PostgreSQL the store announces it in the very transaction that stores the events:
//    StoreChanges.announceAppends); other instances with live subscribers read that range from the
//    store and publish it on their own bus (each event once: a bounded set of cursors already
//    published here);
//  - control: a cancel posted to an instance that does not hold the run is sent to its owner;
//  - tasks: a task edited on one instance is re-read by the others' schedulers.
import type { EventInput, Store, StoredEvent } from '../store/store.js';
import { CHANGE_CHANNELS, MAX_CHANGE_PAYLOAD, type StoreChanges } from '../store/change-feed.js';
import { eventField, FILTER_FIELDS, type EventBus, type FilterField } from '../telemetry/bus.js';
import { silentLogger, type AppLogger } from '../telemetry/logger.js';

/** Event ids this process published or is storing (its own and other instances'), so none is published twice. */
const SEEN_MAX = 50_000;
/** Ranges waiting to be read from the store; more are dropped (a follower catches up with Last-Event-ID). */
const MAX_PENDING_RANGES = 10_000;
/** Most ids one notification lists (about 40 bytes each, under the 8000-byte payload). */
const MAX_IDS = 120;
/** How long appends are gathered into one notification. */
const NOTIFY_DELAY_MS = 5;

export type ControlMessage =
  /** Cancel a run (POST /runs/{id}/cancel) live in the instance that owns it. */
  | { type: 'cancel'; run_id: string }
  /** Cancel a background run (POST /background/runs/{id}/cancel) held by the instance that owns it. */
  | { type: 'bg_cancel'; run_id: string; reason: string | null };

export class ClusterLink {
  private readonly seen = new Set<string>();
  /** Own appends not yet notified: [first, last] cursor pairs. */
  private outgoing: Array<[string, string]> = [];
  /**
   * The ids (run, trace, task, session) of those events, so an instance reads a range only when
   * one of its followers may want it; null when there were too many to list (read it anyway).
   */
  private outgoingIds: Map<FilterField, Set<string>> | null = new Map();
  private outgoingIdCount = 0;
  private notifyTimer: NodeJS.Timeout | null = null;
  private readonly incoming: Array<[string, string]> = [];
  private pumping = false;
  private readonly unsubs: Array<() => void> = [];
  private closed = false;
  private controlHandler: ((msg: ControlMessage) => void) | null = null;
  private taskHandler: ((taskId: string) => void) | null = null;
  private resyncHandler: (() => void) | null = null;
  /**
   * How this process's own notifications begin (every payload here is `JSON.stringify({ o, ... })`):
   * every instance hears every notification, its own included, so they are told apart before parsing.
   */
  private readonly ownPrefix: string;
  /** The store announces this process's appends itself (StoreChanges.announceAppends): `appended` sends nothing. */
  private readonly announced: boolean;

  constructor(
    private readonly store: Store,
    private readonly changes: StoreChanges,
    private readonly bus: EventBus,
    readonly instanceId: string,
    private readonly log: AppLogger = silentLogger,
  ) {
    this.ownPrefix = `{"o":${JSON.stringify(instanceId)},`;
    this.announced = changes.announceAppends?.((events) => this.announcement(events as EventInput[])) === true;
    this.unsubs.push(
      changes.subscribe(CHANGE_CHANNELS.events, (p) => this.onEvents(p)),
      changes.subscribe(CHANGE_CHANNELS.control, (p) => this.onControl(p)),
      changes.subscribe(CHANGE_CHANNELS.tasks, (p) => this.onTask(p)),
      // Notifications sent while the feed was down are lost: whoever follows something re-reads it.
      changes.onReconnect(() => this.resyncHandler?.()),
    );
  }

  // ---------------------------------------------------------------- events

  /**
   * The emitter is about to store these events (and will publish them here itself): a notified
   * range of another instance that holds one of them (sequences interleave) must not publish it.
   */
  appending(events: Array<{ event_id: string }>): void {
    for (const e of events) this.remember(e.event_id);
  }

  /**
   * The announcement of a round of this process's appends, made by the store inside the round:
   * the notification `flush` would send, the round's range between `head` and `tail`.
   */
  private announcement(events: EventInput[]): { head: string; tail: string } | null {
    if (this.closed || events.length === 0) return null;
    const ids = new Map<FilterField, Set<string>>();
    let n = 0;
    scan: for (const e of events) {
      for (const f of FILTER_FIELDS) {
        const v = eventField(e, f);
        if (v === null) continue;
        let set = ids.get(f);
        if (!set) ids.set(f, (set = new Set()));
        if (!set.has(v)) {
          set.add(v);
          if (++n > MAX_IDS) break scan;
        }
      }
    }
    const head = `${this.ownPrefix}"r":[`;
    const k = n > MAX_IDS ? '' : `,"k":${JSON.stringify(Object.fromEntries([...ids].map(([f, set]) => [f, [...set]])))}`;
    return { head, tail: Buffer.byteLength(k) > MAX_CHANGE_PAYLOAD - 200 ? ']}' : `]${k}}` };
  }

  /** The emitter stored these events and published them here: tell the other instances. */
  appended(events: StoredEvent[]): void {
    if (this.closed || this.announced || events.length === 0) return;
    const first = events[0].cursor;
    const last = events[events.length - 1].cursor;
    if (this.outgoingIds) {
      for (const e of events) {
        for (const f of FILTER_FIELDS) {
          const v = eventField(e, f);
          if (v === null) continue;
          let set = this.outgoingIds.get(f);
          if (!set) this.outgoingIds.set(f, (set = new Set()));
          if (!set.has(v)) {
            set.add(v);
            if (++this.outgoingIdCount > MAX_IDS) {
              this.outgoingIds = null;
              break;
            }
          }
        }
        if (!this.outgoingIds) break;
      }
    }
    const prev = this.outgoing[this.outgoing.length - 1];
    // Adjacent batches (the common case: one process appending alone) merge into one range.
    if (prev && isNext(prev[1], first)) prev[1] = last;
    else this.outgoing.push([first, last]);
    if (!this.notifyTimer) {
      this.notifyTimer = setTimeout(() => this.flush(), NOTIFY_DELAY_MS);
      this.notifyTimer.unref();
    }
  }

  private flush(): void {
    this.notifyTimer = null;
    const ranges = this.outgoing;
    const ids = this.outgoingIds;
    this.outgoing = [];
    this.outgoingIds = new Map();
    this.outgoingIdCount = 0;
    if (ranges.length === 0) return;
    const k = ids ? Object.fromEntries([...ids].map(([f, set]) => [f, [...set]])) : undefined;
    // One notification carries up to ~100 ranges and MAX_IDS ids (PostgreSQL's payload limit is 8000 bytes).
    for (let i = 0; i < ranges.length; i += 100) {
      let payload = JSON.stringify({ o: this.instanceId, r: ranges.slice(i, i + 100), k });
      if (Buffer.byteLength(payload) > MAX_CHANGE_PAYLOAD) payload = JSON.stringify({ o: this.instanceId, r: ranges.slice(i, i + 100) });
      void this.changes.notify(CHANGE_CHANNELS.events, payload);
    }
  }

  private onEvents(payload: string): void {
    // Nobody here follows anything (a later follower replays from the store), or our own: not even parsed.
    if (this.closed || this.bus.size === 0 || payload.startsWith(this.ownPrefix)) return;
    const msg = parse(payload) as { o?: string; r?: Array<[string, string]>; k?: Partial<Record<FilterField, string[]>> } | null;
    if (!msg || msg.o === this.instanceId || !Array.isArray(msg.r)) return;
    // Nobody here follows anything these events belong to: nothing to read. Without the ids (too
    // many to list), any follower reads.
    if (msg.k && typeof msg.k === 'object' && !this.bus.mayWant(msg.k)) return;
    for (const r of msg.r) {
      if (!Array.isArray(r) || typeof r[0] !== 'string' || typeof r[1] !== 'string') continue;
      if (this.incoming.length >= MAX_PENDING_RANGES) {
        this.log.warn('cluster: too many event ranges waiting; live followers may miss events (they resume with Last-Event-ID)');
        break;
      }
      this.incoming.push([r[0], r[1]]);
    }
    void this.pump();
  }

  /** Reads the notified ranges from the store, in order, and publishes what this process has not. */
  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.incoming.length > 0 && !this.closed) {
        const [first, last] = this.incoming.shift()!;
        let after = before(first);
        if (after === undefined) continue;
        for (;;) {
          const page = await this.store.readEvents({ after, limit: 1000 });
          let done = page.events.length === 0;
          for (const e of page.events) {
            if (cmp(e.cursor, last) > 0) {
              done = true;
              break;
            }
            if (!this.seen.has(e.event_id)) {
              this.remember(e.event_id);
              this.bus.publish(e);
            }
            after = e.cursor;
          }
          if (done || !page.next_cursor || this.closed) break;
        }
      }
    } catch (err) {
      this.log.warn({ err: String(err) }, 'cluster: could not read notified events');
    } finally {
      this.pumping = false;
    }
    if (this.incoming.length > 0 && !this.closed) setTimeout(() => void this.pump(), 100).unref();
  }

  private remember(id: string): void {
    this.seen.add(id);
    if (this.seen.size > SEEN_MAX) {
      // Sets iterate in insertion order: drop the oldest tenth.
      let n = SEEN_MAX / 10;
      for (const c of this.seen) {
        this.seen.delete(c);
        if (--n <= 0) break;
      }
    }
  }

  // ---------------------------------------------------------------- control (cancel)

  onControlMessage(fn: (msg: ControlMessage) => void): void {
    this.controlHandler = fn;
  }

  sendControl(msg: ControlMessage): Promise<void> {
    return this.changes.notify(CHANGE_CHANNELS.control, JSON.stringify({ o: this.instanceId, ...msg }));
  }

  private onControl(payload: string): void {
    if (payload.startsWith(this.ownPrefix)) return;
    const msg = parse(payload) as (ControlMessage & { o?: string }) | null;
    if (!msg || msg.o === this.instanceId || typeof msg.run_id !== 'string') return;
    if (msg.type === 'cancel') this.controlHandler?.({ type: 'cancel', run_id: msg.run_id });
    else if (msg.type === 'bg_cancel')
      this.controlHandler?.({ type: 'bg_cancel', run_id: msg.run_id, reason: typeof msg.reason === 'string' ? msg.reason.slice(0, 1000) : null });
  }

  // ---------------------------------------------------------------- tasks

  /** Called on edits of other instances (task id), and on a feed reconnect (everything). */
  onTaskChanged(fn: (taskId: string) => void, resyncAll: () => void): void {
    this.taskHandler = fn;
    this.resyncHandler = resyncAll;
  }

  taskChanged(taskId: string): void {
    void this.changes.notify(CHANGE_CHANNELS.tasks, JSON.stringify({ o: this.instanceId, task_id: taskId }));
  }

  private onTask(payload: string): void {
    if (payload.startsWith(this.ownPrefix)) return;
    const msg = parse(payload) as { o?: string; task_id?: string } | null;
    if (!msg || msg.o === this.instanceId || typeof msg.task_id !== 'string') return;
    this.taskHandler?.(msg.task_id);
  }

  close(): void {
    this.closed = true;
    if (this.announced) this.changes.announceAppends?.(null);
    if (this.notifyTimer) clearTimeout(this.notifyTimer);
    this.flush();
    for (const u of this.unsubs) u();
    this.incoming.length = 0;
  }
}

function parse(payload: string): unknown {
  try {
    return JSON.parse(payload);
  } catch {
    return null;
  }
}

/** Cursors are fixed-width decimal strings (string order == numeric order). */
function cmp(a: string, b: string): number {
  if (a.length !== b.length) return a.length - b.length;
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The cursor just before `c` in the same encoding, or undefined when `c` is not numeric. */
function before(c: string): string | null | undefined {
  if (!/^\d+$/.test(c)) return undefined;
  const n = BigInt(c) - 1n;
  if (n <= 0n) return null;
  return n.toString().padStart(c.length, '0');
}

function isNext(a: string, b: string): boolean {
  if (!/^\d+$/.test(a) || !/^\d+$/.test(b)) return false;
  return BigInt(b) === BigInt(a) + 1n;
}
