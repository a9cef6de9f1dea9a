// Synchronous runs: request, result, stream frames, the public run view and the session routes
// (docs/contract.md §12.1, §1, §3).
import { z } from 'zod';
import {
  BackgroundId,
  Cursor,
  ErrorInfo,
  IsoDateTime,
  JsonObject,
  OffsetCursor,
  QueryId,
  SafeId,
  TimeRangeQuery,
  checkTimeRange,
  listOrder,
  queryInt,
} from './common.js';
import { ApprovalView, BudgetRequestView, OutcomeResponse } from './decisions.js';
import { WebhookUrl } from './webhooks.js';
import { RunSessionPolicy } from './steer.js';

/**
 * The bounds of ConcurrencySpec, shared with its hand-written check on the hot path
 * (src/http/run-request-fast.ts). No control characters in a key: records hold a tenant's key as
 * `<tenant>` U+001F `<key>` (src/runtime/tenancy.ts keyInTenant), so no key a client names can
 * spell another tenant's.
 */
// eslint-disable-next-line no-control-regex
export const CONCURRENCY_KEY_CHARS = /^[^\u0000-\u001f\u007f]*$/;
export const CONCURRENCY_KEY_MAX = 256;
export const CONCURRENCY_LIMIT_MAX = 10_000;

/** A run's concurrency key (docs/contract.md §3.4): at most `limit` runs of one key run at once; more wait `queued`. */
export const ConcurrencySpec = z
  .strictObject({
    key: z
      .string()
      .min(1)
      .max(CONCURRENCY_KEY_MAX)
      .regex(CONCURRENCY_KEY_CHARS, { error: 'must not contain control characters' })
      .describe('Runs sharing this key share its limit, e.g. `customer:42`. A matching `flow.concurrency` rule of the config wins over `limit`.'),
    limit: z.number().int().min(1).max(CONCURRENCY_LIMIT_MAX).describe('Runs of this key running at once, at most.'),
  })
  .meta({ id: 'ConcurrencySpec' });
export type ConcurrencySpec = z.infer<typeof ConcurrencySpec>;

/** −100..100, default 0: among runs waiting for a slot, higher goes first; equal priorities are FIFO. */
export const RunPriority = z.number().int().min(-100).max(100).describe('Among runs waiting for a slot, higher goes first (−100..100, default 0).');

export const RunRequest = z
  .strictObject({
    query: z.string().min(1).describe('Prompt for the agent.'),
    session_id: SafeId.nullish().describe('For conversation continuity; a new session is created when absent.'),
    agent_id: BackgroundId.nullish().describe(
      'A registered agent (POST /background/agents) to run as; default: the served agent. 404 when not registered (docs/agents.md).',
    ),
    webhook: WebhookUrl.nullish(),
    session_policy: RunSessionPolicy.nullish(),
    concurrency: ConcurrencySpec.nullish(),
    priority: RunPriority.nullish(),
    metadata: JsonObject.refine((v) => JSON.stringify(v).length <= 16_384, { message: 'at most 16 KiB as JSON' })
      .nullish()
      .describe(
        'Free-form data about the request, stored on the run; governance rule conditions see it as `metadata` (docs/policies.md). At most 16 KiB as JSON.',
      ),
  })
  .meta({ id: 'RunRequest' });
export type RunRequest = z.infer<typeof RunRequest>;

/** Outcome of a run as answered to its caller (docs/contract.md §3.1). */
export const RunResponseStatus = z
  .enum(['success', 'error', 'cancelled', 'awaiting_approval', 'awaiting_budget', 'interrupted', 'timeout'])
  .meta({ id: 'RunResponseStatus' });
export type RunResponseStatus = z.infer<typeof RunResponseStatus>;

export const TerminationReason = z
  .enum(['stop', 'max_steps', 'budget_exhausted', 'guardrail', 'provider_error', 'internal_error', 'cancelled', 'timeout'])
  .meta({ id: 'TerminationReason' });
export type TerminationReason = z.infer<typeof TerminationReason>;

/** Status of the stored run record (docs/contract.md §3.1); the `status` filter of GET /runs. */
export const RunRecordStatus = z
  .enum(['queued', 'running', 'awaiting_approval', 'awaiting_budget', 'interrupted', 'completed', 'blocked', 'failed', 'cancelled', 'timeout'])
  .meta({ id: 'RunRecordStatus' });
export type RunRecordStatus = z.infer<typeof RunRecordStatus>;

export const ToolSource = z.enum(['local', 'mcp', 'builtin', 'subagent']).meta({ id: 'ToolSource' });
export type ToolSource = z.infer<typeof ToolSource>;

export const ToolCallOutcome = z.enum(['success', 'error', 'denied', 'rejected', 'timeout', 'cancelled', 'unknown']).meta({ id: 'ToolCallOutcome' });
export type ToolCallOutcome = z.infer<typeof ToolCallOutcome>;

/** A non-idempotent call that succeeded or may have (docs/contract.md §6.3). */
export const SideEffect = z
  .object({
    tool_call_id: z.string(),
    tool_name: z.string(),
    outcome: z.enum(['success', 'unknown']),
    step: z.number().int().nonnegative().optional(),
  })
  .meta({ id: 'SideEffect' });
export type SideEffect = z.infer<typeof SideEffect>;

/** The run result: body of POST /run/sync and the data of the stream's `complete` frame. */
export const RunResponse = z
  .object({
    agent_name: z.string(),
    approvals: z.array(ApprovalView).nullable().default(null).describe('Approvals a paused run waits for.'),
    budget_request: BudgetRequestView.nullable().default(null).describe('The budget a waiting run ran out of and what it needs.'),
    guardrail_result: JsonObject.nullable().default(null),
    metric: JsonObject.nullable().default(null),
    response: z.string().nullable().describe('Agent answer; null while the run awaits a person.'),
    run_id: z.string().nullable(),
    session_id: z.string(),
    status: RunResponseStatus.default('success'),
    trace_id: z.string().nullable(),
    termination_reason: TerminationReason.nullable().default(null),
    side_effects: z.array(SideEffect).nullable().default(null).describe('Set when the run did not succeed.'),
    error: ErrorInfo.nullable().optional().describe('What failed, for a run that ended in error (null otherwise).'),
  })
  .meta({ id: 'RunResponse' });
export type RunResponse = z.infer<typeof RunResponse>;

// --- stream frames (docs/contract.md §3.2) ---------------------------------------------------------

export const RunStreamSessionFrame = z
  .object({ session_id: z.string(), run_id: z.string().nullable(), status: z.enum(['started', 'streaming']) })
  .meta({ id: 'RunStreamSessionFrame' });
export type RunStreamSessionFrame = z.infer<typeof RunStreamSessionFrame>;

export const RunStreamQueuedFrame = z
  .object({
    run_id: z.string(),
    key: z.string().describe('The concurrency key the run waits for.'),
    position: z.number().int().positive().describe("1-based place among the key's waiting runs."),
  })
  .meta({ id: 'RunStreamQueuedFrame' });
export type RunStreamQueuedFrame = z.infer<typeof RunStreamQueuedFrame>;

export const RunStreamDeltaFrame = z
  .object({ run_id: z.string(), text: z.string(), sequence: z.number().int().nonnegative() })
  .meta({ id: 'RunStreamDeltaFrame' });
export type RunStreamDeltaFrame = z.infer<typeof RunStreamDeltaFrame>;

export const RunStreamErrorFrame = z
  .object({
    error: z.string(),
    message: z.string(),
    run_id: z.string().nullable(),
    session_id: z.string().nullable(),
    last_cursor: z
      .string()
      .nullable()
      .optional()
      .describe('StreamOverflow: id of the last frame sent; resume with Last-Event-ID set to it (GET /events/{session_id}?run_id=...).'),
  })
  .meta({ id: 'RunStreamErrorFrame' });
export type RunStreamErrorFrame = z.infer<typeof RunStreamErrorFrame>;

// --- public run view (docs/contract.md §3.3) -------------------------------------------------------

export const ToolCallView = z
  .object({
    tool_call_id: z.string(),
    tool_name: z.string(),
    source: ToolSource,
    idempotent: z.boolean(),
    step: z.number().int().nonnegative(),
    state: z.enum(['started', 'completed']),
    outcome: ToolCallOutcome.nullable().describe('Null while the call is started and not completed.'),
    started_at: IsoDateTime,
    ended_at: IsoDateTime.nullable(),
  })
  .meta({ id: 'ToolCall' });
export type ToolCallView = z.infer<typeof ToolCallView>;

export const RunUsage = z
  .object({
    requests: z.number().int().nonnegative(),
    request_tokens: z.number().int().nonnegative(),
    response_tokens: z.number().int().nonnegative(),
    total_tokens: z.number().int().nonnegative(),
    estimated_cost_usd: z.number().nonnegative(),
  })
  .meta({ id: 'RunUsage' });
export type RunUsage = z.infer<typeof RunUsage>;

/**
 * GET /runs/{run_id}. The saved conversation is never part of it. `response` and
 * `termination_reason` are extras beyond §3.3 so a finished run can be read back in one call.
 */
/** How much of a run's request its view carries (a list of 500 runs must not carry 500 conversations). */
export const QUERY_PREVIEW_CHARS = 500;

export const RunView = z
  .object({
    run_id: z.string(),
    session_id: z.string(),
    tenant: z.string().nullish().describe('The tenant of the key that started the run (docs/multi-tenant.md); null: none.'),
    metadata: JsonObject.optional().describe("The request's `metadata` (a background run's: its task's); absent: none."),
    agent_name: z.string(),
    agent_id: z.string().describe('The agent that ran it (the configured agent, or the background agent).'),
    task_id: z.string().nullish().describe('The background task whose run started it; null for a request.'),
    query_preview: z.string().nullish().describe(`The request that started the run, its first ${QUERY_PREVIEW_CHARS} characters, secrets redacted.`),
    status: RunRecordStatus,
    step: z.number().int().nonnegative(),
    attempt: z.number().int().nonnegative(),
    trace_ids: z.array(z.string()),
    tool_calls: z.array(ToolCallView),
    usage: RunUsage,
    approvals: z.array(ApprovalView),
    budget_requests: z.array(BudgetRequestView),
    outcomes: z.array(OutcomeResponse),
    error: ErrorInfo.nullable(),
    created_at: IsoDateTime,
    updated_at: IsoDateTime,
    heartbeat_at: IsoDateTime.nullable(),
    ended_at: IsoDateTime.nullish().describe('When it finished; null while it runs or waits.'),
    lease_seconds: z.number().positive(),
    response: z.string().nullish(),
    termination_reason: TerminationReason.nullish(),
    concurrency: z
      .object({ key: z.string(), limit: z.number().int().positive() })
      .nullish()
      .describe('The concurrency key the run runs under, with the limit in force (docs/flow-control.md).'),
    priority: z.number().int().optional(),
    queue: z
      .object({ key: z.string(), position: z.number().int().positive() })
      .nullish()
      .describe("While `queued`: the key it waits for and its 1-based place among the key's waiting runs."),
    throttled_until: IsoDateTime.nullish().describe("While a model call waits for its provider's rate limit: until when."),
  })
  .meta({ id: 'RunView' });
export type RunView = z.infer<typeof RunView>;

export const RunsListQuery = TimeRangeQuery.extend({
  status: RunRecordStatus.optional(),
  session_id: QueryId.optional(),
  agent_id: QueryId.optional().describe('Only runs of this agent.'),
  task_id: QueryId.optional().describe('Only runs of this background task (the agent runs its background runs started).'),
  order: listOrder('asc'),
  limit: queryInt(1, 500, 100),
  cursor: Cursor.optional(),
}).superRefine(checkTimeRange);
export type RunsListQuery = z.infer<typeof RunsListQuery>;

export const RunsListResponse = z
  .object({
    runs: z.array(RunView),
    total: z.number().int().nonnegative(),
    next_cursor: z.string().nullable(),
  })
  .meta({ id: 'RunsListResponse' });
export type RunsListResponse = z.infer<typeof RunsListResponse>;

export const RunCancelResponse = z.object({ status: z.literal('cancel_requested'), run_id: z.string() }).meta({ id: 'RunCancelResponse' });
export type RunCancelResponse = z.infer<typeof RunCancelResponse>;

// --- sessions ----------------------------------------------------------------------------------

/** GET /sessions/{session_id}/history, a page of messages at a time (oldest first). */
export const SessionHistoryQuery = z.object({ limit: queryInt(1, 1000, 1000), cursor: OffsetCursor.optional() });
export type SessionHistoryQuery = z.infer<typeof SessionHistoryQuery>;

export const SessionHistoryResponse = z
  .object({
    session_id: z.string(),
    messages: z.array(JsonObject),
    count: z.number().int().nonnegative().describe('Messages in this page.'),
    total: z.number().int().nonnegative().describe('Messages in the session.'),
    next_cursor: z.string().nullable(),
  })
  .meta({ id: 'SessionHistoryResponse' });
export type SessionHistoryResponse = z.infer<typeof SessionHistoryResponse>;

export const SessionClearedResponse = z.object({ status: z.literal('cleared'), session_id: z.string() }).meta({ id: 'SessionClearedResponse' });
export type SessionClearedResponse = z.infer<typeof SessionClearedResponse>;

// --- path parameters (no OpenAPI id: swagger needs them inline to list the parameters) ---------

export const RunIdParams = z.object({ run_id: SafeId });
export type RunIdParams = z.infer<typeof RunIdParams>;

export const RunApprovalParams = z.object({ run_id: SafeId, approval_id: SafeId });
export type RunApprovalParams = z.infer<typeof RunApprovalParams>;

export const SessionIdParams = z.object({ session_id: SafeId });
export type SessionIdParams = z.infer<typeof SessionIdParams>;
