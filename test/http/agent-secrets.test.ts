// Secrets of registered agents in what is answered and exported, over real HTTP: an agent whose
// key comes from agents.secret_env talks to a provider that echoes the key, in a tool call's
// arguments (which waits for an approval) and in its answer. The tool and the model see the real
// value; every answer (GET /runs/{id}, GET /runs?status=awaiting_approval, the decision, the
// RunResponse), every event, the run.completed webhook body, the OTLP export and the run record
// in the store hold `[REDACTED]`.
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDACTED } from '../../src/telemetry/redact.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const FIXTURES = path.resolve('test/fixtures/agents');
// Shaped like no known credential: only the redaction set built from agents.secret_env finds it.
const KEY = 'echokey-' + 'Hq3Zr7Vw1Lp9Xc';
const toolCalls = (): Array<{ tool: string; args: Record<string, unknown> }> => ((globalThis as Record<string, unknown>).__agentToolCalls ??= []) as never;

describe("a registered agent's key echoed by its provider", () => {
  let model: ScriptedOpenAI;
  let collector: HttpServer;
  const received: Array<{ url: string; body: string }> = [];
  let server: TestServer;

  beforeAll(async () => {
    model = await startScriptedOpenAI();
    collector = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        received.push({ url: req.url ?? '', body });
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((r) => collector.listen(0, '127.0.0.1', r));
    const at = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;
    server = await startTestServer(
      {
        agents: { tools_dirs: [FIXTURES], model_hosts: [new URL(model.url).host], secret_env: ['AGENTD_TEST_ECHO_KEY'] },
        governance: { rules: [{ tools: ['alt_echo'], effect: 'ask', reason: 'check it' }] },
        webhooks: { endpoints: [{ url: `${at}/hook`, secret: 'whsec-test-0123456789' }], initial_backoff_seconds: 0.2 },
        telemetry: { otlp: { endpoint: at, protocol: 'http/json' } },
      },
      { env: { AGENTD_TEST_ECHO_KEY: KEY } },
    );
    const spec = {
      agent_id: 'echo',
      model_config: { provider: 'openai-compatible', base_url: model.url, model: 'm', api_key_env: 'AGENTD_TEST_ECHO_KEY' },
      agent_config: { builtin_tools: [] },
      local_tools_ref: path.join(FIXTURES, 'alt-tools.mjs'),
    };
    expect((await postJson(`${server.url}/background/agents`, { spec })).status).toBe(200);
  });

  afterAll(async () => {
    await server?.stop();
    server?.cleanup();
    await model?.close();
    await new Promise((r) => collector?.close(r));
  });

  it('is [REDACTED] in approvals, answers, events, the webhook body, OTLP and the stored record; the tool and the model get the real value', async () => {
    const keyOf = (headers: Record<string, unknown>) => String(headers.authorization).replace(/^Bearer /, '');
    model.enqueue(
      (_req, headers) => ({ tool_calls: [{ id: 'k1', name: 'alt_echo', arguments: { text: `key=${keyOf(headers)}` } }] }),
      (_req, headers) => ({ text: `Your key is ${keyOf(headers)}.` }),
    );
    const started = await postJson(`${server.url}/run/sync`, { query: 'show me the key', agent_id: 'echo' });
    expect(started.body.status, JSON.stringify(started.body)).toBe('awaiting_approval');
    const runId: string = started.body.run_id;
    expect(model.headers[0].authorization).toBe(`Bearer ${KEY}`);

    // Pending: every view of the approval.
    const pendingViews = [
      started.body,
      (await getJson(`${server.url}/runs/${runId}`)).body,
      (await getJson(`${server.url}/runs?status=awaiting_approval`)).body,
    ];
    for (const view of pendingViews) expect(JSON.stringify(view)).not.toContain(KEY);
    const approval = pendingViews[1].approvals[0];
    expect(approval.arguments).toEqual({ text: `key=${REDACTED}` });
    const decided = await postJson(`${server.url}/runs/${runId}/approvals/${approval.approval_id}`, { decision: 'approve', approver: 'alice' });
    expect(decided.status, JSON.stringify(decided.body)).toBe(200);
    expect(JSON.stringify(decided.body)).not.toContain(KEY);
    expect(decided.body.arguments).toEqual({ text: `key=${REDACTED}` });

    const done = await eventually(
      async () => {
        const r = await getJson(`${server.url}/runs/${runId}`);
        return r.body.status === 'completed' ? r.body : null;
      },
      10_000,
      'the run completes after the approval',
    );
    // The tool ran with the real value, and the model got its result.
    expect(toolCalls().at(-1)).toMatchObject({ tool: 'alt_echo', args: { text: `key=${KEY}` } });
    expect(JSON.stringify(model.requests[1].messages)).toContain(`alt:key=${KEY}`);
    // Decided and ended: still redacted, and the answer too.
    expect(done.response).toBe(`Your key is ${REDACTED}.`);
    expect(JSON.stringify(done)).not.toContain(KEY);
    expect(JSON.stringify((await getJson(`${server.url}/runs`)).body)).not.toContain(KEY);

    const events = (await getJson(`${server.url}/telemetry/events?run_id=${runId}&limit=1000`)).body;
    expect(events.events.length).toBeGreaterThan(5);
    expect(JSON.stringify(events)).not.toContain(KEY);

    const hook = await eventually(
      () => received.find((r) => r.url === '/hook' && r.body.includes('run.completed') && r.body.includes(runId)),
      10_000,
      'the run.completed webhook',
    );
    expect(hook.body).toContain(REDACTED);
    const span = await eventually(() => received.find((r) => r.url.startsWith('/v1/traces') && r.body.includes(runId)), 10_000, 'the OTLP export');
    expect(span).toBeDefined();
    expect(received.filter((r) => r.body.includes(KEY))).toEqual([]);

    // The stored run record: nothing execution still needs, so nothing raw.
    const record = await server.store.getRecord('runs', runId);
    expect(JSON.stringify(record!.value)).not.toContain(KEY);
  }, 30_000);
});
