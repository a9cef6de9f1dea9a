// Evaluations over past runs (docs/contract.md §3.7, docs/debugging.md): create, read, list,
// cancel, delete. Creating, cancelling and deleting need an operator key; reading a reader key.
import type { EvalItem, EvalRecord } from '../runtime/evals/eval-types.js';
import {
  ErrorResponse,
  EvalCreateRequest,
  EvalDeletedResponse,
  EvalDetail,
  EvalIdParams,
  EvalListQuery,
  EvalListResponse,
  EvalView,
  HTTPValidationError,
} from '../schemas/index.js';
import type { AppDeps, ZodApp } from './deps.js';

const errors = { 404: ErrorResponse, 409: ErrorResponse, 422: HTTPValidationError };

export function evalRoutes(app: ZodApp, deps: AppDeps): void {
  const evals = deps.runtime.evals;
  const view = async (e: EvalRecord) => ({
    eval_id: e.eval_id,
    name: e.name,
    status: e.status,
    progress: await evals.progress(e),
    created_at: e.created_at,
    ended_at: e.ended_at,
    variant: e.variant,
    tools: e.tools,
    concurrency: e.concurrency,
    scorer: e.scorer,
    ...(e.tenant ? { tenant: e.tenant } : {}),
  });
  const itemView = (i: EvalItem) => ({
    run_id: i.run_id,
    replay_run_id: i.status === 'pending' || i.status === 'cancelled' ? null : i.replay_run_id,
    status: i.status,
    changed: i.changed,
    score: i.score,
    token_delta: i.token_delta,
    cost_delta_usd: i.cost_delta_usd,
    original_outcomes: i.original_outcomes,
    error: i.error,
  });

  app.post(
    '/evals',
    {
      schema: {
        operationId: 'createEval',
        tags: ['evals'],
        summary: 'Replay a batch of past runs against a variant, durably, and score them',
        body: EvalCreateRequest,
        response: { 201: EvalView, ...errors },
      },
    },
    async (request, reply) => {
      const created = await evals.create(request.body, request.tenantScope);
      return reply.code(201).send(await view(created));
    },
  );

  app.get(
    '/evals',
    {
      schema: {
        operationId: 'listEvals',
        tags: ['evals'],
        summary: 'Evaluations, newest first',
        querystring: EvalListQuery,
        response: { 200: EvalListResponse, 422: HTTPValidationError },
      },
    },
    async (request) => {
      const q = request.query;
      const page = await evals.list(q.limit, q.cursor ?? null, request.tenantScope);
      return { evals: await Promise.all(page.evals.map(view)), next_cursor: page.next_cursor };
    },
  );

  app.get(
    '/evals/:eval_id',
    {
      schema: {
        operationId: 'getEval',
        tags: ['evals'],
        summary: 'An evaluation, its items (one per run: the replay, changed, score, deltas) and aggregates',
        params: EvalIdParams,
        response: { 200: EvalDetail, ...errors },
      },
    },
    async (request) => {
      const { record, items } = await evals.get(request.params.eval_id, request.tenantScope);
      return { ...(await view(record)), items: items.map(itemView), aggregates: evals.aggregates(items) };
    },
  );

  app.post(
    '/evals/:eval_id/cancel',
    {
      schema: {
        operationId: 'cancelEval',
        tags: ['evals'],
        summary: 'Start no more replays (those in flight finish)',
        params: EvalIdParams,
        response: { 200: EvalView, ...errors },
      },
    },
    async (request) => view(await evals.cancel(request.params.eval_id, request.tenantScope)),
  );

  app.delete(
    '/evals/:eval_id',
    {
      schema: {
        operationId: 'deleteEval',
        tags: ['evals'],
        summary: 'Delete an evaluation and its items (its replay runs stay: they are runs)',
        params: EvalIdParams,
        response: { 200: EvalDeletedResponse, ...errors },
      },
    },
    async (request) => {
      const { eval_id } = request.params;
      await evals.delete(eval_id, request.tenantScope);
      return { status: 'deleted' as const, eval_id };
    },
  );
}
