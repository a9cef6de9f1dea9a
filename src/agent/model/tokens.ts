import type { ChatMessage, ToolCallRequest, ToolDeclaration } from './types.js';

// Budgets reserve "input tokens + max output tokens" before a call (docs/contract.md §5), so the
// estimate needs no tokenizer, only to be stable and roughly right: ~4 characters per token plus
// a small per-message overhead, the same rule the demo model and the scripted server report.
const CHARS_PER_TOKEN = 4;
const PER_MESSAGE_OVERHEAD = 4;

export function tokensForText(text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN);
}

function toolCallsChars(calls: ToolCallRequest[] | undefined): number {
  if (!calls) return 0;
  let n = 0;
  for (const c of calls) n += c.name.length + JSON.stringify(c.arguments).length;
  return n;
}

export function estimateInputTokens(messages: ChatMessage[], tools: ToolDeclaration[]): number {
  let tokens = 0;
  for (const m of messages) {
    let chars = m.content.length;
    if (m.role === 'assistant') chars += toolCallsChars(m.tool_calls);
    if (m.role === 'tool') chars += m.tool_name.length + m.tool_call_id.length;
    tokens += Math.ceil(chars / CHARS_PER_TOKEN) + PER_MESSAGE_OVERHEAD;
  }
  for (const t of tools) tokens += declarationTokens(t);
  return tokens;
}

/**
 * A declaration's share of the estimate, worked out once per declaration object: a run's tools are
 * the same objects call after call (src/runtime/run-effects.ts toolDeclarations), and their schemas
 * were serialised twice per model call (its budget reservation and its rate-limit admission).
 * The name, description and schema it was worked out for are checked, so a declaration changed
 * in place is measured again.
 */
const declared = new WeakMap<ToolDeclaration, { name: string; description: string; schema: unknown; tokens: number }>();
function declarationTokens(t: ToolDeclaration): number {
  const known = declared.get(t);
  if (known && known.name === t.name && known.description === t.description && known.schema === t.input_schema) return known.tokens;
  const tokens = tokensForText(t.name + t.description + JSON.stringify(t.input_schema));
  declared.set(t, { name: t.name, description: t.description, schema: t.input_schema, tokens });
  return tokens;
}

export function estimateOutputTokens(text: string, calls: ToolCallRequest[]): number {
  return Math.ceil((text.length + toolCallsChars(calls)) / CHARS_PER_TOKEN);
}
