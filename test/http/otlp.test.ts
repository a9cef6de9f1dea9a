// OTLP/HTTP export end to end: a real server, configured only by the standard OTEL_* variables,
// with the scripted model, exports to a local collector that decodes protobuf (the default
// protocol) and JSON itself (test/helpers/otlp-receiver.ts). Checked: GenAI semantic-convention
// names and kinds, parent/child links, one span per tool execution, service.name from
// OTEL_SERVICE_NAME, the OTEL_EXPORTER_OTLP_* headers (and that their values never reach a body),
// and docs/telemetry.md's attribute table against what is really sent, both ways.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const MCP_FIXTURE = join(import.meta.dirname, '../fixtures/mcp-stdio-server.ts');
const HEADER_SECRET = 'c0llector-key=1234';
const CONFIG = {
  agent: {
    name: 'otlp-agent',
    // Known request parameters: exported as gen_ai.request.max_tokens / .temperature.
    model: { max_output_tokens: 512, temperature: 0.25 },
    tools: { builtin: ['clock', 'workspace'], mcp: [{ name: 'fx', command: process.execPath, args: ['--import', 'tsx', MCP_FIXTURE] }] },
  },
  governance: { rules: [{ tools: ['workspace_write'], effect: 'ask', reason: 'writes files' }] },
  pricing: { scripted: { input_per_million_usd: 1, output_per_million_usd: 2 } },
};

let model: ScriptedOpenAI;
let rx: OtlpReceiver;
let server: TestServer;

const str = (s: ReceivedSpan, key: string): unknown => s.attributes[key];
const ofRun = (runId: string) => rx.spans().filter((s) => s.attributes['agentd.run_id'] === runId);
const byName = (spans: ReceivedSpan[], name: string) => spans.filter((s) => s.attributes['agentd.span.name'] === name);
/** Waits until the trace of a run segment (its root span) has arrived; returns that trace's spans. */
const exportedTrace = (runId: string, status: string) =>
  eventually(
    () => {
      const root = ofRun(runId).find((s) => s.parentSpanId === '' && s.attributes['agentd.trace.status'] === status);
      return root ? rx.spans().filter((s) => s.traceId === root.traceId) : null;
    },
    15_000,
    `exported ${status} trace of ${runId}`,
  );

beforeAll(async () => {
  [model, rx] = await Promise.all([startScriptedOpenAI(), startOtlpReceiver()]);
  model.setDefault({ text: 'done' });
  server = await startTestServer(CONFIG, {
    modelUrl: model.url,
    env: {
      OTEL_SERVICE_NAME: 'agentd-otlp-test',
      OTEL_EXPORTER_OTLP_ENDPOINT: rx.url,
      // Percent-encoded `=` in a value, spaces around pairs: both decoded/trimmed.
      OTEL_EXPORTER_OTLP_HEADERS: `x-collector-key=${encodeURIComponent(HEADER_SECRET)} , x-tenant=acme`,
    },
  });
}, 30_000);
afterAll(async () => {
  await server?.stop();
  server?.cleanup();
  await Promise.all([model?.close(), rx?.close()]);
});

describe('OTLP export (protobuf, configured by OTEL_* variables)', () => {
  let toolRun: string;
  let spans: ReceivedSpan[];

  beforeAll(async () => {
    model.enqueue(
      {
        tool_calls: [
          { id: 'call_clock', name: 'clock', arguments: {} },
          { id: 'call_nope', name: 'no_such_tool', arguments: {} },
        ],
        usage: { prompt_tokens: 120, completion_tokens: 30 },
        finish_reason: 'tool_calls',
      },
      { text: 'It is noon.', usage: { prompt_tokens: 200, completion_tokens: 10 }, finish_reason: 'stop' },
    );
    const run = await postJson(`${server.url}/run/sync`, { query: 'what time is it?' });
    expect(run.body.status).toBe('success');
    toolRun = run.body.run_id;
    spans = await exportedTrace(toolRun, 'completed');
  }, 30_000);

  it('sends protobuf to /v1/traces with the OTEL_EXPORTER_OTLP_HEADERS, never their values in the body', () => {
    const req = rx.requests.find((r) => r.spans.some((s) => s.attributes['agentd.run_id'] === toolRun))!;
    expect(req.path).toBe('/v1/traces');
    expect(req.contentType).toBe('application/x-protobuf');
    expect(req.headers['x-collector-key']).toBe(HEADER_SECRET);
    expect(req.headers['x-tenant']).toBe('acme');
    for (const r of rx.requests) expect(r.body.includes(Buffer.from(HEADER_SECRET))).toBe(false);
  });

  it('names the resource from OTEL_SERVICE_NAME', () => {
    for (const s of spans) {
      expect(s.resource['service.name']).toBe('agentd-otlp-test');
      expect(s.scope).toBe('agentd');
    }
  });

  it('uses GenAI semantic-convention names and kinds, with one tree per segment', () => {
    expect(new Set(spans.map((s) => s.traceId)).size).toBe(1);
    const ids = new Set(spans.map((s) => s.spanId));
    expect(spans.filter((s) => s.parentSpanId !== '' && !ids.has(s.parentSpanId))).toEqual([]);
    const roots = spans.filter((s) => s.parentSpanId === '');
    expect(roots.map((s) => [s.name, s.kind])).toEqual([['invoke_agent otlp-agent', 1]]);
    const root = roots[0];

    const steps = byName(spans, 'agent.step');
    expect(steps).toHaveLength(2);
    for (const s of steps) expect([s.name, s.kind, s.parentSpanId]).toEqual(['agent.step', 1, root.spanId]);

    const chats = byName(spans, 'model.call');
    expect(chats.map((s) => [s.name, s.kind])).toEqual([
      ['chat scripted', 3],
      ['chat scripted', 3],
    ]);
    for (const c of chats) expect(steps.map((s) => s.spanId)).toContain(c.parentSpanId);
    const first = chats.find((c) => c.attributes['gen_ai.usage.input_tokens'] === 120)!;
    expect(first.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'openai-compatible',
      'gen_ai.request.model': 'scripted',
      'gen_ai.request.max_tokens': 512,
      'gen_ai.request.temperature': 0.25,
      'gen_ai.usage.output_tokens': 30,
      'gen_ai.response.finish_reasons': ['tool_calls'],
      'gen_ai.conversation.id': root.attributes['agentd.session_id'],
    });
    expect(typeof first.attributes['gen_ai.response.model']).toBe('string');
    // The provider's response id (the scripted server's chatcmpl-scripted-N), one per call.
    const responseIds = chats.map((c) => c.attributes['gen_ai.response.id']);
    for (const id of responseIds) expect(id).toMatch(/^chatcmpl-scripted-\d+$/);
    expect(new Set(responseIds).size).toBe(2);
    // Message content is opt-in (telemetry.otlp.capture_message_content): none by default.
    const content = ['gen_ai.input.messages', 'gen_ai.output.messages', 'gen_ai.system_instructions', 'gen_ai.tool.call.arguments', 'gen_ai.tool.call.result'];
    for (const s of spans) for (const key of content) expect(s.attributes[key], `${key} on ${s.name}`).toBeUndefined();
    expect(root.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.agent.name': 'otlp-agent',
      'gen_ai.usage.input_tokens': 320,
      'gen_ai.usage.output_tokens': 40,
    });
  });

  it('exports exactly one execute_tool span per tool call, under its batch, with the policy check folded in', () => {
    const batch = byName(spans, 'tool.batch');
    expect(batch).toHaveLength(1);
    const tools = spans.filter((s) => s.name.startsWith('execute_tool'));
    expect(tools.map((s) => s.attributes['gen_ai.tool.call.id']).sort()).toEqual(['call_clock', 'call_nope']);
    expect(byName(spans, 'tool.call')).toHaveLength(2);

    const clock = tools.find((s) => str(s, 'gen_ai.tool.call.id') === 'call_clock')!;
    expect([clock.name, clock.kind, clock.parentSpanId, clock.status.code]).toEqual(['execute_tool clock', 1, batch[0].spanId, 1]);
    expect(clock.attributes).toMatchObject({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'clock',
      'gen_ai.tool.type': 'function',
      'agentd.policy.decision': 'allow',
    });
    expect(clock.events.map((e) => e.name)).toEqual(['policy_request_created', 'policy_decision_allow', 'tool_call', 'tool_result']);

    const nope = tools.find((s) => str(s, 'gen_ai.tool.call.id') === 'call_nope')!;
    expect([nope.name, nope.status.code, str(nope, 'error.type')]).toEqual(['execute_tool no_such_tool', 2, 'rejected']);
    expect(String(str(nope, 'agentd.error.message'))).toContain("Unknown tool 'no_such_tool'");
  });

  it('the trace view agrees: one tool.call span per call', async () => {
    const view = (await getJson(`${server.url}/telemetry/runs/${toolRun}/trace`)).body;
    const calls = view.trace.spans.filter((s: { name: string }) => s.name === 'tool.call');
    expect(calls.map((s: { attributes: Record<string, unknown> }) => s.attributes['gen_ai.tool.call.id']).sort()).toEqual(['call_clock', 'call_nope']);
  });
});

describe('a run paused for approval: two segments, linked', () => {
  it('links the resumed segment to the first with a span link (protobuf), and the run trace shows both with the wait', async () => {
    model.enqueue({ tool_calls: [{ id: 'call_link', name: 'workspace_write', arguments: { path: 'l.txt', content: 'x' } }] }, { text: 'linked' });
    const paused = (await postJson(`${server.url}/run/sync`, { query: 'write l.txt' })).body;
    expect(paused.status).toBe('awaiting_approval');
    const first = await exportedTrace(paused.run_id, 'suspended');
    const firstRoot = first.find((s) => s.parentSpanId === '')!;
    expect(firstRoot.links).toEqual([]);

    // While it waits, the run trace has one segment and an open wait.
    const waiting = (await getJson(`${server.url}/telemetry/runs/${paused.run_id}/trace`)).body;
    expect(waiting.segments.map((t: { status: string }) => t.status)).toEqual(['suspended']);
    expect(waiting.waits).toHaveLength(1);
    expect(waiting.waits[0]).toMatchObject({ after_trace_id: waiting.trace.trace_id, before_trace_id: null, ended_at: null });
    expect(waiting.waits[0].decisions).toMatchObject([{ kind: 'approval', subject: 'workspace_write', decision: 'pending', approver: null }]);

    const approvalId = paused.approvals[0].approval_id;
    const edited = { path: 'l2.txt', content: 'y' };
    expect(
      (await postJson(`${server.url}/runs/${paused.run_id}/approvals/${approvalId}`, { decision: 'approve', approver: 'alice', note: 'ok', arguments: edited }))
        .status,
    ).toBe(200);
    const second = await exportedTrace(paused.run_id, 'completed');
    const secondRoot = second.find((s) => s.parentSpanId === '')!;
    expect(secondRoot.traceId).not.toBe(firstRoot.traceId);
    expect(secondRoot.links).toEqual([
      {
        traceId: firstRoot.traceId,
        spanId: firstRoot.spanId,
        attributes: {
          'agentd.link.type': 'previous_segment',
          'agentd.trace_id': firstRoot.attributes['agentd.trace_id'],
          'agentd.span_id': firstRoot.attributes['agentd.span_id'],
        },
      },
    ]);
    expect(secondRoot.attributes['agentd.parent_trace_id']).toBe(firstRoot.attributes['agentd.trace_id']);
    expect(second.filter((s) => s !== secondRoot).every((s) => s.links.length === 0)).toBe(true);

    // Over HTTP: the latest segment as before (summary, trace), plus both segments and the wait.
    const view = (await getJson(`${server.url}/telemetry/runs/${paused.run_id}/trace`)).body;
    expect(view.summary.trace_id).toBe(view.trace.trace_id);
    expect(view.trace.status).toBe('completed');
    expect(view.segments.map((t: { trace_id: string; status: string }) => [t.trace_id, t.status])).toEqual([
      [firstRoot.attributes['agentd.trace_id'], 'suspended'],
      [view.trace.trace_id, 'completed'],
    ]);
    // The model call that asked for the tool is in the first segment, the approved call in the second.
    expect(view.segments[0].spans.some((s: { name: string }) => s.name === 'model.call')).toBe(true);
    expect(view.segments[1].spans.some((s: { name: string }) => s.name === 'tool.call')).toBe(true);
    expect(view.earlier_segments_omitted).toBe(false);
    expect(view.waits).toEqual([
      {
        after_trace_id: view.segments[0].trace_id,
        before_trace_id: view.segments[1].trace_id,
        started_at: view.segments[0].ended_at,
        ended_at: view.segments[1].started_at,
        duration_ms: Date.parse(view.segments[1].started_at) - Date.parse(view.segments[0].ended_at),
        cause: 'approval',
        decisions: [
          {
            kind: 'approval',
            id: approvalId,
            subject: 'workspace_write',
            decision: expect.stringMatching(/^(approved|used)$/),
            approver: 'alice',
            note: 'ok',
            decided_at: expect.any(String),
            edited_arguments: edited,
            amount: null,
          },
        ],
      },
    ]);
  }, 60_000);

  it('a run id with no trace is 404 with its code', async () => {
    const res = await getJson(`${server.url}/telemetry/runs/run_doesnotexist/trace`);
    expect([res.status, res.body.code]).toEqual([404, expect.stringMatching(/^AGT_ERR_/)]);
  });
});

describe("docs/telemetry.md's span attributes are what is sent", () => {
  it('every documented attribute is on an exported span, and every exported attribute is documented', async () => {
    // An approval across two segments (policy "ask", agentd.parent_trace_id) ...
    model.enqueue({ tool_calls: [{ id: 'call_write', name: 'workspace_write', arguments: { path: 'a.txt', content: 'x' } }] }, { text: 'written' });
    const paused = (await postJson(`${server.url}/run/sync`, { query: 'write a file' })).body;
    expect(paused.status).toBe('awaiting_approval');
    const first = await exportedTrace(paused.run_id, 'suspended');
    const waiting = first.filter((s) => s.name.startsWith('execute_tool'));
    expect(waiting.map((s) => [s.name, str(s, 'agentd.policy.decision'), s.status.code])).toEqual([['execute_tool workspace_write', 'ask', 0]]);
    const approvalId = paused.approvals[0].approval_id;
    expect((await postJson(`${server.url}/runs/${paused.run_id}/approvals/${approvalId}`, { decision: 'approve', approver: 'alice' })).status).toBe(200);
    const second = await exportedTrace(paused.run_id, 'completed');
    const resumedRoot = second.find((s) => s.parentSpanId === '')!;
    expect(resumedRoot.attributes['agentd.parent_trace_id']).toBe(first.find((s) => s.parentSpanId === '')!.attributes['agentd.trace_id']);
    expect(second.filter((s) => s.name.startsWith('execute_tool')).map((s) => s.name)).toEqual(['execute_tool workspace_write']);

    // ... an MCP tool (agentd.mcp_server) ...
    model.enqueue({ tool_calls: [{ id: 'call_mcp', name: 'fx__echo', arguments: { text: 'hi' } }] }, { text: 'echoed' });
    const mcpRun = (await postJson(`${server.url}/run/sync`, { query: 'echo' })).body;
    const mcp = (await exportedTrace(mcpRun.run_id, 'completed')).filter((s) => s.name.startsWith('execute_tool'));
    expect(mcp.map((s) => [s.name, s.kind, str(s, 'agentd.mcp_server')])).toEqual([['execute_tool fx__echo', 1, 'fx']]);

    // ... and a background task's run (agentd.task_id).
    expect((await postJson(`${server.url}/background/tasks`, { task_id: 'otlp-task', query: 'hello', schedule: { type: 'manual' } })).status).toBe(200);
    const bg = (await postJson(`${server.url}/background/tasks/otlp-task/run`, { wait: true })).body;
    await eventually(() => rx.spans().some((s) => s.attributes['agentd.task_id'] === 'otlp-task'), 15_000, 'background run trace');

    // ... and a tenant's run (agentd.tenant; with auth off, the header names the tenant).
    const tenantRun = (await postJson(`${server.url}/run/sync`, { query: 'hello' }, { 'x-agentd-tenant': 'otlp-tenant' })).body;
    const tenantSpans = await exportedTrace(tenantRun.run_id, 'completed');
    expect(tenantSpans.map((sp) => str(sp, 'agentd.tenant'))).toEqual(tenantSpans.map(() => 'otlp-tenant'));
    expect(first.map((sp) => sp.attributes['agentd.tenant'])).toEqual(first.map(() => undefined));

    const sent = new Set(rx.spans().flatMap((s) => Object.keys(s.attributes)));
    const doc = documentedAttributes();
    expect(doc.size).toBeGreaterThan(20);
    const missing = [...doc].filter(([name, viewOnly]) => !viewOnly && !sent.has(name)).map(([name]) => name);
    expect(missing, `documented in docs/telemetry.md but never sent (${JSON.stringify(bg).slice(0, 80)})`).toEqual([]);
    const undocumented = [...sent].filter((name) => !doc.has(name));
    expect(undocumented, 'sent but not in docs/telemetry.md').toEqual([]);
    const viewOnlySent = [...doc].filter(([name, viewOnly]) => viewOnly && sent.has(name)).map(([name]) => name);
    expect(viewOnlySent, 'marked view only but sent').toEqual([]);
  }, 60_000);
});

/** Attribute name -> marked *view only*, from the "Span attributes" table of docs/telemetry.md. */
function documentedAttributes(): Map<string, boolean> {
  const text = readFileSync(join(import.meta.dirname, '../../docs/telemetry.md'), 'utf8');
  const start = text.indexOf('### Span attributes');
  expect(start).toBeGreaterThan(0);
  const rest = text.slice(start + 1);
  const section = rest.slice(0, rest.search(/\n#{2,3} /));
  const out = new Map<string, boolean>();
  for (const line of section.split('\n')) {
    const m = /^\| `([a-z_.]+)` \|([^|]*)\|/.exec(line);
    if (m) out.set(m[1], m[2].includes('*view only*'));
  }
  return out;
}

describe('OTLP message content, opted in by OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT', () => {
  it('puts the prompt, the completion, tool arguments and results on the spans, redacted', async () => {
    const SECRET = 'sk-content-0123456789abcdef';
    const rx3 = await startOtlpReceiver();
    const s3 = await startTestServer(
      { agent: { name: 'content-agent', system_instruction: 'Answer briefly.', tools: { builtin: ['clock'] } } },
      { modelUrl: model.url, env: { OTEL_EXPORTER_OTLP_ENDPOINT: rx3.url, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true' } },
    );
    try {
      model.enqueue(
        { tool_calls: [{ id: 'call_c', name: 'clock', arguments: {} }], finish_reason: 'tool_calls' },
        { text: 'It is noon.', finish_reason: 'stop' },
      );
      const run = (await postJson(`${s3.url}/run/sync`, { query: `what time is it? my key is ${SECRET}` })).body;
      expect(run.status).toBe('success');
      const spans = await eventually(
        () => {
          const got = rx3.spans().filter((s) => s.attributes['agentd.run_id'] === run.run_id);
          return got.some((s) => s.parentSpanId === '' && s.attributes['agentd.trace.status'] === 'completed') ? got : null;
        },
        15_000,
        'exported trace with content',
      );
      const chats = byName(spans, 'model.call');
      expect(chats).toHaveLength(2);
      const firstCall = chats.find((c) => String(c.attributes['gen_ai.output.messages']).includes('tool_call'))!;
      expect(JSON.parse(String(firstCall.attributes['gen_ai.system_instructions']))).toEqual([{ type: 'text', content: 'Answer briefly.' }]);
      const input = JSON.parse(String(firstCall.attributes['gen_ai.input.messages']));
      expect(input).toEqual([{ role: 'user', parts: [{ type: 'text', content: expect.stringContaining('what time is it?') }] }]);
      expect(JSON.parse(String(firstCall.attributes['gen_ai.output.messages']))).toEqual([
        { role: 'assistant', parts: [{ type: 'tool_call', id: 'call_c', name: 'clock', arguments: {} }], finish_reason: 'tool_calls' },
      ]);
      const lastCall = chats.find((c) => c !== firstCall)!;
      const lastInput = JSON.parse(String(lastCall.attributes['gen_ai.input.messages'])) as { role: string; parts: { type: string }[] }[];
      expect(lastInput.map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
      expect(lastInput[2].parts[0].type).toBe('tool_call_response');
      expect(JSON.parse(String(lastCall.attributes['gen_ai.output.messages']))[0].parts).toEqual([{ type: 'text', content: 'It is noon.' }]);
      const tool = spans.find((s) => s.name === 'execute_tool clock')!;
      expect(JSON.parse(String(tool.attributes['gen_ai.tool.call.arguments']))).toEqual({});
      expect(typeof tool.attributes['gen_ai.tool.call.result']).toBe('string');
      // The secret in the query is redacted in the content as everywhere else.
      for (const r of rx3.requests) expect(r.body.includes(Buffer.from(SECRET))).toBe(false);
    } finally {
      await s3.stop();
      s3.cleanup();
      await rx3.close();
    }
  }, 60_000);
});

describe('OTLP export (JSON, to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given)', () => {
  it('uses the traces-specific variables over the general ones and the default service.name', async () => {
    const rx2 = await startOtlpReceiver();
    const s2 = await startTestServer(
      { agent: { name: 'json-agent', tools: { builtin: ['clock'] } } },
      {
        modelUrl: model.url,
        env: {
          OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9/never-used',
          OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${rx2.url}/custom/traces`,
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
          OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
          OTEL_EXPORTER_OTLP_HEADERS: 'x-tenant=general,x-region=eu',
          OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'x-tenant=traces',
          OTEL_EXPORTER_OTLP_TIMEOUT: '5000',
        },
      },
    );
    try {
      model.enqueue({ tool_calls: [{ id: 'call_j', name: 'clock', arguments: {} }], usage: { prompt_tokens: 7, completion_tokens: 3 } }, { text: 'noon' });
      const run = (await postJson(`${s2.url}/run/sync`, { query: 'time?' })).body;
      const spans = await eventually(
        () => {
          const mine = rx2.spans().filter((s) => s.attributes['agentd.run_id'] === run.run_id);
          return mine.some((s) => s.parentSpanId === '') ? mine : null;
        },
        15_000,
        'JSON export',
      );
      const req = rx2.requests[0];
      expect([req.path, req.contentType, req.headers['x-tenant'], req.headers['x-region']]).toEqual(['/custom/traces', 'application/json', 'traces', 'eu']);
      expect(spans[0].resource['service.name']).toBe('agentd');
      const ids = new Set(spans.map((s) => s.spanId));
      expect(spans.filter((s) => s.parentSpanId !== '' && !ids.has(s.parentSpanId))).toEqual([]);
      expect(spans.map((s) => [s.name, s.kind]).sort()).toEqual([
        ['agent.step', 1],
        ['agent.step', 1],
        ['chat scripted', 3],
        ['chat scripted', 3],
        ['execute_tool clock', 1],
        ['invoke_agent json-agent', 1],
        ['observation.pipeline', 1],
        ['tool.batch', 1],
      ]);
      const chat = spans.find((s) => s.attributes['gen_ai.usage.input_tokens'] === 7)!;
      expect(chat.attributes['gen_ai.response.finish_reasons']).toEqual(['tool_calls']);
    } finally {
      await s2.stop();
      s2.cleanup();
      await rx2.close();
    }
  }, 30_000);
});

describe('forks, replays and evaluation replays: linked to the run they came from', () => {
  it("the first segment's root span of each carries a span link to the original run's root span", async () => {
    model.enqueue({ text: 'original answer' });
    const original = (await postJson(`${server.url}/run/sync`, { query: 'link me' })).body;
    const originalRoot = (await exportedTrace(original.run_id, 'completed')).find((s) => s.parentSpanId === '')!;
    expect(originalRoot.links).toEqual([]);
    const linkTo = (type: string, extra: Record<string, string> = {}) => ({
      traceId: originalRoot.traceId,
      spanId: originalRoot.spanId,
      attributes: {
        'agentd.link.type': type,
        'agentd.run_id': original.run_id,
        'agentd.trace_id': originalRoot.attributes['agentd.trace_id'],
        'agentd.span_id': originalRoot.attributes['agentd.span_id'],
        ...extra,
      },
    });

    const fork = (await postJson(`${server.url}/runs/${original.run_id}/fork`, { checkpoint_id: 'cp_1', edits: { user_message: 'and again' } })).body;
    expect(fork.forked_from).toEqual({ run_id: original.run_id, checkpoint_id: 'cp_1' });
    const forkSpans = await exportedTrace(fork.run_id, 'completed');
    const forkRoot = forkSpans.find((s) => s.parentSpanId === '')!;
    expect(forkRoot.traceId).not.toBe(originalRoot.traceId);
    expect(forkRoot.links).toEqual([linkTo('forked_from')]);
    expect(forkSpans.filter((s) => s !== forkRoot).every((s) => s.links.length === 0)).toBe(true);

    const replay = (await postJson(`${server.url}/runs/${original.run_id}/replay`, { variant: { system_instruction: 'be brief' } })).body;
    expect(replay.replay_of.run_id).toBe(original.run_id);
    const replayRoot = (await exportedTrace(replay.run_id, 'completed')).find((s) => s.parentSpanId === '')!;
    expect(replayRoot.links).toEqual([linkTo('replay_of')]);

    const ev = (await postJson(`${server.url}/evals`, { name: 'otlp', source: { run_ids: [original.run_id] }, variant: { system_instruction: 'v2' } })).body;
    const item = await eventually(async () => {
      const d = (await getJson(`${server.url}/evals/${ev.eval_id}`)).body;
      return d.status === 'completed' ? d.items[0] : null;
    });
    const evalRoot = (await exportedTrace(item.replay_run_id, 'completed')).find((s) => s.parentSpanId === '')!;
    expect(evalRoot.links).toEqual([linkTo('replay_of', { 'agentd.eval_id': ev.eval_id })]);
  });
});
