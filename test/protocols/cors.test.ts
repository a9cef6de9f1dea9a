// CORS (server.cors.origins): off by default; on, a preflight for every route a browser may call,
// exact origins only, credentials by the Authorization header (never Access-Control-Allow-Credentials).
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { configFromObject } from '../../src/config.js';
import { startTestServer, tempDir, type TestServer } from '../helpers/server.js';

const APP = 'https://app.example.com';
const sha = (k: string) => createHash('sha256').update(k).digest('hex');
const AUTH = { api_keys: [{ name: 'op', role: 'operator', key_sha256: sha('k-op') }] };

const preflight = (url: string, path: string, origin: string, method = 'POST') =>
  fetch(`${url}${path}`, {
    method: 'OPTIONS',
    headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': 'authorization, content-type' },
  });

/** A concrete path for a route pattern. */
const concrete = (pattern: string) => pattern.replace(/\*$/, 'file.txt').replace(/:([A-Za-z_]+)/g, 'x');

describe('CORS off (the default)', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer();
  });
  afterAll(async () => {
    await s.stop();
    s.cleanup();
  });

  it('answers no preflight and sends no CORS header', async () => {
    expect((await preflight(s.url, '/run', APP)).status).toBe(404);
    const res = await fetch(`${s.url}/health`, { headers: { origin: APP } });
    expect([...res.headers.keys()].filter((h) => h.startsWith('access-control-'))).toEqual([]);
  });
});

describe('CORS on', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ auth: AUTH, server: { cors: { origins: [APP, 'http://localhost:5173'] } } });
  });
  afterAll(async () => {
    await s.stop();
    s.cleanup();
  });

  it('answers a preflight on every route, without a key, naming the exact origin and the methods there', async () => {
    const routes = s.app.routeList.filter((r) => r.method !== 'OPTIONS');
    expect(routes.length).toBeGreaterThan(40);
    for (const r of routes) {
      const res = await preflight(s.url, concrete(r.url), APP, r.method);
      const label = `${r.method} ${r.url}`;
      expect(res.status, label).toBe(204);
      expect(res.headers.get('access-control-allow-origin'), label).toBe(APP);
      expect(res.headers.get('access-control-allow-methods')?.split(', '), label).toContain(r.method);
      expect(res.headers.get('access-control-allow-headers'), label).toContain('authorization');
      expect(res.headers.get('access-control-allow-credentials'), label).toBeNull();
      expect(res.headers.get('vary'), label).toContain('Origin');
    }
  });

  it('gives an origin not listed (or spelled differently) no CORS header', async () => {
    for (const origin of ['https://evil.example.com', 'https://app.example.com.evil.com', 'http://app.example.com', 'https://APP.example.com', 'null']) {
      const res = await preflight(s.url, '/ai-sdk/chat', origin);
      expect(res.headers.get('access-control-allow-origin'), origin).toBeNull();
      const get = await fetch(`${s.url}/health`, { headers: { origin } });
      expect(get.headers.get('access-control-allow-origin'), origin).toBeNull();
    }
  });

  it('puts the CORS headers on answers, a 401 and a stream included', async () => {
    const health = await fetch(`${s.url}/health`, { headers: { origin: APP } });
    expect(health.headers.get('access-control-allow-origin')).toBe(APP);
    expect(health.headers.get('access-control-expose-headers')).toContain('x-request-id');
    const refused = await fetch(`${s.url}/runs`, { headers: { origin: APP } });
    expect(refused.status).toBe(401);
    expect(refused.headers.get('access-control-allow-origin')).toBe(APP);
    const stream = await fetch(`${s.url}/ai-sdk/chat`, {
      method: 'POST',
      headers: { origin: 'http://localhost:5173', authorization: 'Bearer k-op', 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'cors-chat', messages: [{ id: 'u', role: 'user', parts: [{ type: 'text', text: 'hi' }] }], trigger: 'submit-message' }),
    });
    expect(stream.status).toBe(200);
    expect(stream.headers.get('access-control-allow-origin')).toBe('http://localhost:5173');
    expect(stream.headers.get('access-control-expose-headers')).toContain('x-vercel-ai-ui-message-stream');
    expect(stream.headers.get('access-control-allow-credentials')).toBeNull();
    await stream.text();
  });
});

describe('server.cors.origins', () => {
  it('takes exact origins only', () => {
    const load = (origins: unknown) => () => configFromObject({ server: { cors: { origins } } }, { dataDir: tempDir(), env: {} });
    expect(load([APP, 'http://localhost:5173'])).not.toThrow();
    for (const bad of ['*', 'https://app.example.com/', 'https://app.example.com/chat', 'app.example.com', 'ftp://x.example.com'])
      expect(load([bad]), bad).toThrow(/server\.cors\.origins/);
  });
});
