// Registered agents that really run, over real HTTP: the served
// agent talks to one scripted model server, agent `alt` (registered with POST /background/agents)
// to another; each server sees only its own agent's instruction and tool declarations.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { HTTPValidationError } from '../../src/schemas/index.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { streamRun } from '../helpers/sse.js';

const FIXTURES = path.resolve('test/fixtures/agents');
const MCP_FIXTURE = path.resolve('test/fixtures/mcp-stdio-server.ts');
const toolCalls = (): Array<{ tool: string; args: Record<string, unknown>; run_id: string }> =>
  ((globalThis as Record<string, unknown>).__agentToolCalls ??= []) as never;

const systemOf = (req: { messages: Array<{ role: string; content?: unknown }> }): unknown => req.messages.find((m) => m.role === 'system')?.content;
const toolNames = (req: { tools?: Array<{ function: { name: string } }> }): string[] => (req.tools ?? []).map((t) => t.function.name);
const toolResults = (req: { messages: Array<{ role: string; content?: unknown }> }): unknown[] =>
  req.messages.filter((m) => m.role === 'tool').map((m) => m.content);
const locs = (body: unknown): string[] => HTTPValidationError.parse(body).detail.map((d) => d.loc.join('.'));

function altSpec(model: ScriptedOpenAI, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    agent_id: 'alt',
    name: 'Alt',
    system_instruction: 'You are ALT, terse.',
    model_config: { provider: 'openai-compatible', base_url: model.url, model: 'alt-model' },
    agent_config: { max_steps: 4, builtin_tools: [] },
    local_tools_ref: path.join(FIXTURES, 'alt-tools.mjs'),
    ...extra,
  };
}

describe('registered agents', () => {
  let served: ScriptedOpenAI;
  let alt: ScriptedOpenAI;
  let server: TestServer;
  let url: string;

  beforeAll(async () => {
    served = await startScriptedOpenAI();
    alt = await startScriptedOpenAI();
    server = await startTestServer(
      {
        agent: { system_instruction: 'You are the served agent.' },
        agents: { tools_dirs: [FIXTURES], model_hosts: [new URL(alt.url).host] },
        background: { poll_interval_ms: 50 },
      },
      { modelUrl: served.url },
    );
    url = server.url;
    const r = await postJson(`${url}/background/agents`, { spec: altSpec(alt) });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  });

  afterAll(async () => {
    await server?.stop();
    server?.cleanup();
    await served?.close();
    await alt?.close();
  });

  beforeEach(() => {
    served.reset();
    alt.reset();
    toolCalls().length = 0;
  });

  it("a task on alt runs with alt's instruction, model endpoint and tools, and the tool runs", async () => {
    alt.enqueue({ tool_calls: [{ id: 'c1', name: 'alt_echo', arguments: { text: 'hi' } }] }, { text: 'alt is done' });
    expect((await postJson(`${url}/background/tasks`, { task_id: 'on-alt', agent_id: 'alt', query: 'echo hi', schedule: { type: 'manual' } })).status).toBe(
      200,
    );
    const run = await postJson(`${url}/background/tasks/on-alt/run`, { wait: true });
    expect(run.body).toMatchObject({ status: 'completed', agent_id: 'alt' });
    expect(served.requests).toHaveLength(0);
    expect(alt.requests).toHaveLength(2);
    expect(alt.requests[0].model).toBe('alt-model');
    expect(systemOf(alt.requests[0])).toBe('You are ALT, terse.');
    expect(toolNames(alt.requests[0])).toEqual(['alt_echo']);
    expect(toolResults(alt.requests[1])).toEqual(['alt:hi']);
    expect(toolCalls().map((c) => c.tool)).toEqual(['alt_echo']);
    expect(run.body.result_preview).toContain('alt is done');
  });

  it('POST /run/sync and POST /run with agent_id=alt run as alt; without it, as the served agent', async () => {
    alt.enqueue({ tool_calls: [{ id: 'c2', name: 'alt_echo', arguments: { text: 'sync' } }] }, { text: 'sync done' });
    const sync = await postJson(`${url}/run/sync`, { query: 'echo sync', agent_id: 'alt' });
    expect(sync.status).toBe(200);
    expect(sync.body).toMatchObject({ status: 'success', response: 'sync done', agent_name: 'Alt' });
    expect(toolResults(alt.requests[1])).toEqual(['alt:sync']);

    alt.enqueue({ tool_calls: [{ id: 'c3', name: 'alt_echo', arguments: { text: 'stream' } }] }, { text: 'stream done' });
    const streamed = await streamRun(url, { query: 'echo stream', agent_id: 'alt' });
    expect(streamed.status).toBe(200);
    const complete = streamed.frames.find((f) => f.event === 'complete');
    expect(complete?.data).toMatchObject({ status: 'success', response: 'stream done', agent_name: 'Alt' });
    expect(streamed.frames.find((f) => f.event === 'tool_call')?.data.metadata).toMatchObject({ agent_id: 'alt', tool_name: 'alt_echo' });
    expect(alt.requests).toHaveLength(4);
    expect(systemOf(alt.requests[2])).toBe('You are ALT, terse.');
    expect(toolCalls().map((c) => c.args.text)).toEqual(['sync', 'stream']);

    // The served agent is unchanged: its own server, instruction and tools.
    served.enqueue({ text: 'served here' });
    const plain = await postJson(`${url}/run/sync`, { query: 'hello' });
    expect(plain.body).toMatchObject({ status: 'success', response: 'served here', agent_name: 'assistant' });
    expect(served.requests).toHaveLength(1);
    expect(systemOf(served.requests[0])).toBe('You are the served agent.');
    expect(toolNames(served.requests[0])).toEqual(expect.arrayContaining(['clock', 'workspace_read']));
    expect(toolNames(served.requests[0])).not.toContain('alt_echo');
    expect(alt.requests).toHaveLength(4);
  });

  it("alt's max_steps ends its runs; the served agent keeps its own", async () => {
    const spec = { ...altSpec(alt), agent_id: 'short', agent_config: { max_steps: 1, builtin_tools: [] } };
    expect((await postJson(`${url}/background/agents`, { spec })).status).toBe(200);
    alt.setDefault({ tool_calls: [{ name: 'alt_echo', arguments: { text: 'again' } }] });
    try {
      const r = await postJson(`${url}/run/sync`, { query: 'loop', agent_id: 'short' });
      expect(r.body).toMatchObject({ termination_reason: 'max_steps' });
      expect(alt.requests).toHaveLength(1);
    } finally {
      alt.setDefault({ text: 'Hello from the scripted model.' });
    }
  });

  it('an unknown agent_id is 404 before any run starts (JSON, not a stream)', async () => {
    const sync = await postJson(`${url}/run/sync`, { query: 'hi', agent_id: 'nobody' });
    expect(sync.status).toBe(404);
    expect(sync.body).toMatchObject({ error: 'NotFound' });
    const streamed = await streamRun(url, { query: 'hi', agent_id: 'nobody' });
    expect(streamed.status).toBe(404);
    expect(streamed.frames[0].data).toMatchObject({ error: 'NotFound' });
    const bad = await postJson(`${url}/run/sync`, { query: 'hi', agent_id: '../x' });
    expect(bad.status).toBe(422);
    expect(locs(bad.body)).toEqual(['body.agent_id']);
    expect(served.requests).toHaveLength(0);
  });

  it('replace changes what the next run uses', async () => {
    const r = await postJson(`${url}/background/agents`, {
      replace: true,
      spec: altSpec(alt, { system_instruction: 'You are ALT v2.', local_tools_ref: path.join(FIXTURES, 'alt-tools-v2.mjs') }),
    });
    expect(r.status).toBe(200);
    alt.enqueue({ tool_calls: [{ id: 'c4', name: 'alt_shout', arguments: { text: 'loud' } }] }, { text: 'v2 done' });
    const sync = await postJson(`${url}/run/sync`, { query: 'shout', agent_id: 'alt' });
    expect(sync.body).toMatchObject({ status: 'success', response: 'v2 done' });
    expect(systemOf(alt.requests[0])).toBe('You are ALT v2.');
    expect(toolNames(alt.requests[0])).toEqual(['alt_shout']);
    expect(toolResults(alt.requests[1])).toEqual(['LOUD']);
    // Back to the first version for the other tests.
    expect((await postJson(`${url}/background/agents`, { replace: true, spec: altSpec(alt) })).status).toBe(200);
  });

  it('refuses a spec that cannot be built with 422 naming the field, and keeps the stored one', async () => {
    const cases: Array<[Record<string, unknown>, string, RegExp]> = [
      [{ model_config: { provider: 'gemini', model: 'x' } }, 'body.spec.model_config.provider', /expected one of/],
      [
        { model_config: { provider: 'openai-compatible', base_url: alt.url, model: 'm', api_key_env: 'AGENTD_TEST_SURELY_UNSET_KEY' } },
        'body.spec.model_config.api_key_env',
        /AGENTD_TEST_SURELY_UNSET_KEY is not available/,
      ],
      [{ model_config: { provider: 'openai-compatible', model: 'm' } }, 'body.spec.model_config.base_url', /required/],
      [{ local_tools_ref: path.join(FIXTURES, 'broken-tools.mjs') }, 'body.spec.local_tools_ref', /broken on purpose/],
      [{ local_tools_ref: path.join(FIXTURES, 'not-a-list.mjs') }, 'body.spec.local_tools_ref', /must be an array/],
      [{ local_tools_ref: path.join(FIXTURES, 'missing.mjs') }, 'body.spec.local_tools_ref', /could not be loaded/],
      [{ local_tools_ref: path.resolve('test/fixtures/tools-module.mjs') }, 'body.spec.local_tools_ref', /agents\.tools_dirs/],
      [{ mcp_tools: [{ server: 'not-configured' }] }, 'body.spec.mcp_tools.0.server', /agents\.mcp_servers/],
      [{ mcp_tools: [{ name: 'fx', command: 'sh', args: ['-c', 'id'] }] }, 'body.spec.mcp_tools.0', /agents\.mcp_servers/],
      [{ agent_config: { max_steps: 0 } }, 'body.spec.agent_config.max_steps', /positive integer/],
      [{ workspace_config: { root: '../../etc' } }, 'body.spec.workspace_config.root', /inside/],
    ];
    for (const [extra, loc, msg] of cases) {
      const r = await postJson(`${url}/background/agents`, { replace: true, spec: altSpec(alt, extra) });
      expect(r.status, `${JSON.stringify(extra)} → ${JSON.stringify(r.body)}`).toBe(422);
      const item = HTTPValidationError.parse(r.body).detail.find((d) => d.loc.join('.') === loc);
      expect(item, `${loc} in ${JSON.stringify(r.body)}`).toBeDefined();
      expect(item!.msg).toMatch(msg);
    }
    // A key in the spec is refused and never echoed.
    const withKey = await postJson(`${url}/background/agents`, {
      spec: { ...altSpec(alt), agent_id: 'keyed', model_config: { provider: 'openai', api_key: 'sk-live-secret-123' } },
    });
    expect(withKey.status).toBe(422);
    expect(locs(withKey.body)).toContain('body.spec.model_config.api_key');
    expect(JSON.stringify(withKey.body)).not.toContain('sk-live-secret-123');
    expect((await getJson(`${url}/background/agents/keyed`)).status).toBe(404);
    // The stored alt is still the good one, and still runs.
    expect((await getJson(`${url}/background/agents/alt`)).body).toMatchObject({
      system_instruction: 'You are ALT, terse.',
      model_config: { provider: 'openai-compatible' },
    });
    alt.enqueue({ text: 'still alt' });
    expect((await postJson(`${url}/run/sync`, { query: 'hi', agent_id: 'alt' })).body).toMatchObject({ status: 'success', response: 'still alt' });
  });
});

describe('registered agents: budgets keyed by agent', () => {
  let served: ScriptedOpenAI;
  let alt: ScriptedOpenAI;
  let server: TestServer;

  beforeAll(async () => {
    served = await startScriptedOpenAI();
    alt = await startScriptedOpenAI();
    server = await startTestServer(
      {
        agents: { tools_dirs: [FIXTURES], model_hosts: [new URL(alt.url).host] },
        budgets: { agent: [{ meter: 'model_calls', limit: 2, on_exhausted: 'terminate' }] },
      },
      { modelUrl: served.url },
    );
    expect((await postJson(`${server.url}/background/agents`, { spec: altSpec(alt) })).status).toBe(200);
  });

  afterAll(async () => {
    await server?.stop();
    server?.cleanup();
    await served?.close();
    await alt?.close();
  });

  it("alt's runs spend alt's agent budget, not the served agent's", async () => {
    alt.enqueue({ tool_calls: [{ id: 'b1', name: 'alt_echo', arguments: { text: 'x' } }] }, { text: 'first' });
    const first = await postJson(`${server.url}/run/sync`, { query: 'go', agent_id: 'alt' });
    expect(first.body).toMatchObject({ status: 'success', response: 'first' });
    const budget = await getJson(`${server.url}/runs/${first.body.run_id}/budget`);
    const entry = budget.body.budgets.find((b: { scope: string }) => b.scope === 'agent');
    expect(entry).toMatchObject({ key: 'agent:alt:total', meter: 'model_calls', limit: 2, spent: 2 });

    // alt's budget is spent: its next run ends before calling its model.
    const second = await postJson(`${server.url}/run/sync`, { query: 'again', agent_id: 'alt' });
    expect(second.body).toMatchObject({ termination_reason: 'budget_exhausted' });
    expect(alt.requests).toHaveLength(2);

    // The served agent has a budget of its own.
    served.enqueue({ text: 'served ok' });
    const plain = await postJson(`${server.url}/run/sync`, { query: 'hello' });
    expect(plain.body).toMatchObject({ status: 'success', response: 'served ok' });
    const servedBudget = await getJson(`${server.url}/runs/${plain.body.run_id}/budget`);
    expect(servedBudget.body.budgets.find((b: { scope: string }) => b.scope === 'agent')).toMatchObject({ key: 'agent:default:total', spent: 1 });
  });
});

describe('registered agents: shared MCP connections', () => {
  let server: TestServer;
  const fx = { server: 'fx' };

  beforeAll(async () => {
    server = await startTestServer({ agents: { mcp_servers: { fx: { command: process.execPath, args: ['--import', 'tsx', MCP_FIXTURE] } } } });
  });

  afterAll(async () => {
    await server?.stop();
    server?.cleanup();
  });

  it("a synchronous run of a registered agent works in the agent's own workspace folder", async () => {
    const spec = { agent_id: 'writer', agent_config: { builtin_tools: ['workspace'] }, workspace_config: { root: 'teams/writer' } };
    expect((await postJson(`${server.url}/background/agents`, { spec })).status).toBe(200);
    const r = await postJson(`${server.url}/run/sync`, { query: 'use workspace_write path=note.txt content=hello', agent_id: 'writer', session_id: 'ws1' });
    expect(r.body.status).toBe('success');
    const file = path.join(server.runtime.config.background.workspace_root, 'teams/writer/sessions/ws1/note.txt');
    expect(readFileSync(file, 'utf8')).toBe('hello');
  });

  it('two agents naming one server share its connection, closed when neither uses it', async () => {
    const pool = server.runtime.agents.mcpPool;
    const spec = (id: string) => ({ agent_id: id, mcp_tools: [fx], agent_config: { builtin_tools: [] } });
    expect((await postJson(`${server.url}/background/agents`, { spec: spec('m1') })).status).toBe(200);
    expect((await postJson(`${server.url}/background/agents`, { spec: spec('m2') })).status).toBe(200);
    expect(pool.size).toBe(1);
    // The demo model calls the MCP tool it is asked for, through m2's build.
    const r = await postJson(`${server.url}/run/sync`, { query: 'use fx__echo text="over mcp"', agent_id: 'm2' });
    expect(r.body.status).toBe('success');
    expect(r.body.response).toContain('over mcp');
    expect((await fetch(`${server.url}/background/agents/m1`, { method: 'DELETE' })).status).toBe(200);
    expect(pool.size).toBe(1);
    expect((await fetch(`${server.url}/background/agents/m2`, { method: 'DELETE' })).status).toBe(200);
    expect(pool.size).toBe(0);
  }, 30_000);
});

describe('registered agents: after a restart', () => {
  let alt: ScriptedOpenAI;
  let server: TestServer | null = null;
  let config: Record<string, unknown>;

  beforeAll(async () => {
    alt = await startScriptedOpenAI();
    config = {
      agents: { tools_dirs: [FIXTURES], model_hosts: [new URL(alt.url).host], secret_env: ['AGENTD_TEST_ALT_KEY'] },
      background: { poll_interval_ms: 50 },
    };
  });

  afterAll(async () => {
    await server?.stop();
    server?.cleanup();
    await alt?.close();
  });

  it('builds the stored spec at its first run; a spec whose key variable is gone fails the run with 409, the task run as failed', async () => {
    const env = { AGENTD_TEST_ALT_KEY: 'sk-alt-test-key' };
    server = await startTestServer(config, { env });
    const spec = altSpec(alt, { model_config: { provider: 'openai-compatible', base_url: alt.url, model: 'alt-model', api_key_env: 'AGENTD_TEST_ALT_KEY' } });
    expect((await postJson(`${server.url}/background/agents`, { spec })).status).toBe(200);
    expect((await postJson(`${server.url}/background/tasks`, { task_id: 't', agent_id: 'alt', query: 'hi', schedule: { type: 'manual' } })).status).toBe(200);
    const dataDir = server.dataDir;
    await server.stop();

    // Same store, new process state: the first run builds alt from its row.
    server = await startTestServer(config, { dataDir, env });
    alt.enqueue({ text: 'rebuilt' });
    const ok = await postJson(`${server.url}/run/sync`, { query: 'hi', agent_id: 'alt' });
    expect(ok.body).toMatchObject({ status: 'success', response: 'rebuilt' });
    expect(systemOf(alt.requests[0])).toBe('You are ALT, terse.');
    expect(alt.headers[0].authorization).toBe('Bearer sk-alt-test-key');
    await server.stop();

    server = await startTestServer(config, { dataDir, env: {} });
    const refused = await postJson(`${server.url}/run/sync`, { query: 'hi', agent_id: 'alt' });
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe('AGT_ERR_AGENT_UNAVAILABLE');
    const run = await postJson(`${server.url}/background/tasks/t/run`, { wait: true });
    expect(run.body).toMatchObject({ status: 'failed' });
    expect(JSON.stringify(run.body)).toMatch(/cannot be built/);
    expect(alt.requests).toHaveLength(1);
    // Nothing stored holds the key.
    const stored = await getJson(`${server.url}/background/agents/alt`);
    expect(JSON.stringify(stored.body)).not.toContain('sk-alt-test-key');
  });
});
