// Redaction, capture and truncation of event payloads (decisions.md §8.1). Runs on the hot path
// of every run step, so each payload is walked once: the walk copies (the caller may mutate its
// objects after the event is published), redacts secrets and keeps an upper bound of the JSON
// size; only when that bound crosses the limit is the payload stringified to measure it exactly.

export type CaptureMode = 'full' | 'metadata_only';

/** A payload left out by `capture: metadata_only`. */
export interface OmittedPayload {
  omitted: true;
  type: 'string' | 'number' | 'boolean' | 'object' | 'array';
  bytes: number;
}

/** A payload whose JSON was over the limit. `preview` is the start of that JSON text. */
export interface TruncatedPayload {
  truncated: true;
  original_bytes: number;
  preview: string;
}

export const REDACTED = '[REDACTED]';
/** Payloads whose JSON is larger than this (UTF-8 bytes) are replaced by a TruncatedPayload. */
export const MAX_PAYLOAD_BYTES = 64 * 1024;
/** At most 3 UTF-8 bytes per UTF-16 unit, so a preview stays well under MAX_PAYLOAD_BYTES. */
export const PREVIEW_CHARS = 16 * 1024;
const MAX_DEPTH = 64;

// Compared against the key lowercased with every non-alphanumeric removed, so `X-Api-Key`,
// `OPENAI_API_KEY`, `apiKey` and `client_secret` all match. `token` only matches as a suffix:
// `input_tokens`, `max_tokens` and `token_usage` are counters, not credentials.
const SECRET_FRAGMENTS = ['apikey', 'password', 'passwd', 'secret', 'privatekey', 'authorization', 'cookie'];
const SECRET_SUFFIXES = ['token'];
const secretKeyCache = new Map<string, boolean>();

/** True when a key names a credential (case-insensitive; api_key, authorization, password, passwd, token, access_token, secret, cookie, set-cookie, private_key, ...). */
export function isSecretKey(key: string): boolean {
  const cached = secretKeyCache.get(key);
  if (cached !== undefined) return cached;
  const compact = key.toLowerCase().replace(/[^a-z0-9]/g, '');
  const secret =
    SECRET_FRAGMENTS.some((f) => compact.includes(f)) || SECRET_SUFFIXES.some((s) => compact.endsWith(s));
  // Keys are a small, repetitive vocabulary; the bound only stops a hostile payload growing it.
  if (secretKeyCache.size < 10_000) secretKeyCache.set(key, secret);
  return secret;
}

interface Sanitized {
  value: unknown;
  /** Upper bound of the UTF-8 size of JSON.stringify(value). */
  bound: number;
}

/**
 * Copies a value into plain JSON data with secrets redacted at any depth. Cycles, BigInts,
 * functions and over-deep nesting become strings or are dropped (as JSON.stringify would) instead
 * of throwing: an event must never fail the run that emits it.
 */
export function redact(value: unknown): unknown {
  return sanitize(value, 0, new Set()).value;
}

function sanitize(value: unknown, depth: number, ancestors: Set<object>): Sanitized {
  switch (typeof value) {
    case 'string':
      // 6 bytes per unit covers `\u00XX` escapes; real text is far smaller, which only means an
      // occasional exact measurement.
      return { value, bound: 2 + 6 * value.length };
    case 'number':
      return Number.isFinite(value) ? { value, bound: 24 } : { value: null, bound: 4 };
    case 'boolean':
      return { value, bound: 5 };
    case 'bigint':
      return { value: value.toString(), bound: 2 + value.toString().length };
    case 'undefined':
    case 'function':
    case 'symbol':
      return { value: undefined, bound: 0 };
  }
  if (value === null) return { value: null, bound: 4 };
  const obj = value as object;
  if (depth >= MAX_DEPTH) return { value: '[MaxDepth]', bound: 12 };
  if (ancestors.has(obj)) return { value: '[Circular]', bound: 12 };
  if (obj instanceof Date) {
    const t = obj.getTime();
    return Number.isNaN(t) ? { value: null, bound: 4 } : { value: obj.toISOString(), bound: 26 };
  }
  if (obj instanceof Error) {
    // JSON.stringify(error) is `{}`; keep what a reader needs.
    const msg = obj.message;
    return { value: { type: obj.name, message: msg }, bound: 32 + obj.name.length * 6 + msg.length * 6 };
  }
  if (ArrayBuffer.isView(obj)) return { value: `[Binary ${obj.byteLength} bytes]`, bound: 40 };
  const toJSON = (obj as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') {
    let converted: unknown;
    try {
      converted = (toJSON as () => unknown).call(obj);
    } catch {
      return { value: '[Unserializable]', bound: 18 };
    }
    if (converted !== obj) return sanitize(converted, depth + 1, ancestors);
  }
  ancestors.add(obj);
  try {
    if (Array.isArray(obj)) {
      const out = new Array<unknown>(obj.length);
      let bound = 2;
      for (let i = 0; i < obj.length; i++) {
        const s = sanitize(obj[i], depth + 1, ancestors);
        // JSON turns undefined array items into null.
        out[i] = s.value === undefined ? null : s.value;
        bound += (s.value === undefined ? 4 : s.bound) + 1;
      }
      return { value: out, bound };
    }
    const out: Record<string, unknown> = {};
    let bound = 2;
    for (const k of Object.keys(obj)) {
      if (isSecretKey(k)) {
        out[k] = REDACTED;
        bound += 6 * k.length + 3 + REDACTED.length + 3;
        continue;
      }
      let raw: unknown;
      try {
        raw = (obj as Record<string, unknown>)[k];
      } catch {
        raw = '[Unreadable]';
      }
      const s = sanitize(raw, depth + 1, ancestors);
      if (s.value === undefined) continue;
      out[k] = s.value;
      bound += 6 * k.length + 3 + s.bound + 1;
    }
    return { value: out, bound };
  } finally {
    ancestors.delete(obj);
  }
}

function payloadType(value: unknown): OmittedPayload['type'] {
  if (Array.isArray(value)) return 'array';
  const t = typeof value;
  return t === 'string' || t === 'number' || t === 'boolean' ? t : 'object';
}

function jsonBytes(value: unknown): number {
  const json = JSON.stringify(value);
  return json === undefined ? 0 : Buffer.byteLength(json, 'utf8');
}

function cutPreview(json: string): string {
  let preview = json.slice(0, PREVIEW_CHARS);
  // Do not leave half a surrogate pair at the end.
  const last = preview.charCodeAt(preview.length - 1);
  if (last >= 0xd800 && last <= 0xdbff) preview = preview.slice(0, -1);
  return preview;
}

/** Applies capture, redaction and truncation to one input/output payload. */
export function capturePayload(value: unknown, capture: CaptureMode): unknown {
  if (value === undefined || value === null) return null;
  if (capture === 'metadata_only') {
    // The content is dropped, so redaction is moot; only its size and type are kept.
    let bytes: number;
    try {
      bytes = jsonBytes(value);
    } catch {
      // Cycles or BigInts: measure the sanitized copy instead.
      bytes = jsonBytes(sanitize(value, 0, new Set()).value);
    }
    const omitted: OmittedPayload = { omitted: true, type: payloadType(value), bytes };
    return omitted;
  }
  const s = sanitize(value, 0, new Set());
  if (s.value === undefined) return null;
  if (s.bound <= MAX_PAYLOAD_BYTES) return s.value;
  const json = JSON.stringify(s.value);
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes <= MAX_PAYLOAD_BYTES) return s.value;
  const truncated: TruncatedPayload = { truncated: true, original_bytes: bytes, preview: cutPreview(json) };
  return truncated;
}
