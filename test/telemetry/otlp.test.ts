import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import { createOtlpExporter, resolveOtlpTracesUrl, type OtlpExportEvent, type OtlpTraceExporter } from '../../src/telemetry/otlp.js';
import { otlpSpanName, toOtelSpanId, toOtelTraceId } from '../../src/telemetry/otlp-spans.js';
import { buildTrace } from '../../src/telemetry/trace-build.js';
import { REDACTED, Redactor } from '../../src/telemetry/redact.js';
import { IDS, runEvents, traceRecord } from './fixtures.js';

interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

const servers: Server[] = [];
const exporters: OtlpTraceExporter[] = [];

afterEach(async () => {
  for (const e of exporters.splice(0)) await e.shutdown(100);
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }
});

/** An OTLP receiver; `status` picks the answer to the n-th request (0-based). */
async function receiver(status: (n: number) => number = () => 200): Promise<{ url: string; requests: Received[]; next: () => Promise<Received> }> {
  const requests: Received[] = [];
  let waiters: Array<(r: Received) => void> = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const r = { path: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks) };
      const code = status(requests.length);
      requests.push(r);
      const json = String(req.headers['content-type']).includes('json');
      res.writeHead(code, { 'content-type': json ? 'application/json' : 'application/x-protobuf' });
      res.end(json ? '{}' : undefined);
      const w = waiters;
      waiters = [];
      for (const f of w) f(r);
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, requests, next: () => new Promise((r) => waiters.push(r)) };
}

function eventWaiter() {
  const events: OtlpExportEvent[] = [];
  let waiters: Array<{ type: OtlpExportEvent['type']; resolve: (e: OtlpExportEvent) => void }> = [];
  return {
    events,
    onEvent: (e: OtlpExportEvent) => {
      events.push(e);
      const hit = waiters.filter((w) => w.type === e.type);
      waiters = waiters.filter((w) => w.type !== e.type);
      for (const w of hit) w.resolve(e);
    },
    waitFor: (type: OtlpExportEvent['type']) => new Promise<OtlpExportEvent>((resolve) => waiters.push({ type, resolve })),
  };
}

const trace = () => buildTrace(traceRecord({ parent_trace_id: 'trace_prev' }), runEvents());

type JsonAttr = { key: string; value: { stringValue?: string; intValue?: number | string; boolValue?: boolean } };
type JsonSpan = {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  status: { code: number };
  attributes: JsonAttr[];
  events: Array<{ name: string }>;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
};
const attr = (s: { attributes: JsonAttr[] }, key: string) => s.attributes.find((a) => a.key === key)?.value;

describe('OTLP export', () => {
  it('exports a trace as OTLP/JSON whose spans share one trace id and form the run tree', async () => {
    const rx = await receiver();
    const w = eventWaiter();
    const exporter = createOtlpExporter({
      endpoint: rx.url,
      protocol: 'http/json',
      headers: { 'x-api-tenant': 'acme' },
      serviceName: 'agentd-test',
      onEvent: w.onEvent,
    });
    exporters.push(exporter);
    const t = trace();
    const exported = w.waitFor('exported');
    expect(exporter.exportTrace(t)).toBe(true);
    // Nothing is sent on the caller's turn: the work happens in the background.
    expect(rx.requests).toHaveLength(0);
    expect(exporter.stats().queued).toBe(1);
    await exporter.flush();
    expect(await exported).toMatchObject({ type: 'exported', trace_ids: [IDS.trace], span_count: 9, attempts: 1 });

    expect(rx.requests).toHaveLength(1);
    const req = rx.requests[0];
    expect(req.path).toBe('/v1/traces');
    expect(req.headers['content-type']).toContain('application/json');
    expect(req.headers['x-api-tenant']).toBe('acme');
    const body = JSON.parse(req.body.toString('utf8')) as {
      resourceSpans: Array<{ resource: { attributes: JsonAttr[] }; scopeSpans: Array<{ scope: { name: string }; spans: JsonSpan[] }> }>;
    };
    expect(body.resourceSpans).toHaveLength(1);
    expect(attr(body.resourceSpans[0].resource, 'service.name')).toEqual({ stringValue: 'agentd-test' });
    const spans = body.resourceSpans[0].scopeSpans[0].spans;
    expect(spans).toHaveLength(t.spans.length);

    const traceIds = new Set(spans.map((s) => s.traceId));
    expect([...traceIds]).toEqual([toOtelTraceId(IDS.trace)]);
    expect(toOtelTraceId(IDS.trace)).toMatch(/^[0-9a-f]{32}$/);

    // Map our ids to OTel ids through the agentd.* attributes and check every parent link.
    const otelIdOf = new Map(spans.map((s) => [attr(s, 'agentd.span_id')?.stringValue, s.spanId]));
    for (const s of spans) {
      expect(s.spanId).toMatch(/^[0-9a-f]{16}$/);
      expect(attr(s, 'agentd.trace_id')).toEqual({ stringValue: IDS.trace });
      const ours = t.spans.find((x) => x.span_id === attr(s, 'agentd.span_id')?.stringValue)!;
      expect(s.name).toBe(otlpSpanName(ours));
      expect(attr(s, 'agentd.span.name')).toEqual({ stringValue: ours.name });
      if (ours.parent_span_id === null) {
        expect(s.parentSpanId ?? '').toBe('');
      } else {
        expect(s.parentSpanId).toBe(otelIdOf.get(ours.parent_span_id));
      }
    }
    const root = spans.find((s) => attr(s, 'agentd.span.name')?.stringValue === 'agent.run')!;
    expect(root.name).toBe('invoke_agent helper');
    expect(root.kind).toBe(1); // INTERNAL (API kind + 1)
    expect(root.spanId).toBe(toOtelSpanId(IDS.root));
    expect(attr(root, 'agentd.parent_trace_id')).toEqual({ stringValue: 'trace_prev' });
    expect(root.events.map((e) => e.name)).toEqual(['user_message', 'final_answer']);
    expect(root.status.code).toBe(1); // OK
    expect(BigInt(root.endTimeUnixNano) - BigInt(root.startTimeUnixNano)).toBe(320_000_000n);
    const model = spans.find((s) => s.spanId === toOtelSpanId(IDS.model1))!;
    expect(model.kind).toBe(3); // CLIENT (API kind + 1)
    expect(model.name).toBe('chat demo-model');
    expect(attr(model, 'gen_ai.request.model')).toEqual({ stringValue: 'demo-model' });
    expect(Number(attr(model, 'gen_ai.usage.input_tokens')?.intValue)).toBe(100);
    const tool = spans.find((s) => s.spanId === toOtelSpanId(IDS.tool1))!;
    expect(attr(tool, 'gen_ai.tool.name')).toEqual({ stringValue: 'calculator' });
    expect([tool.name, tool.kind]).toEqual(['execute_tool calculator', 1]);
  });

  it('exports OTLP/protobuf', async () => {
    const rx = await receiver();
    const exporter = createOtlpExporter({ endpoint: `${rx.url}/v1/traces`, protocol: 'http/protobuf' });
    exporters.push(exporter);
    const got = rx.next();
    exporter.exportTrace(trace());
    const req = await got;
    await exporter.flush();
    expect(req.path).toBe('/v1/traces');
    expect(req.headers['content-type']).toBe('application/x-protobuf');
    expect(req.body.length).toBeGreaterThan(0);
    // The binary trace id is in the message.
    expect(req.body.includes(Buffer.from(toOtelTraceId(IDS.trace), 'hex'))).toBe(true);
    expect(exporter.stats()).toMatchObject({ exported_traces: 1, failed_traces: 0, queued: 0 });
  });

  it('retries a failed export with backoff and then succeeds', async () => {
    const rx = await receiver((n) => (n === 0 ? 400 : 200));
    const w = eventWaiter();
    const exporter = createOtlpExporter({ endpoint: rx.url, protocol: 'http/json', initialBackoffMs: 5, onEvent: w.onEvent });
    exporters.push(exporter);
    const exported = w.waitFor('exported');
    exporter.exportTrace(trace());
    expect(await exported).toMatchObject({ attempts: 2 });
    expect(w.events.map((e) => e.type)).toEqual(['retrying', 'exported']);
    expect(w.events[0]).toMatchObject({ attempt: 1, delay_ms: 5 });
    expect(rx.requests).toHaveLength(2);
  });

  it('an unreachable endpoint never throws; export returns at once and gives up in the background', async () => {
    // A port that was just free: connections are refused.
    const tmp = await receiver();
    const deadUrl = tmp.url;
    const s = servers.pop()!;
    await new Promise<void>((r) => s.close(() => r()));

    const w = eventWaiter();
    const exporter = createOtlpExporter({
      endpoint: deadUrl,
      protocol: 'http/protobuf',
      maxAttempts: 2,
      initialBackoffMs: 1,
      timeoutMillis: 300,
      onEvent: w.onEvent,
    });
    exporters.push(exporter);
    const failed = w.waitFor('failed');
    let result: unknown;
    expect(() => {
      result = exporter.exportTrace(trace());
    }).not.toThrow();
    expect(result).toBe(true);
    expect(exporter.exportTrace(trace())).toBe(true);
    expect(await failed).toMatchObject({ type: 'failed', attempts: 2, trace_ids: [IDS.trace, IDS.trace] });
    await exporter.flush();
    expect(exporter.stats()).toMatchObject({ failed_traces: 2, exported_traces: 0, queued: 0 });
    await expect(exporter.shutdown(100)).resolves.toBeUndefined();
  });

  it('bounds its queue and refuses traces after shutdown', async () => {
    const held: Array<(r: { code: number }) => void> = [];
    const fake: SpanExporter = {
      export: (_spans, cb) => void held.push(cb as (r: { code: number }) => void),
      shutdown: async () => {},
    };
    const w = eventWaiter();
    const exporter = createOtlpExporter({ endpoint: 'http://127.0.0.1:1', exporter: fake, maxQueue: 2, onEvent: w.onEvent });
    expect(exporter.exportTrace(trace())).toBe(true);
    expect(exporter.exportTrace(trace())).toBe(true);
    expect(exporter.exportTrace(trace())).toBe(false);
    expect(w.events).toEqual([{ type: 'dropped', trace_id: IDS.trace, reason: 'queue_full' }]);
    const exported = w.waitFor('exported');
    await new Promise((r) => setImmediate(r));
    expect(held).toHaveLength(1); // both queued traces went out in one batch
    held[0]({ code: 0 });
    expect(await exported).toMatchObject({ trace_ids: [IDS.trace, IDS.trace] });
    await exporter.shutdown(100);
    expect(exporter.exportTrace(trace())).toBe(false);
    expect(w.events.at(-1)).toEqual({ type: 'dropped', trace_id: IDS.trace, reason: 'shut_down' });
  });

  it('an exporter that throws synchronously is a failed attempt, not a crash', async () => {
    const fake: SpanExporter = {
      export: () => {
        throw new Error('serializer exploded');
      },
      shutdown: async () => {},
    };
    const w = eventWaiter();
    const exporter = createOtlpExporter({ endpoint: 'http://127.0.0.1:1', exporter: fake, maxAttempts: 1, onEvent: w.onEvent });
    const failed = w.waitFor('failed');
    exporter.exportTrace(trace());
    expect(await failed).toMatchObject({ error: 'serializer exploded', attempts: 1 });
    await exporter.shutdown(100);
  });
});

describe('OTLP export carries no secret (issue 10, findings 8 and 9)', () => {
  it('redacts span attributes and status messages: value patterns, configured secrets and the collector header values', async () => {
    const rx = await receiver();
    const collectorToken = 'hdr-' + 'Kk2Jj3Hh4Gg5';
    const modelKey = 'cfg-' + 'Mm7Nn8Bb9Vv0';
    const bearer = 'sk-' + 'proj-Ab12Cd34Ef56Gh78Ij90Kl';
    const w = eventWaiter();
    const exporter = createOtlpExporter({
      endpoint: rx.url,
      protocol: 'http/json',
      headers: { authorization: `Bearer ${collectorToken}` },
      redactor: new Redactor([modelKey]),
      onEvent: w.onEvent,
    });
    exporters.push(exporter);
    // A tool_error stored raw, as a version before redaction by value would have stored it.
    const events = runEvents();
    const i = events.findIndex((e) => e.span_id === IDS.tool2 && e.event_type === 'tool_result');
    events[i] = {
      ...events[i],
      event_type: 'tool_error',
      output: null,
      error: { type: 'error', message: `upstream said 401 for Authorization: Bearer ${bearer}; key ${modelKey}; collector ${collectorToken}` },
    };
    const exported = w.waitFor('exported');
    exporter.exportTrace(buildTrace(traceRecord(), events));
    await exporter.flush();
    await exported;
    const body = rx.requests[0].body.toString('utf8');
    expect(rx.requests[0].headers.authorization).toBe(`Bearer ${collectorToken}`);
    expect(body).toContain('agentd.error.message');
    expect(body).toContain(REDACTED);
    for (const secret of [bearer, modelKey, collectorToken]) expect(body).not.toContain(secret);
  });
});

describe('OTLP ids and endpoint', () => {
  it('derives stable, well-formed ids', () => {
    expect(toOtelTraceId('trace_a')).toBe(toOtelTraceId('trace_a'));
    expect(toOtelTraceId('trace_a')).not.toBe(toOtelTraceId('trace_b'));
    expect(toOtelSpanId('span_a')).toMatch(/^[0-9a-f]{16}$/);
  });
  it('appends /v1/traces to a base endpoint only', () => {
    expect(resolveOtlpTracesUrl('http://collector:4318')).toBe('http://collector:4318/v1/traces');
    expect(resolveOtlpTracesUrl('http://collector:4318/')).toBe('http://collector:4318/v1/traces');
    expect(resolveOtlpTracesUrl('https://vendor.example/api/otel/')).toBe('https://vendor.example/api/otel/v1/traces');
    expect(resolveOtlpTracesUrl('http://collector:4318/v1/traces')).toBe('http://collector:4318/v1/traces');
  });
});
