// One model call straight through the provider's LanguageModelV3 interface (`doStream`), for a
// caller that runs its own step loop, as agentd does. `streamText` would add, per call: prompt
// validation with zod, its step loop, a dozen web-stream transforms and result promises, none of
// which agentd uses (measured in /work/shared/design/model-path.md and docs/benchmarks.md
// "Profiles"). The provider code is the same (headers, request body, SSE parsing, errors), and what
// reaches it is what streamText would have passed for our options: the same prompt conversion
// (src/agent/model/ai-sdk.ts toModelMessages, then the SDK's convertToLanguageModelPrompt rules for
// plain text/tool parts), tools as function tools with toolChoice auto, no retries.
import type {
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3FunctionTool,
  LanguageModelV3Message,
  LanguageModelV3Prompt,
  LanguageModelV3ToolResultPart,
  LanguageModelV3Usage,
} from '@ai-sdk/provider';
import type { ChatMessage, ToolCallRequest, ToolDeclaration } from './types.js';

/** True when the model object speaks LanguageModelV3 (every provider agentd builds does). */
export function isV3(model: unknown): model is LanguageModelV3 {
  return (
    typeof model === 'object' &&
    model !== null &&
    (model as { specificationVersion?: unknown }).specificationVersion === 'v3' &&
    typeof (model as { doStream?: unknown }).doStream === 'function'
  );
}

/** OpenAI rejects function parameters that are not an object schema with properties (as toToolSet). */
const schemaCache = new WeakMap<object, Record<string, unknown>>();
export function normalisedSchema(input: Record<string, unknown>): Record<string, unknown> {
  let s = schemaCache.get(input);
  if (!s) {
    s = { ...input };
    if (s.type === undefined) s.type = 'object';
    if (s.type === 'object' && s.properties === undefined) s.properties = {};
    schemaCache.set(input, s);
  }
  return s;
}

/**
 * Function tools, built once per list of declarations (the list object is the cache key; a caller
 * that builds a new list per call still gets every schema normalised only once).
 */
const toolsCache = new WeakMap<ToolDeclaration[], LanguageModelV3FunctionTool[]>();
export function toV3Tools(tools: ToolDeclaration[]): LanguageModelV3FunctionTool[] {
  let out = toolsCache.get(tools);
  if (!out) {
    out = tools.map((t) => ({
      type: 'function' as const,
      name: t.name,
      description: t.description,
      inputSchema: normalisedSchema(t.input_schema) as LanguageModelV3FunctionTool['inputSchema'],
    }));
    toolsCache.set(tools, out);
  }
  return out;
}

/**
 * Our JSON messages → the provider prompt streamText would have built from toModelMessages' output:
 * leading system messages as system, a later one as system (or as a user message when the API takes
 * system text only up front), string content as one text part, tool calls after the text (empty
 * text dropped), consecutive tool results in one tool message.
 */
export function toV3Prompt(messages: ChatMessage[], inlineSystemMessages = true): LanguageModelV3Prompt {
  const out: LanguageModelV3Message[] = [];
  let leading = true;
  for (const m of messages) {
    switch (m.role) {
      case 'system':
        if (leading || inlineSystemMessages) out.push({ role: 'system', content: m.content });
        else out.push({ role: 'user', content: [{ type: 'text', text: m.content }] });
        continue;
      case 'user':
        out.push({ role: 'user', content: [{ type: 'text', text: m.content }] });
        break;
      case 'assistant': {
        const calls = m.tool_calls ?? [];
        if (calls.length === 0) {
          out.push({ role: 'assistant', content: [{ type: 'text', text: m.content }] });
          break;
        }
        out.push({
          role: 'assistant',
          content: [
            ...(m.content ? [{ type: 'text' as const, text: m.content }] : []),
            ...calls.map((c) => ({ type: 'tool-call' as const, toolCallId: c.id, toolName: c.name, input: c.arguments })),
          ],
        });
        break;
      }
      case 'tool': {
        const part: LanguageModelV3ToolResultPart = {
          type: 'tool-result',
          toolCallId: m.tool_call_id,
          toolName: m.tool_name,
          output: { type: 'text', value: m.content },
        };
        const prev = out[out.length - 1];
        if (prev && prev.role === 'tool') prev.content.push(part);
        else out.push({ role: 'tool', content: [part] });
        break;
      }
    }
    leading = false;
  }
  return out;
}

export interface DirectStreamResult {
  text: string;
  tool_calls: ToolCallRequest[];
  inputTokens: number | undefined;
  outputTokens: number | undefined;
  /** The SDK's unified finish reason (streamText's `finishReason`). */
  finishReason: string | undefined;
  modelId: string | undefined;
  /** The provider's response id (OTLP gen_ai.response.id). */
  responseId?: string | undefined;
}

/**
 * Streams one call: `onText` gets each non-empty text delta as it arrives. Throws what the provider
 * throws (APICallError and friends; the caller maps them), or the error a stream part carries.
 */
export async function directStream(
  model: LanguageModelV3,
  opts: { prompt: LanguageModelV3Prompt; tools: ToolDeclaration[]; maxOutputTokens?: number; temperature?: number; abortSignal?: AbortSignal },
  onText: (text: string) => void,
  toArguments: (input: unknown) => Record<string, unknown>,
): Promise<DirectStreamResult> {
  const call: LanguageModelV3CallOptions = {
    prompt: opts.prompt,
    ...(opts.tools.length > 0 ? { tools: toV3Tools(opts.tools), toolChoice: { type: 'auto' as const } } : {}),
    ...(opts.maxOutputTokens !== undefined ? { maxOutputTokens: opts.maxOutputTokens } : {}),
    ...(opts.temperature !== undefined ? { temperature: opts.temperature } : {}),
    ...(opts.abortSignal ? { abortSignal: opts.abortSignal } : {}),
    includeRawChunks: false,
  };
  const { stream } = await model.doStream(call);
  const reader = stream.getReader();
  let text = '';
  const calls: ToolCallRequest[] = [];
  let usage: LanguageModelV3Usage | undefined;
  let finishReason: string | undefined;
  let modelId: string | undefined;
  let responseId: string | undefined;
  let done = false;
  try {
    for (;;) {
      const r = await reader.read();
      if (r.done) {
        done = true;
        break;
      }
      const part = r.value;
      switch (part.type) {
        case 'text-delta':
          if (part.delta) {
            text += part.delta;
            onText(part.delta);
          }
          break;
        case 'tool-call':
          if (!part.providerExecuted) calls.push({ id: part.toolCallId, name: part.toolName, arguments: toArguments(part.input) });
          break;
        case 'response-metadata':
          if (part.modelId) modelId = part.modelId;
          if (part.id) responseId = part.id;
          break;
        case 'finish':
          usage = part.usage;
          finishReason = part.finishReason.unified;
          break;
        case 'error':
          throw part.error;
        default:
          break;
      }
    }
  } finally {
    // Cancelling a stream that already failed or closed may reject: nothing left to clean up.
    if (!done) reader.cancel().catch(() => undefined);
    else reader.releaseLock();
  }
  return { text, tool_calls: calls, inputTokens: usage?.inputTokens.total, outputTokens: usage?.outputTokens.total, finishReason, modelId, responseId };
}
