// Decodes the `data:` payloads of a streamed Chat Completions answer into what direct-stream.ts
// reads from the AI SDK's openai-compatible provider: text deltas as they come, tool calls
// assembled from their deltas and handed back in index order at the end, the finish reason in the
// SDK's unified names, usage (prompt/completion totals, cached and reasoning tokens when present),
// and the response id/model of the first chunk. Failures throw what the provider's stream carries
// in the same case, with the same messages: a malformed JSON chunk, a chunk that is not a
// completion chunk, an `error` chunk, a stream that ends without a finish reason.
import type { DirectStreamResult } from './direct-stream.js';
import type { ToolCallRequest } from './types.js';

/** The SDK's mapOpenAICompatibleFinishReason: wire finish reason → unified finish reason. */
export function unifiedFinishReason(reason: string): string {
  switch (reason) {
    case 'stop':
      return 'stop';
    case 'length':
      return 'length';
    case 'content_filter':
      return 'content-filter';
    case 'function_call':
    case 'tool_calls':
      return 'tool-calls';
    default:
      return 'other';
  }
}

export interface ChatCompletionsResult extends DirectStreamResult {
  responseId: string | undefined;
  /** prompt_tokens_details.cached_tokens, when the server reports usage. */
  cachedInputTokens: number | undefined;
  /** completion_tokens_details.reasoning_tokens, when the server reports usage. */
  reasoningTokens: number | undefined;
}

interface PendingCall {
  index: number | undefined;
  id: string | undefined;
  name: string | undefined;
  args: string;
  sequence: number;
}

interface WireToolCallDelta {
  index?: number | null;
  id?: string | null;
  function?: { name?: string | null; arguments?: string | null } | null;
}

interface WireUsage {
  prompt_tokens?: number | null;
  completion_tokens?: number | null;
  prompt_tokens_details?: { cached_tokens?: number | null } | null;
  completion_tokens_details?: { reasoning_tokens?: number | null } | null;
}

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const nonBlank = (v: unknown): string | undefined => (typeof v === 'string' && v.trim().length > 0 ? v : undefined);
const errorText = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** A stream payload the provider would have rejected (the SDK's JSONParseError / TypeValidationError / error chunk). */
export class ChatStreamDataError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ChatStreamDataError';
  }
}

let generatedIds = 0;
/** For a tool call the server sent without an id (some OpenAI-compatible servers do). */
function generateCallId(): string {
  generatedIds = (generatedIds + 1) % Number.MAX_SAFE_INTEGER;
  return `call_${Date.now().toString(36)}${generatedIds.toString(36)}`;
}

export class ChatCompletionsDecoder {
  private text = '';
  private calls: PendingCall[] = [];
  private finishReason: string | undefined;
  private usage: WireUsage | undefined;
  private first = true;
  private modelId: string | undefined;
  private responseId: string | undefined;

  /** `toArguments`: the raw argument text of a call → its arguments (as direct-stream.ts takes it). */
  constructor(
    private readonly onText: (text: string) => void,
    private readonly toArguments: (input: unknown) => Record<string, unknown>,
  ) {}

  /** One SSE `data` payload. Throws ChatStreamDataError (or what onText throws). */
  push(data: string): void {
    if (data === '[DONE]') return;
    let value: unknown;
    try {
      value = JSON.parse(data);
    } catch (err) {
      throw new ChatStreamDataError(`JSON parsing failed: Text: ${data}.\nError message: ${errorText(err)}`);
    }
    if (isObject(value) && 'error' in value) {
      const e = value.error;
      const message = isObject(e) && typeof e.message === 'string' ? e.message : JSON.stringify(e);
      throw new ChatStreamDataError(`model stream reported an error: ${message}`);
    }
    if (!isObject(value) || !Array.isArray(value.choices)) {
      throw new ChatStreamDataError(`Type validation failed: Value: ${data}.\nError message: expected a chat completion chunk with a choices array`);
    }
    if (this.first) {
      this.first = false;
      if (typeof value.model === 'string') this.modelId = value.model;
      if (typeof value.id === 'string') this.responseId = value.id;
    }
    if (value.usage != null) this.usage = value.usage as WireUsage;
    const choice: unknown = value.choices[0];
    if (!isObject(choice)) return;
    if (typeof choice.finish_reason === 'string') this.finishReason = unifiedFinishReason(choice.finish_reason);
    const delta = choice.delta;
    if (!isObject(delta)) return;
    this.content(delta.content);
    if (Array.isArray(delta.tool_calls)) for (const d of delta.tool_calls as WireToolCallDelta[]) if (isObject(d)) this.toolCallDelta(d);
  }

  /** The stream ended: the assembled answer, or the provider's "no finish reason" failure. */
  finish(): ChatCompletionsResult {
    const tool_calls = this.assembledCalls();
    if (this.finishReason === undefined) throw new ChatStreamDataError('Response stream ended without a finish reason.');
    const u = this.usage;
    // As the SDK's convertOpenAICompatibleChatUsage: a usage object with a missing count counts 0.
    return {
      text: this.text,
      tool_calls,
      inputTokens: u ? (u.prompt_tokens ?? 0) : undefined,
      outputTokens: u ? (u.completion_tokens ?? 0) : undefined,
      cachedInputTokens: u ? (u.prompt_tokens_details?.cached_tokens ?? 0) : undefined,
      reasoningTokens: u ? (u.completion_tokens_details?.reasoning_tokens ?? 0) : undefined,
      finishReason: this.finishReason,
      modelId: this.modelId,
      responseId: this.responseId,
    };
  }

  private content(content: unknown): void {
    if (typeof content === 'string') {
      if (content.length > 0) this.emit(content);
      return;
    }
    // Some servers send content as parts; only text parts are answer text (thinking parts are
    // reasoning, which agentd does not keep).
    if (!Array.isArray(content)) return;
    for (const part of content) if (isObject(part) && part.type === 'text' && typeof part.text === 'string' && part.text.length > 0) this.emit(part.text);
  }

  private emit(t: string): void {
    this.text += t;
    this.onText(t);
  }

  /**
   * Deltas of one call share its `index`; the first carries id and name, the rest carry argument
   * text. A server that reuses one index for several calls starts each with a new id and a name.
   * A server that sends no index continues the call its id names, or the one unfinished call.
   */
  private toolCallDelta(d: WireToolCallDelta): void {
    const index = typeof d.index === 'number' ? d.index : undefined;
    const id = nonBlank(d.id);
    const name = nonBlank(d.function?.name);
    const args = typeof d.function?.arguments === 'string' ? d.function.arguments : '';
    let call: PendingCall | undefined;
    if (index !== undefined) {
      for (let i = this.calls.length - 1; i >= 0; i--) {
        if (this.calls[i].index === index) {
          call = this.calls[i];
          break;
        }
      }
      if (call && name !== undefined && call.name !== undefined && id !== undefined && call.id !== undefined && id !== call.id) call = undefined;
    } else if (id !== undefined) call = this.calls.find((c) => c.id === id);
    else if (name === undefined && this.calls.length > 0) call = this.calls[this.calls.length - 1];
    if (!call) {
      this.calls.push({ index, id, name, args, sequence: this.calls.length });
      return;
    }
    if (call.id === undefined && id !== undefined) call.id = id;
    if (call.name === undefined && name !== undefined) call.name = name;
    call.args += args;
  }

  private assembledCalls(): ToolCallRequest[] {
    const calls = this.calls.every((c) => c.index !== undefined) ? [...this.calls].sort((a, b) => a.index! - b.index! || a.sequence - b.sequence) : this.calls;
    const used = new Set<string>();
    const out: ToolCallRequest[] = [];
    for (const c of calls) {
      if (c.name === undefined) throw new ChatStreamDataError("Expected 'function.name' to be a string.");
      let id = c.id;
      if (id === undefined || used.has(id)) id = generateCallId();
      used.add(id);
      out.push({ id, name: c.name, arguments: this.toArguments(c.args) });
    }
    return out;
  }
}
