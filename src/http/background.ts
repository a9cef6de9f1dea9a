// Background routes (docs/contract.md §1 background rows): parse with the zod schemas, delegate to the
// background manager, serialise. No business logic here.
import type { FastifyRequest } from 'fastify';
import {
  AgentIdParams,
  BackgroundAgentsListQuery,
  BackgroundAgentDeleteQuery,
  BackgroundAgentRegistrationRequest,
  BackgroundAgentSpec,
  BackgroundAgentsResponse,
  BackgroundManagerStatusResponse,
  BackgroundRun,
  BackgroundRunAttemptsResponse,
  BackgroundRunEventsResponse,
  BackgroundRunIdParams,
  BackgroundRunListQuery,
  BackgroundRunWorkspaceResponse,
  BackgroundRunsListQuery,
  BackgroundRunsResponse,
  BackgroundStatusResponse,
  BackgroundTaskCreateRequest,
  BackgroundTaskDeleteQuery,
  BackgroundTaskBulkRunRequest,
  BackgroundTaskBulkRunResponse,
  BackgroundTaskPatchRequest,
  BackgroundTaskRunRequest,
  BackgroundTaskSpec,
  BackgroundTaskStatusResponse,
  BackgroundTasksListQuery,
  BackgroundTasksResponse,
  ErrorResponse,
  HTTPValidationError,
  HttpErrorResponse,
  RunWaitTimeoutResponse,
  SchedulePreviewQuery,
  SchedulePreviewResponse,
  TaskIdParams,
  WorkspaceFileParams,
} from '../schemas/index.js';
import type { AppDeps, ZodApp } from './deps.js';
import { binaryResponse } from './openapi.js';
import { IdempotencyHeaders, debouncedTrigger, idempotencyRequestOf, once, startTaskRun, waitBackgroundRun } from './idempotent.js';
import { newId } from '../ids.js';
import { repos } from '../store/repos/index.js';
import { tenantOf } from './tenancy.js';
import { bgKey, publicTask } from '../background/tenancy.js';

/** The task a route's task_id names: its key in the namespace of the request's tenant (src/background/tenancy.ts). */
/** The background subsystem's key of the task a request names: in the tenant the request acts in. */
const taskKeyOf = (request: FastifyRequest & { params: { task_id: string } }) => bgKey(tenantOf(request), request.params.task_id);

const errors = { 404: ErrorResponse, 409: ErrorResponse, 422: HTTPValidationError };
const tags = ['background'];

export function backgroundRoutes(app: ZodApp, deps: AppDeps): void {
  const bg = deps.runtime.background;

  // ---------------------------------------------------------------- agents

  app.post(
    '/background/agents',
    {
      schema: {
        tags,
        operationId: 'registerBackgroundAgent',
        summary: 'Register the served agent (spec omitted) or an agent spec',
        body: BackgroundAgentRegistrationRequest,
        // 403: a tools module without an admin key; 503: the MCP process cap (docs/agents.md).
        response: { 200: BackgroundAgentSpec, 403: ErrorResponse, 503: ErrorResponse, ...errors },
      },
    },
    // The role decides what the spec may use (an admin key for a tools module); null: auth is off.
    async (request) =>
      bg.agents.registerAgent(request.body, {
        role: request.apiKeyRole ?? ((deps.config.auth?.api_keys ?? []).length === 0 ? null : 'unknown'),
        tenant: tenantOf(request),
        keyTenant: request.apiKeyTenant ?? null,
      }),
  );

  app.get(
    '/background/agents',
    {
      schema: {
        tags,
        operationId: 'listBackgroundAgents',
        summary: 'List registered background agents, a page at a time',
        querystring: BackgroundAgentsListQuery,
        response: { 200: BackgroundAgentsResponse, 422: HTTPValidationError },
      },
    },
    async (request) => bg.agents.listAgents(request.query, request.tenantScope),
  );

  app.get(
    '/background/agents/:agent_id',
    {
      schema: {
        tags,
        operationId: 'getBackgroundAgent',
        summary: 'One background agent',
        params: AgentIdParams,
        response: { 200: BackgroundAgentSpec, ...errors },
      },
    },
    async (request) => bg.agents.getAgent(request.params.agent_id, request.tenantScope),
  );

  app.delete(
    '/background/agents/:agent_id',
    {
      schema: {
        tags,
        operationId: 'deleteBackgroundAgent',
        summary: 'Delete a background agent (409 with runs in flight unless force)',
        params: AgentIdParams,
        querystring: BackgroundAgentDeleteQuery,
        response: { 200: BackgroundStatusResponse, ...errors },
      },
    },
    async (request) => bg.agents.deleteAgent(request.params.agent_id, request.query.force, tenantOf(request)),
  );

  // ---------------------------------------------------------------- tasks

  app.post(
    '/background/tasks',
    {
      schema: {
        tags,
        operationId: 'createBackgroundTask',
        summary: 'Create (or with replace, replace) a background task',
        body: BackgroundTaskCreateRequest,
        response: { 200: BackgroundTaskSpec, ...errors },
      },
    },
    async (request) => publicTask(await bg.tasks.createTask(request.body, tenantOf(request))),
  );

  app.get(
    '/background/tasks',
    {
      schema: {
        tags,
        operationId: 'listBackgroundTasks',
        summary: 'List background tasks, oldest first (order=desc: newest first)',
        querystring: BackgroundTasksListQuery,
        response: { 200: BackgroundTasksResponse, 422: HTTPValidationError },
      },
    },
    async (request) => {
      const page = await bg.tasks.listTasks(request.query, request.tenantScope);
      return { ...page, tasks: page.tasks.map(publicTask) };
    },
  );

  app.get(
    '/background/tasks/:task_id',
    {
      schema: {
        tags,
        operationId: 'getBackgroundTask',
        summary: 'One background task',
        params: TaskIdParams,
        response: { 200: BackgroundTaskSpec, ...errors },
      },
    },
    async (request) => publicTask(await bg.tasks.getTask(taskKeyOf(request))),
  );

  app.patch(
    '/background/tasks/:task_id',
    {
      schema: {
        tags,
        operationId: 'updateBackgroundTask',
        summary: 'Change a background task (a new schedule starts a new schedule revision)',
        params: TaskIdParams,
        body: BackgroundTaskPatchRequest,
        response: { 200: BackgroundTaskSpec, ...errors },
      },
    },
    async (request) => publicTask(await bg.tasks.patchTask(taskKeyOf(request), request.body)),
  );

  app.delete(
    '/background/tasks/:task_id',
    {
      schema: {
        tags,
        operationId: 'deleteBackgroundTask',
        summary: 'Delete a background task (and with delete_runs, its runs)',
        params: TaskIdParams,
        querystring: BackgroundTaskDeleteQuery,
        response: { 200: BackgroundStatusResponse, ...errors },
      },
    },
    async (request) => bg.tasks.deleteTask(taskKeyOf(request), request.query.delete_runs),
  );

  app.get(
    '/background/tasks/:task_id/status',
    {
      schema: {
        tags,
        operationId: 'getBackgroundTaskStatus',
        summary: 'Schedule state and run counts of a task',
        params: TaskIdParams,
        response: { 200: BackgroundTaskStatusResponse, ...errors },
      },
    },
    async (request) => bg.tasks.taskStatus(taskKeyOf(request)),
  );

  app.get(
    '/background/tasks/:task_id/schedule',
    {
      schema: {
        tags,
        operationId: 'previewBackgroundTaskSchedule',
        summary: 'The next due times of a task, with DST notes',
        params: TaskIdParams,
        querystring: SchedulePreviewQuery,
        response: { 200: SchedulePreviewResponse, ...errors },
      },
    },
    async (request) => bg.tasks.schedulePreview(taskKeyOf(request), request.query.count),
  );

  app.post(
    '/background/tasks/:task_id/run',
    {
      schema: {
        tags,
        operationId: 'runBackgroundTask',
        summary: 'Queue a manual run (with wait: answer when it ends or pauses for a person)',
        params: TaskIdParams,
        headers: IdempotencyHeaders,
        body: BackgroundTaskRunRequest.nullish(),
        response: { 200: BackgroundRun, 503: ErrorResponse, 504: RunWaitTimeoutResponse, ...errors },
      },
    },
    async (request) => {
      const taskId = taskKeyOf(request);
      const body = request.body ?? { wait: false };
      if (body.webhook) deps.runtime.webhooks.checkRequestUrl(body.webhook);
      const begin = async (run_id: string) => {
        if (body.webhook) await deps.runtime.webhooks.rememberRequestUrl(run_id, body.webhook);
        return startTaskRun(bg, taskId, body, run_id);
      };
      const idem = idempotencyRequestOf(request, 'runBackgroundTask');
      if (body.debounce_seconds) return debouncedTrigger(deps, taskId, body, idem);
      if (!idem) return body.webhook ? (await begin(newId('bgrun'))).all : bg.runTask(taskId, body);
      const once = await deps.runtime.idempotency.startOnce(
        idem,
        () => newId('bgrun'),
        async (id) => (await repos(deps.store).bgRuns.get(id)) !== null,
        begin,
      );
      if (once.fresh) return once.started.all;
      return waitBackgroundRun(deps, once.target_id, body.wait);
    },
  );

  app.post(
    '/background/tasks/:task_id/runs',
    {
      schema: {
        tags,
        operationId: 'runBackgroundTaskBulk',
        summary: 'Queue up to 1,000 manual runs in one call, each idempotent by its own key',
        params: TaskIdParams,
        body: BackgroundTaskBulkRunRequest,
        response: { 200: BackgroundTaskBulkRunResponse, 503: ErrorResponse, ...errors },
      },
    },
    async (request) => bg.runTaskBulk(taskKeyOf(request), request.body.runs),
  );

  app.post(
    '/background/tasks/:task_id/pause',
    {
      schema: {
        tags,
        operationId: 'pauseBackgroundTask',
        summary: 'Pause the schedule of a task (manual runs still work)',
        params: TaskIdParams,
        response: { 200: BackgroundStatusResponse, ...errors },
      },
    },
    async (request) => bg.tasks.pauseTask(taskKeyOf(request)),
  );

  app.post(
    '/background/tasks/:task_id/resume',
    {
      schema: {
        tags,
        operationId: 'resumeBackgroundTask',
        summary: 'Resume the schedule of a task (occurrences of the pause are skipped)',
        params: TaskIdParams,
        response: { 200: BackgroundStatusResponse, ...errors },
      },
    },
    async (request) => bg.tasks.resumeTask(taskKeyOf(request)),
  );

  // ---------------------------------------------------------------- runs

  app.get(
    '/background/runs',
    {
      schema: {
        tags,
        operationId: 'listBackgroundRuns',
        summary: 'List background runs, oldest first (order=desc: newest first), by task, status, agent and time range',
        querystring: BackgroundRunsListQuery,
        response: { 200: BackgroundRunsResponse, 422: HTTPValidationError },
      },
    },
    async (request) => bg.runs.listRuns(request.query, request.tenantScope),
  );

  app.get(
    '/background/runs/:run_id',
    {
      schema: {
        tags,
        operationId: 'getBackgroundRun',
        summary: 'One background run',
        params: BackgroundRunIdParams,
        response: { 200: BackgroundRun, ...errors },
      },
    },
    async (request) => bg.runs.getRun(request.params.run_id),
  );

  app.get(
    '/background/runs/:run_id/attempts',
    {
      schema: {
        tags,
        operationId: 'listBackgroundRunAttempts',
        summary: 'Attempts of a background run, first attempt first (order=desc: latest first)',
        params: BackgroundRunIdParams,
        querystring: BackgroundRunListQuery,
        response: { 200: BackgroundRunAttemptsResponse, ...errors },
      },
    },
    async (request) => bg.runs.attempts(request.params.run_id, request.query),
  );

  app.get(
    '/background/runs/:run_id/events',
    {
      schema: {
        tags,
        operationId: 'listBackgroundRunEvents',
        summary: 'Replay of the run lifecycle events (sequence 1..n; order=desc: n..1)',
        params: BackgroundRunIdParams,
        querystring: BackgroundRunListQuery,
        response: { 200: BackgroundRunEventsResponse, ...errors },
      },
    },
    async (request) => bg.runs.events(request.params.run_id, request.query),
  );

  app.get(
    '/background/runs/:run_id/workspace',
    {
      schema: {
        tags,
        operationId: 'listBackgroundRunWorkspace',
        summary: 'Files of the run workspace',
        params: BackgroundRunIdParams,
        response: { 200: BackgroundRunWorkspaceResponse, 404: ErrorResponse, 422: HTTPValidationError },
      },
    },
    async (request) => bg.runs.workspace(request.params.run_id),
  );

  app.get(
    '/background/runs/:run_id/workspace/files/*',
    {
      schema: {
        tags,
        operationId: 'downloadBackgroundRunFile',
        summary: 'Download one file of the run workspace (read-only)',
        params: WorkspaceFileParams,
        response: { 200: binaryResponse('The file bytes, as an attachment.'), 400: HttpErrorResponse, 404: HttpErrorResponse, 422: HTTPValidationError },
      },
    },
    async (request, reply) => {
      const params = request.params;
      const file = await bg.runs.openWorkspaceFile(params.run_id, params['*']);
      reply.header('content-type', 'application/octet-stream');
      reply.header('content-length', String(file.size));
      reply.header('content-disposition', `attachment; filename="${file.name.replace(/["\\\r\n]/g, '_')}"`);
      // Bytes pass straight through: the JSON serializer never sees a stream.
      return reply.serializer((x: unknown) => x as string).send(file.stream);
    },
  );

  app.post(
    '/background/runs/:run_id/cancel',
    {
      schema: {
        tags,
        operationId: 'cancelBackgroundRun',
        summary: 'Cancel a queued, running or waiting background run',
        params: BackgroundRunIdParams,
        headers: IdempotencyHeaders,
        response: { 200: BackgroundStatusResponse, ...errors },
      },
    },
    async (request) => once(deps, request, 'cancelBackgroundRun', () => bg.operator.cancel(request.params.run_id)),
  );

  app.post(
    '/background/runs/:run_id/resume',
    {
      schema: {
        tags,
        operationId: 'resumeBackgroundRun',
        summary: 'Continue a background run whose pause for a person was decided',
        params: BackgroundRunIdParams,
        response: { 200: BackgroundStatusResponse, ...errors },
      },
    },
    async (request) => bg.operator.resume(request.params.run_id),
  );

  app.get(
    '/background/status',
    {
      schema: {
        tags,
        operationId: 'getBackgroundStatus',
        summary: 'Background manager status and run counts',
        response: { 200: BackgroundManagerStatusResponse },
      },
    },
    async (request) => bg.status(request.tenantScope),
  );
}
