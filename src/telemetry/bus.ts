// Live fan-out of stored events (docs/contract.md §8.3). Events reach the bus only after the store
// gave them a cursor, so a subscriber can always fall back to the store from the last cursor it
// saw. Publishing is on the run's hot path: it never throws, never awaits, and touches only the
// subscribers indexed under the event's own run/trace/task/session ids.
import type { EventInput, StoredEvent } from '../store/store.js';
import { reportSwallowed } from './swallowed.js';

export interface EventFilter {
  session_id?: string;
  run_id?: string;
  trace_id?: string;
  task_id?: string;
}

export const FILTER_FIELDS = ['run_id', 'trace_id', 'task_id', 'session_id'] as const;
export type FilterField = (typeof FILTER_FIELDS)[number];

export interface OverflowInfo {
  /** Events that were queued and not delivered when the subscriber was dropped. */
  lag: number;
  /** Cursor of the last event whose delivery completed: the client reconnects from here. */
  last_cursor: string | null;
}

export interface SubscribeOptions {
  /** A subscriber with more than this many undelivered events is dropped. Default 1000. */
  maxLag?: number;
  /** Called once when the subscriber is dropped for lagging. */
  onOverflow?: (info: OverflowInfo) => void;
  /** Called once when `onEvent` throws or rejects; the subscriber is dropped. */
  onError?: (error: unknown) => void;
}

/**
 * Receives events one at a time, in publish order. Returning a promise (an SSE write waiting for
 * the socket to drain) holds back the next delivery; events published meanwhile queue up to maxLag.
 */
export type EventHandler = (event: StoredEvent) => void | Promise<void>;

export const DEFAULT_MAX_LAG = 1000;

interface Subscriber {
  filter: EventFilter;
  onEvent: EventHandler;
  maxLag: number;
  onOverflow?: (info: OverflowInfo) => void;
  onError?: (error: unknown) => void;
  queue: StoredEvent[];
  head: number;
  draining: boolean;
  closed: boolean;
  lastCursor: string | null;
  /** The index this subscriber lives in (its most selective filter field), or null for "all". */
  field: FilterField | null;
}

/** Reads an id from the event's top level, falling back to metadata for records made elsewhere. */
export function eventField(event: EventInput, field: FilterField): string | null {
  const top = event[field];
  if (typeof top === 'string' && top.length > 0) return top;
  const meta = event.metadata;
  if (meta && typeof meta === 'object') {
    const v = (meta as Record<string, unknown>)[field];
    if (typeof v === 'string' && v.length > 0) return v;
  }
  return null;
}

export function matchesFilter(event: StoredEvent, filter: EventFilter): boolean {
  for (const f of FILTER_FIELDS) {
    const want = filter[f];
    if (want !== undefined && eventField(event, f) !== want) return false;
  }
  return true;
}

export class EventBus {
  private readonly indexes: Record<FilterField, Map<string, Set<Subscriber>>> = {
    run_id: new Map(),
    trace_id: new Map(),
    task_id: new Map(),
    session_id: new Map(),
  };
  private readonly unfiltered = new Set<Subscriber>();
  private count = 0;

  /**
   * Whether a published event with these ids could reach a subscriber: an unfiltered one, or one
   * indexed under one of the values. `ids` maps a filter field to values (`run_id` -> [...]).
   */
  mayWant(ids: Partial<Record<FilterField, string[]>>): boolean {
    if (this.unfiltered.size > 0) return true;
    for (const f of FILTER_FIELDS) {
      const index = this.indexes[f];
      if (index.size === 0) continue;
      for (const v of ids[f] ?? []) if (index.has(v)) return true;
    }
    return false;
  }

  /** Number of live subscribers. */
  get size(): number {
    return this.count;
  }

  subscribe(filter: EventFilter, onEvent: EventHandler, options: SubscribeOptions = {}): () => void {
    // Index under the most selective field given; the other fields are checked on delivery.
    const field = FILTER_FIELDS.find((f) => filter[f] !== undefined) ?? null;
    const sub: Subscriber = {
      filter: { ...filter },
      onEvent,
      maxLag: options.maxLag ?? DEFAULT_MAX_LAG,
      onOverflow: options.onOverflow,
      onError: options.onError,
      queue: [],
      head: 0,
      draining: false,
      closed: false,
      lastCursor: null,
      field,
    };
    if (field === null) {
      this.unfiltered.add(sub);
    } else {
      const key = filter[field] as string;
      const index = this.indexes[field];
      let set = index.get(key);
      if (!set) index.set(key, (set = new Set()));
      set.add(sub);
    }
    this.count++;
    return () => this.remove(sub);
  }

  publish(event: StoredEvent): void {
    this.deliverTo(this.unfiltered, event);
    for (const f of FILTER_FIELDS) {
      const value = eventField(event, f);
      if (value === null) continue;
      const set = this.indexes[f].get(value);
      if (set) this.deliverTo(set, event);
    }
  }

  publishAll(events: StoredEvent[]): void {
    for (const e of events) this.publish(e);
  }

  private deliverTo(set: Set<Subscriber>, event: StoredEvent): void {
    if (set.size === 0) return;
    // A handler may unsubscribe (itself or others) while we iterate; Set iteration tolerates
    // deletion, and `closed` stops delivery to removed subscribers.
    for (const sub of set) {
      if (sub.closed || !matchesFilter(event, sub.filter)) continue;
      sub.queue.push(event);
      if (sub.queue.length - sub.head > sub.maxLag) {
        this.overflow(sub);
        continue;
      }
      if (!sub.draining) this.drain(sub);
    }
  }

  private drain(sub: Subscriber): void {
    sub.draining = true;
    try {
      while (!sub.closed && sub.head < sub.queue.length) {
        const event = sub.queue[sub.head++];
        let result: void | Promise<void>;
        try {
          result = sub.onEvent(event);
        } catch (err) {
          this.fail(sub, err);
          return;
        }
        if (result && typeof (result as Promise<void>).then === 'function') {
          (result as Promise<void>).then(
            () => {
              sub.lastCursor = event.cursor;
              this.compact(sub);
              sub.draining = false;
              if (!sub.closed) this.drain(sub);
            },
            (err: unknown) => this.fail(sub, err),
          );
          return;
        }
        sub.lastCursor = event.cursor;
      }
      this.compact(sub);
      sub.draining = false;
    } catch (err) {
      // Only reachable through a bug in this file; publish must still not throw.
      this.fail(sub, err);
    }
  }

  private compact(sub: Subscriber): void {
    if (sub.head === sub.queue.length) {
      sub.queue = [];
      sub.head = 0;
    } else if (sub.head > 1024 && sub.head * 2 > sub.queue.length) {
      sub.queue = sub.queue.slice(sub.head);
      sub.head = 0;
    }
  }

  private overflow(sub: Subscriber): void {
    const info: OverflowInfo = { lag: sub.queue.length - sub.head, last_cursor: sub.lastCursor };
    this.remove(sub);
    safeCall(sub.onOverflow, info);
  }

  private fail(sub: Subscriber, err: unknown): void {
    if (sub.closed) return;
    this.remove(sub);
    safeCall(sub.onError, err);
  }

  private remove(sub: Subscriber): void {
    if (sub.closed) return;
    sub.closed = true;
    sub.queue = [];
    sub.head = 0;
    this.count--;
    if (sub.field === null) {
      this.unfiltered.delete(sub);
      return;
    }
    const key = sub.filter[sub.field] as string;
    const index = this.indexes[sub.field];
    const set = index.get(key);
    if (set) {
      set.delete(sub);
      if (set.size === 0) index.delete(key);
    }
  }
}

function safeCall<T>(fn: ((arg: T) => void) | undefined, arg: T): void {
  if (!fn) return;
  try {
    fn(arg);
  } catch (err) {
    // A faulty callback must not break the publisher's loop.
    reportSwallowed('bus.subscriber', err);
  }
}

/** Cursors are fixed-width decimal strings; comparing length first also orders unpadded ones. */
export function compareCursors(a: string, b: string): number {
  if (a.length !== b.length) return a.length - b.length;
  return a < b ? -1 : a > b ? 1 : 0;
}

export class StreamOverflowError extends Error {
  constructor(readonly info: OverflowInfo) {
    super(`subscriber fell more than the allowed number of events behind; reconnect from cursor ${info.last_cursor ?? '(start)'}`);
    this.name = 'StreamOverflowError';
  }
}

export interface ReplayThenFollowOptions {
  /** Stored events strictly after `after` (already filtered for this stream), one page at a time. */
  readPage: (after: string | null) => Promise<{ events: StoredEvent[]; next_cursor: string | null }>;
  /**
   * Subscribes to live events for the same filter, e.g.
   * `(onEvent, opts) => bus.subscribe({ session_id, run_id }, onEvent, opts)`.
   */
  subscribe: (onEvent: (event: StoredEvent) => void, options: SubscribeOptions) => () => void;
  /** Cursor the client already has (`cursor` query or Last-Event-ID); null replays everything. */
  after: string | null;
  /** Most live events held while the consumer is behind (replaying or slow). Default 1000. */
  maxLag?: number;
  /** Most bytes of live events held while the consumer is behind (measured by `sizeOf`). Default: no limit. */
  maxLagBytes?: number;
  /** Size of an event for `maxLagBytes` (e.g. its serialized length). */
  sizeOf?: (event: StoredEvent) => number;
  /**
   * Called once, at once, when the consumer falls too far behind: a consumer blocked elsewhere
   * (waiting for a socket) learns it without calling next(), which then throws StreamOverflowError.
   */
  onOverflow?: (info: OverflowInfo) => void;
  /** Ends the iteration (the HTTP connection closed). */
  signal?: AbortSignal;
}

/**
 * Replays stored events after a cursor, then follows live ones, with no gap and no duplicate.
 *
 * The race it closes: an event stored after the replay read its last page but before a naive
 * subscribe would be lost; one stored before the last page was read and also published live
 * would be sent twice. So it subscribes first and buffers live events, replays from the store,
 * then drains the buffer skipping cursors at or below the last replayed one. It relies on the
 * store-then-publish order: whatever is published after subscribing is either in the buffer or
 * (stored before the replay read it) deduplicated by cursor.
 *
 * Iteration ends on `return()` or `signal`; it throws StreamOverflowError when more than maxLag
 * live events (or maxLagBytes of them) are waiting for the consumer. Use it from one consumer
 * (e.g. `for await`).
 */
export function replayThenFollow(options: ReplayThenFollowOptions): ReplayFollow {
  return new ReplayFollowIterator(options);
}

export interface ReplayFollow extends AsyncIterableIterator<StoredEvent> {
  /** Cursor of the last event handed to the consumer (what the SSE `id:` carried). */
  readonly cursor: string | null;
  /** Size (by `sizeOf`) of the live events waiting for the consumer. */
  readonly heldBytes: number;
}

class ReplayFollowIterator implements ReplayFollow {
  private phase: 'init' | 'replay' | 'follow' | 'done' = 'init';
  private live: StoredEvent[] = [];
  private liveHead = 0;
  private liveBytes = 0;
  /** The replay page being sent; entries are cleared as they go (a slow consumer holds only what it has not had). */
  private page: Array<StoredEvent | undefined> = [];
  private pageIndex = 0;
  private pageNext: string | null = null;
  private lastReplayed: string | null;
  private overflowInfo: OverflowInfo | null = null;
  private lastYielded: string | null = null;
  private unsubscribe: (() => void) | null = null;
  private wake: (() => void) | null = null;
  private readonly maxLag: number;
  private readonly maxLagBytes: number;
  private readonly onAbort = (): void => void this.finish();

  constructor(private readonly opts: ReplayThenFollowOptions) {
    this.lastReplayed = opts.after;
    this.maxLag = opts.maxLag ?? DEFAULT_MAX_LAG;
    this.maxLagBytes = opts.maxLagBytes ?? Infinity;
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<StoredEvent> {
    return this;
  }

  async next(): Promise<IteratorResult<StoredEvent, undefined>> {
    if (this.phase === 'init') this.start();
    for (;;) {
      if (this.phase === 'done') return { done: true, value: undefined };
      if (this.overflowInfo) {
        const info = this.overflowInfo;
        this.finish();
        throw new StreamOverflowError(info);
      }
      if (this.phase === 'replay') {
        if (this.pageIndex < this.page.length) {
          const event = this.page[this.pageIndex]!;
          this.page[this.pageIndex++] = undefined;
          // A page may repeat the cursor it started after if an adapter is inclusive; skip it.
          if (this.lastReplayed !== null && compareCursors(event.cursor, this.lastReplayed) <= 0) continue;
          this.lastReplayed = event.cursor;
          return this.yield(event);
        }
        if (this.page.length > 0 && this.pageNext === null) {
          this.phase = 'follow';
          continue;
        }
        let result: { events: StoredEvent[]; next_cursor: string | null };
        try {
          result = await this.opts.readPage(this.pageNext ?? this.lastReplayed);
        } catch (err) {
          this.finish();
          throw err;
        }
        if (this.phase !== 'replay') continue; // finished while reading
        this.page = result.events;
        this.pageIndex = 0;
        this.pageNext = result.next_cursor;
        if (result.events.length === 0) this.phase = 'follow';
        continue;
      }
      // follow
      if (this.liveHead < this.live.length) {
        const event = this.live[this.liveHead++];
        if (this.opts.sizeOf) this.liveBytes -= this.opts.sizeOf(event);
        if (this.liveHead === this.live.length) {
          this.live = [];
          this.liveHead = 0;
          this.liveBytes = 0;
        }
        if (this.lastReplayed !== null && compareCursors(event.cursor, this.lastReplayed) <= 0) continue;
        return this.yield(event);
      }
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
      this.wake = null;
    }
  }

  async return(): Promise<IteratorResult<StoredEvent, undefined>> {
    this.finish();
    return { done: true, value: undefined };
  }

  /** Cursor of the last event handed to the consumer (what the SSE `id:` carried). */
  get cursor(): string | null {
    return this.lastYielded ?? this.opts.after;
  }

  get heldBytes(): number {
    return this.liveBytes;
  }

  private yield(event: StoredEvent): IteratorResult<StoredEvent, undefined> {
    this.lastYielded = event.cursor;
    return { done: false, value: event };
  }

  private start(): void {
    this.phase = 'replay';
    const signal = this.opts.signal;
    if (signal?.aborted) {
      this.finish();
      return;
    }
    signal?.addEventListener('abort', this.onAbort, { once: true });
    this.unsubscribe = this.opts.subscribe(
      (event) => {
        if (this.phase === 'done') return;
        const size = this.opts.sizeOf ? this.opts.sizeOf(event) : 0;
        if (this.isFull(size)) this.pruneReplayed();
        if (this.isFull(size)) {
          this.markOverflow(this.live.length - this.liveHead + 1);
          return;
        }
        this.live.push(event);
        this.liveBytes += size;
        this.wake?.();
      },
      {
        maxLag: this.maxLag,
        onOverflow: (info) => this.markOverflow(info.lag),
      },
    );
  }

  // One more event of `size` would be too many; a lone event is always taken, however large.
  private isFull(size: number): boolean {
    const held = this.live.length - this.liveHead;
    return held >= this.maxLag || (held > 0 && this.liveBytes + size > this.maxLagBytes);
  }

  // While a long replay runs, the live buffer fills with events the replay has already sent;
  // dropping those first keeps a busy session from overflowing a consumer that is keeping up.
  private pruneReplayed(): void {
    const floor = this.lastReplayed;
    if (floor === null) return;
    const kept: StoredEvent[] = [];
    let bytes = 0;
    for (let i = this.liveHead; i < this.live.length; i++) {
      if (compareCursors(this.live[i].cursor, floor) > 0) {
        kept.push(this.live[i]);
        if (this.opts.sizeOf) bytes += this.opts.sizeOf(this.live[i]);
      }
    }
    this.live = kept;
    this.liveHead = 0;
    this.liveBytes = bytes;
  }

  private markOverflow(lag: number): void {
    if (this.overflowInfo || this.phase === 'done') return;
    this.overflowInfo = { lag, last_cursor: this.lastYielded ?? this.opts.after };
    this.live = [];
    this.liveHead = 0;
    this.liveBytes = 0;
    this.unsubscribe?.();
    this.unsubscribe = null;
    this.wake?.();
    safeCall(this.opts.onOverflow, this.overflowInfo);
  }

  private finish(): void {
    if (this.phase === 'done') return;
    this.phase = 'done';
    this.live = [];
    this.liveHead = 0;
    this.liveBytes = 0;
    this.page = [];
    this.unsubscribe?.();
    this.unsubscribe = null;
    this.opts.signal?.removeEventListener('abort', this.onAbort);
    this.wake?.();
  }
}
