// Tenants on the protocol adapters (docs/multi-tenant.md): runs started through the AI SDK, AG-UI,
// OpenAI-compatible, A2A and MCP routes are the key's tenant's; sessions (chat ids, threads,
// contexts) are looked up in its namespace; tenant A's paused run is not found, listed or decided
// through any protocol with a tenant-B key; the agents a protocol lists or runs are the tenant's
// own and the shared ones, and an agent id naming another tenant's key never runs it.
import { createHash } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { defaultReplies, GOVERNED_OPEN, useLedger } from '../helpers/protocol-server.js';

const sha = (k: string) => createHash('sha256').update(k).digest('hex');
const ROLES = ['reader', 'operator', 'approver', 'admin'] as const;
type Role = (typeof ROLES)[number];
type Who = 'acme' | 'beta' | 'global';
const keyOf = (who: Who, role: Role) => `proto-key-${who}-${role}`;
const KEYS = [
  ...ROLES.flatMap((role) => (['acme', 'beta'] as const).map((tenant) => ({ name: `${tenant}-${role}`, role, tenant, key_sha256: sha(keyOf(tenant, role)) }))),
  ...ROLES.map((role) => ({ name: `global-${role}`, role, key_sha256: sha(keyOf('global', role)) })),
];
const as = (who: Who, role: Role, extra: Record<string, string> = {}) => ({ authorization: `Bearer ${keyOf(who, role)}`, ...extra });

let model: ScriptedOpenAI;
let s: TestServer;
const ledger = useLedger();
const clients: Client[] = [];
/** Tenant A's run paused for approval in session THREAD. */
const A = { run: '', approval: '' };
const THREAD = 'shared-thread';

/** POST with a streamed answer: the whole text once the stream ends. */
async function postText(path: string, body: unknown, headers: Record<string, string>) {
  const res = await fetch(`${s.url}${path}`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, text: await res.text() };
}

async function mcp(who: Who, role: Role): Promise<Client> {
  const client = new Client({ name: 'tenant-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${s.url}/mcp`), { requestInit: { headers: as(who, role) } }));
  clients.push(client);
  return client;
}

const a2a = (who: Who, role: Role, method: string, params: unknown) =>
  postJson(`${s.url}/a2a`, { jsonrpc: '2.0', id: 1, method, params }, as(who, role, { 'a2a-version': '1.0' }));

beforeAll(async () => {
  model = await startScriptedOpenAI();
  defaultReplies(model);
  ledger.reset();
  s = await startTestServer({ auth: { api_keys: KEYS }, ...GOVERNED_OPEN }, { modelUrl: model.url });
  model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'acme pays' } }] });
  const paused = await postJson(`${s.url}/run/sync`, { query: 'acme pays', session_id: THREAD }, as('acme', 'operator'));
  expect(paused.body.status).toBe('awaiting_approval');
  A.run = paused.body.run_id;
  A.approval = paused.body.approvals[0].approval_id;
  // An agent of acme's own, and a shared one.
  expect((await postJson(`${s.url}/background/agents`, { spec: { agent_id: 'acme-only', system_instruction: 'Be brief.' } }, as('acme', 'admin'))).status).toBe(
    200,
  );
  expect((await postJson(`${s.url}/background/agents`, { spec: { agent_id: 'everyone', system_instruction: 'Be kind.' } }, as('global', 'admin'))).status).toBe(
    200,
  );
}, 60_000);

afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  await s?.stop();
  s?.cleanup();
  await model?.close();
});

const betaRunIds = async () => (await getJson(`${s.url}/runs?limit=500`, as('beta', 'reader'))).body.runs.map((r: { run_id: string }) => r.run_id) as string[];

describe('runs started through the protocols are the key tenant', () => {
  it('stamps the run of each protocol with the tenant, its session in the tenant namespace', async () => {
    const before = new Set(await betaRunIds());
    const ai = await postText(
      '/ai-sdk/chat',
      { id: THREAD, trigger: 'submit-message', messages: [{ id: 'm1', role: 'user', parts: [{ type: 'text', text: 'hi' }] }] },
      as('beta', 'operator'),
    );
    expect(ai.status).toBe(200);
    const ag = await postText('/ag-ui', { threadId: THREAD, runId: 'r1', messages: [{ id: 'u1', role: 'user', content: 'hi' }] }, as('beta', 'operator'));
    expect(ag.status).toBe(200);
    const oa = await postJson(
      `${s.url}/v1/chat/completions`,
      { model: 'default', messages: [{ role: 'user', content: 'hi' }] },
      as('beta', 'operator', { 'x-agentd-session-id': THREAD }),
    );
    expect(oa.status).toBe(200);
    const sent = await a2a('beta', 'operator', 'SendMessage', { message: { messageId: 'mm1', role: 'ROLE_USER', parts: [{ text: 'hi' }], contextId: THREAD } });
    expect(sent.body.result?.task?.id).toBeTruthy();
    const client = await mcp('beta', 'operator');
    const ran = (await client.callTool({ name: 'run_agent', arguments: { query: 'hi', session_id: THREAD } })).structuredContent as { run_id: string };
    const fresh = (await betaRunIds()).filter((id) => !before.has(id));
    expect(fresh).toHaveLength(5);
    expect(fresh).toContain(sent.body.result.task.id);
    expect(fresh).toContain(ran.run_id);
    for (const id of fresh) {
      const view = await getJson(`${s.url}/runs/${id}`, as('beta', 'reader'));
      expect(view.body).toMatchObject({ tenant: 'beta', session_id: THREAD });
      expect((await getJson(`${s.url}/runs/${id}`, as('acme', 'reader'))).status).toBe(404);
    }
    // Acme's session of that id holds none of beta's turns.
    const acmeRuns = await getJson(`${s.url}/runs?session_id=${THREAD}`, as('acme', 'reader'));
    expect(acmeRuns.body.runs.map((r: { run_id: string }) => r.run_id)).toEqual([A.run]);
  }, 60_000);
});

describe("no protocol finds, lists or decides another tenant's paused run", () => {
  it('AI SDK and AG-UI: the approval answer of the same thread is not found', async () => {
    const ai = await postJson(
      `${s.url}/ai-sdk/chat`,
      {
        id: THREAD,
        trigger: 'submit-message',
        messages: [
          {
            id: 'a1',
            role: 'assistant',
            parts: [{ type: 'tool-ledger_append', toolCallId: 'c1', state: 'approval-responded', input: {}, approval: { id: A.approval, approved: true } }],
          },
        ],
      },
      as('beta', 'approver'),
    );
    expect(ai.status).toBe(404);
    expect(ai.body.code).toBe('AGT_ERR_APPROVAL_NOT_FOUND');
    const ag = await postJson(
      `${s.url}/ag-ui`,
      { threadId: THREAD, runId: 'r2', messages: [], resume: [{ interruptId: A.approval, status: 'resolved', payload: { decision: 'approve' } }] },
      as('beta', 'approver'),
    );
    expect(ag.status).toBe(404);
    expect(ag.body.code).toBe('AGT_ERR_APPROVAL_NOT_FOUND');
  });

  it('OpenAI-compatible: a tool message deciding it finds no paused run', async () => {
    const r = await postJson(
      `${s.url}/v1/chat/completions`,
      { model: 'default', messages: [{ role: 'tool', tool_call_id: A.approval, content: JSON.stringify({ decision: 'approve' }) }] },
      as('beta', 'approver', { 'x-agentd-session-id': THREAD }),
    );
    expect(r.status).toBe(409);
    expect(r.body.code).toBe('AGT_ERR_RUN_NOT_WAITING');
  });

  it('A2A: GetTask, CancelTask and a decision answer task not found', async () => {
    const missing = await a2a('beta', 'admin', 'GetTask', { id: 'run_missing' });
    for (const [method, params] of [
      ['GetTask', { id: A.run }],
      ['CancelTask', { id: A.run }],
      ['SendMessage', { message: { messageId: 'd1', role: 'ROLE_USER', taskId: A.run, parts: [{ data: { decision: 'approve' } }] } }],
    ] as const) {
      const r = await a2a('beta', 'admin', method, params);
      expect(r.body.error?.code, method).toBe(missing.body.error.code);
      expect(JSON.stringify(r.body), method).not.toContain('acme');
    }
  });

  it('MCP: list_pending_approvals lists none of it; deciding it is a run not found', async () => {
    const reader = await mcp('beta', 'reader');
    const listed = (await reader.callTool({ name: 'list_pending_approvals', arguments: {} })).structuredContent as { approvals: Array<{ run_id: string }> };
    expect(listed.approvals.map((a) => a.run_id)).not.toContain(A.run);
    const own = (await (await mcp('acme', 'reader')).callTool({ name: 'list_pending_approvals', arguments: {} })).structuredContent as {
      approvals: Array<{ run_id: string }>;
    };
    expect(own.approvals.map((a) => a.run_id)).toContain(A.run);
    const approver = await mcp('beta', 'admin');
    const decided = await approver.callTool({ name: 'decide_approval', arguments: { run_id: A.run, approval_id: A.approval, decision: 'approve' } });
    expect(decided.isError).toBe(true);
    expect((decided.content as Array<{ text: string }>)[0].text).toMatch(/^AGT_ERR_RUN_NOT_FOUND/);
  });

  it('leaves the run paused and its tool not run', async () => {
    const view = await getJson(`${s.url}/runs/${A.run}`, as('acme', 'reader'));
    expect(view.body.status).toBe('awaiting_approval');
    expect(view.body.approvals[0].status).toBe('pending');
    expect(ledger.lines()).toHaveLength(0);
  });

  it("decides it through a protocol with the tenant's own key (its thread is found in its namespace)", async () => {
    const ag = await postText(
      '/ag-ui',
      { threadId: THREAD, runId: 'r3', messages: [], resume: [{ interruptId: A.approval, status: 'resolved', payload: { decision: 'approve' } }] },
      as('acme', 'approver'),
    );
    expect(ag.status).toBe(200);
    expect(ag.text).toContain('RUN_FINISHED');
    expect(ledger.lines().map((l) => l.entry)).toEqual(['acme pays']);
    expect((await getJson(`${s.url}/runs/${A.run}`, as('acme', 'reader'))).body.status).toBe('completed');
  });
});

describe('agents through the protocols', () => {
  it('lists a tenant its own and the shared agents; the public card and global keys only the shared', async () => {
    const ids = async (h: Record<string, string>) => (await getJson(`${s.url}/v1/models`, h)).body.data.map((m: { id: string }) => m.id);
    expect(await ids(as('acme', 'reader'))).toEqual(expect.arrayContaining(['default', 'everyone', 'acme-only']));
    expect(await ids(as('beta', 'reader'))).not.toContain('acme-only');
    expect(await ids(as('global', 'reader'))).not.toContain('acme-only');
    const card = await getJson(`${s.url}/.well-known/agent-card.json`);
    expect(card.body.skills.map((x: { id: string }) => x.id)).toContain('everyone');
    expect(JSON.stringify(card.body)).not.toContain('acme-only');
  });

  it("runs a tenant's own agent by its id, and never another tenant's, whatever the id says", async () => {
    const own = await postJson(`${s.url}/run/sync`, { query: 'hi', agent_id: 'acme-only' }, as('acme', 'operator'));
    expect(own.body.status).toBe('success');
    const theirs = await postJson(`${s.url}/run/sync`, { query: 'hi', agent_id: 'acme-only' }, as('beta', 'operator'));
    expect(theirs.status).toBe(404);
    // A2A's agent id is free text: the stored key of acme's agent does not reach it either.
    for (const who of ['beta', 'global'] as const) {
      const r = await a2a(who, 'operator', 'SendMessage', {
        message: { messageId: `x-${who}`, role: 'ROLE_USER', parts: [{ text: 'hi' }] },
        metadata: { agent_id: 'acme~acme-only' },
      });
      expect(r.body.error, who).toBeTruthy();
      expect(r.body.result, who).toBeUndefined();
    }
  });
});

describe('evaluations, replays and comparisons per tenant', () => {
  it("replays and evaluates a tenant's runs only, and keeps its evaluations to itself", async () => {
    const aDone = await postJson(`${s.url}/run/sync`, { query: 'acme question', session_id: 'eval-s' }, as('acme', 'operator'));
    const bDone = await postJson(`${s.url}/run/sync`, { query: 'beta question', session_id: 'eval-s' }, as('beta', 'operator'));
    expect(aDone.body.status).toBe('success');
    // A replay of acme's run is acme's; beta cannot replay or compare it.
    const replay = await postJson(`${s.url}/runs/${aDone.body.run_id}/replay`, { variant: { system_instruction: 'Be terse.' } }, as('acme', 'operator'));
    expect(replay.status).toBe(200);
    expect((await getJson(`${s.url}/runs/${replay.body.run_id}`, as('acme', 'reader'))).body.tenant).toBe('acme');
    const theirs = await postJson(`${s.url}/runs/${aDone.body.run_id}/replay`, { variant: { system_instruction: 'x' } }, as('beta', 'operator'));
    expect(theirs.status).toBe(404);
    expect(theirs.body.code).toBe('AGT_ERR_RUN_NOT_FOUND');
    const cmp = await getJson(`${s.url}/runs/${aDone.body.run_id}/compare/${bDone.body.run_id}`, as('beta', 'reader'));
    expect(cmp.status).toBe(404);
    // An evaluation of beta's session eval-s selects beta's run only; naming acme's run is a missing run.
    const named = await postJson(
      `${s.url}/evals`,
      { name: 'x', source: { run_ids: [aDone.body.run_id] }, variant: { system_instruction: 'y' } },
      as('beta', 'operator'),
    );
    const missing = await postJson(
      `${s.url}/evals`,
      { name: 'x', source: { run_ids: ['run_missing'] }, variant: { system_instruction: 'y' } },
      as('beta', 'operator'),
    );
    expect(named.status).toBe(422);
    expect(named.body.detail[0].type).toBe(missing.body.detail[0].type);
    const ev = await postJson(
      `${s.url}/evals`,
      { name: 'beta eval', source: { filter: { session_id: 'eval-s', limit: 50 } }, variant: { system_instruction: 'y' } },
      as('beta', 'operator'),
    );
    expect(ev.status).toBe(201);
    expect(ev.body).toMatchObject({ tenant: 'beta', progress: { total: 1 } });
    const all = await postJson(
      `${s.url}/evals`,
      { name: 'beta all', source: { filter: { limit: 500 } }, variant: { system_instruction: 'y' } },
      as('beta', 'operator'),
    );
    expect(all.status).toBe(201);
    const detail = await getJson(`${s.url}/evals/${all.body.eval_id}`, as('beta', 'reader'));
    const ownRuns = new Set(await betaRunIds());
    for (const item of detail.body.items) expect(ownRuns.has(item.run_id), item.run_id).toBe(true);
    // Acme sees neither of beta's evaluations; a global key sees both, with their tenant.
    expect((await getJson(`${s.url}/evals`, as('acme', 'reader'))).body.evals).toEqual([]);
    for (const [m, p] of [
      ['GET', `/evals/${ev.body.eval_id}`],
      ['POST', `/evals/${ev.body.eval_id}/cancel`],
      ['DELETE', `/evals/${ev.body.eval_id}`],
    ] as const) {
      const r = await fetch(`${s.url}${p}`, { method: m, headers: as('acme', 'admin') });
      expect(r.status, `${m} ${p}`).toBe(404);
    }
    const global = await getJson(`${s.url}/evals`, as('global', 'reader'));
    expect(global.body.evals.map((e: { tenant?: string }) => e.tenant)).toEqual(['beta', 'beta']);
    // No more replays of the larger one: the server stops after this file.
    await postJson(`${s.url}/evals/${all.body.eval_id}/cancel`, {}, as('beta', 'operator'));
  });
});
