// The MCP server driven by @modelcontextprotocol/sdk's Client over StreamableHTTPClientTransport
// against a real server with the scripted model: run_agent finishing and pausing, the pending
// approvals, decisions by role (approve with edited arguments, deny), a budget pause.
import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { getJson, startTestServer, type TestServer } from '../helpers/server.js';
import { defaultReplies, GOVERNED, KEYS, useLedger } from '../helpers/protocol-server.js';

let model: ScriptedOpenAI;
let server: TestServer;
const ledger = useLedger();
const open: Client[] = [];

async function connect(base: string, key: string, headers: Record<string, string> = {}): Promise<Client> {
  const client = new Client({ name: 'agentd-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers: { authorization: `Bearer ${key}`, ...headers } } }));
  open.push(client);
  return client;
}

type RunResult = {
  run_id: string;
  session_id: string;
  status: string;
  response: string | null;
  approvals: Array<{ approval_id: string; tool_name: string; arguments: Record<string, unknown> }>;
  budget_request: { request_id: string; meter: string } | null;
};
const structured = (r: unknown) => (r as { structuredContent: RunResult }).structuredContent;
const textOf = (r: unknown) => ((r as { content: Array<{ text: string }> }).content[0]?.text ?? '') as string;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  server = await startTestServer(GOVERNED, { modelUrl: model.url });
});
afterAll(async () => {
  await Promise.allSettled(open.map((c) => c.close()));
  await server?.stop();
  server?.cleanup();
  await model?.close();
});
beforeEach(() => {
  defaultReplies(model);
  ledger.reset();
});

describe('MCP server through the official MCP client', () => {
  it('lists the tools', async () => {
    const client = await connect(server.url, KEYS.reader);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['decide_approval', 'decide_budget', 'list_pending_approvals', 'run_agent']);
  });

  it('run_agent answers with the text and the run as structured content; it is the same run GET /runs shows', async () => {
    const client = await connect(server.url, KEYS.operator);
    const res = await client.callTool({ name: 'run_agent', arguments: { query: 'hello', session_id: 'mcp-s1' } });
    expect(res.isError).toBeFalsy();
    expect(textOf(res)).toBe('plain answer');
    const run = structured(res);
    expect(run).toMatchObject({ session_id: 'mcp-s1', status: 'success', response: 'plain answer', approvals: [] });
    const view = (await getJson(`${server.url}/runs/${run.run_id}`, { authorization: `Bearer ${KEYS.reader}` })).body;
    expect(view).toMatchObject({ status: 'completed', session_id: 'mcp-s1' });
  });

  it('a paused run answers at once; list_pending_approvals shows it; only an approver decides (edited arguments)', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 10' } }] });
    const operator = await connect(server.url, KEYS.operator);
    const paused = structured(await operator.callTool({ name: 'run_agent', arguments: { query: 'pay' } }));
    expect(paused.status).toBe('awaiting_approval');
    expect(paused.approvals).toEqual([expect.objectContaining({ tool_name: 'ledger_append', arguments: { entry: 'pay 10' } })]);
    const approvalId = paused.approvals[0].approval_id;

    const reader = await connect(server.url, KEYS.reader);
    const listed = (await reader.callTool({ name: 'list_pending_approvals', arguments: {} })).structuredContent as {
      approvals: Array<{ run_id: string; approval_id: string }>;
    };
    expect(listed.approvals).toContainEqual(expect.objectContaining({ run_id: paused.run_id, approval_id: approvalId }));

    const args = { run_id: paused.run_id, approval_id: approvalId, decision: 'approve', arguments: { entry: 'pay 5' } };
    const refused = await operator.callTool({ name: 'decide_approval', arguments: args });
    expect(refused.isError).toBe(true);
    expect(textOf(refused)).toMatch(/^AGT_ERR_FORBIDDEN/);
    expect(ledger.lines()).toHaveLength(0);

    const approver = await connect(server.url, KEYS.approver);
    const done = await approver.callTool({ name: 'decide_approval', arguments: args });
    expect(structured(done)).toMatchObject({ run_id: paused.run_id, status: 'success', response: 'saw: {"appended":"pay 5"}' });
    expect(ledger.lines().map((l) => l.entry)).toEqual(['pay 5']);
    const view = (await getJson(`${server.url}/runs/${paused.run_id}`, { authorization: `Bearer ${KEYS.reader}` })).body;
    expect(view.approvals[0]).toMatchObject({ approver: 'approver-key', edited_arguments: { entry: 'pay 5' } });

    // Deciding it again is agentd's conflict, as a tool error with its code.
    const again = await approver.callTool({ name: 'decide_approval', arguments: { run_id: args.run_id, approval_id: args.approval_id, decision: 'deny' } });
    expect(again.isError).toBe(true);
    expect(textOf(again)).toMatch(/^AGT_ERR_APPROVAL_ALREADY_DECIDED/);
  });

  it('deny: the tool never runs and the note reaches the model', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 99' } }] });
    const admin = await connect(server.url, KEYS.admin);
    const paused = structured(await admin.callTool({ name: 'run_agent', arguments: { query: 'pay big' } }));
    const done = structured(
      await admin.callTool({
        name: 'decide_approval',
        arguments: { run_id: paused.run_id, approval_id: paused.approvals[0].approval_id, decision: 'deny', note: 'no' },
      }),
    );
    expect(done.status).toBe('success');
    expect(done.response).toContain('Denied by admin-key: no');
    expect(ledger.lines()).toHaveLength(0);
  });

  it('a retried run_agent (same Idempotency-Key and arguments, a new JSON-RPC id) answers with the first run; other arguments are refused', async () => {
    const client = await connect(server.url, KEYS.operator, { 'idempotency-key': `mcp-retry-${randomUUID()}` });
    const args = { query: 'hello', session_id: `mcp-idem-${randomUUID()}` };
    const first = structured(await client.callTool({ name: 'run_agent', arguments: args }));
    expect(first.status).toBe('success');
    const calls = model.requests.length;
    // The client numbers its JSON-RPC requests: this retry goes out under another id.
    const again = await client.callTool({ name: 'run_agent', arguments: args });
    expect(again.isError).toBeFalsy();
    expect(structured(again)).toMatchObject({ run_id: first.run_id, status: 'success', response: 'plain answer' });
    expect(model.requests.length).toBe(calls);
    const runs = (await getJson(`${server.url}/runs?session_id=${args.session_id}`, { authorization: `Bearer ${KEYS.reader}` })).body;
    expect(runs.total).toBe(1);
    // The same key with other arguments starts nothing.
    const other = await client.callTool({ name: 'run_agent', arguments: { ...args, query: 'something else' } });
    expect(other.isError).toBe(true);
    expect(textOf(other)).toMatch(/^AGT_ERR_VALIDATION: idempotency_key_reused/);
    expect(model.requests.length).toBe(calls);
  });

  it('a reader key starts no run', async () => {
    const reader = await connect(server.url, KEYS.reader);
    const before = model.requests.length;
    const res = await reader.callTool({ name: 'run_agent', arguments: { query: 'hello' } });
    expect(res.isError).toBe(true);
    expect(textOf(res)).toMatch(/^AGT_ERR_FORBIDDEN/);
    expect(model.requests.length).toBe(before);
  });

  it('GET and DELETE /mcp are 405: the server keeps no MCP session', async () => {
    for (const method of ['GET', 'DELETE']) {
      const res = await fetch(`${server.url}/mcp`, { method, headers: { authorization: `Bearer ${KEYS.reader}`, accept: 'text/event-stream' } });
      expect(res.status).toBe(405);
      expect(((await res.json()) as { code: string }).code).toBe('AGT_ERR_METHOD_NOT_ALLOWED');
    }
  });
});

describe('MCP server: a budget pause', () => {
  let budgeted: TestServer;
  beforeAll(async () => {
    budgeted = await startTestServer({ ...GOVERNED, budgets: { run: [{ meter: 'model_calls', limit: 1 }] } }, { modelUrl: model.url });
  });
  afterAll(async () => {
    await budgeted?.stop();
    budgeted?.cleanup();
  });

  it('run_agent answers awaiting_budget with the request; decide_budget grants it and the run completes', async () => {
    model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] });
    const admin = await connect(budgeted.url, KEYS.admin);
    const paused = structured(await admin.callTool({ name: 'run_agent', arguments: { query: 'two calls' } }));
    expect(paused.status).toBe('awaiting_budget');
    expect(paused.budget_request).toMatchObject({ meter: 'model_calls' });
    const listed = (await admin.callTool({ name: 'list_pending_approvals', arguments: {} })).structuredContent as {
      budget_requests: Array<{ run_id: string }>;
    };
    expect(listed.budget_requests.map((b) => b.run_id)).toContain(paused.run_id);
    const done = structured(await admin.callTool({ name: 'decide_budget', arguments: { run_id: paused.run_id, decision: 'grant' } }));
    expect(done).toMatchObject({ status: 'success', response: 'saw: echo: x' });
  });
});
