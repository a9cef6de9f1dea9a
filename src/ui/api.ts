// The dashboard's only door to agentd: the public HTTP API with the user's key.
import { readSseFrames } from '../client/sse.js';
const KEY = 'agentd.key';
const APPROVER = 'agentd.approver';

export const session = {
  key: (): string => sessionStorage.getItem(KEY) ?? '',
  setKey: (k: string) => (k ? sessionStorage.setItem(KEY, k) : sessionStorage.removeItem(KEY)),
  approver: (): string => sessionStorage.getItem(APPROVER) ?? 'dashboard',
  setApprover: (n: string) => sessionStorage.setItem(APPROVER, n),
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
}

/**
 * What the key may do, found by harmless probes (no route tells a key its role): GET /runs needs
 * any role (401 = no valid key); a decision on a run that does not exist answers 403 to a key that
 * may not decide and 404/422 to one that may; a cancel of a run that does not exist likewise for
 * operating. Nothing exists under these ids, so nothing changes.
 */
export async function probeAccess(): Promise<Access> {
  const status = (p: Promise<unknown>) =>
    p.then(
      () => 200,
      (e) => {
        // No answer at all is not a role: the caller shows that the service is down and retries.
        if (e instanceof UnreachableError) throw e;
        return e instanceof ApiError ? e.status : 0;
      },
    );
  const read = await status(api('/runs?limit=1'));
  if (read === 401) return { needsKey: true, canOperate: false, canDecide: false, role: 'none' };
  const probe = 'run_dashboard_probe';
  const [decide, operate] = await Promise.all([
    status(api(`/runs/${probe}/approvals/approval_dashboard_probe`, { method: 'POST', body: {} })),
    status(api(`/runs/${probe}/cancel`, { method: 'POST', body: {} })),
  ]);
  const canDecide = decide !== 403 && decide !== 401;
  const canOperate = operate !== 403 && operate !== 401;
  const role = !session.key() ? 'open (no keys)' : canDecide && canOperate ? 'admin' : canDecide ? 'approver' : canOperate ? 'operator' : 'reader';
  return { needsKey: false, canOperate, canDecide, role };
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
