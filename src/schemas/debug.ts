// Checkpoints, forks, counterfactual replays and comparisons of runs (docs/contract.md §3.4-3.6,
// docs/debugging.md).
import { z } from 'zod';
import { BackgroundId, Cursor, IsoDateTime, JsonObject, SafeId, queryInt } from './common.js';
import { RunResponse } from './runs.js';

const UsageView = z
  .object({
    requests: z.number(),
    request_tokens: z.number(),
    response_tokens: z.number(),
    total_tokens: z.number(),
    estimated_cost_usd: z.number(),
  })
  .meta({ id: 'CheckpointUsage' });

export const CheckpointView = z
  .object({
    checkpoint_id: z.string(),
    step: z.number().int().nonnegative(),
    state: z.string().describe("The run machine's state value there (`calling`: before a model call; `awaiting*`, `interrupted`: a pause)."),
    created_at: IsoDateTime,
    message_count: z.number().int().nonnegative().describe('How many messages the model would see there, system instruction included.'),
    usage: UsageView,
    pending: z.object({ approvals: z.array(z.string()), budget_request: z.string().nullable() }),
  })
  .meta({ id: 'Checkpoint' });

export const CheckpointListResponse = z
  .object({ run_id: z.string(), checkpoints: z.array(CheckpointView), count: z.number().int().nonnegative() })
  .meta({ id: 'CheckpointListResponse' });

const MessageView = z
  .object({
    role: z.enum(['system', 'user', 'assistant', 'tool']),
    content: z.string(),
    tool_calls: z.array(z.object({ id: z.string(), name: z.string(), arguments: JsonObject })).optional(),
    tool_call_id: z.string().optional(),
    tool_name: z.string().optional(),
  })
  .meta({ id: 'ConversationMessage' });

export const CheckpointDetail = CheckpointView.extend({
  run_id: z.string(),
  messages: z.array(MessageView).describe('The conversation exactly as the model would see it there (secrets redacted), system instruction first.'),
}).meta({ id: 'CheckpointDetail' });

export const CheckpointParams = z.object({ run_id: SafeId, checkpoint_id: SafeId });

export const CompareParams = z.object({ a: SafeId, b: SafeId });

const RunOriginView = {
  forked_from: z.object({ run_id: z.string(), checkpoint_id: z.string() }).optional().describe('Set on a fork: the run and checkpoint it continues from.'),
  replay_of: z.object({ run_id: z.string(), variant: JsonObject }).optional().describe('Set on a replay: the run it re-asks and the variant.'),
  eval_id: z.string().optional().describe('Set on an evaluation item: its evaluation.'),
};

export const DebugRunResponse = RunResponse.extend(RunOriginView).meta({ id: 'DebugRunResponse' });

const ToolResultEdit = z.string().max(1_000_000);

export const ForkRequest = z
  .strictObject({
    checkpoint_id: SafeId,
    edits: z
      .strictObject({
        user_message: z.string().min(1).max(1_000_000).optional().describe('Appended as a user message, last.'),
        tool_results: z
          .record(SafeId, ToolResultEdit)
          .optional()
          .describe('Tool call id → the result the model reads instead (or the missing one at a pause).'),
        append_messages: z
          .array(z.strictObject({ role: z.enum(['user', 'assistant']), content: z.string().max(1_000_000) }))
          .max(100)
          .optional(),
      })
      .nullish(),
    session_id: SafeId.nullish().describe('Default: a new session seeded with the conversation up to the checkpoint.'),
    stream: z
      .boolean()
      .nullish()
      .describe('`true`: the answer is the POST /run SSE stream (its `complete` frame carries `forked_from`); default: the JSON answer of POST /run/sync.'),
  })
  .meta({ id: 'ForkRequest' });

export const ReplayVariant = z
  .strictObject({
    agent_id: BackgroundId.optional().describe('A registered agent to re-ask (its own instruction, unless `system_instruction` is given).'),
    model: JsonObject.optional().describe(
      "A model config in the shape of a registered agent's `model_config`, checked the same way (agents.model_hosts, agents.secret_env).",
    ),
    system_instruction: z.string().max(1_000_000).optional(),
  })
  .refine((v) => v.agent_id !== undefined || v.model !== undefined || v.system_instruction !== undefined, {
    message: 'name at least one of agent_id, model, system_instruction',
  })
  .meta({ id: 'ReplayVariant' });

export const ReplayTools = z
  .enum(['recorded', 'live'])
  .describe('`recorded` (default): every call is answered from the original run. `live`: an unmatched idempotent call runs; a non-idempotent one never does.')
  .meta({ id: 'ReplayTools' });

export const ReplayRequest = z
  .strictObject({
    variant: ReplayVariant,
    tools: ReplayTools.optional(),
    from_checkpoint: SafeId.nullish(),
    session_id: SafeId.nullish(),
    stream: z
      .boolean()
      .nullish()
      .describe('`true`: the answer is the POST /run SSE stream (its `complete` frame carries `replay_of`); default: the JSON answer of POST /run/sync.'),
  })
  .meta({ id: 'ReplayRequest' });

const ToolCallSummary = z.object({ name: z.string(), arguments: JsonObject, outcome: z.string() });

const RunSummary = z
  .object({
    run_id: z.string(),
    status: z.string(),
    response: z.string().nullable(),
    steps: z.number(),
    tokens: z.number(),
    cost_usd: z.number(),
    duration_ms: z.number().nullable(),
    tool_calls: z.array(ToolCallSummary),
    outcomes: z.array(z.object({ label: z.string().nullable(), reward: z.number().nullable(), source: z.string() })),
  })
  .meta({ id: 'RunSummary' });

export const CompareResponse = z
  .object({
    a: RunSummary,
    b: RunSummary,
    diff: z.object({
      response_changed: z.boolean(),
      response_diff: z.string().describe('Unified diff of the two answers, line by line; empty when equal.'),
      tool_calls: z.object({
        added: z.array(ToolCallSummary),
        removed: z.array(ToolCallSummary),
        changed: z.array(z.object({ name: z.string(), a: ToolCallSummary, b: ToolCallSummary })),
      }),
      steps_delta: z.number(),
      tokens_delta: z.number(),
      cost_delta_usd: z.number(),
      duration_delta_ms: z.number().nullable(),
    }),
  })
  .meta({ id: 'CompareResponse' });

// --- evaluations (docs/contract.md §3.7) ----------------------------------------------------------

const EvalScorer = z
  .discriminatedUnion('type', [
    z.strictObject({ type: z.literal('exact') }),
    z.strictObject({ type: z.literal('contains'), text: z.string().min(1).max(10_000) }),
    z.strictObject({ type: z.literal('judge'), agent_id: BackgroundId }),
  ])
  .meta({ id: 'EvalScorer' });

export const EvalCreateRequest = z
  .strictObject({
    name: z.string().min(1).max(200),
    source: z.union([
      z.strictObject({ run_ids: z.array(SafeId).min(1).max(1000) }),
      z.strictObject({
        filter: z.strictObject({
          agent_id: BackgroundId.optional(),
          task_id: SafeId.optional(),
          session_id: SafeId.optional(),
          status: z.enum(['completed', 'blocked', 'failed', 'cancelled', 'timeout']).optional().describe('Default: every ended run.'),
          since: IsoDateTime.optional(),
          until: IsoDateTime.optional(),
          limit: z.number().int().min(1).max(1000),
        }),
      }),
    ]),
    variant: ReplayVariant,
    tools: ReplayTools.optional(),
    concurrency: z.number().int().min(1).max(32).optional().describe('Replays in flight at once (default 4).'),
    scorer: EvalScorer.nullish(),
  })
  .meta({ id: 'EvalCreateRequest' });

const EvalStatus = z.enum(['queued', 'running', 'completed', 'cancelled', 'failed']).meta({ id: 'EvalStatus' });

export const EvalView = z
  .object({
    eval_id: z.string(),
    name: z.string(),
    status: EvalStatus,
    progress: z.object({ total: z.number().int(), done: z.number().int(), failed: z.number().int() }),
    created_at: IsoDateTime,
    ended_at: IsoDateTime.nullable(),
    variant: JsonObject,
    tools: ReplayTools,
    concurrency: z.number().int(),
    scorer: JsonObject.nullable(),
    tenant: z.string().optional().describe('The tenant of the key that created it (docs/multi-tenant.md); absent: none.'),
  })
  .meta({ id: 'Eval' });

export const EvalDetail = EvalView.extend({
  items: z.array(
    z.object({
      run_id: z.string(),
      replay_run_id: z.string().nullable().describe('Null until the replay starts.'),
      status: z.enum(['pending', 'running', 'done', 'failed', 'cancelled']),
      changed: z.boolean().nullable(),
      score: z.number().nullable(),
      token_delta: z.number().nullable(),
      cost_delta_usd: z.number().nullable(),
      original_outcomes: z.array(z.object({ label: z.string().nullable(), reward: z.number().nullable() })),
      error: z.string().nullable(),
    }),
  ),
  aggregates: z.object({
    items: z.number().int(),
    changed_pct: z.number(),
    mean_score: z.number().nullable(),
    token_delta: z.number(),
    cost_delta_usd: z.number(),
    outcomes: z.record(z.string(), z.object({ items: z.number().int(), changed: z.number().int(), mean_score: z.number().nullable() })),
  }),
}).meta({ id: 'EvalDetail' });

export const EvalListQuery = z.object({ limit: queryInt(1, 200, 50), cursor: Cursor.optional() });
export const EvalListResponse = z.object({ evals: z.array(EvalView), next_cursor: z.string().nullable() }).meta({ id: 'EvalListResponse' });
export const EvalIdParams = z.object({ eval_id: SafeId });
export const EvalDeletedResponse = z.object({ status: z.literal('deleted'), eval_id: z.string() }).meta({ id: 'EvalDeletedResponse' });
