// The service skeleton through HTTP: health/ready/metrics shapes, OpenAPI completeness, the
// bad-input matrix (never a 500), body limits, auth, and docs/errors.md kept in step.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../src/errors.js';
import {
  ErrorResponse,
  HTTPValidationError,
  HealthResponse,
  MachinesResponse,
  MetricsResponse,
  ReadinessResponse,
  ToolsResponse,
} from '../../src/schemas/index.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({ server: { max_body_bytes: 4096 }, governance: { rules: [{ tools: ['workspace_write'], effect: 'ask' }] } });
});
afterAll(async () => {
  await server.stop();
  server.cleanup();
});

describe('health, readiness, metrics', () => {
  it('answers the spec shapes', async () => {
    const health = HealthResponse.parse((await getJson(`${server.url}/health`)).body);
    expect(health).toMatchObject({ status: 'healthy', agent_name: 'assistant', version: '0.1.0' });
    const ready = await getJson(`${server.url}/ready`);
    expect(ready.status).toBe(200);
    expect(ReadinessResponse.parse(ready.body)).toMatchObject({ ready: true, initialized: true, mcp_connected: true });
    await postJson(`${server.url}/run/sync`, { query: 'what time is it' });
    const metrics = MetricsResponse.parse((await getJson(`${server.url}/metrics`)).body);
    expect(metrics.total_requests).toBeGreaterThanOrEqual(1);
    expect(metrics.total_tokens).toBe(metrics.total_request_tokens + metrics.total_response_tokens);
    expect(metrics.total_tokens).toBeGreaterThan(0);
    const prom = await fetch(`${server.url}/metrics/prometheus`);
    expect(prom.headers.get('content-type')).toContain('text/plain');
    const text = await prom.text();
    expect(text).toContain('agentd_runs_total{status="completed"}');
    expect(text).toContain('agentd_tokens_total');
  });

  it('lists tools and machines', async () => {
    const tools = ToolsResponse.parse((await getJson(`${server.url}/tools`)).body);
    expect(tools.tools.map((t) => t.name)).toEqual(expect.arrayContaining(['clock', 'workspace_read', 'workspace_write', 'workspace_list']));
    expect(tools.tools.find((t) => t.name === 'workspace_write')).toMatchObject({ source: 'builtin', requires_approval: true });
    expect(tools.tools.find((t) => t.name === 'clock')!.requires_approval).toBe(false);
    const machines = MachinesResponse.parse((await getJson(`${server.url}/machines`)).body);
    const run = machines.machines.find((m) => m.id === 'run')!;
    expect(run.states).toEqual(expect.arrayContaining(['calling', 'awaitingApproval', 'awaitingBudget', 'completed']));
    expect(run.mermaid).toMatch(/^stateDiagram-v2/);
    expect(run.mermaid).toContain('awaitingApproval --> budgeting');
  });

  it('carries a request id on every answer', async () => {
    const res = await fetch(`${server.url}/health`);
    expect(res.headers.get('x-request-id')).toMatch(/^req_/);
    const mine = await fetch(`${server.url}/health`, { headers: { 'x-request-id': 'trace-me-1' } });
    expect(mine.headers.get('x-request-id')).toBe('trace-me-1');
  });
});

describe('OpenAPI', () => {
  it('documents every route that exists, as OpenAPI 3.1', async () => {
    const doc = (await getJson(`${server.url}/openapi.json`)).body;
    expect(doc.openapi).toBe('3.1.0');
    const missing: string[] = [];
    for (const r of server.app.routeList) {
      if (r.hidden) continue;
      // Fastify's `*` wildcard is documented as a named `{path}` parameter.
      const path = r.url.replace(/:([A-Za-z_]+)/g, '{$1}').replace(/\*$/, '{path}');
      const entry = doc.paths[path];
      if (!entry?.[r.method.toLowerCase()]) missing.push(`${r.method} ${r.url}`);
    }
    expect(missing).toEqual([]);
    expect(doc.paths['/runs/{run_id}/approvals/{approval_id}'].post.requestBody).toBeTruthy();
    const docs = await fetch(`${server.url}/docs`, { redirect: 'follow' });
    expect(docs.status).toBe(200);
    expect(await docs.text()).toContain('<html');
  });
});

describe('bad input is a clear 4xx in the documented shape, never a 500', () => {
  const cases: Array<{ name: string; method: 'GET' | 'POST'; path: string; body?: string; status: number; loc?: string }> = [
    { name: 'wrong type', method: 'POST', path: '/run/sync', body: JSON.stringify({ query: 42 }), status: 422, loc: 'body.query' },
    { name: 'missing required field', method: 'POST', path: '/run/sync', body: JSON.stringify({}), status: 422, loc: 'body.query' },
    { name: 'unknown field', method: 'POST', path: '/run/sync', body: JSON.stringify({ query: 'x', nope: 1 }), status: 422, loc: 'body.nope' },
    { name: 'malformed JSON', method: 'POST', path: '/run/sync', body: '{"query": ', status: 422, loc: 'body' },
    { name: 'JSON array body', method: 'POST', path: '/run/sync', body: '[]', status: 422 },
    { name: 'null body', method: 'POST', path: '/run/sync', body: 'null', status: 422 },
    {
      name: 'approver empty',
      method: 'POST',
      path: '/runs/run_x/approvals/approval_y',
      body: JSON.stringify({ decision: 'approve', approver: '' }),
      status: 422,
      loc: 'body.approver',
    },
    {
      name: 'amount zero',
      method: 'POST',
      path: '/runs/run_x/budget',
      body: JSON.stringify({ decision: 'grant', approver: 'a', amount: 0 }),
      status: 422,
      loc: 'body.amount',
    },
    { name: 'bad limit', method: 'GET', path: '/runs?limit=abc', status: 422, loc: 'query.limit' },
    { name: 'limit too high', method: 'GET', path: '/telemetry/traces?limit=100000', status: 422, loc: 'query.limit' },
    { name: 'run id with ..', method: 'GET', path: '/runs/..%2F..%2Fetc', status: 422, loc: 'path.run_id' },
    { name: 'unknown run', method: 'GET', path: '/runs/run_doesnotexist', status: 404 },
    { name: 'unknown route', method: 'GET', path: '/nowhere', status: 404 },
  ];
  for (const c of cases) {
    it(c.name, async () => {
      const res = await fetch(`${server.url}${c.path}`, {
        method: c.method,
        headers: c.body !== undefined ? { 'content-type': 'application/json' } : {},
        body: c.body,
      });
      expect(res.status).toBe(c.status);
      const body = (await res.json()) as any;
      if (c.status === 422) {
        HTTPValidationError.parse(body);
        if (c.loc) expect(body.detail.map((d: { loc: Array<string | number> }) => d.loc.join('.'))).toContain(c.loc);
      } else {
        ErrorResponse.parse(body);
      }
      expect(JSON.stringify(body)).not.toMatch(/\bat \S+ \(|node_modules|\.ts:\d+/); // no stack traces
    });
  }

  it('refuses an oversized body with 413', async () => {
    const res = await postJson(`${server.url}/run/sync`, { query: 'x'.repeat(10_000) });
    expect(res.status).toBe(413);
    expect(ErrorResponse.parse(res.body).error).toBe('PayloadTooLarge');
  });

  it('refuses a non-JSON body with 415', async () => {
    const res = await fetch(`${server.url}/run/sync`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'hello' });
    expect(res.status).toBe(415);
    expect(((await res.json()) as { error: string }).error).toBe('UnsupportedMediaType');
  });
});

describe('auth', () => {
  it('checks bearer keys by SHA-256 and roles by route', async () => {
    const sha = (k: string) => createHash('sha256').update(k).digest('hex');
    const s = await startTestServer({
      auth: {
        bind_approver: true,
        api_keys: [
          { name: 'reader', key_sha256: sha('r-key'), role: 'reader' },
          { name: 'ops', key_sha256: sha('o-key'), role: 'operator' },
          { name: 'alice', key_sha256: sha('a-key'), role: 'approver' },
        ],
      },
    });
    try {
      expect((await getJson(`${s.url}/health`)).status).toBe(200); // public
      expect((await getJson(`${s.url}/ready`)).status).toBe(200);
      const anon = await getJson(`${s.url}/runs`);
      expect(anon.status).toBe(401);
      expect(anon.body.error).toBe('Unauthorized');
      expect((await getJson(`${s.url}/runs`, { authorization: 'Bearer wrong' })).status).toBe(401);
      expect((await getJson(`${s.url}/runs`, { authorization: 'Bearer r-key' })).status).toBe(200);
      expect((await postJson(`${s.url}/run/sync`, { query: 'hi' }, { authorization: 'Bearer r-key' })).status).toBe(403);
      expect((await postJson(`${s.url}/run/sync`, { query: 'hi' }, { authorization: 'Bearer o-key' })).status).toBe(200);
      // Operators cannot decide for a person; approvers must decide under their own name.
      expect(
        (await postJson(`${s.url}/runs/run_x/approvals/approval_y`, { decision: 'approve', approver: 'ops' }, { authorization: 'Bearer o-key' })).status,
      ).toBe(403);
      expect(
        (await postJson(`${s.url}/runs/run_x/approvals/approval_y`, { decision: 'approve', approver: 'bob' }, { authorization: 'Bearer a-key' })).status,
      ).toBe(403);
      expect(
        (await postJson(`${s.url}/runs/run_x/approvals/approval_y`, { decision: 'approve', approver: 'alice' }, { authorization: 'Bearer a-key' })).status,
      ).toBe(404);
    } finally {
      await s.stop();
      s.cleanup();
    }
  });
});

describe('docs/errors.md', () => {
  it('lists every error code of src/errors.ts with its status', () => {
    const doc = readFileSync(join(import.meta.dirname, '../../docs/errors.md'), 'utf8');
    for (const [code, e] of Object.entries(ERROR_CODES)) {
      expect(doc, code).toMatch(new RegExp(`\\| \`${code}\` \\| ${e.status} \\|`));
    }
  });
});

describe('session workspaces', () => {
  it("gives a synchronous run its session's folder for the workspace tools", async () => {
    const run = (await postJson(`${server.url}/run/sync`, { query: 'workspace_list please', session_id: 'ws-tour' })).body;
    expect(run.status).toBe('success');
    expect(run.response).toMatch(/^The workspace_list tool says: .*"entries":\[\]/);
  });
});
