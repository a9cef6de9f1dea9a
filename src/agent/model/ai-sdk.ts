import {
  generateText,
  jsonSchema,
  stepCountIs,
  streamText,
  tool,
  type FinishReason,
  type JSONSchema7,
  type LanguageModel,
  type LanguageModelUsage,
  type ModelMessage,
  type SystemModelMessage,
  type ToolModelMessage,
  type ToolSet,
} from 'ai';
import { toModelCallError } from './errors.js';
import { chatCompletionsBody } from './chat-completions-body.js';
import type { ChatCompletionsStream } from './chat-completions-stream.js';
import { directStream, isV3, toV3Prompt, type DirectStreamResult } from './direct-stream.js';
import type { Redactor } from '../../telemetry/redact.js';
import { estimateInputTokens, estimateOutputTokens } from './tokens.js';
import {
  ModelCallError,
  type ChatMessage,
  type ModelCallRequest,
  type ModelCallResult,
  type ModelFinishReason,
  type ModelProvider,
  type ModelUsage,
  type ToolCallRequest,
  type ToolDeclaration,
} from './types.js';

export interface AiSdkProviderOptions {
  provider: string;
  model: string;
  languageModel: LanguageModel;
  max_output_tokens?: number;
  temperature?: number;
  /**
   * Anthropic accepts system text only before the conversation; other APIs accept it anywhere.
   * When false, a system message after the first non-system one is sent as a user message.
   */
  inlineSystemMessages: boolean;
  /**
   * Applied to every error message before it leaves the provider: a provider may echo the API key
   * (a 401 quoting the Authorization header) or the request, and the message is kept in the run's
   * snapshot, record and events. createModelProvider passes one that knows the configured key.
   */
  redactor?: Redactor;
  /**
   * Chat Completions providers: streaming calls go through our own client and SSE parser
   * (chat-completions-stream.ts) instead of the SDK's doStream; `languageModel` still makes the
   * non-streamed calls.
   */
  chatStream?: ChatCompletionsStream;
}

/** Our JSON messages → the SDK's ModelMessage list (leading system messages go to `system`). */
export function toModelMessages(messages: ChatMessage[], inlineSystemMessages = true): { system: SystemModelMessage[]; messages: ModelMessage[] } {
  const system: SystemModelMessage[] = [];
  const out: ModelMessage[] = [];
  let leading = true;
  for (const m of messages) {
    if (m.role === 'system') {
      if (leading) system.push({ role: 'system', content: m.content });
      else if (inlineSystemMessages) out.push({ role: 'system', content: m.content });
      else out.push({ role: 'user', content: m.content });
      continue;
    }
    leading = false;
    switch (m.role) {
      case 'user':
        out.push({ role: 'user', content: m.content });
        break;
      case 'assistant': {
        const calls = m.tool_calls ?? [];
        if (calls.length === 0) {
          out.push({ role: 'assistant', content: m.content });
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
        // Consecutive results of one batch go in one tool message, as the APIs expect them.
        const part = {
          type: 'tool-result' as const,
          toolCallId: m.tool_call_id,
          toolName: m.tool_name,
          output: { type: 'text' as const, value: m.content },
        };
        const prev = out[out.length - 1];
        if (prev && prev.role === 'tool') (prev as ToolModelMessage).content.push(part);
        else out.push({ role: 'tool', content: [part] });
        break;
      }
    }
  }
  return { system, messages: out };
}

/** Declares tools with no `execute`, so the SDK hands every call back to our run loop. */
export function toToolSet(tools: ToolDeclaration[]): ToolSet {
  const set: ToolSet = {};
  for (const t of tools) {
    const schema: Record<string, unknown> = { ...t.input_schema };
    // OpenAI rejects function parameters that are not an object schema with properties.
    if (schema.type === undefined) schema.type = 'object';
    if (schema.type === 'object' && schema.properties === undefined) schema.properties = {};
    set[t.name] = tool({ description: t.description, inputSchema: jsonSchema(schema as JSONSchema7) });
  }
  return set;
}

function toArguments(input: unknown): Record<string, unknown> {
  let v = input;
  if (typeof v === 'string') {
    try {
      v = v.trim() === '' ? {} : JSON.parse(v);
    } catch {
      return {};
    }
  }
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

export function mapFinishReason(reason: FinishReason | undefined, hasToolCalls: boolean): ModelFinishReason {
  // Some OpenAI-compatible servers say "stop" next to tool calls; the calls are what matter.
  if (hasToolCalls) return 'tool_calls';
  switch (reason) {
    case 'stop':
      return 'stop';
    case 'tool-calls':
      return 'tool_calls';
    case 'length':
      return 'length';
    case 'error':
      return 'error';
    default:
      return 'other';
  }
}

function mapUsage(u: LanguageModelUsage | undefined, fallbackIn: number, fallbackOut: number): ModelUsage {
  // A server that reports no usage must not make the call look free to the budget ledger.
  const input = u?.inputTokens ?? fallbackIn;
  const output = u?.outputTokens ?? fallbackOut;
  const total = u?.totalTokens ?? input + output;
  return { input_tokens: input, output_tokens: output, total_tokens: total };
}

/** One streamed model call, whichever client makes it. */
type StreamRunner = (
  req: ModelCallRequest,
  maxOutputTokens: number | undefined,
  temperature: number | undefined,
  onText: (text: string) => void,
) => Promise<DirectStreamResult>;

interface SdkToolCall {
  toolCallId: string;
  toolName: string;
  input: unknown;
}

export class AiSdkProvider implements ModelProvider {
  readonly provider: string;
  readonly model: string;
  readonly temperature?: number;

  constructor(private readonly opts: AiSdkProviderOptions) {
    this.provider = opts.provider;
    this.model = opts.model;
    if (opts.temperature !== undefined) this.temperature = opts.temperature;
  }

  estimateInputTokens(messages: ChatMessage[], tools: ToolDeclaration[]): number {
    return estimateInputTokens(messages, tools);
  }

  async call(req: ModelCallRequest): Promise<ModelCallResult> {
    if (req.signal?.aborted) throw new ModelCallError('aborted', 'model call aborted before it started');
    // Streaming (every run step): straight to the provider's doStream, without streamText's
    // pipeline (src/agent/model/direct-stream.ts).
    if (req.onDelta && this.opts.chatStream) return this.callDirect(req, req.onDelta, this.chatStreamRunner(this.opts.chatStream));
    if (req.onDelta && isV3(this.opts.languageModel)) return this.callDirect(req, req.onDelta, this.doStreamRunner(this.opts.languageModel));
    const { system, messages } = toModelMessages(req.messages, this.opts.inlineSystemMessages);
    const tools = toToolSet(req.tools);
    const maxOutputTokens = req.max_output_tokens ?? this.opts.max_output_tokens;
    const temperature = req.temperature ?? this.opts.temperature;
    const common = {
      model: this.opts.languageModel,
      ...(system.length > 0 ? { system } : {}),
      messages,
      allowSystemInMessages: true,
      ...(req.tools.length > 0 ? { tools } : {}),
      // The run loop is ours: one step, tool calls returned unexecuted, and no SDK retries
      // (withRetries owns retrying so each failure becomes one model_error event).
      stopWhen: stepCountIs(1),
      maxRetries: 0,
      ...(maxOutputTokens !== undefined ? { maxOutputTokens } : {}),
      ...(temperature !== undefined ? { temperature } : {}),
      ...(req.signal ? { abortSignal: req.signal } : {}),
    };
    const estIn = estimateInputTokens(req.messages, req.tools);

    if (!req.onDelta) {
      try {
        const r = await generateText(common);
        const calls = r.toolCalls.map((c) => this.toCall(c));
        return {
          text: r.text,
          tool_calls: calls,
          usage: mapUsage(r.usage, estIn, estimateOutputTokens(r.text, calls)),
          finish_reason: mapFinishReason(r.finishReason, calls.length > 0),
          model: r.response?.modelId || this.model,
          ...(r.response?.id ? { response_id: r.response.id } : {}),
        };
      } catch (err) {
        throw this.scrubbed(toModelCallError(err, req.signal));
      }
    }

    const onDelta = req.onDelta;
    let text = '';
    const calls: ToolCallRequest[] = [];
    let usage: LanguageModelUsage | undefined;
    let finish: FinishReason | undefined;
    let modelId: string | undefined;
    let responseId: string | undefined;
    try {
      const result = streamText({
        ...common,
        // Errors are read from the stream below; the default handler would print them.
        onError: () => {},
      });
      for await (const part of result.fullStream) {
        switch (part.type) {
          case 'text-delta':
            if (part.text) {
              text += part.text;
              onDelta(part.text);
            }
            break;
          case 'tool-call':
            calls.push(this.toCall(part));
            break;
          case 'finish-step':
            usage = part.usage;
            finish = part.finishReason;
            modelId = part.response?.modelId;
            responseId = part.response?.id;
            break;
          case 'finish':
            usage = usage ?? part.totalUsage;
            finish = part.finishReason;
            break;
          case 'error':
            throw part.error;
          case 'abort':
            throw new ModelCallError('aborted', 'model call aborted');
          default:
            break;
        }
      }
    } catch (err) {
      const e = this.scrubbed(toModelCallError(err, req.signal));
      if (text.length > 0) e.partialOutput = true;
      throw e;
    }
    return {
      text,
      tool_calls: calls,
      usage: mapUsage(usage, estIn, estimateOutputTokens(text, calls)),
      finish_reason: mapFinishReason(finish, calls.length > 0),
      model: modelId || this.model,
      ...(responseId ? { response_id: responseId } : {}),
    };
  }

  /** Our own Chat Completions client (chat-completions-stream.ts). */
  private chatStreamRunner(client: ChatCompletionsStream): StreamRunner {
    return (req, maxOutputTokens, temperature, onText) =>
      client.call(
        chatCompletionsBody({
          model: this.model,
          messages: req.messages,
          tools: req.tools,
          ...(maxOutputTokens !== undefined ? { maxOutputTokens } : {}),
          ...(temperature !== undefined ? { temperature } : {}),
          inlineSystemMessages: this.opts.inlineSystemMessages,
          includeUsage: true,
        }),
        req.signal,
        onText,
        toArguments,
      );
  }

  /** The provider's LanguageModelV3.doStream (direct-stream.ts). */
  private doStreamRunner(model: Parameters<typeof directStream>[0]): StreamRunner {
    return (req, maxOutputTokens, temperature, onText) =>
      directStream(
        model,
        {
          prompt: toV3Prompt(req.messages, this.opts.inlineSystemMessages),
          tools: req.tools,
          ...(maxOutputTokens !== undefined ? { maxOutputTokens } : {}),
          ...(temperature !== undefined ? { temperature } : {}),
          ...(req.signal ? { abortSignal: req.signal } : {}),
        },
        onText,
        toArguments,
      );
  }

  private async callDirect(req: ModelCallRequest, onDelta: (text: string) => void, run: StreamRunner): Promise<ModelCallResult> {
    let streamed = false;
    try {
      const maxOutputTokens = req.max_output_tokens ?? this.opts.max_output_tokens;
      const temperature = req.temperature ?? this.opts.temperature;
      const r = await run(req, maxOutputTokens, temperature, (t) => {
        streamed = true;
        onDelta(t);
      });
      // As mapUsage: a server that reports no usage must not make the call look free.
      const input = r.inputTokens ?? estimateInputTokens(req.messages, req.tools);
      const output = r.outputTokens ?? estimateOutputTokens(r.text, r.tool_calls);
      const usage: ModelUsage = { input_tokens: input, output_tokens: output, total_tokens: input + output };
      return {
        text: r.text,
        tool_calls: r.tool_calls,
        usage,
        finish_reason: mapFinishReason(r.finishReason as FinishReason | undefined, r.tool_calls.length > 0),
        model: r.modelId || this.model,
        ...(r.responseId ? { response_id: r.responseId } : {}),
      };
    } catch (err) {
      const e = this.scrubbed(toModelCallError(err, req.signal));
      if (streamed) e.partialOutput = true;
      throw e;
    }
  }

  private scrubbed(e: ModelCallError): ModelCallError {
    if (this.opts.redactor) e.message = this.opts.redactor.text(e.message);
    return e;
  }

  private toCall(c: SdkToolCall): ToolCallRequest {
    return { id: c.toolCallId, name: c.toolName, arguments: toArguments(c.input) };
  }
}
