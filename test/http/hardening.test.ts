// Issue 10, findings 1, 2, 5, 6 and 7, tried as an attacker and a careless client would: over raw
// sockets, so paths reach the server exactly as written (fetch would normalise them).
import { createHash } from 'node:crypto';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { configFromObject } from '../../src/config.js';
import { startServer } from '../../src/main.js';
import { ROUTE_ACCESS } from '../../src/http/auth.js';
import type { ServerErrorEntry } from '../../src/http/error-handler.js';
import { rawRequest, requestText, type RawAnswer } from '../helpers/raw-http.js';
import { eventually, getJson, postJson, startTestServer, tempDir, type TestServer } from '../helpers/server.js';

const sha = (k: string) => createHash('sha256').update(k).digest('hex');
const ROLES = ['reader', 'operator', 'approver', 'admin'] as const;
type Role = (typeof ROLES)[number];
const KEYS: Record<Role, string> = { reader: 'key-reader-1', operator: 'key-operator-1', approver: 'key-approver-1', admin: 'key-admin-1' };
const AUTH = { api_keys: ROLES.map((role) => ({ name: role, role, key_sha256: sha(KEYS[role]) })) };

const portOf = (s: TestServer) => Number(new URL(s.url).port);

describe('the docs app serves documentation only (finding 1)', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ auth: AUTH });
    // Data that must not leak: a run in session S.
    expect((await postJson(`${s.url}/run/sync`, { query: 'hello', session_id: 'S' }, { authorization: `Bearer ${KEYS.operator}` })).status).toBe(200);
  });
  afterAll(async () => {
    await s.stop();
    s.cleanup();
  });

  const sneaky = [
    '/docs/%2e%2e/runs',
    '/docs/%2E%2E/runs',
    '/docs/../runs',
    '/docs/./../sessions/S/history',
    '/docs/%2e%2e/sessions/S/history',
    '/docs/..%2fruns',
    '/docs/static/%2e%2e/%2e%2e/runs',
    '/docs/%2e%2e/metrics',
    '/docs/%2e%2e/events/S',
    '/docs/%2e%2e/telemetry/events?session_id=S',
    '/docs/..%5cruns',
  ];

  it('answers no API route through /docs, however the path is spelled, and opens no hidden stream', async () => {
    for (const target of sneaky) {
      const a = await rawRequest(portOf(s), requestText('GET', target), { timeoutMs: 3000 });
      expect(a.status, target).toBe(404);
      expect(a.body, target).not.toContain('run_');
      expect(JSON.parse(a.body).error, target).toBe('NotFound');
    }
    // A replay stream opened through the docs app was never closed and buffered every later event.
    expect(s.runtime.bus.size).toBe(0);
  });

  it('still serves the Swagger UI page, its assets and the OpenAPI document without a key', async () => {
    const page = await rawRequest(portOf(s), requestText('GET', '/docs'));
    expect(page.status).toBe(200);
    expect(page.body).toContain('<html');
    const json = await rawRequest(portOf(s), requestText('GET', '/docs/json'));
    expect(json.status).toBe(200);
    expect(JSON.parse(json.body).openapi).toBe('3.1.0');
    const init = await rawRequest(portOf(s), requestText('GET', '/docs/static/swagger-initializer.js'));
    expect(init.status).toBe(200);
    expect((await getJson(`${s.url}/openapi.json`)).status).toBe(200);
  });
});

/**
 * The role × route matrix, independent of the implementation: docs/contract.md §9 and
 * docs/operations.md. Public: health, readiness, the documentation. Decisions: approvers. Other
 * GETs: every role. Everything else: operators.
 */
function expectedRoles(method: string, path: string): Role[] | 'public' {
  if (method === 'GET' && ['/health', '/ready', '/openapi.json', '/docs', '/ui', '/.well-known/agent-card.json'].includes(path)) return 'public';
  // Protocol endpoints carrying reads, runs and decisions in their bodies: every role gets in, and
  // each method checks its own access (test/protocols/{a2a,mcp}.test.ts: a reader key starts no run).
  if (['/a2a', '/mcp'].includes(path)) return [...ROLES];
  if (method === 'POST' && (path === '/runs/{run_id}/approvals/{approval_id}' || path === '/runs/{run_id}/budget')) return ['approver', 'admin'];
  // The chat protocols start runs and take decisions on one route: either role gets past it (the
  // handler then checks the one the body needs: test/protocols/).
  if (method === 'POST' && ['/ai-sdk/chat', '/ag-ui', '/v1/chat/completions'].includes(path)) return ['operator', 'approver', 'admin'];
  if (method === 'GET') return [...ROLES];
  return ['operator', 'admin'];
}

/** A concrete path for an OpenAPI path template, with harmless ids. */
function concrete(path: string): string {
  return path.replace(/\{\*\}/, 'file.txt').replace(/\{[^}]+\}/g, (m) => `x${m.length}`);
}

/** Other spellings of the same path that a router may or may not match; none may get past the role check. */
function spellings(path: string): Array<{ name: string; target: string }> {
  const segs = path.split('/');
  const encoded = segs.map((seg) => (/^[a-z]/.test(seg) ? `%${seg.charCodeAt(0).toString(16)}${seg.slice(1)}` : seg)).join('/');
  return [
    { name: 'plain', target: path },
    { name: 'percent-encoded', target: encoded },
    { name: 'upper-case', target: path.toUpperCase() },
    { name: 'double-slash', target: path.replace(/\//g, '//') },
    { name: 'trailing-slash', target: `${path}/` },
    { name: 'absolute-form', target: `http://localhost${path}` },
  ];
}

describe('authorization is decided on the matched route (finding 2)', () => {
  let s: TestServer;
  let operations: Array<{ method: string; path: string }> = [];
  beforeAll(async () => {
    s = await startTestServer({ auth: AUTH });
    const doc = (await getJson(`${s.url}/openapi.json`)).body as { paths: Record<string, Record<string, unknown>> };
    for (const [path, ops] of Object.entries(doc.paths)) for (const m of Object.keys(ops)) operations.push({ method: m.toUpperCase(), path });
    operations = [...operations, { method: 'GET', path: '/openapi.json' }, { method: 'GET', path: '/docs' }, { method: 'GET', path: '/ui' }];
  });
  afterAll(async () => {
    await s.stop();
    s.cleanup();
  });

  const send = (method: string, target: string, key: string | null): Promise<RawAnswer> => {
    const headers: Record<string, string> = key ? { authorization: `Bearer ${key}` } : {};
    const body = method === 'GET' || method === 'DELETE' ? undefined : '{}';
    // headersOnly: a GET of a stream route answers with an SSE stream that never ends.
    return rawRequest(portOf(s), requestText(method, target, { headers, body }), { headersOnly: true, timeoutMs: 5000 });
  };

  it('covers every route of the OpenAPI document', () => {
    expect(operations.length).toBeGreaterThan(40);
    // Every special case in the access table names a route that exists.
    const registered = new Set(s.app.routeList.map((r) => `${r.method} ${r.url}`));
    for (const k of Object.keys(ROUTE_ACCESS)) expect(registered.has(k), k).toBe(true);
  });

  it('gives each role exactly its routes, in every spelling of the path', async () => {
    const failures: string[] = [];
    const jobs: Array<() => Promise<void>> = [];
    for (const op of operations) {
      const want = expectedRoles(op.method, op.path);
      for (const sp of spellings(concrete(op.path))) {
        for (const who of [null, 'bad-key', ...ROLES] as const) {
          jobs.push(async () => {
            const key = who === null ? null : who === 'bad-key' ? 'not-a-key' : KEYS[who];
            const a = await send(op.method, sp.target, key);
            const label = `${op.method} ${sp.target} as ${who ?? 'anonymous'}: ${a.status} ${a.body.slice(0, 120)}`;
            if (a.status === 0 || a.status >= 500) return void failures.push(`no answer or 5xx: ${label}`);
            if (want === 'public') {
              if (sp.name === 'plain' && (a.status === 401 || a.status === 403)) failures.push(`public route refused: ${label}`);
              return;
            }
            const allowed = who !== null && who !== 'bad-key' && want.includes(who);
            if (who === null || who === 'bad-key') {
              // Without a valid key nothing gets past authentication, whatever the spelling.
              if (a.status !== 401) failures.push(`expected 401: ${label}`);
            } else if (!allowed) {
              // 403 when the router matched the route, 404 when it did not: never the handler.
              if (a.status !== 403 && a.status !== 404) failures.push(`expected 403/404: ${label}`);
              if (sp.name === 'plain' && a.status !== 403) failures.push(`expected 403: ${label}`);
            } else if (a.status === 401 || a.status === 403) {
              failures.push(`allowed role refused: ${label}`);
            }
          });
        }
      }
    }
    // A few at a time: enough to be quick, few enough for a 2-core machine.
    for (let i = 0; i < jobs.length; i += 24) await Promise.all(jobs.slice(i, i + 24).map((j) => j()));
    expect(failures).toEqual([]);
  }, 120_000);
});

describe('timeouts and the connection cap (finding 5)', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ server: { headers_timeout_seconds: 1, body_timeout_seconds: 1, keep_alive_timeout_seconds: 1, max_connections: 50 } });
  });
  afterAll(async () => {
    await s.stop();
    s.cleanup();
  });

  it('closes connections whose headers never finish, with a 408 in the error shape', async () => {
    const started = Date.now();
    const a = await rawRequest(portOf(s), 'GET /health HTTP/1.1\r\nHost: x\r\n', { timeoutMs: 8000 });
    expect(a.closedByServer).toBe(true);
    expect(a.status).toBe(408);
    expect(JSON.parse(a.body)).toEqual({ error: 'RequestTimeout', code: expect.stringMatching(/^AGT_ERR_/), message: expect.any(String), detail: null });
    expect(Date.now() - started).toBeLessThan(6000);
  });

  it('closes connections whose body never finishes', async () => {
    const a = await rawRequest(
      portOf(s),
      `POST /run/sync HTTP/1.1\r\nHost: localhost:${portOf(s)}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"query":`,
      {
        timeoutMs: 8000,
      },
    );
    expect(a.closedByServer).toBe(true);
    expect([0, 408]).toContain(a.status);
  });

  it('survives many half-open connections and more than max_connections sockets: /health still answers', async () => {
    const sockets: net.Socket[] = [];
    const closed = { n: 0 };
    for (let i = 0; i < 120; i++) {
      const c = net.connect(portOf(s), '127.0.0.1', () => c.write('GET /health HTTP/1.1\r\nHost: x\r\n'));
      c.on('error', () => undefined);
      c.on('close', () => closed.n++);
      c.resume(); // read, so the server's close is seen
      sockets.push(c);
    }
    // Over the cap: closed at once. Under it: closed by the header timeout.
    await eventually(() => closed.n === 120, 8000, 'every half-open socket closed by the server').catch((e) => {
      throw new Error(`${e.message}: ${closed.n} closed`);
    });
    const health = await getJson(`${s.url}/health`);
    expect(health.status).toBe(200);
    for (const c of sockets) c.destroy();
  });

  it('keeps an SSE stream open past every timeout (no request body is pending)', async () => {
    const socket = net.connect(portOf(s), '127.0.0.1', () =>
      socket.write(requestText('GET', '/events/quiet-session', { headers: { connection: 'keep-alive', host: `localhost:${portOf(s)}` } })),
    );
    let text = '';
    let closed = false;
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (text += d));
    socket.on('close', () => (closed = true));
    socket.on('error', () => undefined);
    await eventually(() => text.includes('event: session'), 5000, 'session frame');
    // Part of the scenario: a quiet stream outlives the idle timeouts (nothing to await: nothing happens).
    await new Promise((r) => setTimeout(r, 3000));
    expect(closed).toBe(false);
    socket.destroy();
  });
});

describe('bodies and ids the API can serve (findings 6 and 7)', () => {
  let s: TestServer;
  let logged: ServerErrorEntry[];
  let dataDir: string;
  beforeAll(async () => {
    logged = [];
    dataDir = tempDir();
    const config = configFromObject({ server: { port: 0 }, runs: { orphan_sweep: { interval_seconds: 3600 } } }, { dataDir, env: {} });
    const server = await startServer(config, { logServerError: (e) => logged.push(e) });
    s = { ...server, dataDir, stop: (g = 0) => server.close(g), cleanup: () => undefined } as TestServer;
  });
  afterAll(async () => {
    await s.stop();
  });

  const deep = (levels: number, leaf = '1') => '['.repeat(levels) + leaf + ']'.repeat(levels);

  it('refuses JSON nested deeper than server.max_json_depth with a 422 naming where', async () => {
    const body = `{"task_id":"deep","query":"q","schedule":{"type":"manual"},"metadata":{"a":${deep(10_000)}}}`;
    const a = await postJson(`${s.url}/background/tasks`, body);
    expect(a.status).toBe(422);
    expect(a.body.detail[0].type).toBe('json_too_deep');
    expect(a.body.detail[0].loc.slice(0, 3)).toEqual(['body', 'metadata', 'a']);
    // Deep arrays at the top level, and in every JSON route.
    const b = await postJson(`${s.url}/run/sync`, deep(100_000));
    expect(b.status).toBe(422);
    expect(b.body.detail[0].loc).toEqual(['body', ...new Array(64).fill(0)]);
    // Brackets inside strings do not count.
    const c = await postJson(`${s.url}/run/sync`, { query: '['.repeat(5000), session_id: 'brackets' });
    expect(c.status).toBe(200);
    // Nesting within the limit is accepted.
    const ok = await postJson(`${s.url}/background/tasks`, `{"task_id":"deep-ok","query":"q","schedule":{"type":"manual"},"metadata":{"a":${deep(60)}}}`);
    expect(ok.status).toBe(200);
  });

  it('routes every session id validation accepts: 101-256 characters work on every session route', async () => {
    const id = 's'.repeat(256);
    expect((await postJson(`${s.url}/run/sync`, { query: 'hi', session_id: id })).status).toBe(200);
    expect((await getJson(`${s.url}/sessions/${id}/history`)).status).toBe(200);
    expect((await getJson(`${s.url}/events/${id}/list`)).status).toBe(200);
    expect((await getJson(`${s.url}/telemetry/sessions/${id}/trace`)).status).toBe(200);
    const del = await fetch(`${s.url}/sessions/${id}`, { method: 'DELETE' });
    expect(del.status).toBe(200);
    // Multi-byte ids count characters, not bytes: 256 emoji fit too.
    const emoji = '\u{1F600}'.repeat(256);
    expect((await postJson(`${s.url}/run/sync`, { query: 'hi', session_id: emoji })).status).toBe(200);
    expect((await getJson(`${s.url}/sessions/${encodeURIComponent(emoji)}/history`)).status).toBe(200);
  });

  it('answers a too-long id with 422 on its parameter, and only an absurd one with 414, in the error shape', async () => {
    const a = await getJson(`${s.url}/sessions/${'s'.repeat(257)}/history`);
    expect(a.status).toBe(422);
    expect(a.body.detail[0].loc).toEqual(['path', 'session_id']);
    const b = await getJson(`${s.url}/sessions/${'s'.repeat(5000)}/history`);
    expect(b.status).toBe(414);
    expect(b.body).toEqual({ error: 'URITooLong', code: expect.stringMatching(/^AGT_ERR_/), message: expect.any(String), detail: null });
  });

  it('refuses lone surrogates in ids (they could never be sent back in a URL)', async () => {
    const a = await postJson(`${s.url}/run/sync`, '{"query":"hi","session_id":"ab\\ud800cd"}');
    expect(a.status).toBe(422);
    expect(a.body.detail[0].loc).toEqual(['body', 'session_id']);
    const b = await postJson(`${s.url}/run/sync`, '{"query":"hi","session_id":"\\udc00"}');
    expect(b.status).toBe(422);
  });

  it('answers 400, 414 and 431 from the router and the HTTP parser in the error shape', async () => {
    const port = portOf(s);
    const badUtf8 = await rawRequest(port, requestText('GET', '/runs/%ED%A0%80'));
    expect(badUtf8.status).toBe(400);
    expect(JSON.parse(badUtf8.body)).toEqual({ error: 'BadRequest', code: expect.stringMatching(/^AGT_ERR_/), message: expect.any(String), detail: null });
    const bigHeaders = await rawRequest(port, requestText('GET', '/health', { headers: { 'x-big': 'a'.repeat(20_000) } }));
    expect(bigHeaders.status).toBe(431);
    expect(JSON.parse(bigHeaders.body)).toEqual({
      error: 'RequestHeaderFieldsTooLarge',
      code: expect.stringMatching(/^AGT_ERR_/),
      message: expect.any(String),
      detail: null,
    });
    const garbage = await rawRequest(port, 'NOT HTTP AT ALL\r\n\r\n');
    expect(garbage.status).toBe(400);
    expect(JSON.parse(garbage.body)).toEqual({ error: 'BadRequest', code: expect.stringMatching(/^AGT_ERR_/), message: expect.any(String), detail: null });
  });

  it('logs every 5xx with its cause, whatever the request-log setting', async () => {
    // The store closed under the server: a real internal failure, not a staged one.
    await s.store.close();
    const a = await getJson(`${s.url}/runs`);
    expect(a.status).toBe(500);
    expect(a.body).toEqual({ error: 'InternalServerError', code: expect.stringMatching(/^AGT_ERR_/), message: expect.any(String), detail: null });
    expect(JSON.stringify(a.body)).not.toContain('at ');
    expect(logged.length).toBeGreaterThan(0);
    const entry = logged[logged.length - 1];
    expect(entry).toMatchObject({ level: 'error', method: 'GET', route: '/runs', status: 500 });
    expect(entry.error.message.length).toBeGreaterThan(0);
  });
});
