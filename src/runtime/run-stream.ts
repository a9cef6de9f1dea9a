// The frames of one streamed run (POST /run), in the order things happened. Telemetry events
// reach the stream when stored and published (a store round after they were emitted); text
// deltas at once. A delta therefore waits until every event the run emitted before it has gone
// out: a delta of the next model call must not overtake the tool_result before it. Frames that
// arrive before the stream is open (the run's first events, before it is accepted) wait too.
// Transport-free: the HTTP route hands it a sink (its SSE channel).
import type { StoredEvent } from '../store/store.js';

/** One frame of the stream (an SSE frame: `event:`, `id:`, JSON `data:`). */
export interface RunFrame {
  event: string;
  data: unknown;
  id?: string;
}

export class RunStream {
  private sink: ((frame: RunFrame) => void) | null = null;
  /** Frames that came before the stream opened, in order. */
  private readonly early: RunFrame[] = [];
  /** The highest `sequence` of the run's events sent so far. */
  private lastEventSeq = 0;
  /** Deltas waiting for the event they came after, in order. */
  private readonly held: Array<{ after: number; frame: RunFrame }> = [];
  private dropped = false;
  private runId = '';

  /** The run the stream is for (its deltas carry the id). */
  forRun(runId: string): void {
    this.runId = runId;
  }

  /** Frames go to `sink` from now on, `first` before anything that waited for the stream to open. */
  open(sink: (frame: RunFrame) => void, first?: RunFrame): void {
    if (first) sink(first);
    for (const f of this.early) sink(f);
    this.early.length = 0;
    this.sink = sink;
  }

  /** A frame out now, or as soon as the stream opens (the `complete` or `error` frame). */
  push(frame: RunFrame): void {
    if (this.sink) this.sink(frame);
    else this.early.push(frame);
  }

  /** A stored telemetry event of the run, as the bus publishes it; deltas that waited for it follow. */
  event(ev: StoredEvent): void {
    this.push({ event: ev.event_type, id: ev.cursor, data: ev });
    if (typeof ev.sequence === 'number' && ev.sequence > this.lastEventSeq) this.lastEventSeq = ev.sequence;
    this.releaseDeltas();
  }

  /** A live text delta (StartOptions.onDelta): `afterEvent` is the sequence of the last event the run emitted before it. */
  delta(text: string, sequence: number, afterEvent: number): void {
    if (this.dropped) return; // nothing is sent any more, and waiting deltas would pile up
    const frame = { event: 'delta', data: { run_id: this.runId, text, sequence } };
    if (this.held.length === 0 && afterEvent <= this.lastEventSeq) this.push(frame);
    else this.held.push({ after: afterEvent, frame });
  }

  /** The run settled: deltas still held go out (an event that could not be stored must not keep them back). */
  releaseAll(): void {
    this.releaseDeltas(true);
  }

  /** The reader was dropped (it fell too far behind): no more deltas, and none kept. */
  drop(): void {
    this.dropped = true;
    this.held.length = 0;
  }

  private releaseDeltas(all = false): void {
    while (this.held.length > 0 && (all || this.held[0].after <= this.lastEventSeq)) this.push(this.held.shift()!.frame);
  }
}
