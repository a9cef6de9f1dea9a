// The OpenAI Chat Completions wire, as much of it as an agent answers (docs/protocols/openai.md).
// Requests are loose: sampling parameters an OpenAI client sends (temperature, top_p, …) are
// accepted and ignored, since the agent's model settings are the operator's.
import { z } from 'zod';
import { JsonObject, SafeId } from '../../schemas/common.js';
import { RunResponseStatus } from '../../schemas/runs.js';

const TextPart = z.looseObject({ type: z.literal('text'), text: z.string().max(1_000_000) });
const Content = z.union([z.string().max(1_000_000), z.array(z.union([TextPart, z.looseObject({ type: z.string() })])).max(256), z.null()]);

export const ChatMessageIn = z
  .looseObject({
    role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']),
    content: Content.optional(),
    tool_call_id: z.string().max(256).optional().describe('role tool: the approval id (or budget request id) this message decides.'),
  })
  .meta({ id: 'OpenAIChatMessage' });
export type ChatMessageIn = z.infer<typeof ChatMessageIn>;

export const ChatCompletionRequest = z
  .looseObject({
    model: z.string().min(1).max(128).describe('An agent id: `default` for the served agent, else a registered agent (GET /v1/models).'),
    messages: z.array(ChatMessageIn).min(1).max(1000),
    stream: z.boolean().nullish(),
    stream_options: z.looseObject({ include_usage: z.boolean().nullish() }).nullish(),
  })
  .meta({ id: 'OpenAIChatCompletionRequest' });
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

export const SessionHeaders = z.looseObject({
  'x-agentd-session-id': SafeId.optional().describe(
    'Makes the conversation a session whose history the server keeps; without it the request messages are the conversation.',
  ),
});

/** What a `role: "tool"` message decides (its content, JSON). */
export const ToolMessageDecision = z.union([
  z.strictObject({ decision: z.enum(['approve', 'deny']), arguments: JsonObject.nullish(), note: z.string().max(10_000).nullish() }),
  z.strictObject({ decision: z.enum(['grant', 'deny']), amount: z.number().positive().nullish(), note: z.string().max(10_000).nullish() }),
]);

const Usage = z.object({ prompt_tokens: z.number().int(), completion_tokens: z.number().int(), total_tokens: z.number().int() }).meta({ id: 'OpenAIUsage' });

export const AgentdRunInfo = z
  .object({
    run_id: z.string(),
    session_id: z.string(),
    status: RunResponseStatus,
    trace_id: z.string(),
    approvals: z.array(z.object({ approval_id: z.string(), tool_name: z.string(), arguments: JsonObject })),
    budget_request: JsonObject.nullable(),
  })
  .meta({ id: 'AgentdRunInfo', description: 'The agentd run behind the answer; a paused run lists what it waits for.' });

export const ChatCompletion = z
  .object({
    id: z.string(),
    object: z.literal('chat.completion'),
    created: z.number().int(),
    model: z.string(),
    choices: z.array(
      z.object({
        index: z.number().int(),
        message: z.object({ role: z.literal('assistant'), content: z.string().nullable(), refusal: z.null() }),
        finish_reason: z.enum(['stop', 'length', 'content_filter']),
        logprobs: z.null(),
      }),
    ),
    usage: Usage,
    agentd: AgentdRunInfo,
  })
  .meta({ id: 'OpenAIChatCompletion' });

export const ChatCompletionChunk = z
  .object({
    id: z.string(),
    object: z.literal('chat.completion.chunk'),
    created: z.number().int(),
    model: z.string(),
    choices: z.array(
      z.object({
        index: z.number().int(),
        delta: z.object({ role: z.literal('assistant').optional(), content: z.string().optional() }),
        finish_reason: z.enum(['stop', 'length', 'content_filter']).nullable(),
      }),
    ),
    usage: Usage.nullish(),
    agentd: AgentdRunInfo.optional(),
  })
  .meta({ id: 'OpenAIChatCompletionChunk' });

export const ModelList = z
  .object({
    object: z.literal('list'),
    data: z.array(z.object({ id: z.string(), object: z.literal('model'), created: z.number().int(), owned_by: z.string() })),
  })
  .meta({ id: 'OpenAIModelList' });
