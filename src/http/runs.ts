import { deciderOf } from './auth.js';
import { tenantOf } from './tenancy.js';
import { newId } from '../ids.js';
import { approvalForAnswer, publicRunView, runResponseOf, type RunRecord } from '../runtime/run-record.js';
import type { StartedRun } from '../runtime/run-types.js';
import { redactorForConfig } from '../telemetry/secrets.js';
import { domainError } from '../errors.js';
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
} from '../schemas/index.js';
import type { AppDeps, ZodApp } from './deps.js';
import { IdempotencyHeaders, idempotencyRequestOf, once, runExists, waitRunSettled } from './idempotent.js';
import { flowOptions, runStreamResponse, streamRun } from './run-sse.js';

const errors = { 404: ErrorResponse, 409: ErrorResponse, 422: HTTPValidationError };

/** The frames of POST /run (docs/http-api.md "Streams"). */
const RUN_STREAM = runStreamResponse(
  'The run as an SSE stream: `session`, its telemetry events (with `id:`), `delta`s, then `complete` or `error`.',
  RunResponse,
);

export function runRoutes(app: ZodApp, deps: AppDeps): void {
  const { runtime } = deps;
  const runs = runtime.runs;
  /**
   * A run's settled record, or (docs/contract.md §3.4) AGT_ERR_RUN_TIMEOUT when it still waits
   * `queued` for its concurrency key at the request timeout: the run stays queued. A started run
   * has its own timeout (it ends `timeout`), so only a queued one needs this: a keyed run that
   * started at once waits for its settled alone (no timer, no race per run).
   */
  const settledOrTimeout = (started: StartedRun): Promise<RunRecord> => (started.queued ? settledOrQueueTimeout(started) : started.settled);
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
    async (request, reply) => streamRun(deps, request, request.body, reply, redactor),
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
      const body = request.body;
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
      const page = await runs.list(request.query, request.tenantScope);
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
      const record = await runs.get(request.params.run_id, request.tenantScope);
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
    async (request) => once(deps, request, 'cancelRun', () => runs.cancel(request.params.run_id)),
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
      const { run_id } = request.params;
      // A draining process starts nothing new; the run stays stored as it is and the next start
      // (or another instance) resumes it.
      if (runs.shuttingDown) throw domainError('AGT_ERR_SHUTTING_DOWN', [], { headers: { 'retry-after': '5' } });
      const rec = await runs.get(run_id, request.tenantScope);
      // A background run's agent run goes on only under its background run's lease, through that
      // run's own resume (docs/background.md "Approvals"; docs/architecture.md "Which instance owns a run").
      if (rec.kind === 'background') throw domainError('AGT_ERR_RUN_IS_BACKGROUND', [run_id, 'resume'], { detail: 'background' });
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
      const { run_id, approval_id } = request.params;
      const body = request.body;
      checkApprover(deps, request.apiKeyName, body.approver);
      // Redacted before the idempotency record stores the answer, so a replay is the same and no copy is raw.
      return once(deps, request, 'decideApproval', async () =>
        approvalForAnswer(await runs.decisions.decideApproval(run_id, approval_id, body, deciderOf(request)), redactor),
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
    async (request) => runs.decisions.budgetView(request.params.run_id),
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
      const body = request.body;
      checkApprover(deps, request.apiKeyName, body.approver);
      return once(deps, request, 'decideBudget', () => runs.decisions.decideBudget(request.params.run_id, body));
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
    async (request) => runs.decisions.recordOutcome(request.params.run_id, request.body),
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
    async (request) => runs.history(request.params.session_id, request.query, tenantOf(request)),
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
    async (request) => runs.clearSession(request.params.session_id, tenantOf(request)),
  );
}

/** A run view whose pending approvals say whether the asking key may decide them (the approvals inboxes). */
function withMayDecide<V extends { approvals: ApprovalState[] }>(view: V, decider: Decider | null): V {
  if (!view.approvals.some((a) => a.status === 'pending')) return view;
  return { ...view, approvals: view.approvals.map((a) => (a.status === 'pending' ? { ...a, may_decide: mayDecide(a, decider) } : a)) };
}

/** With `auth.bind_approver`, the approver named in a decision must be the key's name. */
function checkApprover(deps: AppDeps, keyName: string | undefined, approver: string): void {
  if (deps.config.auth.bind_approver && keyName && keyName !== approver) {
    throw domainError('AGT_ERR_APPROVER_MISMATCH', [approver, keyName]);
  }
}
