// The agent registry (src/agent/agent-registry.ts) with a real store and a real MCP server over stdio:
// builds are cached per agent and held by runs; a replaced or evicted build, and the MCP
// connection it shares, is closed only once no run holds it.
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentRegistry } from '../../src/agent/agent-registry.js';
import type { AgentProfile } from '../../src/agent/agent-profile.js';
import { DemoModel } from '../../src/agent/model/demo.js';
import { ToolRegistry } from '../../src/agent/tools/registry.js';
import { MemoryStore } from '../../src/store/memory.js';
import { systemClock } from '../../src/clock.js';
import type { AgentSpecInput } from '../../src/agent/agent-spec.js';
import { waitFor } from '../helpers/wait.js';

const MCP_FIXTURE = path.resolve('test/fixtures/mcp-stdio-server.ts');
const fxServer = { command: process.execPath, args: ['--import', 'tsx', MCP_FIXTURE], env: {} };
const fx = { server: 'fx' };

let registry: AgentRegistry | null = null;
afterEach(async () => {
  await registry?.close();
  registry = null;
});

async function setup(
  maxCached = 8,
  maxMcpProcesses = 16,
): Promise<{ registry: AgentRegistry; store: MemoryStore; register: (spec: AgentSpecInput) => Promise<void> }> {
  const store = new MemoryStore();
  await store.open();
  const served: AgentProfile = {
    agent_id: 'default',
    agent_name: 'assistant',
    system_instruction: 'served',
    model: new DemoModel({ model: 'demo' }),
    tools: await ToolRegistry.create({ builtin: ['clock'] }),
    max_steps: 10,
    max_output_tokens: 1024,
    session_workspace_root: '/tmp/ws/sessions',
  };
  const reg = new AgentRegistry({
    store,
    clock: systemClock,
    served,
    servedBuiltin: ['clock'],
    workspace_root: '/tmp/ws',
    max_cached: maxCached,
    plan: {
      tools_dirs: [],
      mcp_servers: { fx: fxServer, fx2: fxServer },
      secret: () => undefined,
      model_hosts: [],
      max_mcp_servers: 4,
      max_spec_bytes: 128 * 1024,
    },
    everyRowPrivileged: true,
    maxMcpProcesses,
    mcp: { connectTimeoutMs: 15_000 },
  });
  registry = reg;
  let n = 0;
  const register = async (spec: AgentSpecInput): Promise<void> => {
    const prepared = await reg.prepare(spec, true);
    const at = new Date(Date.UTC(2026, 0, 1, 0, 0, n++)).toISOString();
    const existing = await store.getRecord('bg_agents', spec.agent_id);
    const row = { ...spec, created_at: at, updated_at: at };
    if (existing) await store.updateRecord('bg_agents', spec.agent_id, row, existing.version);
    else await store.createRecord('bg_agents', spec.agent_id, row);
    reg.install(spec.agent_id, at, prepared);
  };
  return { registry: reg, store, register };
}

describe('AgentRegistry', () => {
  it('runs served-agent rows as the served agent, and builds a spec once', async () => {
    const { registry: reg, register } = await setup();
    await register({ agent_id: 'default', metadata: { served_agent: true } });
    const d = await reg.acquire('default');
    expect(d.profile.system_instruction).toBe('served');
    await register({ agent_id: 'alt', system_instruction: 'alt', agent_config: { max_steps: 2 } });
    const a1 = await reg.acquire('alt');
    const a2 = await reg.acquire('alt');
    expect(a1.profile).toBe(a2.profile);
    expect(a1.profile).toMatchObject({
      agent_id: 'alt',
      agent_name: 'alt',
      system_instruction: 'alt',
      max_steps: 2,
      session_workspace_root: '/tmp/ws/agents/alt/sessions',
    });
    expect(a1.profile.tools.list().map((t) => t.name)).toEqual(['clock']);
    await expect(reg.acquire('nobody')).rejects.toMatchObject({ code: 'NotFound' });
  });

  it('builds a stored row on first use (another instance, a restart) and rebuilds when the row changed', async () => {
    const { registry: reg, store } = await setup();
    await store.createRecord('bg_agents', 'x', { agent_id: 'x', system_instruction: 'one', updated_at: '2026-01-01T00:00:00.000Z' });
    const [p1, p2] = await Promise.all([reg.acquire('x'), reg.acquire('x')]);
    expect(p1.profile).toBe(p2.profile); // one build for concurrent first runs
    const rec = await store.getRecord('bg_agents', 'x');
    await store.updateRecord('bg_agents', 'x', { agent_id: 'x', system_instruction: 'two', updated_at: '2026-01-01T00:00:01.000Z' }, rec!.version);
    expect((await reg.acquire('x')).profile.system_instruction).toBe('two');
  });

  it('keeps a replaced build, and its shared MCP connection, until the last run lets go', async () => {
    const { registry: reg, register } = await setup();
    await register({ agent_id: 'm1', mcp_tools: [fx], agent_config: { builtin_tools: [] } });
    await register({ agent_id: 'm2', mcp_tools: [fx], agent_config: { builtin_tools: [] } });
    expect(reg.mcpPool.size).toBe(1);
    const run = await reg.acquire('m1');
    expect(run.profile.tools.list().map((t) => t.name)).toContain('fx__echo');
    // Both replaced by specs without MCP: the run still holds m1's old build.
    await register({ agent_id: 'm1', agent_config: { builtin_tools: [] } });
    await register({ agent_id: 'm2', agent_config: { builtin_tools: [] } });
    expect(reg.mcpPool.size).toBe(1);
    expect(
      await run.profile.tools.get('fx__echo')!.execute(
        { text: 'still here' },
        {
          run_id: 'r',
          session_id: 's',
          attempt: 1,
          lease_token: 'l',
          idempotency_key: 'k',
          workspace_path: null,
          signal: new AbortController().signal,
        },
      ),
    ).toBe('still here');
    run.release();
    run.release(); // twice is once
    await waitFor(() => reg.mcpPool.size === 0, { what: 'the MCP pool to let go of the process' });
  }, 30_000);

  it('refuses a build that needs one MCP process more than agents.max_mcp_processes (503), and shares the ones it has', async () => {
    const { registry: reg, register } = await setup(8, 1);
    await register({ agent_id: 'p1', mcp_tools: [fx], agent_config: { builtin_tools: [] } });
    await register({ agent_id: 'p2', mcp_tools: [fx], agent_config: { builtin_tools: [] } }); // shares p1's process
    expect(reg.mcpPool.processes).toBe(1);
    await expect(reg.prepare({ agent_id: 'p3', mcp_tools: [{ server: 'fx2' }] }, true)).rejects.toMatchObject({
      status: 503,
      domainCode: 'AGT_ERR_MCP_PROCESS_LIMIT',
    });
    expect(reg.mcpPool.processes).toBe(1);
  }, 30_000);

  it('keeps at most max_cached builds', async () => {
    const { registry: reg, register } = await setup(2);
    for (const id of ['a', 'b', 'c']) await register({ agent_id: id });
    expect(reg.size).toBe(2);
    reg.evict('c');
    expect(reg.size).toBe(1);
  });
});
