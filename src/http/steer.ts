// Talking to a run in flight: steer it, interrupt it, read its inbox. Resuming
// an interrupted run is POST /runs/{run_id}/resume (src/http/runs.ts).
import { ErrorResponse, HTTPValidationError, InterruptResponse, RunIdParams, RunInboxView, SteerRequest, SteerResponse } from '../schemas/index.js';
import type { AppDeps, ZodApp } from './deps.js';
import { HttpValidationFailure } from './validation.js';

const errors = { 404: ErrorResponse, 409: ErrorResponse, 422: HTTPValidationError };

export function steerRoutes(app: ZodApp, deps: AppDeps): void {
  const runs = deps.runtime.runs;

  app.post(
    '/runs/:run_id/steer',
    {
      schema: {
        operationId: 'steerRun',
        tags: ['runs'],
        summary: 'Send a running, approval-waiting or interrupted run a message it reads once, as a user message, before its next model call',
        params: RunIdParams,
        body: SteerRequest,
        response: { 200: SteerResponse, ...errors },
      },
    },
    async (request) => {
      const { run_id } = request.params;
      const body = request.body;
      const sender = body.sender ?? (request.apiKeyName && /^[A-Za-z0-9_.@-]{1,64}$/.test(request.apiKeyName) ? request.apiKeyName : 'user');
      const result = await runs.decisions.steer(run_id, { message: body.message, sender });
      if ('blocked' in result) {
        // The input guardrails refuse it as they would refuse a query (and it is recorded as the
        // run's guardrail_violation event).
        throw new HttpValidationFailure([
          {
            loc: ['body', 'message'],
            msg: `blocked by the input guardrails (${result.blocked.rule}): ${result.blocked.message}`,
            type: 'guardrail_violation',
            ctx: { rule: result.blocked.rule },
          },
        ]);
      }
      return result;
    },
  );

  app.post(
    '/runs/:run_id/interrupt',
    {
      schema: {
        operationId: 'interruptRun',
        tags: ['runs'],
        summary: 'Stop a running run at its next step boundary (saved `interrupted`; continue it with POST /runs/{run_id}/resume)',
        params: RunIdParams,
        response: { 200: InterruptResponse, 404: ErrorResponse, 409: ErrorResponse, 422: HTTPValidationError },
      },
    },
    async (request) => runs.decisions.interrupt(request.params.run_id, { by: request.apiKeyName ?? null }),
  );

  app.get(
    '/runs/:run_id/inbox',
    {
      schema: {
        operationId: 'getRunInbox',
        tags: ['runs'],
        summary: 'Steer messages a run was sent and its last interrupt request',
        params: RunIdParams,
        response: { 200: RunInboxView, 404: ErrorResponse, 422: HTTPValidationError },
      },
    },
    async (request) => runs.decisions.inboxOf(request.params.run_id),
  );
}
