import type { FastifyReply, FastifyRequest } from 'fastify';
import { readVisibleEvents, tenantOfEvent } from '../runtime/telemetry-queries.js';
import { visibleIn } from '../runtime/tenancy.js';
import type { EventIndexField } from '../store/store.js';
import { replayThenFollow, StreamOverflowError } from '../telemetry/bus.js';
import {
  ErrorResponse,
  EventStreamQuery,
  EventsQuery,
  EventsResponse,
  HTTPValidationError,
  RunIdParams,
  RunTraceResponse,
  SessionEventsListQuery,
  SessionEventsQuery,
  SessionIdParams,
  TraceIdParams,
  TraceResponse,
  TracesListQuery,
  TracesListResponse,
  RunStreamErrorFrame,
  RunStreamSessionFrame,
  TelemetryEvent,
} from '../schemas/index.js';
import { sseResponse } from './openapi.js';
import type { AppDeps, ZodApp } from './deps.js';
import { SseChannel, serializedSize, streamOptions } from './sse.js';

const notFoundOr422 = { 404: ErrorResponse, 422: HTTPValidationError };

/** The frames of the follow streams (docs/http-api.md "Streams"). */
const EVENT_STREAM = sseResponse(
  'SSE: `session`, the stored events after the cursor (Last-Event-ID wins), then new ones as they are stored; `error` ends it (StreamOverflow, ServiceShuttingDown: reconnect with Last-Event-ID = last_cursor).',
  [
    { event: 'session', data: RunStreamSessionFrame, description: 'First frame: the session (and run filter), status `streaming`.' },
    { data: TelemetryEvent, id: true, description: 'A stored telemetry event; `event:` is its event_type, `id:` its store cursor.' },
    { event: 'error', data: RunStreamErrorFrame, description: 'Last frame: StreamOverflow or ServiceShuttingDown with last_cursor, or InternalServerError.' },
  ],
);

export function telemetryRoutes(app: ZodApp, deps: AppDeps): void {
  const q = deps.runtime.telemetryQueries;

  app.get(
    '/telemetry/events',
    {
      schema: {
        operationId: 'listEvents',
        tags: ['telemetry'],
        summary: 'Stored telemetry events (filters AND-ed; event_type repeatable)',
        querystring: EventsQuery,
        response: { 200: EventsResponse, 422: HTTPValidationError },
      },
    },
    async (request, reply) => {
      const query = request.query;
      const filters: Partial<Record<EventIndexField, string | string[]>> = {};
      for (const k of ['trace_id', 'run_id', 'session_id', 'task_id', 'event_type'] as const) if (query[k] !== undefined) filters[k] = query[k]!;
      const page = await q.eventsJson({ filters, cursor: query.cursor, limit: query.limit }, request.tenantScope);
      // The events are the store's own JSON text (what JSON.stringify of the parsed events gives),
      // spliced into the envelope: up to 1000 events are not parsed only to be serialised again.
      // A string with a JSON content type is sent by Fastify as it is.
      reply.type('application/json; charset=utf-8');
      return eventsEnvelope(query.session_id ?? null, page.events, page.next_cursor);
    },
  );

  app.get(
    '/telemetry/events/stream',
    {
      sse: { kind: 'manual', heartbeat: false },
      // No HEAD twin (Fastify adds one to every GET): a HEAD answer carries no body, so the stream's
      // headers, flushed by its first write, never left and the client hung. HEAD is a 404 here.
      exposeHeadRoute: false,
      schema: {
        operationId: 'streamEvents',
        tags: ['telemetry'],
        summary: 'Replay stored events of a session after a cursor, then follow new ones (SSE)',
        querystring: EventStreamQuery,
        response: { 200: EVENT_STREAM, 422: HTTPValidationError, 429: ErrorResponse },
      },
    },
    async (request, reply) => {
      const query = request.query;
      await streamEvents(deps, request, reply, query.session_id, query.run_id, query.cursor);
    },
  );

  app.get(
    '/telemetry/traces',
    {
      schema: {
        operationId: 'listTraces',
        tags: ['telemetry'],
        summary: 'Trace summaries, newest first (order=asc: oldest first), by run, session, task, agent, status and time range',
        querystring: TracesListQuery,
        response: { 200: TracesListResponse, 422: HTTPValidationError },
      },
    },
    async (request) => q.list(request.query, request.tenantScope),
  );

  app.get(
    '/telemetry/traces/:trace_id',
    {
      schema: {
        operationId: 'getTrace',
        tags: ['telemetry'],
        summary: 'One exact trace',
        params: TraceIdParams,
        response: { 200: TraceResponse, ...notFoundOr422 },
      },
    },
    async (request) => q.trace(request.params.trace_id, request.tenantScope),
  );

  app.get(
    '/telemetry/runs/:run_id/trace',
    {
      schema: {
        operationId: 'getRunTrace',
        tags: ['telemetry'],
        summary: 'All of a run: its latest segment (summary, trace), every segment and the waits between them',
        params: RunIdParams,
        response: { 200: RunTraceResponse, ...notFoundOr422 },
      },
    },
    async (request) => q.runTrace(request.params.run_id),
  );

  app.get(
    '/telemetry/sessions/:session_id/trace',
    {
      schema: {
        operationId: 'getSessionTrace',
        tags: ['telemetry'],
        summary: 'Latest trace of a session',
        params: SessionIdParams,
        response: { 200: TraceResponse, ...notFoundOr422 },
      },
    },
    async (request) => q.latest({ session_id: request.params.session_id }, request.tenantScope),
  );

  app.get(
    '/events/:session_id',
    {
      sse: { kind: 'manual', heartbeat: false },
      exposeHeadRoute: false, // as /telemetry/events/stream
      schema: {
        operationId: 'followSessionEvents',
        tags: ['telemetry'],
        summary: 'Compact alias of /telemetry/events/stream',
        params: SessionIdParams,
        querystring: SessionEventsQuery,
        response: { 200: EVENT_STREAM, 422: HTTPValidationError, 429: ErrorResponse },
      },
    },
    async (request, reply) => {
      const { session_id } = request.params;
      const query = request.query;
      await streamEvents(deps, request, reply, session_id, query.run_id, query.cursor);
    },
  );

  app.get(
    '/events/:session_id/list',
    {
      schema: {
        operationId: 'listSessionEvents',
        tags: ['telemetry'],
        summary: 'Compact alias: stored events of a session',
        params: SessionIdParams,
        querystring: SessionEventsListQuery,
        response: { 200: EventsResponse, 422: HTTPValidationError },
      },
    },
    async (request, reply) => {
      const { session_id } = request.params;
      const query = request.query;
      const filters: Partial<Record<EventIndexField, string>> = { session_id, ...(query.run_id ? { run_id: query.run_id } : {}) };
      const page = await q.eventsJson({ filters, cursor: query.cursor, limit: query.limit }, request.tenantScope);
      reply.type('application/json; charset=utf-8');
      return eventsEnvelope(session_id, page.events, page.next_cursor);
    },
  );

  app.get(
    '/events/:session_id/trace',
    {
      schema: {
        operationId: 'getSessionLatestTrace',
        tags: ['telemetry'],
        summary: 'Compact alias: latest trace of the session (or of run_id)',
        params: SessionIdParams,
        querystring: SessionEventsQuery,
        response: { 200: TraceResponse, ...notFoundOr422 },
      },
    },
    async (request) => {
      const { session_id } = request.params;
      const { run_id } = request.query;
      // A run id of another tenant is as missing as the session's trace would be.
      if (run_id && !request.tenantScope.all) await deps.runtime.runs.get(run_id, request.tenantScope);
      return q.latest(run_id ? { run_id } : { session_id }, request.tenantScope);
    },
  );
}

/** `{session_id, events, count, next_cursor}` (EventsResponse) around events already in JSON. */
function eventsEnvelope(sessionId: string | null, events: string[], nextCursor: string | null): string {
  return `{"session_id":${JSON.stringify(sessionId)},"events":[${events.join(',')}],"count":${events.length},"next_cursor":${JSON.stringify(nextCursor)}}`;
}

/**
 * SSE replay-then-follow (docs/contract.md §8.3): `session` first, stored events after the cursor
 * (`Last-Event-ID` wins over `cursor`), then live ones, each with `id:` = store cursor. The replay
 * waits for the socket; a consumer more than `server.stream_max_queued_events` live events (or
 * `_bytes`) behind gets `error` StreamOverflow with `last_cursor` and is closed, to resume from it.
 */
async function streamEvents(
  deps: AppDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  sessionId: string,
  runId: string | undefined,
  cursor: string | undefined,
): Promise<void> {
  const scope = request.tenantScope;
  const lastEventId = request.headers['last-event-id'];
  const after = (typeof lastEventId === 'string' && /^\d{1,16}$/.test(lastEventId) ? lastEventId : cursor) ?? null;
  const filters: Partial<Record<EventIndexField, string>> = { session_id: sessionId, ...(runId ? { run_id: runId } : {}) };
  const options = streamOptions(deps, { resumeFrom: after, heldElsewhere: () => iterator.heldBytes });
  const channel = new SseChannel(reply, options);
  const abort = new AbortController();
  channel.onClientClose(() => abort.abort());
  channel.onDropped(() => abort.abort());
  // Shutdown ends the stream with a final frame (after the loop below stops), not a cut socket.
  let shuttingDown = false;
  let lastCursor: string | null = after;
  const untrack = deps.runtime.trackStream(() => {
    shuttingDown = true;
    abort.abort();
  });
  channel.push({ event: 'session', data: { session_id: sessionId, run_id: runId ?? null, status: 'streaming' } });
  const iterator = replayThenFollow({
    after,
    signal: abort.signal,
    // Small pages: a replay waiting for a slow socket holds the rest of its page (its own copy of
    // those events, unlike live ones, which all streams share).
    readPage: (from) => readVisibleEvents(deps.store, { filters, after: from, limit: 100 }, scope),
    // Live events of other tenants never reach the stream's queue (docs/multi-tenant.md).
    subscribe: (onEvent, opts) =>
      deps.runtime.bus.subscribe(
        runId ? { run_id: runId, session_id: sessionId } : { session_id: sessionId },
        scope.all
          ? onEvent
          : (ev) => {
              if (visibleIn(scope, tenantOfEvent(ev))) onEvent(ev);
            },
        opts,
      ),
    // While the loop below waits for the socket, live events wait here: the stream's bound.
    maxLag: options.maxQueuedEvents,
    maxLagBytes: options.maxQueuedBytes,
    sizeOf: serializedSize,
    onOverflow: () => channel.drop(),
  });
  // A wait for room in the socket also ends when the stream is aborted (client gone, shutdown).
  const aborted = new Promise<void>((resolve) => abort.signal.addEventListener('abort', () => resolve(), { once: true }));
  void (async () => {
    try {
      for await (const ev of iterator) {
        lastCursor = ev.cursor;
        // The replay reads the store no faster than the client reads the stream.
        const room = channel.send({ event: ev.event_type, id: ev.cursor, data: ev });
        if (room) await Promise.race([room, aborted]);
      }
    } catch (err) {
      if (err instanceof StreamOverflowError) {
        channel.drop(); // already dropped by onOverflow; the error frame carries the last cursor sent
      } else if (!abort.signal.aborted) {
        channel.push({ event: 'error', data: { error: 'InternalServerError', message: 'the event stream failed' } });
      }
    } finally {
      untrack();
      if (shuttingDown) {
        channel.push({
          event: 'error',
          data: {
            error: 'ServiceShuttingDown',
            message: 'the service is shutting down; reconnect with Last-Event-ID (or cursor) set to last_cursor to continue',
            last_cursor: lastCursor,
          },
        });
      }
      channel.close();
    }
  })();
  await channel.run();
}
