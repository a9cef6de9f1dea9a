// GET /ui: the dashboard's static files, built in memory from src/ui/ when running from source.
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveUiPath } from '../../src/http/ui.js';
import { rawRequest, requestText } from '../helpers/raw-http.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const sha = (k: string) => createHash('sha256').update(k).digest('hex');

describe('resolveUiPath', () => {
  const files = { 'index.html': {}, 'app-1.js': {}, 'app-1.css': {} } as never;
  it('maps the page, assets and client-side routes; refuses dot segments and odd names', () => {
    expect(resolveUiPath('', files)).toBe('index.html');
    expect(resolveUiPath('app-1.js', files)).toBe('app-1.js');
    expect(resolveUiPath('runs/run_abc', files)).toBe('index.html');
    expect(resolveUiPath('approvals', files)).toBe('index.html');
    expect(resolveUiPath('app-2.js', files)).toBeNull();
    for (const bad of ['..', '../runs', 'a/../b', '.env', 'runs/.hidden', 'a%2e', 'a\\b', 'a//b']) expect(resolveUiPath(bad, files), bad).toBeNull();
  });
});

describe('GET /ui', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ auth: { api_keys: [{ name: 'r', role: 'reader', key_sha256: sha('k-reader') }] } });
  });
  afterAll(async () => {
    await s.stop();
    s.cleanup();
  });

  it('serves the page without a key, with its assets, types and cache headers', async () => {
    const page = await fetch(`${s.url}/ui`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.headers.get('cache-control')).toBe('no-cache');
    expect(page.headers.get('content-security-policy')).toContain("connect-src 'self'");
    const html = await page.text();
    const js = /src="\/ui\/(app-[0-9a-f]+\.js)"/.exec(html)?.[1];
    const css = /href="\/ui\/(app-[0-9a-f]+\.css)"/.exec(html)?.[1];
    expect(js && css).toBeTruthy();
    const script = await fetch(`${s.url}/ui/${js}`);
    expect(script.status).toBe(200);
    expect(script.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(script.headers.get('cache-control')).toContain('immutable');
    // Bundled, offline: no module import from elsewhere.
    expect(await script.text()).not.toMatch(/from\s*["']https?:/);
    const style = await fetch(`${s.url}/ui/${css}`);
    expect(style.headers.get('content-type')).toBe('text/css; charset=utf-8');
  });

  it('answers client-side routes with the page and unknown files with the 404 shape', async () => {
    const route = await fetch(`${s.url}/ui/runs/run_abc`);
    expect(route.status).toBe(200);
    expect(await route.text()).toContain('<div id="app">');
    const missing = await fetch(`${s.url}/ui/app-0000.js`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: string }).error).toBe('NotFound');
  });

  it('never lets a dot segment reach the API past authentication', async () => {
    const port = Number(new URL(s.url).port);
    for (const target of ['/ui/%2e%2e/runs', '/ui/..%2fruns', '/ui/%2E%2E/%2E%2E/runs', '/ui/.env']) {
      const a = await rawRequest(port, requestText('GET', target), { timeoutMs: 5000 });
      expect([401, 404], `${target}: ${a.status}`).toContain(a.status);
      expect(a.body).not.toContain('"runs"');
    }
    // The API itself still wants the key.
    expect((await fetch(`${s.url}/runs`)).status).toBe(401);
  });
});
