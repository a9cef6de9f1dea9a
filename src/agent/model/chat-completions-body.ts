// The JSON body of a streamed Chat Completions request, built straight from our messages: the same
// JSON the AI SDK's openai-compatible provider sends for what direct-stream.ts passes it (toV3Prompt
// → convertToOpenAICompatibleChatMessages, function tools with tool_choice "auto", max_tokens,
// temperature, stream, stream_options), key order included. test/agent/model/chat-completions-stream.test.ts
// compares the two on the wire.
import { normalisedSchema } from './direct-stream.js';
import type { ChatMessage, ToolDeclaration } from './types.js';

export interface ChatBodyOptions {
  model: string;
  messages: ChatMessage[];
  tools: ToolDeclaration[];
  maxOutputTokens?: number;
  temperature?: number;
  /** false: a system message after the conversation began goes as a user message (as toV3Prompt). */
  inlineSystemMessages: boolean;
  /** Ask for the usage chunk (`stream_options.include_usage`). */
  includeUsage: boolean;
}

type WireMessage =
  | { role: 'system' | 'user'; content: string }
  | { role: 'assistant'; content: string | null; tool_calls?: Array<{ id: string; type: 'function'; function: { name: string; arguments: string } }> }
  | { role: 'tool'; tool_call_id: string; content: string };

export function toWireMessages(messages: ChatMessage[], inlineSystemMessages: boolean): WireMessage[] {
  const out: WireMessage[] = [];
  let leading = true;
  for (const m of messages) {
    switch (m.role) {
      case 'system':
        out.push({ role: leading || inlineSystemMessages ? 'system' : 'user', content: m.content });
        continue;
      case 'user':
        out.push({ role: 'user', content: m.content });
        break;
      case 'assistant': {
        const calls = m.tool_calls ?? [];
        if (calls.length === 0) out.push({ role: 'assistant', content: m.content });
        else
          out.push({
            role: 'assistant',
            content: m.content || null,
            tool_calls: calls.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: JSON.stringify(c.arguments) } })),
          });
        break;
      }
      case 'tool':
        out.push({ role: 'tool', tool_call_id: m.tool_call_id, content: m.content });
        break;
    }
    leading = false;
  }
  return out;
}

/** The `tools` array as JSON, serialised once per list of declarations (the list is the key). */
const toolsJsonCache = new WeakMap<ToolDeclaration[], string>();
export function toolsJson(tools: ToolDeclaration[]): string {
  let json = toolsJsonCache.get(tools);
  if (json === undefined) {
    json = JSON.stringify(
      tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: normalisedSchema(t.input_schema) } })),
    );
    toolsJsonCache.set(tools, json);
  }
  return json;
}

/** A number as JSON writes it (String() is the same text for a finite one). */
const jsonNumber = (n: number): string => (Number.isFinite(n) ? String(n) : 'null');

/** The model's name as a JSON string: the same name call after call, serialised once. */
let modelName = '';
let modelJson = '""';
function modelNameJson(model: string): string {
  if (model !== modelName) {
    modelJson = JSON.stringify(model);
    modelName = model;
  }
  return modelJson;
}

export function chatCompletionsBody(o: ChatBodyOptions): string {
  let body = `{"model":${modelNameJson(o.model)}`;
  if (o.maxOutputTokens !== undefined) body += `,"max_tokens":${jsonNumber(o.maxOutputTokens)}`;
  if (o.temperature !== undefined) body += `,"temperature":${jsonNumber(o.temperature)}`;
  body += `,"messages":${JSON.stringify(toWireMessages(o.messages, o.inlineSystemMessages))}`;
  if (o.tools.length > 0) body += `,"tools":${toolsJson(o.tools)},"tool_choice":"auto"`;
  body += ',"stream":true';
  if (o.includeUsage) body += ',"stream_options":{"include_usage":true}';
  return `${body}}`;
}
