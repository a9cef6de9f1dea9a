// Redaction, capture and truncation of event payloads (docs/contract.md §8.1). Runs on the hot path
// of every run step, so each payload is walked once: the walk copies (the caller may mutate its
// objects after the event is published), redacts secrets and keeps an upper bound of the JSON
// size; only when that bound crosses the limit is the payload stringified to measure it exactly.
//
// Secrets are found two ways: by field name (`password`, `api_key`,
// ... anywhere in an object) and by value, inside any string: well-known credential shapes
// (`Bearer …`, `password=…`, AWS/GitHub/OpenAI/Anthropic/Slack/Google keys, PEM private keys,
// JWTs, `Authorization:` lines, URL passwords) and the exact secret values the configuration
// holds (see secrets.ts). Both value kinds are one precompiled regular expression, so a string
// costs one scan; strings too short to hold any of them are not scanned at all.

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
  const secret = SECRET_FRAGMENTS.some((f) => compact.includes(f)) || SECRET_SUFFIXES.some((s) => compact.endsWith(s));
  // Keys are a small, repetitive vocabulary; the bound only stops a hostile payload growing it.
  if (secretKeyCache.size < 10_000) secretKeyCache.set(key, secret);
  return secret;
}

// ---------------------------------------------------------------- secrets inside strings

// Each alternative below is one credential shape. The ones that keep a prefix (the separator
// after a key name, the `Bearer ` scheme, the URL up to the password) capture it in their own
// group, so the replacement says what was removed; the others are replaced whole.
//
// Built for speed, measured in test/bench/benchmarks/redaction.ts: V8 tries every alternative at
// every position whose character could start one, so each alternative starts with a literal
// character that is rare in text, and any boundary check comes after it (a lookbehind placed
// first runs at every position). Key-named values (`password=…`, `"api_key": "…"`,
// `Authorization: …`) are found at their separator `:` / `=`, with the key name checked by a
// lookbehind; key names are matched in any case by explicit classes (no `i` flag: the token
// prefixes AKIA, ghp_, sk-, xox, eyJ have one case). The known secret values come first.
//
// A value after `key=` / `key: ` is a quoted string (plain, JSON-escaped `\"…\"` as in JSON text
// inside a string, or single-quoted; the closing quote may be missing when the text was cut) or a
// run of characters up to a delimiter. Separators allow spaces and tabs, not newlines, so
// `password:` at the end of a line never swallows the next line.
const anyCase = (word: string): string => word.replace(/[a-z]/g, (c) => `[${c.toUpperCase()}${c}]`);
const QUOTED_VALUE = String.raw`"(?:[^"\\\r\n]|\\.)*"?|\\"(?:[^"\\\r\n]|\\[^"\r\n])*(?:\\")?|'(?:[^'\\\r\n]|\\.)*'?`;
const BARE_VALUE = String.raw`[^\s"'\\,;&<>{}\[\]()]+`;
/** A separator whose key (read backwards by a lookbehind) is one of `keys`. */
const separatorAfter = (keys: string): string => String.raw`[:=](?<=(?:${keys})(?:\\?["'])?[ \t]*[:=])`;
const HEADER_KEYS = String.raw`(?<![A-Za-z0-9])(?:${anyCase('authorization')}|${anyCase('cookie')})`;
const CREDENTIAL_KEYS = [
  `${anyCase('api')}[_-]?${anyCase('key')}`,
  `${anyCase('access')}[_-]?${anyCase('key')}`,
  `${anyCase('secret')}[_-]?${anyCase('key')}`,
  `${anyCase('private')}[_-]?${anyCase('key')}`,
  anyCase('password'),
  anyCase('passwd'),
  anyCase('passphrase'),
  anyCase('secret'),
  `${anyCase('credential')}[sS]?`,
].join('|');
/** Not a letter or digit before the token's first character (checked after it, see above). */
const startsWord = (c: string): string => String.raw`${c}(?<![A-Za-z0-9]${c})`;
/** Patterns found at a key name's separator; the three groups of replaceMatch. */
const KEYED_PATTERNS: string[] = [
  // 1: an Authorization / Cookie header (Proxy-Authorization, Set-Cookie too), up to the end of
  // the line or of the quoted value.
  String.raw`(${separatorAfter(HEADER_KEYS)}[ \t]*(?:\\?["'])?)[^"'\\\r\n]+`,
  // 2: a credential-named key and its value (db_password=…, "api_key": "…", clientSecret: …).
  String.raw`(${separatorAfter(CREDENTIAL_KEYS)}>?[ \t]*)(?:${QUOTED_VALUE}|${BARE_VALUE})`,
  // 3: a token-named key (access_token=…, githubToken: …); a bare value must hold a letter, so
  // `token: 512` (a count) is left alone. `max_tokens: 5` does not match: `token` must end the key.
  String.raw`(${separatorAfter(anyCase('token'))}>?[ \t]*)(?:${QUOTED_VALUE}|(?=[^\s"'\\,;&<>{}\[\]()]*[A-Za-z])${BARE_VALUE})`,
];
/** Patterns of the secret itself; their two groups follow KEYED_PATTERNS' three. */
const SHAPE_PATTERNS: string[] = [
  // 4: the password of a URL's user info (postgres://user:password@host).
  String.raw`(:\/\/[^\s/:@"'<>]+:)[^\s/@"'<>]+(?=@)`,
  // 5: a bearer token: 8+ characters with a digit, or 20+ ("the bearer of this letter" stays).
  String.raw`(${startsWord('[Bb]')}earer[ \t]+)(?:(?=[A-Za-z_.~+/-]*[0-9])[\w.~+/-]{8,}|[\w.~+/-]{20,})=*`,
  // Replaced whole: PEM private keys (to the END line, or to the end of a cut text), AWS access
  // key ids and Google API keys, GitHub tokens, OpenAI/Anthropic keys (with a digit: `sk-learn-…`
  // is a library), Slack tokens, JWTs.
  String.raw`-----BEGIN[A-Z ]{0,40}PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z ]{0,40}PRIVATE KEY-----|$)`,
  String.raw`${startsWord('A')}(?:(?:KIA|SIA)[A-Z0-9]{16}(?![A-Za-z0-9])|Iza[0-9A-Za-z_-]{35})`,
  String.raw`${startsWord('g')}(?:h[pousr]_[A-Za-z0-9]{36,}|ithub_pat_[A-Za-z0-9_]{22,})`,
  String.raw`${startsWord('s')}k-(?=[A-Za-z_-]*[0-9])[A-Za-z0-9_-]{20,}`,
  String.raw`${startsWord('x')}ox[abposr]-[0-9]+-[A-Za-z0-9-]{8,}`,
  String.raw`${startsWord('e')}yJ[\w-]{5,}\.eyJ[\w-]{5,}\.[\w-]{5,}`,
];
/** The shortest text any value pattern can match (`token=a`): shorter strings are not scanned. */
const MIN_PATTERN_CHARS = 7;
/** Redactor.text's memo: total characters of the texts it holds (keys; most values are the same strings). */
const MEMO_MAX_CHARS = 4 * 1024 * 1024;
const MEMO_MAX_ENTRIES = 20_000;
/**
 * Longer texts are scanned every time: V8 hashes only strings up to 16,383 characters and gives
 * longer ones their length as hash, so memoised big texts of one length (padded logs, fixed-size
 * reads) would all share a bucket and each lookup would compare them all.
 */
const MEMO_MAX_TEXT_CHARS = 16_383;
/** Configured secret values shorter than this are ignored: `true`, `1` or `json` must never be scrubbed. */
export const MIN_SECRET_CHARS = 8;

const escapeRegExp = (s: string): string => s.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');

/** Keeps the quotes of a quoted value, so redacted JSON text stays JSON. */
function redactedValue(value: string): string {
  const open = value.startsWith('\\"') ? '\\"' : value[0] === '"' || value[0] === "'" ? value[0] : '';
  if (open === '') return REDACTED;
  const closed = value.length >= 2 * open.length && value.endsWith(open);
  return `${open}${REDACTED}${closed ? open : ''}`;
}

function replaceMatch(match: string, header?: string, key?: string, tokenKey?: string, url?: string, bearer?: string): string {
  if (header !== undefined) return header + REDACTED;
  if (key !== undefined) return key + redactedValue(match.slice(key.length));
  if (tokenKey !== undefined) return tokenKey + redactedValue(match.slice(tokenKey.length));
  if (url !== undefined) return url + REDACTED;
  if (bearer !== undefined) return bearer + REDACTED;
  return REDACTED;
}

/**
 * Finds secrets inside strings: the value patterns above plus the exact secret values it was
 * built with (the configured model key, OTLP and MCP headers, ...: see secrets.ts). Build one per
 * process (the regular expression is compiled once) and pass it wherever telemetry leaves a run.
 */
export class Redactor {
  /** Known values, then KEYED_PATTERNS, then SHAPE_PATTERNS, as one alternation. */
  private readonly re: RegExp;
  private readonly minChars: number;
  /** The configured secret values it scrubs (longest first), for tests and `config check`. */
  readonly secrets: readonly string[];

  constructor(secrets: Iterable<string> = []) {
    const known = [...new Set([...secrets].filter((s) => typeof s === 'string' && s.length >= MIN_SECRET_CHARS))];
    known.sort((a, b) => b.length - a.length);
    this.secrets = known;
    // Known values first: at a given position the exact secret wins over a pattern that would
    // keep a prefix of it. They carry no group, so replaceMatch replaces them whole.
    this.re = new RegExp([...known.map(escapeRegExp), ...KEYED_PATTERNS, ...SHAPE_PATTERNS].join('|'), 'g');
    this.minChars = Math.min(MIN_PATTERN_CHARS, ...known.map((s) => s.length));
  }

  /**
   * Texts already scanned and what they became. A run records the same strings again and again:
   * the user message in user_message and in the first model_call, a tool's output in tool_result
   * and in the next model_call's last message, the answer in model_response and final_answer, the
   * run, session and model names in every event's metadata. A repeat costs a hash lookup (V8 keeps
   * a string's hash in the string) instead of a scan (~3 µs per KB). Bounded by MEMO_MAX_CHARS of
   * keys and MEMO_MAX_ENTRIES; when full it is emptied and refilled by what comes next.
   */
  private readonly memo = new Map<string, string>();
  private memoChars = 0;

  /** The text with every secret replaced by `[REDACTED]`; the same string when there is none. */
  text(s: string): string {
    if (s.length < this.minChars) return s;
    const known = this.memo.get(s);
    if (known !== undefined) return known;
    // A global replace with no match returns the original string without copying it.
    const out = s.replace(this.re, replaceMatch as (m: string, ...groups: string[]) => string);
    if (s.length <= MEMO_MAX_TEXT_CHARS) {
      if (this.memoChars + s.length > MEMO_MAX_CHARS || this.memo.size >= MEMO_MAX_ENTRIES) {
        this.memo.clear();
        this.memoChars = 0;
      }
      this.memo.set(s, out);
      this.memoChars += s.length;
    }
    return out;
  }
}

/** Value patterns only (no configured secrets): the default of every function below. */
export const defaultRedactor = new Redactor();

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
export function redact(value: unknown, redactor: Redactor = defaultRedactor): unknown {
  return sanitize(value, 0, PATH.length, redactor).value;
}

/**
 * A string, finite number, boolean or null as sanitize gives it, through one shared record (the
 * caller reads it before the next call); null for anything else. Most values an event carries are
 * such leaves (metadata is a flat object of ids and names): they then cost no record of their own
 * and no call through sanitize's cases.
 */
function leaf(value: unknown, redactor: Redactor): Sanitized | null {
  if (typeof value === 'string') {
    const text = redactor.text(value);
    LEAF.value = text;
    LEAF.bound = 2 + 6 * text.length;
  } else if (typeof value === 'number' && Number.isFinite(value)) {
    LEAF.value = value;
    LEAF.bound = 24;
  } else if (typeof value === 'boolean') {
    LEAF.value = value;
    LEAF.bound = 5;
  } else if (value === null) {
    LEAF.value = null;
    LEAF.bound = 4;
  } else return null;
  return LEAF;
}
const LEAF: Sanitized = { value: null, bound: 0 };

/**
 * The objects sanitize is inside of, outermost first: a value met again among its own ancestors is
 * a cycle. One array for every call instead of a Set per payload (a run's events made several
 * each); a call works on the part from its `from` index, which a redact() called again from within
 * (a toJSON) starts past, and leaves it as it found it.
 */
const PATH: object[] = [];

function sanitize(value: unknown, depth: number, from: number, redactor: Redactor): Sanitized {
  switch (typeof value) {
    case 'string': {
      const text = redactor.text(value);
      // 6 bytes per unit covers `\u00XX` escapes; real text is far smaller, which only means an
      // occasional exact measurement.
      return { value: text, bound: 2 + 6 * text.length };
    }
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
  if (PATH.indexOf(obj, from) !== -1) return { value: '[Circular]', bound: 12 };
  if (obj instanceof Date) {
    const t = obj.getTime();
    return Number.isNaN(t) ? { value: null, bound: 4 } : { value: obj.toISOString(), bound: 26 };
  }
  if (obj instanceof Error) {
    // JSON.stringify(error) is `{}`; keep what a reader needs.
    const msg = redactor.text(String(obj.message));
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
    if (converted !== obj) return sanitize(converted, depth + 1, from, redactor);
  }
  PATH.push(obj);
  try {
    if (Array.isArray(obj)) {
      const out = new Array<unknown>(obj.length);
      let bound = 2;
      for (let i = 0; i < obj.length; i++) {
        const s = leaf(obj[i], redactor) ?? sanitize(obj[i], depth + 1, from, redactor);
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
      const s = leaf(raw, redactor) ?? sanitize(raw, depth + 1, from, redactor);
      if (s.value === undefined) continue;
      // A key can be a secret too: a map keyed by token or API key. Keys are a small vocabulary,
      // so after the first event this is a memo hit.
      const key = redactor.text(k);
      out[key] = s.value;
      bound += 6 * key.length + 3 + s.bound + 1;
    }
    return { value: out, bound };
  } finally {
    PATH.pop();
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
export function capturePayload(value: unknown, capture: CaptureMode, redactor: Redactor = defaultRedactor): unknown {
  if (value === undefined || value === null) return null;
  if (capture === 'metadata_only') {
    // The content is dropped, so redaction is moot; only its size and type are kept.
    let bytes: number;
    try {
      bytes = jsonBytes(value);
    } catch {
      // Cycles or BigInts: measure the sanitized copy instead.
      bytes = jsonBytes(sanitize(value, 0, PATH.length, redactor).value);
    }
    const omitted: OmittedPayload = { omitted: true, type: payloadType(value), bytes };
    return omitted;
  }
  const s = sanitize(value, 0, PATH.length, redactor);
  if (s.value === undefined) return null;
  if (s.bound <= MAX_PAYLOAD_BYTES) return s.value;
  const json = JSON.stringify(s.value);
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes <= MAX_PAYLOAD_BYTES) return s.value;
  const truncated: TruncatedPayload = { truncated: true, original_bytes: bytes, preview: cutPreview(json) };
  return truncated;
}
