import type { Clock } from '../clock.js';
import type { Store, StoredEvent } from '../store/store.js';
import type { EventBus } from '../telemetry/bus.js';
import { createEventRecord, type CaptureSettings, type EventRecordInput } from '../telemetry/record.js';

/**
 * Telemetry goes to the store first (which gives each event its cursor), then to live
 * subscribers (decisions.md §8.3): a subscriber never sees an event a reconnect could not replay.
 */
export class TelemetryEmitter {
  constructor(
    private readonly store: Store,
    readonly bus: EventBus,
    private readonly settings: CaptureSettings,
    private readonly clock: Clock,
  ) {}

  async emit(input: EventRecordInput): Promise<StoredEvent> {
    const record = createEventRecord(input, this.settings, this.clock);
    const [stored] = await this.store.appendEvents([record]);
    this.bus.publish(stored);
    return stored;
  }

  /** Several events in one store append (one durable write), then published in order; throws like emit. */
  async emitMany(inputs: EventRecordInput[]): Promise<StoredEvent[]> {
    if (inputs.length === 0) return [];
    const stored = await this.store.appendEvents(inputs.map((i) => createEventRecord(i, this.settings, this.clock)));
    for (const e of stored) this.bus.publish(e);
    return stored;
  }

  /**
   * Several events of one emitter in one store append (one durable write), then published in
   * order. A failure never reaches the caller: telemetry must not fail a run.
   */
  async emitManySafe(inputs: EventRecordInput[]): Promise<void> {
    try {
      const records = inputs.map((i) => createEventRecord(i, this.settings, this.clock));
      const stored = await this.store.appendEvents(records);
      for (const e of stored) this.bus.publish(e);
    } catch {
      // dropped: the run goes on
    }
  }

  /** Like emit, but a telemetry failure never fails the caller (used on paths that must finish). */
  async emitSafe(input: EventRecordInput): Promise<StoredEvent | null> {
    try {
      return await this.emit(input);
    } catch {
      return null;
    }
  }
}
