// The dashboard's only door to agentd: the public HTTP API with the user's key.
import { readSseFrames } from '../client/sse.js';
const KEY = 'agentd.key';
const APPROVER = 'agentd.approver';

/** The signed-in key's name (GET /whoami); null with auth off. */
let keyName: string | null = null;

export const session = {
  key: (): string => sessionStorage.getItem(KEY) ?? '',
  setKey: (k: string) => {
    if (k) sessionStorage.setItem(KEY, k);
    else {
      sessionStorage.removeItem(KEY);
      // "Deciding as" was this key's choice; the next key starts from its own name.
      sessionStorage.removeItem(APPROVER);
    }
  },
  /** Who decides: the name typed under "deciding as", else the key's name (as steer messages are signed), else "dashboard". */
  approver: (): string => sessionStorage.getItem(APPROVER) || keyName || 'dashboard',
  setApprover: (n: string) => (n ? sessionStorage.setItem(APPROVER, n) : sessionStorage.removeItem(APPROVER)),
};

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
  ) {
    super(describe(status, body));
  }
}

function describe(status: number, body: unknown): string {
  const b = body as { message?: string; detail?: Array<{ loc?: unknown[]; msg?: string }> } | null;
  if (b && typeof b.message === 'string') return `${status}: ${b.message}`;
  if (b && Array.isArray(b.detail)) return `${status}: ${b.detail.map((d) => `${(d.loc ?? []).join('.')}: ${d.msg}`).join('; ')}`;
  return `HTTP ${status}`;
}

/** The service did not answer at all (stopped, restarting, network down): no HTTP status. */
export class UnreachableError extends Error {
  constructor() {
    super('Cannot reach the agentd service: it may be stopped or restarting. Retrying…');
  }
  // Pages show errors with String(e): the plain sentence, not "Error: …" or a browser's "TypeError: Failed to fetch".
  override toString(): string {
    return this.message;
  }
}

type Listener = (reachable: boolean) => void;
const listeners = new Set<Listener>();
let reachable = true;

/** Whether the last request reached the service; the header shows a banner while it does not. */
export const connection = {
  reachable: () => reachable,
  subscribe(fn: Listener): () => void {
    listeners.add(fn);
    return () => listeners.delete(fn);
  },
};

function setReachable(v: boolean): void {
  if (v === reachable) return;
  reachable = v;
  for (const fn of listeners) fn(v);
}

/** fetch, with a network failure (fetch rejects with a TypeError) turned into UnreachableError. */
async function request(path: string, init: RequestInit): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(path, init);
  } catch (err) {
    if ((err as Error)?.name === 'AbortError') throw err;
    setReachable(false);
    throw new UnreachableError();
  }
  setReachable(true);
  return res;
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const k = session.key();
  return { ...(k ? { authorization: `Bearer ${k}` } : {}), ...extra };
}

export async function api<T = any>(path: string, init: { method?: string; body?: unknown; signal?: AbortSignal } = {}): Promise<T> {
  const res = await request(path, {
    method: init.method ?? 'GET',
    headers: headers(init.body !== undefined ? { 'content-type': 'application/json' } : {}),
    body: init.body !== undefined ? JSON.stringify(init.body) : undefined,
    signal: init.signal,
  });
  const text = await res.text();
  let body: unknown = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = text;
  }
  if (!res.ok) throw new ApiError(res.status, body);
  return body as T;
}

/** A file of the API as a download (fetch + blob: a plain link could not send the key). */
export async function download(path: string, name: string): Promise<void> {
  const res = await request(path, { headers: headers() });
  if (!res.ok) throw new ApiError(res.status, null);
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export interface Frame {
  event: string;
  id: string | null;
  data: any;
}

/**
 * An SSE stream read with fetch (EventSource cannot send Authorization). Calls onFrame per frame;
 * resolves when the stream ends. Reconnecting is the caller's (with the last id as Last-Event-ID).
 */
export async function stream(
  path: string,
  init: { method?: string; body?: unknown; lastEventId?: string | null; signal?: AbortSignal },
  onFrame: (f: Frame) => void,
): Promise<void> {
  const h = headers({ accept: 'text/event-stream', ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}) });
  if (init.lastEventId) h['last-event-id'] = init.lastEventId;
  const res = await request(path, {
    method: init.method ?? 'GET',
    headers: h,
    body: init.body !== undefined ? JSON.stringify(init.body) : undefined,
    signal: init.signal,
  });
  if (!res.ok || !res.body) {
    const text = await res.text().catch(() => '');
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    throw new ApiError(res.status, body);
  }
  // The typed client's reader (one SSE parser in the project, with its bound on a frame's size).
  for await (const raw of readSseFrames(res.body)) {
    if (raw.data === '' && raw.event === 'retry') continue;
    let parsed: unknown = raw.data;
    try {
      parsed = JSON.parse(raw.data);
    } catch {
      /* plain text */
    }
    onFrame({ event: raw.event, id: raw.id ?? null, data: parsed });
  }
}

export interface Access {
  /** The server wants a key and we have none (or a bad one). */
  needsKey: boolean;
  canOperate: boolean;
  canDecide: boolean;
  role: string;
  /** The signed-in key's name; null with auth off. */
  name: string | null;
  /** The tenant the key acts in (docs/multi-tenant.md); null: a global key, or auth off. */
  tenant: string | null;
}

/** What the key may do and who it is: GET /whoami (401 = a key is needed, or this one is not valid). */
export async function probeAccess(): Promise<Access> {
  let me: { name: string | null; role: string; auth: boolean; tenant?: string | null };
  try {
    me = await api('/whoami');
  } catch (e) {
    // No answer at all is not a role: the caller shows that the service is down and retries.
    if (e instanceof ApiError && e.status === 401) return { needsKey: true, canOperate: false, canDecide: false, role: 'none', name: null, tenant: null };
    throw e;
  }
  keyName = me.name;
  const canDecide = me.role === 'approver' || me.role === 'admin';
  const canOperate = me.role === 'operator' || me.role === 'admin';
  return { needsKey: false, canOperate, canDecide, role: me.auth ? me.role : 'open (no keys)', name: me.name, tenant: me.tenant ?? null };
}

/** A small JSON-schema check (type, required, properties, additionalProperties, enum) for edited tool arguments; the server checks again. */
export function schemaProblems(value: unknown, schema: any, path = '$'): string[] {
  if (!schema || typeof schema !== 'object') return [];
  const out: string[] = [];
  const t = schema.type;
  const types = Array.isArray(t) ? t : t ? [t] : [];
  const actual = value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value === 'number' && Number.isInteger(value) ? 'integer' : typeof value;
  if (types.length && !types.some((x: string) => x === actual || (x === 'number' && actual === 'integer'))) {
    return [`${path} must be ${types.join(' or ')}`];
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((e: unknown) => JSON.stringify(e) === JSON.stringify(value)))
    out.push(`${path} must be one of ${JSON.stringify(schema.enum)}`);
  if (actual === 'object') {
    const obj = value as Record<string, unknown>;
    for (const r of schema.required ?? []) if (!(r in obj)) out.push(`${path}.${r} is required`);
    const props = schema.properties ?? {};
    for (const [k, v] of Object.entries(obj)) {
      if (props[k]) out.push(...schemaProblems(v, props[k], `${path}.${k}`));
      else if (schema.additionalProperties === false) out.push(`${path}.${k} is not allowed`);
    }
  }
  if (actual === 'array' && schema.items) (value as unknown[]).forEach((v, i) => out.push(...schemaProblems(v, schema.items, `${path}[${i}]`)));
  return out;
}
