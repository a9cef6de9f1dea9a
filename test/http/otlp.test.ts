// OTLP/HTTP export: a receiver on loopback gets the run's spans, and their ids form the run's tree.
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, postJson, startTestServer, type TestServer } from '../helpers/server.js';

interface OtlpSpan { traceId: string; spanId: string; parentSpanId?: string; name: string; attributes: Array<{ key: string; value: Record<string, unknown> }> }

const received: Array<{ contentType: string; body: any }> = [];
const receiver = createServer((req: IncomingMessage, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const text = Buffer.concat(chunks).toString('utf8');
    received.push({ contentType: String(req.headers['content-type']), body: req.headers['content-type']?.includes('json') ? JSON.parse(text) : text });
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{}');
  });
});
let server: TestServer;

beforeAll(async () => {
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
  const port = (receiver.address() as AddressInfo).port;
  server = await startTestServer({ telemetry: { otlp: { endpoint: `http://127.0.0.1:${port}`, protocol: 'http/json' } } });
});
afterAll(async () => {
  await server.stop();
  server.cleanup();
  receiver.close();
});

describe('OTLP export', () => {
  it("exports a finished run's trace with GenAI attributes and a consistent span tree", async () => {
    const run = (await postJson(`${server.url}/run/sync`, { query: 'what time is it?' })).body;
    expect(run.status).toBe('success');
    const spans = await eventually(async () => {
      const all: OtlpSpan[] = received.flatMap((r) => r.body.resourceSpans.flatMap((rs: any) => rs.scopeSpans.flatMap((ss: any) => ss.spans)));
      const mine = all.filter((s) => s.attributes.some((a) => a.key === 'agentd.run_id' && a.value.stringValue === run.run_id));
      return mine.some((s) => s.name === 'agent.run') ? mine : null;
    });
    expect(received[0].contentType).toContain('application/json');
    expect(new Set(spans.map((s) => s.traceId)).size).toBe(1);
    expect(spans[0].traceId).toMatch(/^[0-9a-f]{32}$/);
    const ids = new Set(spans.map((s) => s.spanId));
    const roots = spans.filter((s) => !s.parentSpanId);
    expect(roots.map((s) => s.name)).toEqual(['agent.run']);
    expect(spans.filter((s) => s.parentSpanId && !ids.has(s.parentSpanId))).toEqual([]);
    const names = spans.map((s) => s.name);
    for (const n of ['agent.step', 'model.call', 'tool.batch', 'tool.call']) expect(names).toContain(n);
    const model = spans.find((s) => s.name === 'model.call')!;
    expect(model.attributes.map((a) => a.key)).toEqual(expect.arrayContaining(['gen_ai.request.model', 'gen_ai.usage.input_tokens']));
  });
});
