// HTTP side of Idempotency-Key (src/integrations/idempotency.ts): the header's schema (documented
// in OpenAPI, validated: 422 loc ["header", "idempotency-key"]), the caller's scope, and the answers
// a retried request gets (POST /run: its run's stream replayed from the first event, live while it
// runs; POST /run/sync: the run's result once it settles).
import { tenantKey } from '../runtime/tenancy.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { IDEMPOTENCY_HEADER, IDEMPOTENCY_KEY_PATTERN, MAX_IDEMPOTENCY_KEY_LENGTH, keyOfHeaders, type IdempotencyRequest } from '../integrations/idempotency.js';
import { runResponseOf, type RunRecord } from '../runtime/run-record.js';
import { redactorForConfig } from '../telemetry/secrets.js';
import type { AppDeps } from './deps.js';
import type { BackgroundManager } from '../background/manager.js';
import { TERMINAL, WAITING } from '../background/types.js';
import { HttpDetailError, notFound } from '../errors.js';
import type { BackgroundRun, BackgroundTaskRunRequest } from '../schemas/index.js';
import { SseChannel, streamOptions } from './sse.js';
import { repos } from '../store/repos/index.js';

/** The optional header of the idempotent routes (OpenAPI header parameter). */
export const IdempotencyHeaders = z.looseObject({
  [IDEMPOTENCY_HEADER]: z
    .string()
    .max(MAX_IDEMPOTENCY_KEY_LENGTH)
    .regex(IDEMPOTENCY_KEY_PATTERN, { message: `1 to ${MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII characters` })
    .optional()
    .describe(
      `Makes the request safe to retry: the same key with the same body within idempotency.ttl_seconds (24 h) answers with the original result and never does the work twice; the same key with another body is 422. Scoped to the caller's API key. 1..${MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII characters.`,
    ),
});

/**
 * The idempotency scope of a request, or null when it carries no key. `body`: what a retry must
 * repeat, when not the whole request body (a JSON-RPC call without its `id`, which clients make
 * anew for every request, retries included).
 */
export function idempotencyRequestOf(request: FastifyRequest, operation: string, body: unknown = request.body): IdempotencyRequest | null {
  const key = keyOfHeaders(request.headers as Record<string, unknown>);
  if (key === null) return null;
  return {
    // Keys live in the namespace of the tenant the request acts in: a global key's key in tenant A
    // is not its key in tenant B (docs/multi-tenant.md).
    principal: tenantKey(request.tenantScope.tenant, request.apiKeyName ?? 'anonymous'),
    key,
    operation,
    method: request.method,
    path: request.url.split('?')[0],
    body: body ?? null,
  };
}

/** A decision route's work, done once per Idempotency-Key (a retry gets the stored answer). */
export function once<T>(deps: AppDeps, request: FastifyRequest, operation: string, exec: () => Promise<T>): Promise<T> {
  const idem = idempotencyRequestOf(request, operation);
  return idem ? deps.runtime.idempotency.respondOnce(idem, exec) : exec();
}

export async function runExists(deps: AppDeps, runId: string): Promise<boolean> {
  return (await repos(deps.store).runs.get(runId)) !== null;
}

const settledStatus = (s: RunRecord['status']) => s !== 'running';

/**
 * Waits (bounded by server.request_timeout_seconds) until the run is no longer `running`; wakes on
 * its events and re-reads the record at least every second (its owner may be another process).
 */
export async function waitRunSettled(deps: AppDeps, runId: string, signal?: AbortSignal): Promise<RunRecord | null> {
  const deadline = Date.now() + deps.config.server.request_timeout_seconds * 1000;
  let wake: (() => void) | null = null;
  const unsubscribe = deps.runtime.bus.subscribe({ run_id: runId }, () => wake?.());
  const offSettled = deps.runtime.runs.onSettled((r) => {
    if (r.run_id === runId) wake?.();
  });
  try {
    for (;;) {
      const rec = await repos(deps.store).runs.get<RunRecord>(runId);
      // The key outlived its run (deleted since): nothing to answer with.
      if (!rec) throw notFound('run of this Idempotency-Key', runId);
      if (settledStatus(rec.value.status)) return rec.value;
      if (Date.now() > deadline || signal?.aborted) return null;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 1000);
        wake = () => {
          clearTimeout(t);
          resolve();
        };
        signal?.addEventListener('abort', () => wake?.(), { once: true });
      });
      wake = null;
    }
  } finally {
    unsubscribe();
    offSettled();
  }
}

/**
 * The answer to a retried POST /run: the run's stream again, from its first stored event, live
 * while it goes on, then `complete` (or `error`). Deltas are not stored, so none are replayed.
 * Closing this stream does not cancel the run.
 */
export async function replayRunStream(deps: AppDeps, reply: FastifyReply, runId: string): Promise<void> {
  const first = await repos(deps.store).runs.get<RunRecord>(runId);
  if (!first) throw notFound('run of this Idempotency-Key', runId); // deleted since: before the stream opens
  const sessionId = first.value.session_id;
  const channel = new SseChannel(reply, streamOptions(deps, { overflowContext: { run_id: runId, session_id: sessionId } }));
  const abort = new AbortController();
  channel.onClientClose(() => abort.abort());
  channel.onDropped(() => abort.abort());
  let shuttingDown = false;
  const untrack = deps.runtime.trackStream(() => {
    shuttingDown = true;
    abort.abort();
  });
  channel.push({ event: 'session', data: { session_id: sessionId, run_id: runId, status: 'started' } });
  const deadline = Date.now() + deps.config.server.request_timeout_seconds * 1000;
  let wake: (() => void) | null = null;
  const unsubscribe = deps.runtime.bus.subscribe({ run_id: runId }, () => wake?.());
  const offSettled = deps.runtime.runs.onSettled((r) => {
    if (r.run_id === runId) wake?.();
  });
  abort.signal.addEventListener('abort', () => wake?.(), { once: true });
  let after: string | null = null;
  /** Sends every stored event after `after`; false when the stream ended meanwhile. */
  const drain = async (): Promise<boolean> => {
    for (;;) {
      const page = await deps.store.readEvents({ filters: { run_id: runId }, after, limit: 200 });
      for (const ev of page.events) {
        if (abort.signal.aborted) return false;
        after = ev.cursor;
        const room = channel.send({ event: ev.event_type, id: ev.cursor, data: ev });
        if (room) await room;
      }
      if (!page.next_cursor || page.events.length === 0) return !abort.signal.aborted;
    }
  };
  void (async () => {
    try {
      for (;;) {
        if (!(await drain())) return;
        const rec = await repos(deps.store).runs.get<RunRecord>(runId);
        if (rec && settledStatus(rec.value.status)) {
          // Its events were stored before the record said so: one more read has them all.
          if (!(await drain())) return;
          channel.push({ event: 'complete', data: runResponseOf(rec.value, redactorForConfig(deps.config)) });
          return;
        }
        if (Date.now() > deadline) {
          channel.push({
            event: 'error',
            data: {
              error: 'GatewayTimeout',
              message: `run ${runId} is still running; follow it at GET /events/{session_id}?run_id=${runId}`,
              run_id: runId,
              session_id: sessionId,
            },
          });
          return;
        }
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, 1000);
          wake = () => {
            clearTimeout(t);
            resolve();
          };
        });
        wake = null;
      }
    } catch {
      if (!abort.signal.aborted)
        channel.push({ event: 'error', data: { error: 'InternalServerError', message: 'the run stream failed', run_id: runId, session_id: sessionId } });
    } finally {
      unsubscribe();
      offSettled();
      untrack();
      // As the follow streams do: a last frame, then retry with the same key (or follow the run).
      if (shuttingDown)
        channel.push({
          event: 'error',
          data: {
            error: 'ServiceShuttingDown',
            message: 'the service is shutting down; retry with the same Idempotency-Key to get this run again',
            run_id: runId,
            session_id: sessionId,
            last_cursor: after,
          },
        });
      channel.close();
    }
  })();
  await channel.run();
}

/**
 * Starts a manual background run with a chosen id; resolves once the run exists (`all` is the
 * route's whole answer, which with `wait` comes later).
 */
export function startTaskRun(bg: BackgroundManager, taskId: string, body: BackgroundTaskRunRequest, runId: string): Promise<{ all: Promise<BackgroundRun> }> {
  return new Promise((resolve, reject) => {
    const all = bg.runTask(taskId, body, { run_id: runId, onQueued: async () => resolve({ all }) });
    all.catch(reject); // before it was queued: the start failed (after: no-op; `all` carries it)
  });
}

/**
 * A debounced manual trigger (src/background/debounce.ts). The Idempotency-Key deduplicates before
 * debouncing: the first request's answer (its run) is kept, and a retry joins no window again; it
 * answers that run as it is now, or with `wait` once it ends. A webhook is told of the run the
 * trigger joined.
 */
export async function debouncedTrigger(deps: AppDeps, taskId: string, body: BackgroundTaskRunRequest, idem: IdempotencyRequest | null): Promise<BackgroundRun> {
  const bg = deps.runtime.background;
  const webhook = body.webhook;
  if (webhook) deps.runtime.webhooks.checkRequestUrl(webhook);
  const onQueued = webhook ? (run: BackgroundRun) => deps.runtime.webhooks.rememberRequestUrl(run.run_id, webhook) : undefined;
  // Without a key, runTask waits itself (on the engine's settle waiters) after the run is queued.
  if (!idem) return bg.runTask(taskId, body, { onQueued });
  const first = await deps.runtime.idempotency.respondOnce(idem, () => bg.runTask(taskId, { ...body, wait: false }, { onQueued }));
  return waitBackgroundRun(deps, first.run_id, body.wait);
}

/** A retried manual run: the run as it is now, or with `wait` once it ends or waits for a person. */
export async function waitBackgroundRun(deps: AppDeps, runId: string, wait: boolean): Promise<BackgroundRun> {
  const bg = deps.runtime.background;
  const budget = deps.config.server.request_timeout_seconds;
  const deadline = Date.now() + budget * 1000;
  for (;;) {
    const run = await bg.runs.getRun(runId);
    if (!wait || TERMINAL.has(run.status) || WAITING.has(run.status)) return run;
    if (Date.now() > deadline) {
      throw new HttpDetailError(
        504,
        {
          message: `background run ${runId} did not finish within the wait budget of ${budget} s; it goes on and can be inspected at GET /background/runs/${runId}`,
          run_id: runId,
          task_id: run.task_id,
          status: run.status,
          request_timeout_seconds: budget,
          wait_timeout_seconds: budget,
        },
        'AGT_ERR_RUN_WAIT_TIMEOUT',
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}
