import type { FastifyInstance } from 'fastify';
import { deciderOf } from './auth.js';
import { tenantOf } from './tenancy.js';
import { newId } from '../ids.js';
import { approvalForAnswer, publicRunView, runResponseOf, type RunRecord } from '../runtime/run-record.js';
import { redactorForConfig } from '../telemetry/secrets.js';
import { domainError } from '../errors.js';
import type { SessionPolicy } from '../runtime/runs.js';
import { RunStream } from '../runtime/run-stream.js';
import { mayDecide, type Decider } from '../runtime/run-decisions.js';
import type { ApprovalState } from '../../machines/run.machine.js';
import {
  ApprovalDecisionRequest,
  ApprovalView,
  BudgetDecisionRequest,
  BudgetDecisionResponse,
  OutcomeRequest,
  OutcomeResponse,
  RunApprovalParams,
  RunBudgetResponse,
  RunCancelResponse,
  RunIdParams,
  RunRequest,
  RunResponse,
  RunView,
  RunsListQuery,
  RunsListResponse,
  SessionClearedResponse,
  SessionHistoryQuery,
  SessionHistoryResponse,
  SessionIdParams,
  ErrorResponse,
  HTTPValidationError,
  RunStreamDeltaFrame,
  RunStreamQueuedFrame,
  RunStreamErrorFrame,
  RunStreamSessionFrame,
  TelemetryEvent,
} from '../schemas/index.js';
import { sseResponse } from './openapi.js';
import type { AppDeps } from './deps.js';
import { SseChannel, streamOptions } from './sse.js';
import { IdempotencyHeaders, idempotencyRequestOf, once, replayRunStream, runExists, waitRunSettled } from './idempotent.js';
import { swallow, isRefusal } from '../telemetry/swallowed.js';

const errors = { 404: ErrorResponse, 409: ErrorResponse, 422: HTTPValidationError };

/** The frames of POST /run (docs/http-api.md "Streams"). */
const RUN_STREAM = sseResponse('The run as an SSE stream: `session`, its telemetry events (with `id:`), `delta`s, then `complete` or `error`.', [
  { event: 'session', data: RunStreamSessionFrame, description: 'First frame: the session and run ids.' },
  {
    event: 'queued',
    data: RunStreamQueuedFrame,
    description: "Only for a run over its concurrency key's limit: it waits `queued` (docs/flow-control.md); its events follow once it starts.",
  },
  { data: TelemetryEvent, id: true, description: 'A stored telemetry event of the run; `event:` is its event_type.' },
  { event: 'delta', data: RunStreamDeltaFrame, description: 'Live answer text (never stored or replayed).' },
  { event: 'complete', data: RunResponse, description: 'Last frame: the run result.' },
  {
    event: 'error',
    data: RunStreamErrorFrame,
    description: 'Last frame instead of complete: the service failed, or StreamOverflow (the reader fell behind; the run goes on).',
  },
]);

export function runRoutes(app: FastifyInstance, deps: AppDeps): void {
  const { runtime } = deps;
  const runs = runtime.runs;
  /**
   * A run's settled record, or (docs/contract.md §3.4) AGT_ERR_RUN_TIMEOUT when it still waits
   * `queued` for its concurrency key at the request timeout: the run stays queued. A started run
   * has its own timeout (it ends `timeout`), so only a queued one needs this.
   */
  const settledOrQueueTimeout = async (started: { run_id: string; settled: Promise<RunRecord> }): Promise<RunRecord> => {
    let timer: NodeJS.Timeout | null = null;
    const late = new Promise<null>((resolve) => {
      timer = setTimeout(() => resolve(null), deps.config.server.request_timeout_seconds * 1000);
      timer.unref();
    });
    const record = await Promise.race([started.settled, late]);
    if (record) {
      if (timer) clearTimeout(timer);
      return record;
    }
    const now = await runs.get(started.run_id);
    if (now.status === 'queued') throw domainError('AGT_ERR_RUN_TIMEOUT', [started.run_id, started.run_id]);
    return started.settled; // it started just in time: its own timeout ends it
  };
  // Answers are redacted with the process's set: configured secrets and what registered agents may resolve.
  const redactor = redactorForConfig(deps.config);

  app.post(
    '/run',
    {
      sse: { kind: 'manual', heartbeat: false },
      schema: {
        operationId: 'startRun',
        tags: ['runs'],
        summary: 'Start a run; the answer is an SSE stream: session, telemetry events, deltas, then complete or error',
        headers: IdempotencyHeaders,
        body: RunRequest,
        response: { 200: RUN_STREAM, 404: ErrorResponse, 409: ErrorResponse, 422: HTTPValidationError, 429: ErrorResponse, 503: ErrorResponse },
      },
    },
    async (request, reply) => {
      const body = request.body as RunBody;
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
          ...(body.metadata ? { metadata: body.metadata } : {}),
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
    },
  );

  app.post(
    '/run/sync',
    {
      schema: {
        operationId: 'runSync',
        tags: ['runs'],
        summary: 'Run and answer with the RunResponse (any outcome, incl. awaiting_*)',
        headers: IdempotencyHeaders,
        body: RunRequest,
        response: { 200: RunResponse, 404: ErrorResponse, 409: ErrorResponse, 422: HTTPValidationError, 503: ErrorResponse, 504: ErrorResponse },
      },
    },
    async (request) => {
      const body = request.body as RunBody;
      if (body.webhook) deps.runtime.webhooks.checkRequestUrl(body.webhook);
      const begin = async (run_id: string) => {
        if (body.webhook) await deps.runtime.webhooks.rememberRequestUrl(run_id, body.webhook);
        return runs.start(body.query, body.session_id ?? null, {
          tenant: tenantOf(request),
          ...(body.metadata ? { metadata: body.metadata } : {}),
          run_id,
          ...(body.agent_id != null ? { agent_id: body.agent_id } : {}),
          session_policy: body.session_policy ?? undefined,
          ...flowOptions(body),
        });
      };
      const idem = idempotencyRequestOf(request, 'runSync');
      // Only a run with a concurrency key can wait `queued` past the request timeout.
      const settledOrTimeout = body.concurrency ? settledOrQueueTimeout : (started: { settled: Promise<RunRecord> }) => started.settled;
      if (!idem) return runResponseOf(await settledOrTimeout(await begin(newId('run'))), redactor);
      const once = await deps.runtime.idempotency.startOnce(
        idem,
        () => newId('run'),
        (id) => runExists(deps, id),
        begin,
      );
      if (once.fresh) return runResponseOf(await settledOrTimeout(once.started), redactor);
      const record = await waitRunSettled(deps, once.target_id);
      if (!record) throw domainError('AGT_ERR_RUN_TIMEOUT', [once.target_id, once.target_id]);
      return runResponseOf(record, redactor);
    },
  );

  app.get(
    '/runs',
    {
      schema: {
        operationId: 'listRuns',
        tags: ['runs'],
        summary: 'List runs, oldest first (order=desc: newest first), by status, session, agent, task and time range',
        querystring: RunsListQuery,
        response: { 200: RunsListResponse, 422: HTTPValidationError },
      },
    },
    async (request) => {
      const page = await runs.list(request.query as RunsListQuery, request.tenantScope);
      const decider = deciderOf(request);
      return { runs: page.runs.map((r) => withMayDecide(publicRunView(r, redactor), decider)), total: page.total, next_cursor: page.next_cursor };
    },
  );

  app.get(
    '/runs/:run_id',
    {
      schema: { operationId: 'getRun', tags: ['runs'], summary: 'One run', params: RunIdParams, response: { 200: RunView, ...errors } },
    },
    async (request) => {
      const record = await runs.get((request.params as { run_id: string }).run_id, request.tenantScope);
      return { ...withMayDecide(publicRunView(record, redactor), deciderOf(request)), queue: await runs.queueOf(record) };
    },
  );

  app.post(
    '/runs/:run_id/cancel',
    {
      schema: {
        operationId: 'cancelRun',
        tags: ['runs'],
        summary: 'Cancel a run',
        params: RunIdParams,
        headers: IdempotencyHeaders,
        response: { 200: RunCancelResponse, ...errors },
      },
    },
    async (request) => once(deps, request, 'cancelRun', () => runs.cancel((request.params as { run_id: string }).run_id)),
  );

  app.post(
    '/runs/:run_id/resume',
    {
      schema: {
        operationId: 'resumeRun',
        tags: ['runs'],
        summary: 'Continue a decided, interrupted or orphaned run and answer with its result',
        params: RunIdParams,
        response: { 200: RunResponse, ...errors },
      },
    },
    async (request) => {
      const { run_id } = request.params as { run_id: string };
      // A draining process starts nothing new; the run stays stored as it is and the next start
      // (or another instance) resumes it.
      if (runs.shuttingDown) throw domainError('AGT_ERR_SHUTTING_DOWN', [], { headers: { 'retry-after': '5' } });
      const rec = await runs.get(run_id, request.tenantScope);
      const cause =
        rec.status === 'interrupted' ? 'interrupted' : rec.status === 'running' ? 'recovered_after_lapsed_lease' : ((rec.decision ?? 'approval') as 'approval');
      const started = await runs.resume(run_id, { cause, trigger: 'explicit' });
      return runResponseOf(await started.settled, redactor);
    },
  );

  app.post(
    '/runs/:run_id/approvals/:approval_id',
    {
      schema: {
        operationId: 'decideApproval',
        tags: ['decisions'],
        summary: 'Approve or deny a pending tool call',
        params: RunApprovalParams,
        headers: IdempotencyHeaders,
        body: ApprovalDecisionRequest,
        response: { 200: ApprovalView, 403: ErrorResponse, ...errors },
      },
    },
    async (request) => {
      const { run_id, approval_id } = request.params as { run_id: string; approval_id: string };
      const body = request.body as { decision: 'approve' | 'deny'; approver: string; arguments?: Record<string, unknown> | null; note?: string | null };
      checkApprover(deps, request.apiKeyName, body.approver);
      // Redacted before the idempotency record stores the answer, so a replay is the same and no copy is raw.
      return once(deps, request, 'decideApproval', async () =>
        approvalForAnswer(await runs.decideApproval(run_id, approval_id, body, deciderOf(request)), redactor),
      );
    },
  );

  app.get(
    '/runs/:run_id/budget',
    {
      schema: {
        operationId: 'getRunBudget',
        tags: ['decisions'],
        summary: 'Every budget covering the run',
        params: RunIdParams,
        response: { 200: RunBudgetResponse, ...errors },
      },
    },
    async (request) => runs.budgetView((request.params as { run_id: string }).run_id),
  );

  app.post(
    '/runs/:run_id/budget',
    {
      schema: {
        operationId: 'decideBudget',
        tags: ['decisions'],
        summary: 'Grant or deny the budget a run waits for',
        params: RunIdParams,
        headers: IdempotencyHeaders,
        body: BudgetDecisionRequest,
        response: { 200: BudgetDecisionResponse, 403: ErrorResponse, ...errors },
      },
    },
    async (request) => {
      const body = request.body as { decision: 'grant' | 'deny'; approver: string; amount?: number | null; note?: string | null; request_id?: string | null };
      checkApprover(deps, request.apiKeyName, body.approver);
      return once(deps, request, 'decideBudget', () => runs.decideBudget((request.params as { run_id: string }).run_id, body));
    },
  );

  app.post(
    '/runs/:run_id/outcome',
    {
      schema: {
        operationId: 'recordOutcome',
        tags: ['runs'],
        summary: 'Report what a run turned out to be worth',
        params: RunIdParams,
        body: OutcomeRequest,
        response: { 200: OutcomeResponse, ...errors },
      },
    },
    async (request) => runs.recordOutcome((request.params as { run_id: string }).run_id, request.body as { source: string }),
  );

  app.get(
    '/sessions/:session_id/history',
    {
      schema: {
        operationId: 'getSessionHistory',
        tags: ['sessions'],
        summary: 'The conversation of a session, oldest message first, a page at a time',
        params: SessionIdParams,
        querystring: SessionHistoryQuery,
        response: { 200: SessionHistoryResponse, ...errors },
      },
    },
    async (request) => runs.history((request.params as { session_id: string }).session_id, request.query as SessionHistoryQuery, tenantOf(request)),
  );

  app.delete(
    '/sessions/:session_id',
    {
      schema: {
        operationId: 'clearSession',
        tags: ['sessions'],
        summary: 'Forget a session',
        params: SessionIdParams,
        response: { 200: SessionClearedResponse, ...errors },
      },
    },
    async (request) => runs.clearSession((request.params as { session_id: string }).session_id, tenantOf(request)),
  );
}

/** A run view whose pending approvals say whether the asking key may decide them (the approvals inboxes). */
function withMayDecide<V extends { approvals: ApprovalState[] }>(view: V, decider: Decider | null): V {
  if (!view.approvals.some((a) => a.status === 'pending')) return view;
  return { ...view, approvals: view.approvals.map((a) => (a.status === 'pending' ? { ...a, may_decide: mayDecide(a, decider) } : a)) };
}

/** The body of POST /run and /run/sync as validated (RunRequest). */
interface RunBody {
  query: string;
  session_id?: string | null;
  webhook?: string | null;
  agent_id?: string | null;
  session_policy?: SessionPolicy | null;
  concurrency?: { key: string; limit: number } | null;
  priority?: number | null;
  metadata?: Record<string, unknown> | null;
}

/** The flow-control options of a run request (docs/flow-control.md): none unless it names a key or a priority. */
function flowOptions(body: RunBody): { concurrency?: { key: string; limit: number }; priority?: number } {
  return {
    ...(body.concurrency ? { concurrency: body.concurrency } : {}),
    ...(body.priority != null ? { priority: body.priority } : {}),
  };
}

/** With `auth.bind_approver`, the approver named in a decision must be the key's name. */
function checkApprover(deps: AppDeps, keyName: string | undefined, approver: string): void {
  if (deps.config.auth.bind_approver && keyName && keyName !== approver) {
    throw domainError('AGT_ERR_APPROVER_MISMATCH', [approver, keyName]);
  }
}
