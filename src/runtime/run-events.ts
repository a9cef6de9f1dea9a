// A live run's telemetry chain (RunHost.emit builds each event; this keeps their order and
// durability). Events of one run are stored in order, then published; effects do not wait for
// them (telemetry must not add a durable write to every step's latency), and the run reads as
// ended, and settles, only once its chain drained (RunHost awaits `done`).
import type { EventRecordInput } from '../telemetry/record.js';
import type { TelemetryEmitter } from './emitter.js';

export class RunEventChain {
  /** Resolves when every event pushed so far is stored and published. */
  done: Promise<unknown> = Promise.resolve();
  /** Event order within this trace segment, 1..n (the last one given out). */
  seq = 0;
  /** Events held back with a new run's delayed creating write, in order; null once it went. */
  private held: { events: EventRecordInput[]; release: () => void } | null = null;

  /** `hold`: a new run whose creating write waits (RunHost's CREATE_FOLD_MS): its first events wait with it. */
  constructor(
    private readonly telemetry: Pick<TelemetryEmitter, 'emitManySafe'>,
    hold: boolean,
  ) {
    if (!hold) return;
    let release!: () => void;
    this.done = new Promise<void>((r) => (release = r));
    this.held = { events: [], release };
  }

  push(event: EventRecordInput): Promise<unknown> {
    // A new run's first events go to the store right before its creating write: same round, same
    // order, and no event of a run that was never stored.
    if (this.held) {
      this.held.events.push(event);
      return this.done;
    }
    // Handed to the store now, not after the previous event landed: the store's write queue is
    // first in, first out and group-commits, so the events of a step share one durable write and
    // keep their order (sequence numbers and cursors alike) without waiting on each other.
    this.done = Promise.all([this.done, this.telemetry.emitManySafe([event])]);
    return this.done;
  }

  /** The delayed creating write goes to the store now: the events held with it go first. */
  release(): void {
    const held = this.held;
    if (!held) return;
    this.held = null;
    const stored = held.events.length ? this.telemetry.emitManySafe(held.events) : Promise.resolve();
    this.done = Promise.all([this.done, stored]);
    held.release();
  }
}
