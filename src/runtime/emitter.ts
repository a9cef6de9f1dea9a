import type { Clock } from '../clock.js';
import type { CommitOps, EventInput, Store, StoredEvent, Versioned } from '../store/store.js';
import type { EventBus } from '../telemetry/bus.js';
import { createEventRecord, type CaptureSettings, type EventRecordInput } from '../telemetry/record.js';
import { defaultRedactor, redact, type Redactor } from '../telemetry/redact.js';
import { reportSwallowed } from '../telemetry/swallowed.js';

/**
 * Telemetry goes to the store first (which gives each event its cursor), then to live
 * subscribers (docs/contract.md §8.3): a subscriber never sees an event a reconnect could not replay.
 */
export class TelemetryEmitter {
  /**
   * Told of every stored and published batch (the cluster link notifies other instances of the
   * cursors, src/runtime/cluster.ts). Null with a store only this process uses.
   */
  onAppended: ((events: StoredEvent[]) => void) | null = null;
  /** Told of every batch before it is stored (its event ids), with onAppended. */
  onAppending: ((events: Array<{ event_id: string }>) => void) | null = null;

  constructor(
    private readonly store: Store,
    readonly bus: EventBus,
    private readonly settings: CaptureSettings,
    private readonly clock: Clock,
  ) {}

  /** The process's redactor (value patterns and configured secrets): also used for run records. */
  get redactor(): Redactor {
    return this.settings.redactor ?? defaultRedactor;
  }

  /** Text as it may be stored or served: secrets inside it replaced by `[REDACTED]`. */
  redactText<T extends string | null | undefined>(text: T): T {
    return (typeof text === 'string' ? this.redactor.text(text) : text) as T;
  }

  /** A JSON value as it may be stored or served: secret-named fields and secrets inside strings redacted. */
  redactValue<T>(value: T): T {
    return (value === null || value === undefined ? value : redact(value, this.redactor)) as T;
  }

  async emit(input: EventRecordInput): Promise<StoredEvent> {
    const record = createEventRecord(input, this.settings, this.clock);
    this.onAppending?.([record]);
    const [stored] = await this.store.appendEvents([record]);
    this.bus.publish(stored);
    this.onAppended?.([stored]);
    return stored;
  }

  /** Several events in one store append (one durable write), then published in order; throws like emit. */
  async emitMany(inputs: EventRecordInput[]): Promise<StoredEvent[]> {
    if (inputs.length === 0) return [];
    const records = inputs.map((i) => createEventRecord(i, this.settings, this.clock));
    this.onAppending?.(records);
    const stored = await this.store.appendEvents(records);
    for (const e of stored) this.bus.publish(e);
    this.onAppended?.(stored);
    return stored;
  }

  /**
   * A commit that carries these events (Store.commitWithEvents: stored only if the commit
   * applies), then published in order. Throws like the commit (nothing is published then).
   */
  async commitWithEvents(ops: CommitOps, inputs: EventRecordInput[]): Promise<Array<Versioned<unknown> | null>> {
    if (inputs.length === 0) return this.store.commit(ops);
    const records = this.recordsOf(inputs);
    const r = await this.store.commitWithEvents(ops, records);
    this.published(r.events);
    return r.records;
  }

  /**
   * The event records of a commit someone else issues (a background run's completion carried in
   * its agent run's final commit): hand the records to that commit, then its stored events to
   * `published`.
   */
  recordsOf(inputs: EventRecordInput[]): EventInput[] {
    const records = inputs.map((i) => createEventRecord(i, this.settings, this.clock));
    this.onAppending?.(records);
    return records;
  }

  /** Events a commit stored (see recordsOf): published in order. */
  published(stored: StoredEvent[]): void {
    for (const e of stored) this.bus.publish(e);
    this.onAppended?.(stored);
  }

  /**
   * Several events of one emitter in one store append (one durable write), then published in
   * order. A failure never reaches the caller: telemetry must not fail a run.
   */
  async emitManySafe(inputs: EventRecordInput[]): Promise<void> {
    try {
      const records = inputs.map((i) => createEventRecord(i, this.settings, this.clock));
      this.onAppending?.(records);
      const stored = await this.store.appendEvents(records);
      for (const e of stored) this.bus.publish(e);
      this.onAppended?.(stored);
    } catch (err) {
      // dropped: the run goes on
      reportSwallowed('events.append', err, { events: inputs.length, trace_id: inputs[0]?.trace_id });
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
