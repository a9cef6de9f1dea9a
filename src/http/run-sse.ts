// POST /run's answer: the run as an SSE stream (docs/http-api.md "Streams"). The route
// (src/http/runs.ts) validates and authorizes; this module starts the run (or, with an
// Idempotency-Key, replays the first request's), opens the stream once the run is accepted, and
// relays its frames in RunStream's order (src/runtime/run-stream.ts) until complete or error.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { tenantOf } from './tenancy.js';
import { newId } from '../ids.js';
import { runResponseOf } from '../runtime/run-record.js';
import { RunStream } from '../runtime/run-stream.js';
import type { Redactor } from '../telemetry/redact.js';
import type { RunRequest } from '../schemas/index.js';
import type { AppDeps } from './deps.js';
import { SseChannel, streamOptions } from './sse.js';
import { idempotencyRequestOf, replayRunStream, runExists } from './idempotent.js';
import { swallow, isRefusal } from '../telemetry/swallowed.js';

/** The flow-control options of a run request (docs/flow-control.md): none unless it names a key or a priority. */
export function flowOptions(body: RunRequest): { concurrency?: { key: string; limit: number }; priority?: number } {
  return {
    ...(body.concurrency ? { concurrency: body.concurrency } : {}),
    ...(body.priority != null ? { priority: body.priority } : {}),
  };
}

/** Starts the run of a validated POST /run and answers with its stream; resolves once the stream is written. */
export async function streamRun(deps: AppDeps, request: FastifyRequest, body: RunRequest, reply: FastifyReply, redactor: Redactor): Promise<void> {
  const { runtime } = deps;
  const runs = runtime.runs;
  if (body.webhook) deps.runtime.webhooks.checkRequestUrl(body.webhook);
  const idem = idempotencyRequestOf(request, 'startRun');
  let run_id = '';
  let channel: SseChannel | null = null;
  // The order of the frames (events, deltas held behind the events before them, frames
  // before the stream opened) is the RunStream's (src/runtime/run-stream.ts).
  const stream = new RunStream();
  // The stream opens (and its `session` frame goes out) as soon as the run is accepted, without
  // waiting for the run's first store round (RunService.start onAccepted).
  let writing: Promise<void> | null = null;
  let acceptedSession: string | null = null;
  const open = (session_id: string): SseChannel => {
    const ch = new SseChannel(reply, streamOptions(deps, { overflowContext: { run_id, session_id } }));
    acceptedSession = session_id;
    stream.open((f) => void ch.push(f), { event: 'session', data: { session_id, run_id, status: 'started' } });
    writing = ch.run();
    return ch;
  };
  let unsubscribe = (): void => {};
  /** `isNew`: the id was made just now for this request (not a keyed retry's). */
  const begin = async (id: string, isNew = false) => {
    run_id = id;
    stream.forRun(run_id);
    // Subscribe before the run exists, so its first event is not missed. The handler never
    // waits: the channel's bound (server.stream_max_queued_*) is what drops a slow reader.
    unsubscribe = runtime.bus.subscribe({ run_id }, (ev) => stream.event(ev));
    if (body.webhook) await deps.runtime.webhooks.rememberRequestUrl(run_id, body.webhook);
    return runs.start(body.query, body.session_id ?? null, {
      tenant: tenantOf(request),
      run_id,
      run_id_is_new: isNew,
      ...(body.agent_id != null ? { agent_id: body.agent_id } : {}),
      onAccepted: ({ session_id }) => {
        channel = open(session_id);
      },
      session_policy: body.session_policy ?? undefined,
      ...flowOptions(body),
      onQueued: (q) => stream.push({ event: 'queued', data: q }),
      onDelta: (text, sequence, afterEvent) => stream.delta(text, sequence, afterEvent),
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
      if (!once.fresh) return replayRunStream(deps, reply, once.target_id);
      started = once.started;
    } else started = await begin(newId('run'), true);
  } catch (err) {
    unsubscribe();
    if (!channel) throw err; // nothing was streamed yet: a plain JSON error (503, ...)
    // Accepted, then not created (the store failed): the stream says so and ends.
    const ch: SseChannel = channel;
    ch.push({
      event: 'error',
      data: { error: 'InternalServerError', message: String((err as Error)?.message ?? err), run_id, session_id: acceptedSession },
    });
    ch.close();
    await writing;
    return;
  }
  channel ??= open(started.session_id);
  const ch = channel;
  // The client closing the stream cancels the run; the server dropping a reader that fell too
  // far behind does not: the run goes on, its events stay readable (GET /events/{session_id}
  // with run_id and Last-Event-ID) and its result at GET /runs/{run_id}.
  // With an Idempotency-Key the client means to come back (a retry replays the run), so
  // leaving does not cancel: POST /runs/{run_id}/cancel does.
  if (!idem) ch.onClientClose(() => void runs.cancel(run_id, { onlyIfLive: true }).catch(swallow('http.cancel_on_client_close', { run_id }, isRefusal)));
  ch.onDropped(() => {
    stream.drop();
    unsubscribe();
  });
  void started.settled.then(
    (record) => {
      unsubscribe();
      stream.releaseAll(); // an event that could not be stored must not keep its deltas back
      ch.push({ event: 'complete', data: runResponseOf(record, redactor) });
      ch.close();
    },
    (err: unknown) => {
      unsubscribe();
      ch.push({
        event: 'error',
        data: { error: 'InternalServerError', message: String((err as Error)?.message ?? err), run_id, session_id: started.session_id },
      });
      ch.close();
    },
  );
  await writing;
}
