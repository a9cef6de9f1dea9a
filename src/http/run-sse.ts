// One run answered as the POST /run SSE stream: `session`, the run's telemetry events, `delta`s,
// then `complete` or `error` (docs/http-api.md "Streams"). POST /run uses it (streamRun: the route
// in src/http/runs.ts validates and authorizes, this module starts the run or, with an
// Idempotency-Key, replays the first request's), and so do a fork's and a replay's `stream: true`
// (src/http/debug.ts), so every streamed run has the same frames.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { z } from 'zod';
import { newId } from '../ids.js';
import { runResponseOf, type RunRecord } from '../runtime/run-record.js';
import { RunStream } from '../runtime/run-stream.js';
import type { StartOptions } from '../runtime/run-types.js';
import { isRefusal, swallow } from '../telemetry/swallowed.js';
import type { Redactor } from '../telemetry/redact.js';
import { RunStreamDeltaFrame, RunStreamErrorFrame, RunStreamQueuedFrame, RunStreamSessionFrame, TelemetryEvent, type RunRequest } from '../schemas/index.js';
import type { AppDeps } from './deps.js';
import { idempotencyRequestOf, replayRunStream, runExists } from './idempotent.js';
import { tenantOf } from './tenancy.js';
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

/** The flow-control options of a run request (docs/flow-control.md): none unless it names a key or a priority. */
export function flowOptions(body: RunRequest): { concurrency?: { key: string; limit: number }; priority?: number } {
  return {
    ...(body.concurrency ? { concurrency: body.concurrency } : {}),
    ...(body.priority != null ? { priority: body.priority } : {}),
  };
}

/** Starts the run of a validated POST /run and answers with its stream; resolves once the stream is written. */
export async function streamRun(deps: AppDeps, request: FastifyRequest, body: RunRequest, reply: FastifyReply, redactor: Redactor): Promise<void> {
  const runs = deps.runtime.runs;
  if (body.webhook) deps.runtime.webhooks.checkRequestUrl(body.webhook);
  const idem = idempotencyRequestOf(request, 'startRun');
  const sse = new RunSse(deps, reply);
  /** `isNew`: the id was made just now for this request (not a keyed retry's). */
  const begin = async (run_id: string, isNew = false) => {
    const hooks = sse.follow(run_id);
    if (body.webhook) await deps.runtime.webhooks.rememberRequestUrl(run_id, body.webhook);
    return runs.start(body.query, body.session_id ?? null, {
      tenant: tenantOf(request),
      ...(body.metadata ? { metadata: body.metadata } : {}),
      run_id,
      run_id_is_new: isNew,
      ...(body.agent_id != null ? { agent_id: body.agent_id } : {}),
      session_policy: body.session_policy ?? undefined,
      ...flowOptions(body),
      ...hooks,
    });
  };
  let started;
  try {
    if (idem) {
      // A retry (same key, same body) gets the first request's run, replayed from its first event.
      const once = await deps.runtime.idempotency.startOnce(
        idem,
        () => newId('run'),
        (id) => runExists(deps, id),
        begin,
      );
      if (!once.fresh) {
        sse.stopFollowing();
        return replayRunStream(deps, reply, once.target_id);
      }
      started = once.started;
    } else started = await begin(newId('run'), true);
  } catch (err) {
    return sse.startFailed(err);
  }
  // With an Idempotency-Key the client means to come back (a retry replays the run), so leaving
  // does not cancel: POST /runs/{run_id}/cancel does.
  await sse.serve(started, { complete: (record) => runResponseOf(record, redactor), cancelOnClientClose: !idem });
}
