// Limits and edges: approval expiry, the request timeout, admission control, and a real MCP
// server over stdio inside a run.
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer } from '../helpers/server.js';

const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');
const MCP_FIXTURE = join(import.meta.dirname, '../fixtures/mcp-stdio-server.ts');
let model: ScriptedOpenAI;

beforeAll(async () => {
  model = await startScriptedOpenAI();
});
afterAll(async () => {
  await model.close();
});
beforeEach(() => {
  model.reset();
  model.setDefault((req) => (req.messages.at(-1)?.role === 'tool' ? { text: `saw: ${String(req.messages.at(-1)!.content)}` } : { text: 'hi' }));
});

describe('approval expiry', () => {
  it('refuses to decide an expired approval (409) and records it expired', async () => {
    // The server's clock runs with the real one, and jumps past the approval's expiry below (no sleep).
    let ahead = 0;
    const s = await startTestServer(
      { agent: { tools: { local: TOOLS, builtin: [] } }, governance: { approval_expires_seconds: 1, rules: [{ tools: ['ledger_*'], effect: 'ask' }] } },
      { modelUrl: model.url, clock: { now: () => Date.now() + ahead } },
    );
    try {
      model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'late' } }] });
      const paused = (await postJson(`${s.url}/run/sync`, { query: 'pay late' })).body;
      const id = paused.approvals[0].approval_id;
      ahead += 1100;
      const late = await postJson(`${s.url}/runs/${paused.run_id}/approvals/${id}`, { decision: 'approve', approver: 'slow' });
      expect(late.status).toBe(409);
      expect(late.body.detail).toBe('expired');
      const view = (await getJson(`${s.url}/runs/${paused.run_id}`)).body;
      expect(view.approvals[0].status).toBe('expired');
    } finally {
      await s.stop();
      s.cleanup();
    }
  });
});

describe('request timeout and admission', () => {
  it('ends a run that outlives request_timeout_seconds with status timeout', async () => {
    const s = await startTestServer({ server: { request_timeout_seconds: 1 } }, { modelUrl: model.url });
    try {
      model.enqueue({ hang: true });
      const res = await postJson(`${s.url}/run/sync`, { query: 'too slow' });
      expect(res.body).toMatchObject({ status: 'timeout', termination_reason: 'timeout', response: null });
      expect((await getJson(`${s.url}/runs/${res.body.run_id}`)).body.status).toBe('timeout');
    } finally {
      await s.stop();
      s.cleanup();
    }
  });

  it('answers 503 ServerBusy with Retry-After when no run slot frees up within 5 s', async () => {
    const s = await startTestServer({ server: { max_concurrent_runs: 1 } }, { modelUrl: model.url });
    try {
      model.enqueue({ hang: true });
      const first = fetch(`${s.url}/run/sync`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ query: 'hold the slot' }),
      });
      await eventually(async () => (await getJson(`${s.url}/runs?status=running`)).body.total === 1);
      const [second, stream] = await Promise.all([
        postJson(`${s.url}/run/sync`, { query: 'no room' }),
        fetch(`${s.url}/run`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ query: 'no room either' }) }),
      ]);
      expect(second.status).toBe(503);
      expect(second.body.error).toBe('ServerBusy');
      expect(second.headers.get('retry-after')).toBe('1');
      expect(stream.status).toBe(503);
      expect(stream.headers.get('content-type')).toContain('application/json');
      const running = (await getJson(`${s.url}/runs?status=running`)).body.runs[0];
      await postJson(`${s.url}/runs/${running.run_id}/cancel`, {});
      expect(((await (await first).json()) as { status: string }).status).toBe('cancelled');
    } finally {
      await s.stop();
      s.cleanup();
    }
  }, 20_000);
});

describe('MCP over stdio', () => {
  it('connects the server, reports it in /ready and /tools, and calls its tools in a run', async () => {
    const s = await startTestServer(
      { agent: { tools: { builtin: [], mcp: [{ name: 'fx', command: process.execPath, args: ['--import', 'tsx', MCP_FIXTURE] }] } } },
      { modelUrl: model.url },
    );
    try {
      const ready = await eventually(async () => {
        const r = (await getJson(`${s.url}/ready`)).body;
        return r.ready ? r : null;
      }, 20_000);
      expect(ready).toMatchObject({ mcp_connected: true, mcp_servers: { fx: { status: 'connected' } } });
      const tools = (await getJson(`${s.url}/tools`)).body.tools;
      expect(tools.find((t: { name: string }) => t.name === 'fx__add')).toMatchObject({ source: 'mcp' });
      model.enqueue({ tool_calls: [{ name: 'fx__add', arguments: { a: 2, b: 3 } }] });
      const res = await postJson(`${s.url}/run/sync`, { query: 'add 2 and 3' });
      expect(res.body.status).toBe('success');
      expect(res.body.response).toMatch(/^saw: .*5/);
      const call = (await getJson(`${s.url}/telemetry/events?run_id=${res.body.run_id}&event_type=tool_call`)).body.events[0];
      expect(call.actor).toMatchObject({ type: 'mcp_server', id: 'fx__add', name: 'fx' });
    } finally {
      await s.stop();
      s.cleanup();
    }
  }, 30_000);
});
