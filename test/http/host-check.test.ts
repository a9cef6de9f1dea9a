// `server.allowed_hosts` and no server path in any answer (src/http/host-check.ts,
// src/http/server-paths.ts). Over raw sockets, so the Host header is exactly what a DNS-rebinding
// page's browser would send; the config check through the real CLI in a child process.
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { configFromObject } from '../../src/config.js';
import { startServer } from '../../src/main.js';
import { captureLog } from '../helpers/log-capture.js';
import { rawRequest } from '../helpers/raw-http.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { getJson, postJson, startTestServer, tempDir, type TestServer } from '../helpers/server.js';
import { runCli } from '../cli/helpers.js';

const FIXTURES = path.resolve('test/fixtures/agents');
const portOf = (s: TestServer) => Number(new URL(s.url).port);
const sha = (k: string) => createHash('sha256').update(k).digest('hex');

/** A request with exactly this Host header (none: an HTTP/1.0 request without one), read whole. */
function withHost(s: TestServer, method: string, target: string, host: string | null, extra: Record<string, string> = {}) {
  const body = method === 'POST' ? JSON.stringify({ query: 'hi' }) : undefined;
  const headers: Record<string, string> = { connection: 'close', ...extra };
  if (host !== null) headers.host = host;
  if (body !== undefined) Object.assign(headers, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) });
  const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
  const request = `${method} ${target} HTTP/${host === null ? '1.0' : '1.1'}\r\n${lines.join('')}\r\n${body ?? ''}`;
  return rawRequest(portOf(s), request, { timeoutMs: 5000, headersOnly: target.startsWith('/events/') });
}

const codeOf = (body: string): string | undefined => {
  try {
    return (JSON.parse(body) as { code?: string }).code;
  } catch {
    return undefined;
  }
};

describe('allowed hosts: loopback with auth off (the default list)', () => {
  let s: TestServer;
  let model: ScriptedOpenAI;
  beforeAll(async () => {
    model = await startScriptedOpenAI();
    s = await startTestServer({}, { modelUrl: model.url });
  });
  afterAll(async () => {
    await s.stop();
    s.cleanup();
    await model.close();
  });

  it('refuses a foreign Host (a DNS-rebinding page) on every route but /health and /ready', async () => {
    const port = portOf(s);
    for (const host of ['attacker.example', `attacker.example:${port}`, `localhost:${port + 1}`, `127.0.0.1:${port}.attacker.example`]) {
      for (const [method, target] of [
        ['GET', '/runs'],
        ['GET', '/background/agents'],
        ['GET', '/openapi.json'],
        ['GET', '/no/such/route'],
        ['POST', '/run/sync'],
        ['GET', '/events/some-session'],
      ] as const) {
        const a = await withHost(s, method, target, host);
        expect(a.status, `${method} ${target} Host ${host}`).toBe(400);
        expect(JSON.parse(a.body)).toEqual({ error: 'BadRequest', code: 'AGT_ERR_HOST_NOT_ALLOWED', message: expect.any(String), detail: null });
      }
      for (const target of ['/health', '/ready']) expect((await withHost(s, 'GET', target, host)).status, `${target} Host ${host}`).toBe(200);
    }
    // Refused before any work: no run reached the model.
    expect(model.requests).toHaveLength(0);
  });

  it('refuses a request without a Host header', async () => {
    const a = await withHost(s, 'GET', '/runs', null);
    expect(a.status).toBe(400);
    expect(codeOf(a.body)).toBe('AGT_ERR_HOST_NOT_ALLOWED');
  });

  it('accepts localhost, 127.0.0.1 and [::1] with the port (any case), as browsers, curl and fetch send them', async () => {
    const port = portOf(s);
    for (const host of [`localhost:${port}`, `LOCALHOST:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`]) {
      const a = await withHost(s, 'GET', '/runs', host);
      expect(a.status, host).toBe(200);
    }
    expect((await getJson(`${s.url}/runs`)).status).toBe(200); // fetch: Host 127.0.0.1:<port>
  });
});

describe('allowed hosts: configured', () => {
  const KEY = 'key-host-check';
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({
      server: { allowed_hosts: ['api.example.com', `localhost:4321`] },
      auth: { api_keys: [{ name: 'reader', role: 'reader', key_sha256: sha(KEY) }] },
    });
  });
  afterAll(async () => {
    await s.stop();
    s.cleanup();
  });

  it('takes only the listed hosts, with auth on too: a name alone on any port, a name with a port on that port', async () => {
    const auth = { authorization: `Bearer ${KEY}` };
    expect((await withHost(s, 'GET', '/runs', 'api.example.com', auth)).status).toBe(200);
    expect((await withHost(s, 'GET', '/runs', 'api.example.com:8443', auth)).status).toBe(200);
    expect((await withHost(s, 'GET', '/runs', 'localhost:4321', auth)).status).toBe(200);
    const wrongPort = await withHost(s, 'GET', '/runs', 'localhost:4322', auth);
    expect(wrongPort.status).toBe(400);
    expect(codeOf(wrongPort.body)).toBe('AGT_ERR_HOST_NOT_ALLOWED');
    // Checked before the key: a foreign host learns nothing, not even that a key is needed.
    const foreign = await withHost(s, 'GET', '/runs', `127.0.0.1:${portOf(s)}`);
    expect(foreign.status).toBe(400);
    expect(codeOf(foreign.body)).toBe('AGT_ERR_HOST_NOT_ALLOWED');
    expect((await withHost(s, 'GET', '/health', 'evil.example')).status).toBe(200);
  });
});

describe('allowed hosts: auth on, or "*"', () => {
  it('checks no host by default when auth is on (the keys guard the API), and none with "*"', async () => {
    const KEY = 'key-any-host';
    const a = await startTestServer({ auth: { api_keys: [{ name: 'reader', role: 'reader', key_sha256: sha(KEY) }] } });
    const b = await startTestServer({ server: { allowed_hosts: ['*'] } });
    try {
      expect((await withHost(a, 'GET', '/runs', 'anything.example', { authorization: `Bearer ${KEY}` })).status).toBe(200);
      expect((await withHost(b, 'GET', '/runs', 'anything.example')).status).toBe(200);
    } finally {
      for (const s of [a, b]) {
        await s.stop();
        s.cleanup();
      }
    }
  });

  it('warns at start-up when bound beyond loopback with auth off and no allowed_hosts', async () => {
    const warnings = async (server: Record<string, unknown>) => {
      const dataDir = tempDir();
      const log = captureLog({ level: 'warn' });
      const srv = await startServer(configFromObject({ server: { port: 0, ...server } }, { dataDir, env: {} }), { logger: log.logger });
      await srv.close(0);
      rmSync(dataDir, { recursive: true, force: true });
      return log.entries().filter((e) => /allowed_hosts/.test(e.msg));
    };
    expect(await warnings({ host: '0.0.0.0' })).toHaveLength(1);
    expect(await warnings({ host: '0.0.0.0', allowed_hosts: ['agentd.internal'] })).toHaveLength(0);
    expect(await warnings({ host: '127.0.0.1' })).toHaveLength(0);
  });
});

describe('no server path in any answer', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({
      agent: { tools: { local: path.join(FIXTURES, 'alt-tools.mjs') } },
      agents: { tools_dirs: [FIXTURES] },
    });
  });
  afterAll(async () => {
    await s.stop();
    s.cleanup();
  });

  const messages = (body: { detail: Array<{ msg: string }> }) => body.detail.map((d) => d.msg).join('\n');
  // Any of the server's folders: its working directory (the checkout, dist/), the fixtures, the temp dir.
  const ABSOLUTE = new RegExp([process.cwd(), FIXTURES, tmpdir()].map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|'));

  it('a tools module that fails to load: the 422 names the module, not where it lies', async () => {
    const r = await postJson(`${s.url}/background/agents`, { spec: { agent_id: 'broken', local_tools_ref: path.join(FIXTURES, 'broken-tools.mjs') } });
    expect(r.status).toBe(422);
    // `input` is what the caller sent; the messages are the server's.
    const text = messages(r.body);
    expect(text).toContain('broken-tools.mjs');
    expect(text).not.toMatch(ABSOLUTE);
    expect(text).not.toMatch(/file:\/\//);
  });

  it('a tools module that imports a package that is not there (the error quotes the importing file)', async () => {
    const r = await postJson(`${s.url}/background/agents`, {
      spec: { agent_id: 'missing-dep', local_tools_ref: path.join(FIXTURES, 'missing-dep-tools.mjs') },
    });
    expect(r.status).toBe(422);
    const text = messages(r.body);
    expect(text).toContain('no-such-package-for-agentd-tests');
    expect(text).not.toMatch(ABSOLUTE);
  });

  it('a module outside agents.tools_dirs: the 422 does not list the server folders', async () => {
    const r = await postJson(`${s.url}/background/agents`, { spec: { agent_id: 'outside', local_tools_ref: '/etc/passwd' } });
    expect(r.status).toBe(422);
    expect(messages(r.body)).toContain('tools_dirs');
    expect(messages(r.body)).not.toMatch(ABSOLUTE);
  });

  it("GET /background/agents shows the served agent's tools module by name, not by its server path", async () => {
    const list = await getJson(`${s.url}/background/agents`);
    const served = list.body.agents.find((a: { metadata?: { served_agent?: boolean } }) => a.metadata?.served_agent);
    expect(served.local_tools_ref).toBe('alt-tools.mjs');
    expect(JSON.stringify(list.body)).not.toMatch(ABSOLUTE);
    const one = await getJson(`${s.url}/background/agents/${served.agent_id}`);
    expect(one.body.local_tools_ref).toBe('alt-tools.mjs');
  });
});

describe('agentd config check (a real child process)', () => {
  it('masks the path of a webhook URL, where services put its token', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'agentd-cc-'));
    try {
      const file = path.join(dir, 'agentd.json');
      writeFileSync(
        file,
        JSON.stringify({ webhooks: { endpoints: [{ url: 'https://hooks.example.com/services/T000/B000/PATHTOKEN123?sig=QUERYTOKEN', secret: 'whsec_x' }] } }),
      );
      const r = await runCli(['config', 'check', '--config', file]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain('https://hooks.example.com');
      expect(r.stdout).not.toContain('PATHTOKEN123');
      expect(r.stdout).not.toContain('QUERYTOKEN');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
