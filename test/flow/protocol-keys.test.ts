// Concurrency keys and priorities on the protocol routes (docs/flow-control.md "Protocol routes"):
// X-Agentd-Concurrency-Key / -Limit and X-Agentd-Priority on POST /v1/chat/completions,
// /ai-sdk/chat, /ag-ui, /a2a and /mcp put the run under the key's limit shared with POST /run.
// The scripted model holds the calls of the run that fills the key until the test lets them go.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

let model: ScriptedOpenAI;
let server: TestServer;
let release: () => void = () => {};
const gate = new Promise<void>((r) => (release = r));
let inFlight = 0;
let peak = 0;

const userText = (req: { messages: Array<{ role: string; content?: unknown }> }): string =>
  String(req.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '');

beforeAll(async () => {
  model = await startScriptedOpenAI();
  model.setDefault((req) => {
    const q = userText(req);
    if (!q.startsWith('proto')) return { text: `ok ${q}` };
    inFlight++;
    peak = Math.max(peak, inFlight);
    return { text: `ok ${q}`, holdUntil: gate.then(() => void inFlight--) };
  });
  server = await startTestServer({ server: { request_timeout_seconds: 30 } }, { modelUrl: model.url });
});
afterAll(async () => {
  release();
  await server.stop();
  server.cleanup();
  await model.close();
});

const KEY = { 'x-agentd-concurrency-key': 'proto', 'x-agentd-concurrency-limit': '1', 'x-agentd-priority': '3' };

it('each protocol route queues its run on the key named in its headers, and runs it once the key has room', async () => {
  const head = postJson(`${server.url}/run/sync`, { query: 'proto#head', concurrency: { key: 'proto', limit: 1 } });
  await eventually(() => inFlight === 1);

  const calls: Array<Promise<{ route: string; status: number; text: string }>> = [];
  const raw = (route: string, path: string, body: unknown) =>
    calls.push(
      fetch(`${server.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...KEY },
        body: JSON.stringify(body),
      }).then(async (r) => ({ route, status: r.status, text: await r.text() })),
    );
  raw('openai', '/v1/chat/completions', { model: 'default', messages: [{ role: 'user', content: 'proto#openai' }] });
  raw('ai-sdk', '/ai-sdk/chat', {
    id: 'ai-sdk-proto',
    trigger: 'submit-message',
    messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'proto#ai-sdk' }] }],
  });
  raw('ag-ui', '/ag-ui', {
    threadId: 'ag-ui-proto',
    runId: 'r1',
    messages: [{ id: 'u1', role: 'user', content: 'proto#ag-ui' }],
    tools: [],
    context: [],
    state: {},
    forwardedProps: {},
  });
  raw('a2a', '/a2a', {
    jsonrpc: '2.0',
    id: 1,
    method: 'SendMessage',
    params: { message: { messageId: 'm-proto', role: 'ROLE_USER', parts: [{ text: 'proto#a2a' }] } },
  });
  const mcp = new Client({ name: 'agentd-test', version: '1.0.0' });
  await mcp.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), { requestInit: { headers: KEY } }));
  calls.push(
    mcp
      .callTool({ name: 'run_agent', arguments: { query: 'proto#mcp' } }, undefined, { timeout: 30_000 })
      .then((r) => ({ route: 'mcp', status: r.isError ? 500 : 200, text: JSON.stringify(r.structuredContent) })),
  );

  // All five wait queued on the key, with their priority; the model has seen none of them.
  const queued = await eventually(async () => {
    const r = await getJson(`${server.url}/runs?status=queued&limit=50`);
    return r.body.runs.length === 5 ? r.body.runs : null;
  });
  for (const run of queued) {
    const view = (await getJson(`${server.url}/runs/${run.run_id}`)).body;
    expect(view.queue.key).toBe('proto');
  }
  // A run without a key is not held up by them.
  expect((await postJson(`${server.url}/run/sync`, { query: 'free' })).status).toBe(200);
  expect(model.requests.map(userText).filter((q) => q.startsWith('proto#') && q !== 'proto#head')).toEqual([]);

  // An agent that does not exist is a 404 at once, also when the key is full (not a queued run that fails later).
  const unknown = await postJson(`${server.url}/run/sync`, { query: 'proto#nope', agent_id: 'nope', concurrency: { key: 'proto', limit: 1 } });
  expect(unknown.status).toBe(404);
  release();
  expect((await head).status).toBe(200);
  const done = await Promise.all(calls);
  for (const d of done) expect(d.status, `${d.route}: ${d.text.slice(0, 300)}`).toBe(200);
  const asked = model.requests.map(userText);
  for (const route of ['openai', 'ai-sdk', 'ag-ui', 'a2a', 'mcp']) expect(asked.filter((q) => q === `proto#${route}`)).toHaveLength(1);
  expect(peak).toBe(1);
  await mcp.close();
});

it('a key without a limit, or a priority out of range, is a 422 at the header', async () => {
  const cases: Array<[Record<string, string>, string]> = [
    [{ 'x-agentd-concurrency-key': 'k' }, 'x-agentd-concurrency-limit'],
    [{ 'x-agentd-concurrency-key': 'k', 'x-agentd-concurrency-limit': '0' }, 'x-agentd-concurrency-limit'],
    [{ 'x-agentd-priority': '101' }, 'x-agentd-priority'],
    [{ 'x-agentd-priority': 'high' }, 'x-agentd-priority'],
  ];
  for (const [headers, at] of cases) {
    const r = await postJson(`${server.url}/v1/chat/completions`, { model: 'default', messages: [{ role: 'user', content: 'x' }] }, headers);
    expect(r.status, JSON.stringify(r.body)).toBe(422);
    expect(r.body.detail[0].loc).toEqual(['header', at]);
  }
});
