// The observation pipeline (spec telemetry `observation_pipeline_end`): what a tool returned is
// parsed, cleaned, formatted and bounded before the model sees it.

export interface Observation {
  content: string;
  truncated: boolean;
  /** Length of the formatted content before truncation. */
  original_chars: number;
}

export const DEFAULT_OBSERVATION_MAX_CHARS = 16_000;

// CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks; end with BEL or ST),
// then any other two-character escape.
const ANSI_RE = /\u001b\[[0-?]*[ -/]*[@-~]|\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)|\u001b[@-Z\\-_]|\u009b[0-?]*[ -/]*[@-~]/g;
// C0 controls except \t (09) and \n (0a), DEL, and C1 controls.
const CONTROL_RE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;

export function cleanText(text: string): string {
  return text.replace(ANSI_RE, '').replace(/\r\n?/g, '\n').replace(CONTROL_RE, '');
}

/** Strings that hold a JSON object or array are parsed so they format like any other value. */
function parse(result: unknown): unknown {
  if (typeof result !== 'string') return result;
  const t = result.trim();
  if (!((t.startsWith('{') && t.endsWith('}')) || (t.startsWith('[') && t.endsWith(']')))) return result;
  try {
    return JSON.parse(t);
  } catch {
    return result;
  }
}

/** Turns anything a tool may return into plain JSON with cleaned strings (no cycles, no bigint, no functions). */
function toJsonValue(value: unknown, seen: WeakSet<object>): unknown {
  if (value === null) return null;
  switch (typeof value) {
    case 'string':
      return cleanText(value);
    case 'number':
      return Number.isFinite(value) ? value : String(value);
    case 'boolean':
      return value;
    case 'bigint':
      return value.toString();
    case 'undefined':
    case 'function':
    case 'symbol':
      return undefined;
  }
  const obj = value as object;
  if (seen.has(obj)) return '[Circular]';
  if (obj instanceof Date) return Number.isNaN(obj.getTime()) ? null : obj.toISOString();
  if (obj instanceof Error) return { error: cleanText(obj.message) };
  const withToJson = obj as { toJSON?: () => unknown };
  if (typeof withToJson.toJSON === 'function') return toJsonValue(withToJson.toJSON(), seen);
  seen.add(obj);
  try {
    if (Array.isArray(obj)) return obj.map((v) => toJsonValue(v, seen) ?? null);
    if (obj instanceof Map) return toJsonValue(Object.fromEntries(obj), seen);
    if (obj instanceof Set) return toJsonValue([...obj], seen);
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(obj)) {
      const j = toJsonValue(v, seen);
      if (j !== undefined) out[cleanText(k)] = j;
    }
    return out;
  } finally {
    seen.delete(obj);
  }
}

const LINE_WIDTH = 80;

/**
 * Pretty but compact: a value whose one-line form fits in the line width stays on one line, larger
 * ones break with two-space indents. Readable for the model without spending tokens on whitespace.
 */
export function compactJson(value: unknown, indent = ''): string {
  const flat = JSON.stringify(value);
  if (value === null || typeof value !== 'object' || indent.length + flat.length <= LINE_WIDTH) return flat;
  const inner = `${indent}  `;
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    return `[\n${value.map((v) => inner + compactJson(v, inner)).join(',\n')}\n${indent}]`;
  }
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length === 0) return '{}';
  return `{\n${entries.map(([k, v]) => `${inner}${JSON.stringify(k)}: ${compactJson(v, inner)}`).join(',\n')}\n${indent}}`;
}

function format(value: unknown): string {
  if (value === undefined) return '(no output)';
  if (typeof value === 'string') return value;
  return compactJson(value);
}

/** Avoids cutting a surrogate pair in half at `index`. */
function safeCut(text: string, index: number): number {
  const code = text.charCodeAt(index - 1);
  return code >= 0xd800 && code <= 0xdbff ? index - 1 : index;
}

function truncate(text: string, maxChars: number): { content: string; truncated: boolean } {
  if (text.length <= maxChars) return { content: text, truncated: false };
  // The head usually says what the output is and the tail holds the error or the summary, so both
  // are kept and the marker says how much of the middle went. The result never exceeds maxChars.
  let dropped = text.length - maxChars;
  for (let i = 0; i < 8; i++) {
    const marker = `\n[... truncated ${dropped} chars]\n`;
    const keep = maxChars - marker.length;
    if (keep <= 0) break;
    const headLen = safeCut(text, Math.ceil(keep * 0.7));
    let tailStart = text.length - (keep - headLen);
    const c = text.charCodeAt(tailStart);
    if (c >= 0xdc00 && c <= 0xdfff) tailStart += 1;
    const actuallyDropped = tailStart - headLen;
    if (actuallyDropped === dropped) return { content: text.slice(0, headLen) + marker + text.slice(tailStart), truncated: true };
    dropped = actuallyDropped;
  }
  const bare = `[... truncated ${text.length} chars]`;
  return { content: bare.length <= maxChars ? bare : bare.slice(0, Math.max(maxChars, 0)), truncated: true };
}

export function formatObservation(result: unknown, opts: { maxChars?: number } = {}): Observation {
  const maxChars = opts.maxChars ?? DEFAULT_OBSERVATION_MAX_CHARS;
  const formatted = format(toJsonValue(parse(result), new WeakSet()));
  const { content, truncated } = truncate(formatted, maxChars);
  return { content, truncated, original_chars: formatted.length };
}
