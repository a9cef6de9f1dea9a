import { estimateInputTokens, estimateOutputTokens } from './tokens.js';
import {
  ModelCallError,
  type ChatMessage,
  type ModelCallRequest,
  type ModelCallResult,
  type ModelProvider,
  type ToolCallRequest,
  type ToolDeclaration,
} from './types.js';

// The built-in offline model (docs/contract.md §10): deterministic, streamed, with usage and real
// tool calls, so a newcomer sees a whole run (tools, approvals, budgets) with no API key.
//
// How it decides, looking only at the turn since the last user message:
// - it calls every declared tool whose name (or the name with _/- read as spaces) appears in the
//   user text and that it has not yet called this turn, all in one batch;
// - else, if nothing was called yet this turn, a tool named `clock` is declared and the user asks
//   about time/date/day, it calls clock;
// - else it answers: quoting tool results if there were any this turn, otherwise a short reply.
// Arguments come from the tool's input_schema: `name=value` in the user text wins, then the
// property's default / example / first enum value, then quoted strings, then words of the query.

export interface DemoModelOptions {
  /** Wait this long between streamed chunks (benchmarks, demos). Default 0: no timers at all. */
  chunkDelayMs?: number;
  model?: string;
  max_output_tokens?: number;
}

const TIME_WORDS = /\b(time|date|day|today|tonight|tomorrow|yesterday|weekday|hour|clock|year|month)\b/i;
const RESULT_QUOTE_MAX = 300;

interface Turn {
  userText: string | undefined;
  /** Tool names already called since the last user message. */
  called: Set<string>;
  /** Tool results since the last user message, in order. */
  results: Array<{ name: string; content: string }>;
  /** How many tool calls the whole conversation holds (for unique, deterministic ids). */
  totalCalls: number;
}

function readTurn(messages: ChatMessage[]): Turn {
  let lastUser = -1;
  let totalCalls = 0;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (m.role === 'user') lastUser = i;
    if (m.role === 'assistant') totalCalls += m.tool_calls?.length ?? 0;
  }
  const called = new Set<string>();
  const results: Turn['results'] = [];
  for (let i = lastUser + 1; i < messages.length; i++) {
    const m = messages[i];
    if (m.role === 'assistant') for (const c of m.tool_calls ?? []) called.add(c.name);
    if (m.role === 'tool') results.push({ name: m.tool_name, content: m.content });
  }
  const userMsg = lastUser >= 0 ? messages[lastUser] : undefined;
  return { userText: userMsg?.content, called, results, totalCalls };
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function mentions(text: string, toolName: string): boolean {
  const variants = new Set([toolName, toolName.replace(/[_-]+/g, ' ')]);
  for (const v of variants) {
    if (v.trim() === '') continue;
    const re = new RegExp(`(^|[^A-Za-z0-9_])${escapeRegExp(v)}($|[^A-Za-z0-9_])`, 'i');
    if (re.test(text)) return true;
  }
  return false;
}

type JsonSchema = Record<string, unknown>;

function schemaType(s: JsonSchema): string | undefined {
  const t = s.type;
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) return t.find((x): x is string => typeof x === 'string' && x !== 'null');
  if (Array.isArray(s.enum) && s.enum.length > 0) return typeof s.enum[0];
  return undefined;
}

/** `key=value`, `key: value`, with value bare or quoted. */
function explicitValue(text: string, key: string): string | undefined {
  const re = new RegExp(`(?:^|[\\s,;(])${escapeRegExp(key)}\\s*[=:]\\s*(?:"([^"]*)"|'([^']*)'|([^\\s,;)]+))`, 'i');
  const m = re.exec(text);
  if (!m) return undefined;
  return m[1] ?? m[2] ?? m[3];
}

function quotedStrings(text: string): string[] {
  const out: string[] = [];
  const re = /"([^"]+)"|'([^']+)'|“([^”]+)”/g;
  for (let m = re.exec(text); m; m = re.exec(text)) out.push(m[1] ?? m[2] ?? m[3]);
  return out;
}

function firstExample(s: JsonSchema): unknown {
  if (s.default !== undefined) return s.default;
  if (Array.isArray(s.examples) && s.examples.length > 0) return s.examples[0];
  if (s.example !== undefined) return s.example;
  if (Array.isArray(s.enum) && s.enum.length > 0) return s.enum[0];
  if (s.const !== undefined) return s.const;
  return undefined;
}

const PATHY_NAMES = /^(path|file|filename|file_name|filepath|dir|directory|folder|name)$/i;
const PATHY_WORD = /^[\w.\-/]*[./][\w.\-/]*$/;

function buildArguments(decl: ToolDeclaration, userText: string): Record<string, unknown> {
  const schema = decl.input_schema;
  const props = (schema.properties && typeof schema.properties === 'object' ? schema.properties : {}) as Record<string, JsonSchema>;
  const required = new Set(Array.isArray(schema.required) ? schema.required.filter((r): r is string => typeof r === 'string') : []);
  const quotes = quotedStrings(userText);
  // The query minus the tool's name and any key=value pairs: what the user asked the tool to do.
  let rest = userText;
  for (const v of [decl.name, decl.name.replace(/[_-]+/g, ' ')]) rest = rest.replace(new RegExp(escapeRegExp(v), 'ig'), ' ');
  rest = rest
    .replace(/\b[\w-]+\s*[=:]\s*("[^"]*"|'[^']*'|[^\s,;)]+)/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  const words = rest
    .split(' ')
    .map((w) => w.replace(/^[^\w./-]+|[^\w./-]+$/g, '').replace(/\.+$/, ''))
    .filter((w) => w.length > 0);

  const args: Record<string, unknown> = {};
  const usedWords = new Set<string>();
  const pendingStrings: string[] = [];
  for (const [key, prop] of Object.entries(props)) {
    const type = schemaType(prop ?? {});
    const explicit = explicitValue(userText, key);
    if (explicit !== undefined) {
      args[key] = coerce(explicit, type);
      continue;
    }
    if (!required.has(key)) continue;
    const example = firstExample(prop ?? {});
    if (example !== undefined) {
      args[key] = example;
      continue;
    }
    switch (type) {
      case 'integer':
      case 'number': {
        const min = typeof prop.minimum === 'number' ? prop.minimum : undefined;
        args[key] = min !== undefined && min > 1 ? Math.ceil(min) : 1;
        break;
      }
      case 'boolean':
        args[key] = false;
        break;
      case 'array':
        args[key] = [];
        break;
      case 'object':
        args[key] = {};
        break;
      default:
        if (PATHY_NAMES.test(key)) {
          const w = words.find((x) => PATHY_WORD.test(x) && !usedWords.has(x));
          if (w !== undefined) {
            usedWords.add(w);
            args[key] = w;
            break;
          }
        }
        pendingStrings.push(key);
    }
  }
  // Free-text properties come after path-like ones so a quoted phrase is not taken for a path.
  for (const key of pendingStrings) {
    const quoted = quotes.shift();
    if (quoted !== undefined) args[key] = quoted;
    else if (PATHY_NAMES.test(key)) args[key] = 'notes.txt';
    else {
      const text = words.filter((w) => !usedWords.has(w)).join(' ');
      args[key] = text.length > 0 ? text : key;
    }
  }
  return args;
}

function coerce(raw: string, type: string | undefined): unknown {
  if (type === 'integer' || type === 'number') {
    const n = Number(raw);
    return Number.isFinite(n) ? n : raw;
  }
  if (type === 'boolean') return /^(true|yes|1)$/i.test(raw);
  return raw;
}

function quote(content: string): string {
  const flat = content.replace(/\s+/g, ' ').trim();
  return flat.length > RESULT_QUOTE_MAX ? `${flat.slice(0, RESULT_QUOTE_MAX)}…` : flat;
}

function answerFromResults(results: Turn['results']): string {
  const sentences = results.map(({ name, content }) => {
    const q = quote(content);
    if (/^denied\b/i.test(q) || /\bdenied by\b/i.test(q)) return `I was not allowed to use the ${name} tool (${q}).`;
    if (/^(error|tool error)\b/i.test(q)) return `The ${name} tool failed: ${q}`;
    return `The ${name} tool says: ${q}`;
  });
  return sentences.join(' ');
}

function directAnswer(userText: string | undefined, tools: ToolDeclaration[]): string {
  if (userText === undefined || userText.trim() === '') {
    return 'Hello! I am the built-in demo model. Ask me something.';
  }
  const asked = quote(userText);
  const names = tools.map((t) => t.name);
  const hint = names.length > 0 ? ` I can call these tools if you name one: ${names.join(', ')}.` : '';
  return `You said: "${asked}". I am the built-in demo model, running offline, so I can only echo you and call tools.${hint}`;
}

/** Chunks of one word plus its trailing whitespace; they concatenate back to the text. */
function chunksOf(text: string): string[] {
  return text.match(/\s*\S+\s*/g) ?? (text.length > 0 ? [text] : []);
}

export class DemoModel implements ModelProvider {
  readonly provider = 'demo';
  readonly model: string;

  constructor(private readonly opts: DemoModelOptions = {}) {
    this.model = opts.model ?? 'demo';
  }

  estimateInputTokens(messages: ChatMessage[], tools: ToolDeclaration[]): number {
    return estimateInputTokens(messages, tools);
  }

  /** The reply the demo model gives, without streaming or usage. Pure. */
  decide(messages: ChatMessage[], tools: ToolDeclaration[]): { text: string; tool_calls: ToolCallRequest[] } {
    const turn = readTurn(messages);
    const userText = turn.userText ?? '';
    const toCall: ToolDeclaration[] = [];
    if (turn.userText !== undefined) {
      for (const t of tools) if (!turn.called.has(t.name) && mentions(userText, t.name)) toCall.push(t);
      if (toCall.length === 0 && turn.called.size === 0 && TIME_WORDS.test(userText)) {
        const clock = tools.find((t) => t.name === 'clock');
        if (clock) toCall.push(clock);
      }
    }
    if (toCall.length > 0) {
      const calls = toCall.map((t, i) => ({
        id: `call_demo_${turn.totalCalls + i + 1}`,
        name: t.name,
        arguments: buildArguments(t, userText),
      }));
      return { text: '', tool_calls: calls };
    }
    const text = turn.results.length > 0 ? answerFromResults(turn.results) : directAnswer(turn.userText, tools);
    return { text, tool_calls: [] };
  }

  async call(req: ModelCallRequest): Promise<ModelCallResult> {
    const aborted = (): ModelCallError => new ModelCallError('aborted', 'model call aborted');
    if (req.signal?.aborted) throw aborted();
    const decided = this.decide(req.messages, req.tools);
    let text = decided.text;
    let finish: ModelCallResult['finish_reason'] = decided.tool_calls.length > 0 ? 'tool_calls' : 'stop';
    const maxOut = req.max_output_tokens ?? this.opts.max_output_tokens;
    if (maxOut !== undefined && decided.tool_calls.length === 0 && estimateOutputTokens(text, []) > maxOut) {
      text = text.slice(0, Math.max(0, maxOut * 4));
      finish = 'length';
    }
    const delay = this.opts.chunkDelayMs ?? 0;
    for (const chunk of chunksOf(text)) {
      if (delay > 0) await sleep(delay, req.signal);
      if (req.signal?.aborted) throw aborted();
      req.onDelta?.(chunk);
    }
    const input = estimateInputTokens(req.messages, req.tools);
    const output = Math.max(1, estimateOutputTokens(text, decided.tool_calls));
    return {
      text,
      tool_calls: decided.tool_calls,
      usage: { input_tokens: input, output_tokens: output, total_tokens: input + output },
      finish_reason: finish,
      model: this.model,
    };
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
