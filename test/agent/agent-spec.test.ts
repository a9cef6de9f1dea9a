// The pure part of registered agents (src/agent/agent-spec.ts): what a spec means, and every reason
// it is refused, with the field at fault.
import { describe, expect, it } from 'vitest';
import { AgentSpecError, adminOnlyFields, isServedAgentSpec, planAgent, type PlanOptions } from '../../src/agent/agent-spec.js';

// The allowlisted secrets as the config resolved them (agents.secret_env): SERVER_ONLY is set in the
// server's environment but not listed, so the planner never sees it.
const secrets: Record<string, string> = { ALT_KEY: 'sk-alt-123', OPENAI_API_KEY: 'sk-openai' };
const opts: PlanOptions = {
  tools_dirs: ['/srv/tools'],
  mcp_servers: {
    fs: { command: '/usr/bin/mcp-fs', args: ['--root', '/data'], env: { TOKEN: 'tok-9' } },
    web: { url: 'https://mcp.example/mcp', headers: { authorization: 'Bearer tok-9' } },
  },
  secret: (n) => secrets[n],
  model_hosts: ['127.0.0.1:1234', 'api.openai.com'],
  privileged: true,
  max_mcp_servers: 2,
  max_spec_bytes: 4096,
  cwd: '/srv',
};

function problems(spec: Record<string, unknown>, o: PlanOptions = opts): Array<{ path: string; message: string; type?: string }> {
  try {
    planAgent({ agent_id: 'a', ...spec }, o);
  } catch (err) {
    if (err instanceof AgentSpecError) return err.problems.map((p) => ({ path: p.path.join('.'), message: p.message, ...(p.type ? { type: p.type } : {}) }));
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
        mcp_tools: [{ server: 'fs' }, { server: 'web' }],
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
    expect(problems({ model_config: { provider: 'openai', api_key_env: 'NOPE' } })).toEqual([
      {
        path: 'model_config.api_key_env',
        message: 'environment variable NOPE is not available to registered agents (it must be listed in agents.secret_env and set)',
        type: 'not_allowed',
      },
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
    expect(problems({ local_tools_ref: '/etc/tools.mjs' })).toEqual([
      { path: 'local_tools_ref', message: expect.stringContaining('agents.tools_dirs'), type: 'not_allowed' },
    ]);
    expect(problems({ local_tools_ref: 'tools/../../etc/x.mjs' }).map((p) => p.path)).toEqual(['local_tools_ref']);
    expect(problems({ local_tools_ref: 'tools/x.mjs' }, { ...opts, tools_dirs: [] })).toEqual([
      { path: 'local_tools_ref', message: expect.stringContaining('may not load tools modules'), type: 'not_allowed' },
    ]);
    expect(problems({ mcp_tools: [{ server: 'nope' }] })).toEqual([
      { path: 'mcp_tools.0.server', message: expect.stringContaining('agents.mcp_servers'), type: 'not_allowed' },
    ]);
    expect(problems({ mcp_tools: [{ server: 'fs' }, { server: 'fs' }] }).map((p) => p.path)).toEqual(['mcp_tools.1.server']);
    expect(problems({ mcp_tools: [{ server: 'fs' }, { server: 'web' }, { server: 'fs' }] })).toEqual([
      { path: 'mcp_tools', message: expect.stringContaining('at most 2'), type: 'too_large' },
    ]);
    expect(problems({ system_instruction: 'x'.repeat(5000) })).toEqual([{ path: '', message: expect.stringContaining('max_spec_bytes'), type: 'too_large' }]);
    // All at once: every problem is reported.
    expect(problems({ model_config: { provider: 'openai-compatible' }, agent_config: { max_steps: 0 }, local_tools_ref: '/x.mjs' })).toHaveLength(4);
  });

  it('takes keys, model hosts and MCP servers only from the config, with one answer for a variable not listed and one not set', () => {
    const unavailable = (name: string) => ({
      path: 'model_config.api_key_env',
      message: `environment variable ${name} is not available to registered agents (it must be listed in agents.secret_env and set)`,
      type: 'not_allowed',
    });
    // Listed but unset, and set but not listed, read the same.
    expect(problems({ model_config: { provider: 'openai', api_key_env: 'LISTED_UNSET' } })).toEqual([unavailable('LISTED_UNSET')]);
    expect(problems({ model_config: { provider: 'openai', api_key_env: 'PATH' } })).toEqual([unavailable('PATH')]);
    expect(problems({ model_config: { provider: 'anthropic' } })).toEqual([
      { path: 'model_config.base_url', message: 'host api.anthropic.com is not in agents.model_hosts', type: 'not_allowed' },
      unavailable('ANTHROPIC_API_KEY'),
    ]);
    // The host: a base_url elsewhere (another port too), or a provider's default that is not listed.
    for (const base_url of ['http://attacker.example/v1', 'http://127.0.0.1:9999/v1', 'http://127.0.0.1/v1'])
      expect(problems({ model_config: { provider: 'openai-compatible', base_url, model: 'm' } })).toEqual([
        { path: 'model_config.base_url', message: expect.stringContaining('not in agents.model_hosts'), type: 'not_allowed' },
      ]);
    expect(problems({ model_config: { provider: 'openai-compatible', base_url: 'http://127.0.0.1:1234/v1', model: 'm' } })).toEqual([]);
    expect(problems({ model_config: { provider: 'demo' } })).toEqual([]);
    // MCP servers: only by name; a spec never carries a command, args, env, a URL or headers.
    const inline = [
      { name: 'x', command: '/usr/bin/mcp-fs', env: { NODE_OPTIONS: '--import=data:text/javascript,1' } },
      { name: 'x', url: 'https://attacker.example/mcp', headers: { a: '${OPENAI_API_KEY}' } },
      { server: 'fs', env: { NODE_OPTIONS: '--require=/tmp/x.js' } },
      { server: 'fs', args: ['--evil'] },
    ];
    for (const item of inline)
      expect(problems({ mcp_tools: [item] }), JSON.stringify(item)).toEqual([
        { path: 'mcp_tools.0', message: expect.stringContaining('agents.mcp_servers'), type: 'not_allowed' },
      ]);
    // A tools module only with an admin key.
    expect(problems({ local_tools_ref: 'tools/x.mjs' }, { ...opts, privileged: false })).toEqual([
      { path: 'local_tools_ref', message: expect.stringContaining('admin key'), type: 'not_allowed' },
    ]);
    expect(adminOnlyFields({ local_tools_ref: 'tools/x.mjs' })).toEqual(['local_tools_ref']);
    expect(adminOnlyFields({ local_tools_ref: null })).toEqual([]);
  });

  it('knows the rows that stand for the served agent', () => {
    expect(isServedAgentSpec({ metadata: { served_agent: true } })).toBe(true);
    expect(isServedAgentSpec({ metadata: {} })).toBe(false);
    expect(isServedAgentSpec({})).toBe(false);
  });
});
