// Debugging runs: their checkpoints, a fork from one, a counterfactual replay, a comparison of two
// (docs/contract.md §3.4-3.6, docs/debugging.md). Reading needs a reader key, forks and replays
// an operator key (the defaults of GET and POST in src/http/auth.ts).
import type { FastifyInstance } from 'fastify';
import { runResponseOf } from '../runtime/run-record.js';
import { compareRuns, summaryOf } from '../runtime/debug/compare.js';
import { originView } from '../runtime/debug/origin.js';
import type { ForkEdits, ReplayRequest as ReplayBody } from '../runtime/debug/runs-debug.js';
import { redact } from '../telemetry/redact.js';
import { redactorForConfig } from '../telemetry/secrets.js';
import {
  CheckpointDetail,
  CheckpointListResponse,
  CheckpointParams,
  CompareParams,
  CompareResponse,
  DebugRunResponse,
  ErrorResponse,
  ForkRequest,
  HTTPValidationError,
  ReplayRequest,
  RunIdParams,
} from '../schemas/index.js';
import type { AppDeps } from './deps.js';

const errors = { 404: ErrorResponse, 409: ErrorResponse, 422: HTTPValidationError };

export function debugRoutes(app: FastifyInstance, deps: AppDeps): void {
  const debug = deps.runtime.debug;
  const redactor = redactorForConfig(deps.config);

  app.get(
    '/runs/:run_id/checkpoints',
    {
      schema: {
        operationId: 'listRunCheckpoints',
        tags: ['runs'],
        summary: "A run's checkpoints in order: its start, before each model call, each pause and resume, its end",
        params: RunIdParams,
        response: { 200: CheckpointListResponse, ...errors },
      },
    },
    async (request) => {
      const { run_id } = request.params as { run_id: string };
      const { checkpoints } = await debug.checkpoints(run_id);
      return { run_id, checkpoints, count: checkpoints.length };
    },
  );

  app.get(
    '/runs/:run_id/checkpoints/:checkpoint_id',
    {
      schema: {
        operationId: 'getRunCheckpoint',
        tags: ['runs'],
        summary: 'One checkpoint and the conversation as the model would see it there',
        params: CheckpointParams,
        response: { 200: CheckpointDetail, ...errors },
      },
    },
    async (request) => {
      const { run_id, checkpoint_id } = request.params as { run_id: string; checkpoint_id: string };
      const { checkpoint, messages } = await debug.checkpoint(run_id, checkpoint_id);
      return { run_id, ...checkpoint, messages: redact(messages, redactor) };
    },
  );

  app.post(
    '/runs/:run_id/fork',
    {
      schema: {
        operationId: 'forkRun',
        tags: ['runs'],
        summary: 'Start a new run that continues from a checkpoint, with edits; answers like POST /run/sync plus `forked_from`',
        params: RunIdParams,
        body: ForkRequest,
        response: { 200: DebugRunResponse, ...errors, 503: ErrorResponse },
      },
    },
    async (request) => {
      const { run_id } = request.params as { run_id: string };
      const body = request.body as { checkpoint_id: string; edits?: ForkEdits | null; session_id?: string | null };
      const started = await debug.fork(run_id, body);
      const record = await started.settled;
      return { ...runResponseOf(record, redactor), forked_from: { run_id, checkpoint_id: body.checkpoint_id } };
    },
  );

  app.post(
    '/runs/:run_id/replay',
    {
      schema: {
        operationId: 'replayRun',
        tags: ['runs'],
        summary:
          'Re-ask a variant (agent, model, instruction) with the same inputs, tool results taken from the recording; answers like POST /run/sync plus `replay_of`',
        params: RunIdParams,
        body: ReplayRequest,
        response: { 200: DebugRunResponse, ...errors, 503: ErrorResponse },
      },
    },
    async (request) => {
      const { run_id } = request.params as { run_id: string };
      const body = request.body as ReplayBody;
      const started = await debug.replay(run_id, body);
      const record = await started.settled;
      return { ...runResponseOf(record, redactor), ...originView({ replay_of: { run_id, variant: body.variant } }) };
    },
  );

  app.get(
    '/runs/:a/compare/:b',
    {
      schema: {
        operationId: 'compareRuns',
        tags: ['runs'],
        summary: 'Two runs side by side (answer, steps, tokens, cost, duration, tool calls, outcomes) and their differences',
        params: CompareParams,
        response: { 200: CompareResponse, ...errors },
      },
    },
    async (request) => {
      const { a, b } = request.params as { a: string; b: string };
      // Another tenant's run is not found, as one that does not exist (the run_id routes' check, src/http/tenancy.ts).
      if (!request.tenantScope.all) await Promise.all([deps.runtime.runs.get(a, request.tenantScope), deps.runtime.runs.get(b, request.tenantScope)]);
      const [ra, rb] = await Promise.all([debug.read(a), debug.read(b)]);
      const args = (x: Record<string, unknown>) => redact(x, redactor) as Record<string, unknown>;
      const sa = summaryOf(ra, args);
      const sb = summaryOf(rb, args);
      return { a: sa, b: sb, diff: compareRuns(sa, sb) };
    },
  );
}
