// One run answered as the POST /run SSE stream: `session`, the run's telemetry events, `delta`s,
// then `complete` or `error` (docs/http-api.md "Streams"). POST /run uses it, and so do a fork's
// and a replay's `stream: true` (src/http/debug.ts), so every streamed run has the same frames.
import type { FastifyReply } from 'fastify';
import type { z } from 'zod';
import type { RunRecord } from '../runtime/run-record.js';
import { RunStream } from '../runtime/run-stream.js';
import type { StartOptions } from '../runtime/run-types.js';
import { isRefusal, swallow } from '../telemetry/swallowed.js';
import { RunStreamDeltaFrame, RunStreamErrorFrame, RunStreamQueuedFrame, RunStreamSessionFrame, TelemetryEvent } from '../schemas/index.js';
import type { AppDeps } from './deps.js';
import { refTo, sseResponse } from './openapi.js';
import { SseChannel, streamOptions } from './sse.js';

/** The frames of a streamed run (docs/http-api.md "Streams"); `complete` carries `complete`'s shape. */
export function runStreamResponse(description: string, complete: z.ZodType): ReturnType<typeof sseResponse> {
  return sseResponse(description, [
    { event: 'session', data: RunStreamSessionFrame, description: 'First frame: the session and run ids.' },
    {
      event: 'queued',
      data: RunStreamQueuedFrame,
      description: "Only for a run over its concurrency key's limit: it waits `queued` (docs/flow-control.md); its events follow once it starts.",
    },
    { data: TelemetryEvent, id: true, description: 'A stored telemetry event of the run; `event:` is its event_type.' },
    { event: 'delta', data: RunStreamDeltaFrame, description: 'Live answer text (never stored or replayed).' },
    { event: 'complete', data: complete, description: 'Last frame: the run result.' },
    {
      event: 'error',
      data: RunStreamErrorFrame,
      description: 'Last frame instead of complete: the service failed, or StreamOverflow (the reader fell behind; the run goes on).',
    },
  ]);
}

/** An answer that is JSON (`data`'s shape) by default, the run's SSE stream with `stream: true`. */
export function jsonOrRunStreamResponse(description: string, data: z.ZodType): ReturnType<typeof sseResponse> {
  const stream = runStreamResponse(description, data) as { content: Record<string, unknown> };
  return { description, content: { 'application/json': { schema: refTo(data) }, ...stream.content } };
}

type StreamHooks = Required<Pick<StartOptions, 'onAccepted' | 'onQueued' | 'onDelta'>>;

export class RunSse {
  // The order of the frames (events, deltas held behind the events before them, frames before
  // the stream opened) is the RunStream's (src/runtime/run-stream.ts).
  private readonly stream = new RunStream();
  private channel: SseChannel | null = null;
  private writing: Promise<void> | null = null;
  private acceptedSession: string | null = null;
  private runId = '';
  private unsubscribe = (): void => {};

  constructor(
    private readonly deps: AppDeps,
    private readonly reply: FastifyReply,
  ) {}

  /**
   * Follow `runId` from before it exists (its first event is not missed); the hooks go into the
   * run's StartOptions. The stream opens (its `session` frame goes out) as soon as the run is
   * accepted, without waiting for the run's first store round (RunService.start onAccepted).
   */
  follow(runId: string): StreamHooks {
    this.runId = runId;
    this.stream.forRun(runId);
    // The handler never waits: the channel's bound (server.stream_max_queued_*) is what drops a slow reader.
    this.unsubscribe = this.deps.runtime.bus.subscribe({ run_id: runId }, (ev) => this.stream.event(ev));
    return {
      onAccepted: ({ session_id }) => {
        this.channel = this.open(session_id);
      },
      onQueued: (q) => this.stream.push({ event: 'queued', data: q }),
      onDelta: (text, sequence, afterEvent) => this.stream.delta(text, sequence, afterEvent),
    };
  }

  /** Stop following (the run was not started: a keyed retry replays another stream). */
  stopFollowing(): void {
    this.unsubscribe();
  }

  /**
   * The start failed. Before anything was streamed the error is thrown (a plain JSON answer: 503,
   * 404, ...); after the run was accepted (then not created: the store failed) the stream says so
   * and ends.
   */
  async startFailed(err: unknown): Promise<void> {
    this.unsubscribe();
    const ch = this.channel;
    if (!ch) throw err;
    ch.push({ event: 'error', data: this.errorFrame(err, this.acceptedSession) });
    ch.close();
    await this.writing;
  }

  /**
   * Stream the started run to its end. `complete` makes the last frame's data from the settled
   * record. `cancelOnClientClose`: the client closing the stream cancels the run (not with an
   * Idempotency-Key: that client means to come back).
   */
  async serve(
    started: { session_id: string; settled: Promise<RunRecord> },
    opts: { complete: (record: RunRecord) => unknown; cancelOnClientClose: boolean },
  ): Promise<void> {
    this.channel ??= this.open(started.session_id);
    const ch = this.channel;
    const run_id = this.runId;
    const runs = this.deps.runtime.runs;
    // The server dropping a reader that fell too far behind does not cancel: the run goes on, its
    // events stay readable (GET /events/{session_id} with run_id and Last-Event-ID) and its result
    // at GET /runs/{run_id}.
    if (opts.cancelOnClientClose)
      ch.onClientClose(() => void runs.cancel(run_id, { onlyIfLive: true }).catch(swallow('http.cancel_on_client_close', { run_id }, isRefusal)));
    ch.onDropped(() => {
      this.stream.drop();
      this.unsubscribe();
    });
    void started.settled.then(
      (record) => {
        this.unsubscribe();
        this.stream.releaseAll(); // an event that could not be stored must not keep its deltas back
        ch.push({ event: 'complete', data: opts.complete(record) });
        ch.close();
      },
      (err: unknown) => {
        this.unsubscribe();
        ch.push({ event: 'error', data: this.errorFrame(err, started.session_id) });
        ch.close();
      },
    );
    await this.writing;
  }

  private open(session_id: string): SseChannel {
    const ch = new SseChannel(this.reply, streamOptions(this.deps, { overflowContext: { run_id: this.runId, session_id } }));
    this.acceptedSession = session_id;
    this.stream.open((f) => void ch.push(f), { event: 'session', data: { session_id, run_id: this.runId, status: 'started' } });
    this.writing = ch.run();
    return ch;
  }

  private errorFrame(err: unknown, session_id: string | null) {
    return { error: 'InternalServerError', message: String((err as Error)?.message ?? err), run_id: this.runId, session_id };
  }
}
