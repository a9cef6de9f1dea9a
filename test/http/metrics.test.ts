// GET /metrics/prometheus after real runs: the text passes `promtool check metrics` (Debian's
// `prometheus` package; .ci/run installs it) and holds every family with the values the runs made.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { findPromtool, promtoolCheck, samples } from '../helpers/prometheus.js';
import { eventually, getJson, postJson, startTestServer, tempDir, type TestServer } from '../helpers/server.js';

const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');

/** The value of the one sample of `name` whose labels include every `labels` pair. */
function value(all: Map<string, number>, name: string, labels: Record<string, string> = {}): number | undefined {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const [key, v] of all) {
    const base = key.includes('{') ? key.slice(0, key.indexOf('{')) : key;
    if (base === name && want.every((w) => key.includes(w))) return v;
  }
  return undefined;
}

const promtool = findPromtool();
if (!promtool) process.stderr.write('test/http/metrics.test.ts: promtool not found (apt-get install -y prometheus): the promtool check is skipped\n');

let model: ScriptedOpenAI;
let server: TestServer;
let collector: Server;
let collectorUrl: string;
let received = 0;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  // An OTLP collector that accepts everything, so the exporter's counters move.
  collector = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      received++;
      res.writeHead(200, { 'content-type': req.headers['content-type'] ?? 'application/json' }).end(req.headers['content-type']?.includes('json') ? '{}' : '');
    });
  });
  await new Promise<void>((r) => collector.listen(0, '127.0.0.1', r));
  collectorUrl = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;
  process.env.AGENTD_TEST_LEDGER = join(tempDir(), 'ledger.jsonl');
  server = await startTestServer(
    {
      agent: { tools: { local: TOOLS, builtin: [] } },
      governance: {
        rules: [
          { tools: ['ledger_*'], effect: 'ask', reason: 'writes' },
          { tools: ['explode'], effect: 'deny', reason: 'never' },
        ],
      },
      telemetry: { otlp: { endpoint: collectorUrl } },
      pricing: { scripted: { input_per_million_usd: 1, output_per_million_usd: 2 } },
    },
    { modelUrl: model.url },
  );
});
afterAll(async () => {
  await server?.stop();
  server?.cleanup();
  await model?.close();
  await new Promise((r) => collector?.close(r));
});

describe('GET /metrics/prometheus', () => {
  it('passes promtool and holds every family with the values of the runs it saw', async () => {
    // A run with a tool call, one waiting for approval, a denied call, a failed model call.
    model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text: 'hi' } }] }, { text: 'done' });
    const ok = (await postJson(`${server.url}/run/sync`, { query: 'echo hi', session_id: 'm1' })).body;
    expect(ok.status).toBe('success');
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'x' } }] });
    const parked = (await postJson(`${server.url}/run/sync`, { query: 'pay', session_id: 'm2' })).body;
    expect(parked.status).toBe('awaiting_approval');
    model.enqueue({ tool_calls: [{ name: 'explode', arguments: {} }] }, { text: 'denied' });
    expect((await postJson(`${server.url}/run/sync`, { query: 'boom', session_id: 'm3' })).body.status).toBe('success');
    model.enqueue({ status: 400, message: 'bad request' });
    expect((await postJson(`${server.url}/run/sync`, { query: 'fail', session_id: 'm4' })).body.status).toBe('error');
    expect((await getJson(`${server.url}/runs/${ok.run_id}`)).status).toBe(200);
    expect((await getJson(`${server.url}/no/such/route/abc123`)).status).toBe(404);
    await eventually(() => received > 0, 10_000, 'an OTLP export');

    // An open SSE stream while scraping.
    const ac = new AbortController();
    const stream = await fetch(`${server.url}/events/m1`, { signal: ac.signal, headers: { accept: 'text/event-stream' } });
    expect(stream.status).toBe(200);
    let text = '';
    try {
      const res = await fetch(`${server.url}/metrics/prometheus`);
      expect(res.status).toBe(200);
      text = await res.text();
    } finally {
      ac.abort();
    }

    if (promtool) {
      const check = promtoolCheck(promtool, text);
      expect(check.output).toBe('');
      expect(check.status).toBe(0);
    }

    const all = samples(text);
    // HTTP: by method, route pattern and status; unmatched paths under one fixed label.
    expect(value(all, 'agentd_http_requests_total', { method: 'POST', route: '/run/sync', status: '200' })).toBe(4);
    expect(value(all, 'agentd_http_requests_total', { method: 'GET', route: '/runs/:run_id', status: '200' })).toBe(1);
    expect(value(all, 'agentd_http_requests_total', { route: 'unmatched', status: '404' })).toBe(1);
    expect(value(all, 'agentd_http_request_duration_seconds_count', { method: 'POST', route: '/run/sync', status: '200' })).toBe(4);
    expect(text).not.toContain('abc123');
    expect(text).not.toContain(ok.run_id);
    // Model calls by provider/model: 5 answered (2 + 1 + 2), 1 failed.
    expect(value(all, 'agentd_model_call_duration_seconds_count', { provider: 'openai-compatible', model: 'scripted', outcome: 'ok' })).toBe(5);
    expect(value(all, 'agentd_model_call_errors_total', { provider: 'openai-compatible', model: 'scripted', kind: 'bad_request' })).toBe(1);
    // Tool calls by tool and outcome.
    expect(value(all, 'agentd_tool_calls_total', { tool: 'echo', outcome: 'success' })).toBe(1);
    expect(value(all, 'agentd_tool_calls_total', { tool: 'explode', outcome: 'denied' })).toBe(1);
    expect(value(all, 'agentd_tool_call_duration_seconds_count', { tool: 'echo' })).toBe(1);
    // Runs waiting for a person, from the store; the background queue.
    expect(value(all, 'agentd_runs_awaiting', { reason: 'approval' })).toBe(1);
    expect(value(all, 'agentd_runs_awaiting', { reason: 'budget' })).toBe(0);
    expect(value(all, 'agentd_background_queue_depth')).toBe(0);
    expect(value(all, 'agentd_background_workspace_backlog')).toBe(0);
    // Leases and recoveries (zero here; test/runtime/metrics.test.ts moves them).
    expect(value(all, 'agentd_lease_losses_total', { kind: 'run' })).toBe(0);
    expect(text).toContain('# TYPE agentd_recoveries_total counter');
    // SSE: the stream open during the scrape.
    expect(value(all, 'agentd_sse_streams')).toBeGreaterThanOrEqual(1);
    expect(value(all, 'agentd_sse_buffered_bytes')).toBeGreaterThanOrEqual(0);
    // OTLP: spans the collector accepted.
    expect(value(all, 'agentd_otlp_spans_exported_total')).toBeGreaterThan(0);
    expect(value(all, 'agentd_otlp_traces_failed_total')).toBe(0);
    expect(value(all, 'agentd_otlp_traces_dropped_total', { reason: 'queue_full' })).toBe(0);
    // Runs, tokens; Node's defaults under their standard names, not prefixed.
    expect(value(all, 'agentd_runs_total', { status: 'completed' })).toBe(2);
    expect(value(all, 'agentd_tokens_total', { direction: 'request' })).toBeGreaterThan(0);
    // Tokens and cost by agent, provider and model (bounded label sets: configured values only).
    expect(value(all, 'agentd_tokens_total', { direction: 'response', agent: 'default' })).toBeGreaterThan(0);
    expect(text).toMatch(/^agentd_tokens_total\{direction="request",agent="default",provider="[^"]+",model="[^"]+"\} \d+/m);
    expect(value(all, 'agentd_model_cost_usd_total', { agent: 'default' })).toBeGreaterThan(0);
    expect(value(all, 'process_cpu_user_seconds_total')).toBeGreaterThan(0);
    expect(value(all, 'nodejs_heap_size_used_bytes')).toBeGreaterThan(0);
    expect(text).not.toMatch(/^agentd_(process|nodejs)_/m);
  });
});
