// The pure part of registered agents (src/agent/agent-spec.ts): what a spec means, and every reason
// it is refused, with the field at fault.
import { describe, expect, it } from 'vitest';
import { AgentSpecError, isServedAgentSpec, planAgent, type PlanOptions } from '../../src/agent/agent-spec.js';

const env: Record<string, string> = { ALT_KEY: 'sk-alt-123', OPENAI_API_KEY: 'sk-openai', MCP_TOKEN: 'tok-9' };
const opts: PlanOptions = { tools_dirs: ['/srv/tools'], mcp_commands: ['/usr/bin/mcp-fs'], env: (n) => env[n] || undefined, cwd: '/srv' };

function problems(spec: Record<string, unknown>, o: PlanOptions = opts): Array<{ path: string; message: string }> {
  try {
    planAgent({ agent_id: 'a', ...spec }, o);
  } catch (err) {
    if (err instanceof AgentSpecError) return err.problems.map((p) => ({ path: p.path.join('.'), message: p.message }));
    throw err;
  }
  return [];
}

describe('planAgent', () => {
  it('leaves what a spec does not set to the served agent', () => {
    expect(planAgent({ agent_id: 'a' }, opts)).toEqual({
      agent_id: 'a',
      agent_name: 'a',
      system_instruction: null,
      model: null,
      max_steps: null,
      builtin: null,
      local_tools: null,
      mcp: [],
      workspace_root: 'agents/a',
    });
  });

  it('reads every field', () => {
    const plan = planAgent(
      {
        agent_id: 'alt',
        name: 'Alt',
        system_instruction: 'Be brief.',
        model_config: {
          provider: 'openai-compatible',
          base_url: 'http://127.0.0.1:1234/v1',
          model: 'm',
          api_key_env: 'ALT_KEY',
          max_output_tokens: 256,
          temperature: 0.2,
        },
        agent_config: { max_steps: 3, builtin_tools: ['clock', 'clock'] },
        workspace_config: { root: 'teams/alt' },
        local_tools_ref: 'tools/alt.mjs',
        mcp_tools: [
          { name: 'fs', command: '/usr/bin/mcp-fs', args: ['--root', '/data'], env: { TOKEN: '${MCP_TOKEN}' } },
          { name: 'web', url: 'https://mcp.example/mcp', headers: { authorization: 'Bearer ${MCP_TOKEN}' } },
        ],
      },
      opts,
    );
    expect(plan).toMatchObject({
      agent_name: 'Alt',
      system_instruction: 'Be brief.',
      max_steps: 3,
      builtin: ['clock'],
      local_tools: '/srv/tools/alt.mjs',
      workspace_root: 'teams/alt',
      model: {
        provider: 'openai-compatible',
        base_url: 'http://127.0.0.1:1234/v1',
        model: 'm',
        api_key_env: 'ALT_KEY',
        max_output_tokens: 256,
        temperature: 0.2,
      },
      mcp: [
        { name: 'fs', command: '/usr/bin/mcp-fs', args: ['--root', '/data'], env: { TOKEN: 'tok-9' } },
        { name: 'web', url: 'https://mcp.example/mcp', headers: { authorization: 'Bearer tok-9' } },
      ],
    });
    // The key is there for the provider but never serialised.
    expect(plan.model?.api_key).toBe('sk-alt-123');
    expect(JSON.stringify(plan.model)).not.toContain('sk-alt-123');
  });

  it('defaults the provider to demo and takes the standard key variable of openai', () => {
    expect(planAgent({ agent_id: 'a', model_config: { model: 'x' } }, opts).model).toMatchObject({ provider: 'demo', model: 'x' });
    expect(planAgent({ agent_id: 'a', model_config: {} }, opts).model).toMatchObject({ provider: 'demo', model: 'demo' });
    expect(planAgent({ agent_id: 'a', model_config: { provider: 'openai' } }, opts).model?.api_key).toBe('sk-openai');
  });

  it('refuses what cannot be built, naming each field', () => {
    expect(problems({ model_config: { provider: 'gemini' } })).toEqual([
      { path: 'model_config.provider', message: expect.stringContaining('expected one of') },
    ]);
    expect(problems({ model_config: { provider: 'anthropic' } })).toEqual([
      { path: 'model_config.api_key_env', message: expect.stringContaining('ANTHROPIC_API_KEY') },
    ]);
    expect(problems({ model_config: { provider: 'openai', api_key_env: 'NOPE' } })).toEqual([
      { path: 'model_config.api_key_env', message: 'environment variable NOPE is not set' },
    ]);
    expect(problems({ model_config: { provider: 'openai', api_key: 'sk-x' } }).map((p) => p.path)).toEqual(['model_config.api_key']);
    expect(problems({ model_config: { provider: 'openai-compatible' } }).map((p) => p.path)).toEqual(['model_config.base_url', 'model_config.model']);
    expect(problems({ model_config: { provider: 'demo', base_url: 'file:///etc/passwd' } }).map((p) => p.path)).toEqual(['model_config.base_url']);
    expect(problems({ model_config: { provider: 'demo', colour: 'red' } }).map((p) => p.path)).toEqual(['model_config']);
    expect(problems({ agent_config: { max_steps: 1.5 } }).map((p) => p.path)).toEqual(['agent_config.max_steps']);
    expect(problems({ agent_config: { builtin_tools: ['shell'] } }).map((p) => p.path)).toEqual(['agent_config.builtin_tools.0']);
    expect(problems({ agent_config: { subagents: [] } }).map((p) => p.path)).toEqual(['agent_config']);
    expect(problems({ workspace_config: { root: '/abs' } }).map((p) => p.path)).toEqual(['workspace_config.root']);
    expect(problems({ workspace_config: { root: 'a/../../b' } }).map((p) => p.path)).toEqual(['workspace_config.root']);
    expect(problems({ local_tools_ref: '/etc/tools.mjs' })).toEqual([{ path: 'local_tools_ref', message: expect.stringContaining('agents.tools_dirs') }]);
    expect(problems({ local_tools_ref: 'tools/../../etc/x.mjs' }).map((p) => p.path)).toEqual(['local_tools_ref']);
    expect(problems({ local_tools_ref: 'tools/x.mjs' }, { ...opts, tools_dirs: [] })).toEqual([
      { path: 'local_tools_ref', message: expect.stringContaining('may not load tools modules') },
    ]);
    expect(problems({ mcp_tools: [{ name: 'x', command: 'bash' }] })).toEqual([
      { path: 'mcp_tools.0.command', message: expect.stringContaining('not in agents.mcp_commands') },
    ]);
    expect(problems({ mcp_tools: [{ name: 'a b', url: 'https://x/mcp' }] }).map((p) => p.path)).toEqual(['mcp_tools.0.name']);
    expect(
      problems({
        mcp_tools: [
          { name: 'w', url: 'https://x/mcp' },
          { name: 'w', url: 'https://y/mcp' },
        ],
      }).map((p) => p.path),
    ).toEqual(['mcp_tools.1.name']);
    expect(problems({ mcp_tools: [{ name: 'w', url: 'https://x/mcp', headers: { a: '${UNSET_ONE}' } }] })).toEqual([
      { path: 'mcp_tools.0.headers.a', message: 'environment variable UNSET_ONE is not set' },
    ]);
    expect(problems({ mcp_tools: Array.from({ length: 17 }, (_, i) => ({ name: `s${i}`, url: 'https://x/mcp' })) }).map((p) => p.path)).toEqual(['mcp_tools']);
    // All at once: every problem is reported.
    expect(problems({ model_config: { provider: 'openai-compatible' }, agent_config: { max_steps: 0 }, local_tools_ref: '/x.mjs' })).toHaveLength(4);
  });

  it('knows the rows that stand for the served agent', () => {
    expect(isServedAgentSpec({ metadata: { served_agent: true } })).toBe(true);
    expect(isServedAgentSpec({ metadata: {} })).toBe(false);
    expect(isServedAgentSpec({})).toBe(false);
  });
});
