// Configuration (docs/contract.md §10). The only module that reads process.env: everything else
// receives the frozen Config. Precedence, lowest first: defaults < JSON file < env < CLI flags.
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { z } from 'zod';
import { otlpEnvValues } from './telemetry/otlp-env.js';

import { ConfigSchema, type ParsedConfig } from './config-schema.js';

type DeepReadonly<T> = T extends (infer U)[] ? ReadonlyArray<DeepReadonly<U>> : T extends object ? { readonly [K in keyof T]: DeepReadonly<T[K]> } : T;

type ResolvedModel = Omit<ParsedConfig['agent']['model'], 'model'> & {
  model: string;
  /** Resolved API key. Non-enumerable, so JSON.stringify and console.log never show it. */
  api_key: string | null;
};

/**
 * What registered agents may reach, read from the environment once at start-up (docs/agents.md).
 * A non-enumerable property of `agents`: a printed config never shows a value.
 */
export interface ResolvedAgents {
  /** The values of the `agents.secret_env` names that are set (empty counts as unset). */
  secrets: Readonly<Record<string, string>>;
  /** `agents.mcp_servers` by name, `${NAME}` replaced by the variable's value. */
  mcp: Readonly<Record<string, { command: string; args: string[]; env: Record<string, string> } | { url: string; headers: Record<string, string> }>>;
  /** Every value a `${NAME}` in `agents.mcp_servers` gave (redacted everywhere). */
  interpolated: readonly string[];
}

type ResolvedWebhooks = Omit<ParsedConfig['webhooks'], 'endpoints'> & {
  /** `signing_secret`: the resolved secret (value or env var). Non-enumerable: JSON.stringify never shows it. */
  endpoints: Array<ParsedConfig['webhooks']['endpoints'][number] & { signing_secret: string }>;
  /** Resolved secret of per-request webhooks (non-enumerable), or null. */
  request_signing_secret: string | null;
};

type Resolved = Omit<ParsedConfig, '$schema' | 'store' | 'agent' | 'background' | 'agents' | 'webhooks'> & {
  /** Absolute data directory (AGENTD_DATA_DIR / --data-dir, default ./.agentd). */
  data_dir: string;
  /** Absolute path of the config file read, or null. */
  config_path: string | null;
  store: Omit<ParsedConfig['store'], 'path'> & { path: string };
  agent: Omit<ParsedConfig['agent'], 'model'> & { model: ResolvedModel };
  background: Omit<ParsedConfig['background'], 'workspace_root'> & { workspace_root: string };
  /** `tools_dirs` absolute; `resolved` (non-enumerable) holds what the env gave. */
  agents: Omit<ParsedConfig['agents'], 'mcp_commands'> & { resolved: ResolvedAgents };
  webhooks: ResolvedWebhooks;
};

export type Config = DeepReadonly<Resolved>;

export class ConfigError extends Error {
  constructor(
    readonly problems: string[],
    source: string | null = null,
  ) {
    super(`Invalid configuration${source ? ` (${source})` : ''}:\n${problems.map((p) => `  ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

export const DEFAULT_DATA_DIR = './.agentd';

export interface LoadConfigOptions {
  /**
   * Command-line arguments after the subcommand (`serve --port 9000`); unknown ones are ignored.
   * Default none: the CLI passes its own, and a test runner's argv (which may hold `--config`) is
   * never read by accident.
   */
  argv?: string[];
  /** Default process.env. */
  env?: NodeJS.ProcessEnv;
  /** Config file path; wins over --config and AGENTD_CONFIG. */
  configPath?: string;
  /** Base of relative paths when there is no config file. Default process.cwd(). */
  cwd?: string;
}

interface CliFlags {
  config?: string;
  host?: string;
  port?: string;
  'data-dir'?: string;
}

const FLAG_NAMES = ['config', 'host', 'port', 'data-dir'] as const;

function parseFlags(argv: string[]): CliFlags {
  const flags: CliFlags = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) continue;
    const eq = arg.indexOf('=');
    const name = (eq >= 0 ? arg.slice(2, eq) : arg.slice(2)) as (typeof FLAG_NAMES)[number];
    if (!FLAG_NAMES.includes(name)) continue;
    let value: string | undefined;
    if (eq >= 0) value = arg.slice(eq + 1);
    else if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) value = argv[++i];
    if (value === undefined || value === '') throw new ConfigError([`--${name}: expected a value`]);
    flags[name] = value;
  }
  return flags;
}

function nonEmptyEnv(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v === '' ? undefined : v;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * Sets `path` in `raw`, creating missing objects. A non-object in the way is left alone: the
 * schema then reports that value, which is the real mistake.
 */
function setPath(raw: Record<string, unknown>, path: string[], value: unknown): void {
  let cur = raw;
  for (const key of path.slice(0, -1)) {
    if (cur[key] === undefined) cur[key] = {};
    const next = cur[key];
    if (!isRecord(next)) return;
    cur = next;
  }
  cur[path[path.length - 1]] = value;
}

function getPath(raw: unknown, path: string[]): unknown {
  let cur = raw;
  for (const key of path) {
    if (!isRecord(cur)) return undefined;
    cur = cur[key];
  }
  return cur;
}

/** A numeric env/flag value as a number when it is one, else the text (so zod names the mistake). */
function numeric(text: string): number | string {
  return /^-?\d+(\.\d+)?$/.test(text.trim()) ? Number(text) : text;
}

function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? String(key) : `.${String(key)}`;
  }
  return out;
}

function issueLines(issues: readonly z.core.$ZodIssue[], sources: Map<string, string>): string[] {
  const lines: string[] = [];
  const label = (p: string) => (sources.has(p) ? `${p} (from ${sources.get(p)})` : p);
  for (const issue of issues) {
    const path = formatPath(issue.path);
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) lines.push(`unknown key: ${path === '' ? key : `${path}.${key}`}`);
      continue;
    }
    if (issue.code === 'invalid_union') {
      // MCP servers: the shape is either {name, command} or {name, url}; name the closest branch.
      const best = issue.errors.reduce((a, b) => (b.length < a.length ? b : a), issue.errors[0] ?? []);
      lines.push(
        ...issueLines(
          best.map((sub) => ({ ...sub, path: [...issue.path, ...sub.path] })),
          sources,
        ),
      );
      continue;
    }
    lines.push(`${label(path === '' ? '(root)' : path)}: ${issue.message}`);
  }
  return [...new Set(lines)];
}

function readConfigFile(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new ConfigError([code === 'ENOENT' ? 'file not found' : `cannot read: ${(e as Error).message}`], path);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ConfigError([`not valid JSON: ${(e as Error).message}`], path);
  }
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const key of Object.getOwnPropertyNames(value)) deepFreeze((value as Record<string, unknown>)[key]);
  }
  return value;
}

export interface ConfigFromObjectOptions {
  env?: NodeJS.ProcessEnv;
  /** Data dir; default AGENTD_DATA_DIR of `env`, else ./.agentd. */
  dataDir?: string;
  /** Base of relative paths inside the object. Default process.cwd(). */
  baseDir?: string;
  /** Shown in error messages and kept as `config_path`. */
  configPath?: string | null;
  /** Flag values that win over env (already parsed). */
  flags?: { host?: string; port?: string };
  cwd?: string;
}

/**
 * Validates a config object (as a JSON file would hold it), applies env overrides and flags, and
 * resolves paths and the model key. loadConfig() is this plus reading argv and the file; tests of
 * other modules can call it directly: `configFromObject({ agent: { max_steps: 3 } }, { env: {}, dataDir })`.
 */
export function configFromObject(input: unknown, opts: ConfigFromObjectOptions = {}): Config {
  const env = opts.env ?? process.env;
  const cwd = opts.cwd ?? process.cwd();
  const source = opts.configPath ?? null;
  if (!isRecord(input)) throw new ConfigError(['(root): expected a JSON object'], source);
  const raw = structuredClone(input);
  const sources = new Map<string, string>();
  const override = (path: string[], value: unknown, label: string) => {
    setPath(raw, path, value);
    sources.set(path.join('.'), label);
  };

  const envHost = nonEmptyEnv(env, 'AGENTD_HOST');
  if (envHost !== undefined) override(['server', 'host'], envHost, 'AGENTD_HOST');
  const envPort = nonEmptyEnv(env, 'AGENTD_PORT');
  if (envPort !== undefined) override(['server', 'port'], numeric(envPort), 'AGENTD_PORT');
  const envBaseUrl = nonEmptyEnv(env, 'AGENTD_MODEL_BASE_URL');
  if (envBaseUrl !== undefined) {
    // A base URL with no provider chosen in the file can only mean an OpenAI-style endpoint.
    if (getPath(raw, ['agent', 'model', 'provider']) === undefined) {
      override(['agent', 'model', 'provider'], 'openai-compatible', 'AGENTD_MODEL_BASE_URL');
    }
    override(['agent', 'model', 'base_url'], envBaseUrl, 'AGENTD_MODEL_BASE_URL');
  }
  const envStoreUrl = nonEmptyEnv(env, 'AGENTD_STORE_URL');
  if (envStoreUrl !== undefined) {
    // A store URL with no store kind chosen in the file can only mean PostgreSQL.
    if (getPath(raw, ['store', 'kind']) === undefined) override(['store', 'kind'], 'postgres', 'AGENTD_STORE_URL');
    override(['store', 'url'], envStoreUrl, 'AGENTD_STORE_URL');
  }
  const envModel = nonEmptyEnv(env, 'AGENTD_MODEL');
  if (envModel !== undefined) override(['agent', 'model', 'model'], envModel, 'AGENTD_MODEL');
  // The OTEL_* variables are standard fallbacks, so the file wins over them (docs/contract.md §8.2).
  const otlpEnv = otlpEnvValues(env, (path) => {
    if (path.length === 4 && path[2] === 'headers') {
      const fileHeaders = getPath(raw, path.slice(0, 3));
      return isRecord(fileHeaders) && Object.keys(fileHeaders).some((k) => k.toLowerCase() === path[3]);
    }
    return getPath(raw, path) !== undefined;
  });
  for (const v of otlpEnv.values) override(v.path, v.value, v.label);
  // The log settings: names and values are case-insensitive; an empty value means the default.
  const envLogLevel = nonEmptyEnv(env, 'AGENTD_LOG_LEVEL');
  if (envLogLevel !== undefined) override(['log', 'level'], envLogLevel.trim().toLowerCase(), 'AGENTD_LOG_LEVEL');
  const envLogFormat = nonEmptyEnv(env, 'AGENTD_LOG_FORMAT');
  if (envLogFormat !== undefined) override(['log', 'format'], envLogFormat.trim().toLowerCase(), 'AGENTD_LOG_FORMAT');
  const envLogRequests = nonEmptyEnv(env, 'AGENTD_LOG_REQUESTS');
  // `1` turns request lines on; any other value keeps them off, as before the setting was in the config.
  if (envLogRequests !== undefined) override(['log', 'requests'], envLogRequests.trim() === '1', 'AGENTD_LOG_REQUESTS');
  if (opts.flags?.host !== undefined) override(['server', 'host'], opts.flags.host, '--host');
  if (opts.flags?.port !== undefined) override(['server', 'port'], numeric(opts.flags.port), '--port');

  const parsed = ConfigSchema.safeParse(raw);
  if (!parsed.success) throw new ConfigError([...otlpEnv.problems, ...issueLines(parsed.error.issues, sources)], source);
  const c = parsed.data;

  const problems: string[] = [...otlpEnv.problems];
  const m = c.agent.model;
  const modelName = m.model ?? (m.provider === 'demo' ? 'demo' : undefined);
  if (modelName === undefined) problems.push(`agent.model.model: required for provider "${m.provider}" (or set AGENTD_MODEL)`);
  if (m.provider === 'openai-compatible' && m.base_url === undefined) {
    problems.push('agent.model.base_url: required for provider "openai-compatible" (or set AGENTD_MODEL_BASE_URL)');
  }
  const fallbackKeyEnv = m.provider === 'anthropic' ? 'ANTHROPIC_API_KEY' : 'OPENAI_API_KEY';
  const apiKey =
    nonEmptyEnv(env, 'AGENTD_MODEL_API_KEY') ??
    (m.api_key_env !== undefined ? nonEmptyEnv(env, m.api_key_env) : undefined) ??
    (m.provider === 'demo' ? undefined : nonEmptyEnv(env, fallbackKeyEnv)) ??
    null;
  if ((m.provider === 'openai' || m.provider === 'anthropic') && apiKey === null) {
    problems.push(
      `agent.model.api_key: provider "${m.provider}" needs an API key: set AGENTD_MODEL_API_KEY` +
        (m.api_key_env ? `, ${m.api_key_env}` : '') +
        ` or ${fallbackKeyEnv}`,
    );
  }
  const usesCost = (['run', 'session', 'eval', 'agent', 'tenant', 'application'] as const).some((scope) =>
    c.budgets[scope].some((b) => b.meter === 'cost_usd'),
  );
  if (usesCost && modelName !== undefined && c.pricing[modelName] === undefined) {
    problems.push(`pricing: a cost_usd budget needs a price for model "${modelName}" (pricing.${modelName})`);
  }
  const webhooks = resolveWebhooks(c.webhooks, env, problems);
  const agentsResolved = resolveAgents(c.agents, env, problems);
  if (problems.length > 0) throw new ConfigError(problems, source);

  const dataDir = resolve(cwd, opts.dataDir ?? nonEmptyEnv(env, 'AGENTD_DATA_DIR') ?? DEFAULT_DATA_DIR);
  const base = opts.baseDir ?? cwd;
  const under = (p: string) => (isAbsolute(p) ? p : resolve(base, p));

  const model = { ...m, model: modelName as string } as ResolvedModel;
  Object.defineProperty(model, 'api_key', { value: apiKey, enumerable: false });

  const { $schema: _ignored, ...rest } = c;
  void _ignored;
  const resolved: Resolved = {
    ...rest,
    data_dir: dataDir,
    config_path: source,
    store: { ...c.store, path: c.store.path !== undefined ? under(c.store.path) : dataDir },
    agent: {
      ...c.agent,
      model,
      tools: { ...c.agent.tools, ...(c.agent.tools.local !== undefined ? { local: under(c.agent.tools.local) } : {}) },
    },
    background: {
      ...c.background,
      workspace_root: c.background.workspace_root !== undefined ? under(c.background.workspace_root) : join(dataDir, 'workspaces'),
    },
    agents: withResolved({ ...withoutRemovedKeys(c.agents), tools_dirs: c.agents.tools_dirs.map(under) }, agentsResolved),
    webhooks,
  };
  return deepFreeze(resolved) as Config;
}

function withoutRemovedKeys(a: ParsedConfig['agents']): Omit<ParsedConfig['agents'], 'mcp_commands'> {
  const { mcp_commands: _removed, ...rest } = a;
  void _removed;
  return rest;
}

function withResolved(a: Omit<ParsedConfig['agents'], 'mcp_commands'>, resolved: ResolvedAgents): Resolved['agents'] {
  const out = { ...a } as Resolved['agents'];
  Object.defineProperty(out, 'resolved', { value: resolved, enumerable: false });
  return out;
}

/**
 * Reads what registered agents may use from the environment: the `agents.secret_env` values that
 * are set, and `${NAME}` in `agents.mcp_servers` (an unset one is a start-up problem: the operator
 * wrote it). Read once, so the redaction set built from the config holds every value a build can
 * resolve (src/telemetry/secrets.ts).
 */
function resolveAgents(a: ParsedConfig['agents'], env: NodeJS.ProcessEnv, problems: string[]): ResolvedAgents {
  const secrets: Record<string, string> = Object.create(null) as Record<string, string>;
  for (const name of a.secret_env) {
    const v = nonEmptyEnv(env, name);
    if (v !== undefined) secrets[name] = v;
  }
  const interpolated: string[] = [];
  const fill = (value: string, path: string): string =>
    value.replace(/\$\{([^}]*)\}/g, (_m, name: string) => {
      const v = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/.test(name) ? nonEmptyEnv(env, name) : undefined;
      if (v === undefined) {
        problems.push(`${path}: \${${name}} names no environment variable that is set`);
        return '';
      }
      interpolated.push(v);
      return v;
    });
  const mcp: Record<string, ResolvedAgents['mcp'][string]> = {};
  for (const [name, server] of Object.entries(a.mcp_servers)) {
    const at = `agents.mcp_servers.${name}`;
    if ('url' in server) {
      mcp[name] = { url: server.url, headers: Object.fromEntries(Object.entries(server.headers).map(([k, v]) => [k, fill(v, `${at}.headers.${k}`)])) };
    } else {
      mcp[name] = {
        command: server.command,
        args: [...server.args],
        env: Object.fromEntries(Object.entries(server.env).map(([k, v]) => [k, fill(v, `${at}.env.${k}`)])),
      };
    }
  }
  return { secrets, mcp, interpolated };
}

/** Webhook signing secrets, by value or env-var name, as non-enumerable properties (never printed or stored). */
function resolveWebhooks(w: ParsedConfig['webhooks'], env: NodeJS.ProcessEnv, problems: string[]): ResolvedWebhooks {
  const secretOf = (value: string | undefined, envName: string | undefined, path: string, required: boolean): string | null => {
    if (value !== undefined && envName !== undefined) problems.push(`${path}: set secret or secret_env, not both`);
    const fromEnv = envName !== undefined ? nonEmptyEnv(env, envName) : undefined;
    if (envName !== undefined && fromEnv === undefined) problems.push(`${path}_env: environment variable ${envName} is not set`);
    const secret = value ?? fromEnv ?? null;
    if (secret === null && required && envName === undefined) problems.push(`${path}: a signing secret is required (secret or secret_env)`);
    return secret;
  };
  const endpoints = w.endpoints.map((e, i) => {
    // The value itself only as the non-enumerable signing_secret: a printed config never shows it.
    const { secret: _s, ...visible } = e;
    void _s;
    const out = { ...visible } as ResolvedWebhooks['endpoints'][number];
    Object.defineProperty(out, 'signing_secret', { value: secretOf(e.secret, e.secret_env, `webhooks.endpoints[${i}].secret`, true) ?? '', enumerable: false });
    return out;
  });
  const { endpoints: _e, request_secret: _r, ...rest } = w;
  void _e;
  void _r;
  const out = { ...rest, endpoints } as ResolvedWebhooks;
  const requestSecret = secretOf(w.request_secret, w.request_secret_env, 'webhooks.request_secret', w.allow_request_hosts.length > 0);
  Object.defineProperty(out, 'request_signing_secret', { value: requestSecret, enumerable: false });
  return out;
}

/**
 * Resolves the configuration of a process: reads the JSON file named by `configPath`, --config
 * or AGENTD_CONFIG (none: every default), applies env overrides and CLI flags, validates and
 * returns a deeply frozen object. Throws ConfigError with one line per bad field.
 */
export function loadConfig(opts: LoadConfigOptions = {}): Config {
  const env = opts.env ?? process.env;
  const cwd = opts.cwd ?? process.cwd();
  const flags = parseFlags(opts.argv ?? []);
  const file = opts.configPath ?? flags.config ?? nonEmptyEnv(env, 'AGENTD_CONFIG');
  const configPath = file !== undefined ? resolve(cwd, file) : null;
  const raw = configPath !== null ? readConfigFile(configPath) : {};
  return configFromObject(raw, {
    env,
    cwd,
    configPath,
    dataDir: flags['data-dir'],
    baseDir: configPath !== null ? dirname(configPath) : cwd,
    flags: { host: flags.host, port: flags.port },
  });
}

/** JSON Schema (draft 2020-12) of the config file, printed by `agentd config schema`. */
export function configJsonSchema(): Record<string, unknown> {
  return z.toJSONSchema(ConfigSchema, { target: 'draft-2020-12', io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
}
