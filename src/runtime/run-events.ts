// A live run's telemetry chain (RunHost.emit builds each event; this keeps their order and
// durability). Events of one run are stored in order, then published; effects do not wait for
// them (telemetry must not add a durable write to every step's latency), and the run reads as
// ended, and settles, only once its chain drained (RunHost awaits `done`).
//
// On a store that writes events atomically with a commit (memory, LevelDB), an event pushed while
// the run's record writer has a write the store has not taken yet rides in that write (EventRider,
// src/runtime/persistence.ts) instead of an append of its own: a new run's first events in its
// creating write, its last ones (final_answer, runtime_error, run_interrupted) in its final write.
// Order holds: no append is handed to the store while a write is open, so every event appended
// before that write was handed to the store before it, and every later one after it.
import type { StoredEvent } from '../store/store.js';
import type { EventRecordInput } from '../telemetry/record.js';
import type { TelemetryEmitter } from './emitter.js';
import type { CarriedEvents, EventRider } from './persistence.js';

type Telemetry = Pick<TelemetryEmitter, 'emitManySafe' | 'recordsOf' | 'published'>;

const DRAINED: Promise<unknown> = Promise.resolve();

export class RunEventChain implements EventRider {
  /**
   * Events (or batches) handed on and not yet stored and published, plus one while a new run's
   * events are held. A count, not a chain of Promise.all (four promises per event before): `done`
   * is made only when someone waits while some are out.
   */
  private out = 0;
  private drained: { promise: Promise<void>; resolve: () => void } | null = null;
  /** Event order within this trace segment, 1..n (the last one given out). */
  seq = 0;
  /** Events held back with a new run's delayed creating write, in order; null once it went. */
  private held: { events: EventRecordInput[]; release: () => void } | null = null;
  /** Events waiting to ride in the record writer's next write the store takes (see take()). */
  private riding: { events: EventRecordInput[]; landed: () => void } | null = null;
  /** Inside rideNext(): events ride in the write that follows even if none is open yet. */
  private forceRide = false;

  /**
   * `hold`: a new run whose creating write waits (CREATE_FOLD_MS, src/runtime/create-fold.ts): its first events wait
   * with it, appended right before it. `writeOpen`: on a store that carries events in a commit,
   * whether the run's record writer has a write the store has not taken (events then ride in it).
   */
  constructor(
    private readonly telemetry: Telemetry,
    hold: boolean,
    private readonly writeOpen: (() => boolean) | null = null,
  ) {
    if (!hold) return;
    this.out++;
    this.held = { events: [], release: () => this.landed() };
  }

  /** Resolves when every event pushed so far is stored and published (and any pushed meanwhile). */
  get done(): Promise<unknown> {
    if (this.out === 0) return DRAINED;
    if (!this.drained) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.drained = { promise, resolve };
    }
    return this.drained.promise;
  }

  /** One of those handed on was stored and published (or dropped: telemetry never fails the run). */
  private landed(): void {
    if (--this.out > 0) return;
    const d = this.drained;
    this.drained = null;
    d?.resolve();
  }

  /** Hands events to the store on their own; they count as out until it took them. */
  private append(events: EventRecordInput[]): void {
    this.out++;
    void this.telemetry.emitManySafe(events).then(() => this.landed());
  }

  push(event: EventRecordInput): Promise<unknown> {
    // A new run's first events go to the store right before its creating write: same round, same
    // order, and no event of a run that was never stored.
    if (this.held) {
      this.held.events.push(event);
      return this.done;
    }
    if (this.writeOpen && (this.forceRide || this.riding || this.writeOpen())) {
      if (!this.riding) {
        this.out++;
        this.riding = { events: [], landed: () => this.landed() };
      }
      this.riding.events.push(event);
      return this.done;
    }
    // Handed to the store now, not after the previous event landed: the store's write queue is
    // first in, first out and group-commits, so the events of a step share one durable write and
    // keep their order (sequence numbers and cursors alike) without waiting on each other.
    this.append([event]);
    return this.done;
  }

  /**
   * Runs `emit` so that the events it pushes ride in the record write that follows it (the run's
   * end or stop: its last events in its final commit). The caller makes that write, then calls
   * `wrote`.
   */
  rideNext(emit: () => void): void {
    if (!this.writeOpen) return emit();
    this.forceRide = true;
    try {
      emit();
    } finally {
      this.forceRide = false;
    }
  }

  /** After the write rideNext promised: if no write will take the riding events (it was refused at once), they go on their own. */
  wrote(): void {
    if (this.riding && this.writeOpen && !this.writeOpen()) this.failed();
  }

  /** EventRider: the store is taking one of the run's record writes; the riding events go in it. */
  take(): CarriedEvents | null {
    const r = this.riding;
    if (!r) return null;
    this.riding = null;
    let events;
    try {
      events = this.telemetry.recordsOf(r.events);
    } catch {
      // Never fail the run's write over its telemetry: the append reports what is wrong with them.
      void this.telemetry.emitManySafe(r.events).then(r.landed);
      return null;
    }
    return {
      events,
      stored: (stored: StoredEvent[]) => {
        this.telemetry.published(stored);
        r.landed();
      },
      // Not written: the events are appended on their own (telemetry is not lost with a failed write).
      failed: () => void this.telemetry.emitManySafe(r.events).then(r.landed),
    };
  }

  /** EventRider: a write failed before it took the riding events: they are appended on their own. */
  failed(): void {
    const r = this.riding;
    if (!r) return;
    this.riding = null;
    void this.telemetry.emitManySafe(r.events).then(r.landed);
  }

  /** The delayed creating write goes to the store now: the events held with it go first. */
  release(): void {
    const held = this.held;
    if (!held) return;
    this.held = null;
    if (held.events.length) this.append(held.events);
    held.release();
  }
}
