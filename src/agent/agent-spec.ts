// What a registered agent spec (BackgroundAgentSpec, POST /background/agents) means as an agent:
// pure checks that turn the stored JSON into a build plan, or into a list of problems with their
// place in the spec (answered as 422). Building the plan (modules, providers, MCP connections) is
// src/agent/agent-registry.ts. docs/agents.md describes every field.
//
// What a spec may reach comes from the operator's config, never from the request: keys only from
// the env names of `agents.secret_env`, model hosts only from `agents.model_hosts`, MCP servers
// only by the name of one defined whole in `agents.mcp_servers` (a request never assembles a
// command, its args, env or headers), and a tools module only with an admin key.
import { isAbsolute, normalize, relative, resolve, sep } from 'node:path';
import { z } from 'zod';
import type { ModelProviderConfig, ModelProviderKind } from './model/index.js';
import type { BuiltinToolSet, McpServerConfig } from './tools/types.js';

export const AGENT_MODEL_PROVIDERS = ['demo', 'openai-compatible', 'openai', 'anthropic'] as const;
export const AGENT_BUILTIN_TOOLS = ['workspace', 'clock'] as const;
/** The URL a provider is reached at when a spec sets no base_url (the AI SDK's defaults). */
const PROVIDER_DEFAULT_URL: Partial<Record<ModelProviderKind, string>> = {
  openai: 'https://api.openai.com/v1',
  anthropic: 'https://api.anthropic.com/v1',
};

export interface SpecProblem {
  /** Path inside the spec, e.g. ['model_config', 'api_key_env']. */
  path: Array<string | number>;
  message: string;
  /**
   * The 422 item's `type`: `not_allowed` when the config does not let registered agents reach
   * it, `too_large` past a size cap; `value_error` (the default) otherwise.
   */
  type?: 'not_allowed' | 'too_large';
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

/** An MCP server as `agents.mcp_servers` defines it (without its name), `${NAME}` already filled in. */
export type McpServerBody =
  { command: string; args: readonly string[]; env: Readonly<Record<string, string>> } | { url: string; headers: Readonly<Record<string, string>> };

export interface PlanOptions {
  /** agents.tools_dirs (absolute). */
  tools_dirs: readonly string[];
  /** agents.mcp_servers by name. */
  mcp_servers: Readonly<Record<string, McpServerBody>>;
  /**
   * The value of an environment variable listed in agents.secret_env and set; undefined for one
   * not listed and for one not set alike, so a refusal never tells which.
   */
  secret: (name: string) => string | undefined;
  /** agents.model_hosts. */
  model_hosts: readonly string[];
  /** The spec may use what needs an admin key (local_tools_ref). */
  privileged: boolean;
  /** agents.max_mcp_servers_per_agent. */
  max_mcp_servers: number;
  /** agents.max_spec_bytes. */
  max_spec_bytes: number;
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
  rate_limit: z
    .strictObject({
      requests_per_minute: posInt.max(10_000_000, { error: 'expected a positive integer up to 10000000' }).optional(),
      tokens_per_minute: posInt.max(1_000_000_000, { error: 'expected a positive integer up to 1000000000' }).optional(),
    })
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

/** An item of mcp_tools: the name of a server of agents.mcp_servers, nothing else. */
const McpRefSpec = z.strictObject(
  {
    server: z.string({ error: 'expected the name of a server of agents.mcp_servers' }).min(1, { error: 'expected the name of a server of agents.mcp_servers' }),
  },
  { error: 'expected {"server": "<name of a server of agents.mcp_servers>"}' },
);

function issuesOf(error: z.ZodError, prefix: Array<string | number>): SpecProblem[] {
  return error.issues.map((i) => ({ path: [...prefix, ...(i.path as Array<string | number>)], message: i.message }));
}

/** One answer for a variable not listed and one not set: a caller never learns which variables exist. */
function keyUnavailable(name: string): SpecProblem {
  return {
    path: ['model_config', 'api_key_env'],
    message: `environment variable ${name} is not available to registered agents (it must be listed in agents.secret_env and set)`,
    type: 'not_allowed',
  };
}

/** URL.host of an http(s) URL (lowercase, the port only when it is not the scheme's default), or null. */
function hostOf(u: string): string | null {
  try {
    const url = new URL(u);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.host.toLowerCase() : null;
  } catch {
    return null;
  }
}

/** The fields of a spec that only an admin key may register (a tools module is code the service runs). */
export function adminOnlyFields(spec: Pick<AgentSpecInput, 'local_tools_ref'>): string[] {
  return spec.local_tools_ref != null ? ['local_tools_ref'] : [];
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
 * with its path; a spec with any is refused. Reads nothing but `opts` (the config's allowlists).
 */
export function planAgent(spec: AgentSpecInput, opts: PlanOptions): AgentPlan {
  const problems: SpecProblem[] = [];

  const bytes = Buffer.byteLength(JSON.stringify(spec), 'utf8');
  if (bytes > opts.max_spec_bytes) {
    problems.push({ path: [], message: `the spec is ${bytes} bytes as JSON; agents.max_spec_bytes allows ${opts.max_spec_bytes}`, type: 'too_large' });
  }

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
      // Where the model is reached: the spec's URL or the provider's own; either must be listed.
      // A listed host is one the operator trusts with the run's prompt, tool results and key.
      const target = m.base_url ?? PROVIDER_DEFAULT_URL[provider];
      if (provider !== 'demo' && target !== undefined) {
        const host = hostOf(target);
        if (host === null) problems.push({ path: ['model_config', 'base_url'], message: 'expected an http(s) URL' });
        else if (!opts.model_hosts.some((h) => h.toLowerCase() === host)) {
          problems.push({ path: ['model_config', 'base_url'], message: `host ${host} is not in agents.model_hosts`, type: 'not_allowed' });
        }
      } else if (m.base_url && hostOf(m.base_url) === null) problems.push({ path: ['model_config', 'base_url'], message: 'expected an http(s) URL' });
      let apiKey: string | undefined;
      if (m.api_key_env !== undefined) {
        apiKey = opts.secret(m.api_key_env);
        if (apiKey === undefined) problems.push(keyUnavailable(m.api_key_env));
      } else if (provider === 'openai' || provider === 'anthropic') {
        const fallback = provider === 'anthropic' ? 'ANTHROPIC_API_KEY' : 'OPENAI_API_KEY';
        apiKey = opts.secret(fallback);
        if (apiKey === undefined) problems.push(keyUnavailable(fallback));
      }
      model = {
        provider,
        ...(m.base_url ? { base_url: m.base_url } : {}),
        ...(m.model ? { model: m.model } : provider === 'demo' ? { model: 'demo' } : {}),
        ...(apiKey ? { api_key: apiKey } : {}),
        ...(m.max_output_tokens !== undefined ? { max_output_tokens: m.max_output_tokens } : {}),
        ...(m.temperature !== undefined ? { temperature: m.temperature } : {}),
        ...(m.rate_limit ? { rate_limit: m.rate_limit } : {}),
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
    if (!opts.privileged) {
      problems.push({ path: ['local_tools_ref'], message: 'a tools module needs a spec registered with an admin key', type: 'not_allowed' });
    } else if (opts.tools_dirs.length === 0) {
      problems.push({
        path: ['local_tools_ref'],
        message: 'registered agents may not load tools modules: list the folder in the config key agents.tools_dirs',
        type: 'not_allowed',
      });
    } else if (!insideAny(file, opts.tools_dirs)) {
      problems.push({ path: ['local_tools_ref'], message: 'the module must lie inside one of the folders of agents.tools_dirs', type: 'not_allowed' });
    } else local_tools = file;
  }

  const mcp: McpServerConfig[] = [];
  const list = spec.mcp_tools ?? [];
  if (list.length > opts.max_mcp_servers) {
    problems.push({ path: ['mcp_tools'], message: `at most ${opts.max_mcp_servers} MCP servers (agents.max_mcp_servers_per_agent)`, type: 'too_large' });
  }
  const names = new Set<string>();
  list.slice(0, opts.max_mcp_servers).forEach((raw, i) => {
    const at: Array<string | number> = ['mcp_tools', i];
    const parsed = McpRefSpec.safeParse(raw);
    if (!parsed.success) {
      // The old inline forms ({name, command, args, env} / {name, url, headers}) land here.
      problems.push({
        path: at,
        message: 'an MCP server is defined in the config (agents.mcp_servers) and named here as {"server": "<name>"}',
        type: 'not_allowed',
      });
      return;
    }
    const name = parsed.data.server;
    const body = Object.hasOwn(opts.mcp_servers, name) ? opts.mcp_servers[name] : undefined;
    if (body === undefined) {
      problems.push({ path: [...at, 'server'], message: `no MCP server '${name}' in agents.mcp_servers`, type: 'not_allowed' });
      return;
    }
    if (names.has(name)) {
      problems.push({ path: [...at, 'server'], message: `MCP server '${name}' is named twice` });
      return;
    }
    names.add(name);
    mcp.push(
      'url' in body ? { name, url: body.url, headers: { ...body.headers } } : { name, command: body.command, args: [...body.args], env: { ...body.env } },
    );
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
