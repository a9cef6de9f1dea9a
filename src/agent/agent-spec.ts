// What a registered agent spec (BackgroundAgentSpec, POST /background/agents) means as an agent:
// pure checks that turn the stored JSON into a build plan, or into a list of problems with their
// place in the spec (answered as 422). Building the plan (modules, providers, MCP connections) is
// src/runtime/agent-registry.ts. docs/agents.md describes every field.
import { isAbsolute, normalize, relative, resolve, sep } from 'node:path';
import { z } from 'zod';
import type { ModelProviderConfig, ModelProviderKind } from './model/index.js';
import type { BuiltinToolSet, McpServerConfig } from './tools/types.js';

export const AGENT_MODEL_PROVIDERS = ['demo', 'openai-compatible', 'openai', 'anthropic'] as const;
export const AGENT_BUILTIN_TOOLS = ['workspace', 'clock'] as const;
/** MCP servers one agent may name (each is a connection, maybe a child process). */
export const MAX_AGENT_MCP_SERVERS = 16;

export interface SpecProblem {
  /** Path inside the spec, e.g. ['model_config', 'api_key_env']. */
  path: Array<string | number>;
  message: string;
}

/** Thrown when a spec cannot become an agent; `problems` name every field at fault. */
export class AgentSpecError extends Error {
  constructor(readonly problems: SpecProblem[]) {
    super(problems.map((p) => `${p.path.join('.') || 'spec'}: ${p.message}`).join('; '));
    this.name = 'AgentSpecError';
  }
}

/** The fields of a spec this module reads (a stored AgentRow has more). */
export interface AgentSpecInput {
  agent_id: string;
  name?: string | null;
  system_instruction?: string | null;
  agent_config?: Record<string, unknown> | null;
  model_config?: Record<string, unknown> | null;
  workspace_config?: Record<string, unknown> | null;
  local_tools_ref?: string | null;
  mcp_tools?: Array<Record<string, unknown>> | null;
  metadata?: Record<string, unknown> | null;
}

/** What the registry builds. `null` fields take the served agent's value. */
export interface AgentPlan {
  agent_id: string;
  agent_name: string;
  system_instruction: string | null;
  /** null: the served agent's model. The key is resolved from the env here and never stored. */
  model: (ModelProviderConfig & { api_key_env: string | null }) | null;
  max_steps: number | null;
  builtin: BuiltinToolSet[] | null;
  /** Absolute path of the tools module, inside one of agents.tools_dirs. */
  local_tools: string | null;
  mcp: McpServerConfig[];
  /** Folder (relative to the workspace root) holding this agent's session workspaces. */
  workspace_root: string;
}

export interface PlanOptions {
  /** agents.tools_dirs (absolute). */
  tools_dirs: readonly string[];
  /** agents.mcp_commands. */
  mcp_commands: readonly string[];
  /** Reads an environment variable (empty = unset). */
  env: (name: string) => string | undefined;
  /** Where a relative local_tools_ref is resolved (the service's working directory). */
  cwd: string;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const posInt = z
  .number({ error: 'expected a positive integer' })
  .int({ error: 'expected a positive integer' })
  .min(1, { error: 'expected a positive integer' });

const ModelConfigSpec = z.strictObject({
  provider: z.enum(AGENT_MODEL_PROVIDERS, { error: `expected one of ${AGENT_MODEL_PROVIDERS.map((p) => `"${p}"`).join(', ')}` }).default('demo'),
  base_url: z.url({ error: 'expected an absolute URL such as http://localhost:11434/v1' }).optional(),
  model: z.string({ error: 'expected a non-empty string' }).min(1, { error: 'expected a non-empty string' }).optional(),
  api_key_env: z
    .string({ error: 'expected the name of an environment variable' })
    .regex(ENV_NAME, { error: 'expected the name of an environment variable' })
    .optional(),
  max_output_tokens: posInt.max(1_000_000, { error: 'expected a positive integer up to 1000000' }).optional(),
  temperature: z
    .number({ error: 'expected a number between 0 and 2' })
    .min(0, { error: 'expected a number between 0 and 2' })
    .max(2, { error: 'expected a number between 0 and 2' })
    .optional(),
});

const AgentConfigSpec = z.strictObject({
  max_steps: posInt.max(1000, { error: 'expected a positive integer up to 1000' }).optional(),
  builtin_tools: z.array(z.enum(AGENT_BUILTIN_TOOLS, { error: 'expected "workspace" or "clock"' }), { error: 'expected an array' }).optional(),
});

const WorkspaceConfigSpec = z.strictObject({
  root: z
    .string({ error: 'expected a relative folder' })
    .min(1, { error: 'expected a relative folder' })
    .max(512, { error: 'expected at most 512 characters' })
    .optional(),
});

const McpName = z
  .string({ error: 'expected a server name matching ^[a-zA-Z0-9_-]{1,48}$' })
  .regex(/^[a-zA-Z0-9_-]{1,48}$/, { error: 'expected a server name matching ^[a-zA-Z0-9_-]{1,48}$' });
const StrMap = z.record(z.string(), z.string({ error: 'expected a string' }), { error: 'expected an object of strings' });
const McpStdioSpec = z.strictObject({ name: McpName, command: z.string().min(1), args: z.array(z.string()).max(64).default([]), env: StrMap.default({}) });
const McpHttpSpec = z.strictObject({ name: McpName, url: z.url({ error: 'expected an absolute http(s) URL' }), headers: StrMap.default({}) });

function issuesOf(error: z.ZodError, prefix: Array<string | number>): SpecProblem[] {
  return error.issues.map((i) => ({ path: [...prefix, ...(i.path as Array<string | number>)], message: i.message }));
}

/**
 * `${NAME}` in an MCP server's env or header values is read from the environment when the agent is
 * built, so a token is named in the spec, never stored in it.
 */
function interpolate(value: string, env: PlanOptions['env'], path: Array<string | number>, problems: SpecProblem[]): string {
  return value.replace(/\$\{([^}]*)\}/g, (_m, name: string) => {
    if (!ENV_NAME.test(name)) {
      problems.push({ path, message: `\${${name}} is not the name of an environment variable` });
      return '';
    }
    const v = env(name);
    if (v === undefined) problems.push({ path, message: `environment variable ${name} is not set` });
    return v ?? '';
  });
}

function insideAny(file: string, dirs: readonly string[]): boolean {
  return dirs.some((d) => {
    const rel = relative(d, file);
    return rel !== '' && !rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel);
  });
}

/** A workspace folder relative to the root that stays inside it. */
function safeRelativeFolder(p: string): boolean {
  if (isAbsolute(p) || p.includes('\0') || p.includes('\\')) return false;
  const n = normalize(p);
  return n !== '..' && !n.startsWith(`..${sep}`) && !n.split(sep).includes('..');
}

/** True for the rows that stand for the served agent (registered with the spec omitted). */
export function isServedAgentSpec(spec: Pick<AgentSpecInput, 'metadata'>): boolean {
  return spec.metadata?.served_agent === true;
}

/**
 * Checks a spec and returns what to build. Every problem is collected (not only the first), each
 * with its path; a spec with any is refused. Reads the environment (keys, `${VAR}`) but nothing else.
 */
export function planAgent(spec: AgentSpecInput, opts: PlanOptions): AgentPlan {
  const problems: SpecProblem[] = [];

  let model: AgentPlan['model'] = null;
  if (spec.model_config != null) {
    const raw = spec.model_config;
    if ('api_key' in raw) {
      problems.push({ path: ['model_config', 'api_key'], message: 'a key is never stored: name the environment variable that holds it with api_key_env' });
    }
    const { api_key: _key, ...rest } = raw;
    void _key;
    const parsed = ModelConfigSpec.safeParse(rest);
    if (!parsed.success) problems.push(...issuesOf(parsed.error, ['model_config']));
    else {
      const m = parsed.data;
      const provider: ModelProviderKind = m.provider;
      if (provider === 'openai-compatible') {
        if (!m.base_url) problems.push({ path: ['model_config', 'base_url'], message: 'required for provider "openai-compatible"' });
        if (!m.model) problems.push({ path: ['model_config', 'model'], message: 'required for provider "openai-compatible"' });
      }
      if (m.base_url && !/^https?:\/\//i.test(m.base_url)) problems.push({ path: ['model_config', 'base_url'], message: 'expected an http(s) URL' });
      let apiKey: string | undefined;
      if (m.api_key_env !== undefined) {
        apiKey = opts.env(m.api_key_env);
        if (apiKey === undefined) problems.push({ path: ['model_config', 'api_key_env'], message: `environment variable ${m.api_key_env} is not set` });
      } else if (provider === 'openai' || provider === 'anthropic') {
        const fallback = provider === 'anthropic' ? 'ANTHROPIC_API_KEY' : 'OPENAI_API_KEY';
        apiKey = opts.env(fallback);
        if (apiKey === undefined)
          problems.push({
            path: ['model_config', 'api_key_env'],
            message: `provider "${provider}" needs an API key: set api_key_env to the name of an environment variable holding it (or set ${fallback})`,
          });
      }
      model = {
        provider,
        ...(m.base_url ? { base_url: m.base_url } : {}),
        ...(m.model ? { model: m.model } : provider === 'demo' ? { model: 'demo' } : {}),
        ...(apiKey ? { api_key: apiKey } : {}),
        ...(m.max_output_tokens !== undefined ? { max_output_tokens: m.max_output_tokens } : {}),
        ...(m.temperature !== undefined ? { temperature: m.temperature } : {}),
        api_key_env: m.api_key_env ?? null,
      };
      // Never enumerable: a plan that is logged or serialised does not carry the key.
      if (apiKey) Object.defineProperty(model, 'api_key', { value: apiKey, enumerable: false });
    }
  }

  let max_steps: number | null = null;
  let builtin: BuiltinToolSet[] | null = null;
  const ac = AgentConfigSpec.safeParse(spec.agent_config ?? {});
  if (!ac.success) problems.push(...issuesOf(ac.error, ['agent_config']));
  else {
    max_steps = ac.data.max_steps ?? null;
    builtin = ac.data.builtin_tools ? [...new Set(ac.data.builtin_tools)] : null;
  }

  let workspace_root = `agents/${spec.agent_id}`;
  const wc = WorkspaceConfigSpec.safeParse(spec.workspace_config ?? {});
  if (!wc.success) problems.push(...issuesOf(wc.error, ['workspace_config']));
  else if (wc.data.root !== undefined) {
    if (!safeRelativeFolder(wc.data.root))
      problems.push({ path: ['workspace_config', 'root'], message: 'expected a folder relative to the workspace root that stays inside it' });
    else workspace_root = normalize(wc.data.root);
  }

  let local_tools: string | null = null;
  if (spec.local_tools_ref != null) {
    const file = resolve(opts.cwd, spec.local_tools_ref);
    if (opts.tools_dirs.length === 0) {
      problems.push({
        path: ['local_tools_ref'],
        message: 'registered agents may not load tools modules: list the folder in the config key agents.tools_dirs',
      });
    } else if (!insideAny(file, opts.tools_dirs)) {
      problems.push({ path: ['local_tools_ref'], message: `the module must lie inside one of agents.tools_dirs (${opts.tools_dirs.join(', ')})` });
    } else local_tools = file;
  }

  const mcp: McpServerConfig[] = [];
  const list = spec.mcp_tools ?? [];
  if (list.length > MAX_AGENT_MCP_SERVERS) problems.push({ path: ['mcp_tools'], message: `at most ${MAX_AGENT_MCP_SERVERS} MCP servers` });
  const names = new Set<string>();
  list.slice(0, MAX_AGENT_MCP_SERVERS).forEach((raw, i) => {
    const at: Array<string | number> = ['mcp_tools', i];
    const isHttp = raw !== null && typeof raw === 'object' && 'url' in raw;
    const parsed = (isHttp ? McpHttpSpec : McpStdioSpec).safeParse(raw);
    if (!parsed.success) {
      problems.push(...issuesOf(parsed.error, at));
      return;
    }
    const s = parsed.data;
    if (names.has(s.name)) problems.push({ path: [...at, 'name'], message: `MCP server name '${s.name}' is used twice` });
    names.add(s.name);
    if ('url' in s) {
      if (!/^https?:\/\//i.test(s.url)) problems.push({ path: [...at, 'url'], message: 'expected an http(s) URL' });
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(s.headers)) headers[k] = interpolate(v, opts.env, [...at, 'headers', k], problems);
      mcp.push({ name: s.name, url: s.url, headers });
    } else {
      if (!opts.mcp_commands.includes(s.command)) {
        problems.push({
          path: [...at, 'command'],
          message:
            opts.mcp_commands.length === 0
              ? 'registered agents may not start MCP commands: list the command in the config key agents.mcp_commands'
              : `command '${s.command}' is not in agents.mcp_commands`,
        });
      }
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(s.env)) env[k] = interpolate(v, opts.env, [...at, 'env', k], problems);
      mcp.push({ name: s.name, command: s.command, args: s.args, env });
    }
  });

  if (problems.length > 0) throw new AgentSpecError(problems);
  return {
    agent_id: spec.agent_id,
    agent_name: spec.name ?? spec.agent_id,
    system_instruction: spec.system_instruction ?? null,
    model,
    max_steps,
    builtin,
    local_tools,
    mcp,
    workspace_root,
  };
}
