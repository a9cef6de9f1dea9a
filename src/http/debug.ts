// Debugging runs: their checkpoints, a fork from one, a counterfactual replay, a comparison of two
// (docs/contract.md §3.4-3.6, docs/debugging.md). Reading needs a reader key, forks and replays
// an operator key (the defaults of GET and POST in src/http/auth.ts).
import type { FastifyReply } from 'fastify';
import { newId } from '../ids.js';
import { runResponseOf, type RunRecord } from '../runtime/run-record.js';
import type { StartedRun, StartOptions } from '../runtime/run-types.js';
import { compareRuns, summaryOf } from '../runtime/debug/compare.js';
import { originView } from '../runtime/debug/origin.js';
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
import type { AppDeps, ZodApp } from './deps.js';
import { jsonOrRunStreamResponse, RunSse } from './run-sse.js';

const FORK_ANSWER = jsonOrRunStreamResponse("The fork's RunResponse plus `forked_from`; with `stream: true` the POST /run SSE stream.", DebugRunResponse);
const REPLAY_ANSWER = jsonOrRunStreamResponse("The replay's RunResponse plus `replay_of`; with `stream: true` the POST /run SSE stream.", DebugRunResponse);

const errors = { 404: ErrorResponse, 409: ErrorResponse, 422: HTTPValidationError };

export function debugRoutes(app: ZodApp, deps: AppDeps): void {
  const debug = deps.runtime.debug;
  const redactor = redactorForConfig(deps.config);
  /**
   * A fork or replay answered as the POST /run stream. The client closing the stream cancels the
   * run, as on POST /run: nothing else waits for it.
   */
  const streamed = async (reply: FastifyReply, start: (opts: StartOptions) => Promise<StartedRun>, answer: (record: RunRecord) => unknown) => {
    const sse = new RunSse(deps, reply);
    const run_id = newId('run');
    let started: StartedRun;
    try {
      started = await start({ run_id, run_id_is_new: true, ...sse.follow(run_id) });
    } catch (err) {
      return sse.startFailed(err);
    }
    await sse.serve(started, { complete: answer, cancelOnClientClose: true });
  };

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
      const { run_id } = request.params;
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
      const { run_id, checkpoint_id } = request.params;
      const { checkpoint, messages } = await debug.checkpoint(run_id, checkpoint_id);
      return { run_id, ...checkpoint, messages: redact(messages, redactor) };
    },
  );

  app.post(
    '/runs/:run_id/fork',
    {
      // `stream: true` answers with the POST /run stream (src/http/run-sse.ts); otherwise JSON.
      sse: { kind: 'manual', heartbeat: false },
      schema: {
        operationId: 'forkRun',
        tags: ['runs'],
        summary: 'Start a new run that continues from a checkpoint, with edits; answers like POST /run/sync plus `forked_from`',
        params: RunIdParams,
        body: ForkRequest,
        response: { 200: FORK_ANSWER, ...errors, 503: ErrorResponse },
      },
    },
    async (request, reply) => {
      const { run_id } = request.params;
      const body = request.body;
      const answer = (record: RunRecord) => ({ ...runResponseOf(record, redactor), forked_from: { run_id, checkpoint_id: body.checkpoint_id } });
      if (body.stream) return streamed(reply, (opts) => debug.fork(run_id, body, opts), answer);
      return answer(await (await debug.fork(run_id, body)).settled);
    },
  );

  app.post(
    '/runs/:run_id/replay',
    {
      // `stream: true` answers with the POST /run stream (src/http/run-sse.ts); otherwise JSON.
      sse: { kind: 'manual', heartbeat: false },
      schema: {
        operationId: 'replayRun',
        tags: ['runs'],
        summary:
          'Re-ask a variant (agent, model, instruction) with the same inputs, tool results taken from the recording; answers like POST /run/sync plus `replay_of`',
        params: RunIdParams,
        body: ReplayRequest,
        response: { 200: REPLAY_ANSWER, ...errors, 503: ErrorResponse },
      },
    },
    async (request, reply) => {
      const { run_id } = request.params;
      const body = request.body;
      const answer = (record: RunRecord) => ({ ...runResponseOf(record, redactor), ...originView({ replay_of: { run_id, variant: body.variant } }) });
      if (body.stream) return streamed(reply, (opts) => debug.replay(run_id, body, opts), answer);
      return answer(await (await debug.replay(run_id, body)).settled);
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
      const { a, b } = request.params;
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
