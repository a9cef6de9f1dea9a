// The request bodies of the ecosystem protocols agentd speaks (src/protocols/): what the official
// clients send, checked as loosely as their own schemas are (unknown keys pass: a newer client
// adds fields), strictly where agentd acts on a value.
import { z } from 'zod';
import { BackgroundId, JsonObject, SafeId } from './common.js';

// ---------------------------------------------------------------- AI SDK UI message streams

/** One part of a UI message; agentd reads text parts and the approval answers on tool parts. */
const UiMessagePart = z.looseObject({
  type: z.string().max(256),
  text: z.string().optional(),
  toolCallId: z.string().max(256).optional(),
  state: z.string().max(64).optional(),
  input: z.unknown().optional(),
  approval: z
    .looseObject({
      id: z.string().max(256),
      approved: z.boolean().optional(),
      reason: z.string().max(4000).nullish(),
    })
    .optional(),
});

const UiMessage = z.looseObject({
  id: z.string().max(256),
  role: z.enum(['system', 'user', 'assistant']),
  parts: z.array(UiMessagePart).max(10_000),
  metadata: z.unknown().optional(),
});

export const AiSdkChatRequest = z
  .looseObject({
    id: SafeId.describe('The chat: the agentd session (the server keeps its history).'),
    messages: z.array(UiMessage).min(1).max(10_000).describe('The chat as `useChat` holds it; only the newest message is read.'),
    trigger: z.enum(['submit-message', 'regenerate-message']),
    messageId: z.string().max(256).nullish(),
    agent_id: BackgroundId.nullish().describe('A registered agent to run as (pass it in the transport `body`); default: the served agent.'),
  })
  .meta({ id: 'AiSdkChatRequest' });
export type AiSdkChatRequest = z.infer<typeof AiSdkChatRequest>;
export type UiMessagePart = z.infer<typeof UiMessagePart>;

export const AiSdkChatParams = z.object({ id: SafeId });

/** One frame of a UI message stream (the `ai` package's UIMessageChunk). */
export const AiSdkUiMessageChunk = z
  .looseObject({
    type: z.string().describe('`start`, `start-step`, `text-delta`, `tool-input-available`, `tool-approval-request`, `data-agentd-budget`, `finish`, ...'),
  })
  .meta({ id: 'AiSdkUiMessageChunk' });

// ---------------------------------------------------------------- AG-UI

const AgUiMessage = z.looseObject({
  id: z.string().max(256),
  role: z.string().max(64),
  content: z.unknown().optional(),
});

/** An answer to an interrupt: `payload` is `{decision, arguments?, note?}` (approval) or `{decision, amount?, note?}` (budget). */
export const AgUiResumePayload = z.looseObject({
  decision: z.enum(['approve', 'deny', 'grant']),
  arguments: JsonObject.nullish(),
  amount: z.number().positive().nullish(),
  note: z.string().max(4000).nullish(),
});

/** The characters of descriptions and values an AG-UI `context` may hold in all. */
const AG_UI_CONTEXT_MAX_CHARS = 32_768;

/** One item of AG-UI's `context` (`@ag-ui/core` Context). */
const AgUiContext = z.looseObject({ description: z.string().max(AG_UI_CONTEXT_MAX_CHARS), value: z.string().max(AG_UI_CONTEXT_MAX_CHARS) });

export const AgUiRunAgentInput = z
  .looseObject({
    threadId: SafeId.describe('The conversation: the agentd session.'),
    runId: z.string().min(1).max(256).describe("The client's own id of this run, echoed in RUN_STARTED and RUN_FINISHED."),
    protocolVersion: z.string().max(32).optional(),
    parentRunId: z.string().max(256).optional(),
    messages: z.array(AgUiMessage).max(10_000),
    tools: z
      .array(z.unknown())
      .max(1000)
      .optional()
      .describe("The client's frontend tools: accepted and not offered to the model (agentd runs its own governed tools; docs/protocols/ag-ui.md)."),
    context: z
      .array(AgUiContext)
      .max(100)
      .refine((c) => c.reduce((n, x) => n + x.description.length + x.value.length, 0) <= AG_UI_CONTEXT_MAX_CHARS, {
        message: `at most ${AG_UI_CONTEXT_MAX_CHARS} characters of descriptions and values in all`,
      })
      .optional()
      .describe('What the application says about its situation: the model sees it, for this run only, as a system message before the query.'),
    state: z.unknown().optional().describe("The client's shared state: stored in the run's metadata as `ag_ui_state` when at most 4 KiB as JSON."),
    forwardedProps: z.unknown().optional().describe("Stored in the run's metadata as `ag_ui_forwarded_props` when at most 4 KiB as JSON."),
    resume: z
      .array(
        z.looseObject({
          interruptId: z.string().max(256),
          status: z.enum(['resolved', 'cancelled']),
          payload: AgUiResumePayload.optional(),
        }),
      )
      .max(100)
      .optional(),
  })
  .meta({ id: 'AgUiRunAgentInput' });
export type AgUiRunAgentInput = z.infer<typeof AgUiRunAgentInput>;

/** One AG-UI event (`@ag-ui/core`'s BaseEvent and its kinds). */
export const AgUiEvent = z
  .looseObject({ type: z.string().describe('`RUN_STARTED`, `CUSTOM`, `TEXT_MESSAGE_CONTENT`, `TOOL_CALL_START`, `RUN_FINISHED`, `RUN_ERROR`, ...') })
  .meta({ id: 'AgUiEvent' });
