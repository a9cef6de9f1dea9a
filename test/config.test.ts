import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, configFromObject, configJsonSchema, loadConfig } from '../src/config.js';

const dir = mkdtempSync(join(tmpdir(), 'agentd-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function writeConfig(content: unknown): string {
  const path = join(dir, `config-${n++}.json`);
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
}

function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('loadConfig defaults', () => {
  const c = loadConfig({ argv: [], env: {}, cwd: dir });

  it('has every documented default', () => {
    expect(c.server).toEqual({
      host: '127.0.0.1',
      port: 8000,
      max_body_bytes: 1048576,
      request_timeout_seconds: 300,
      max_concurrent_runs: 64,
      headers_timeout_seconds: 10,
      body_timeout_seconds: 30,
      keep_alive_timeout_seconds: 5,
      max_connections: 4096,
      max_streams_per_key: 256,
      max_json_depth: 64,
      stream_max_queued_events: 1000,
      stream_max_queued_bytes: 8388608,
      stream_drop_grace_seconds: 5,
      cors: { origins: [] },
      protocols: { ai_sdk: { resumable: true } },
    });
    expect(c.data_dir).toBe(join(dir, '.agentd'));
    expect(c.config_path).toBeNull();
    expect(c.store).toEqual({ kind: 'level', path: join(dir, '.agentd'), sync: true, pool_size: 10, statement_timeout_ms: 30000 });
    expect(c.agent.name).toBe('assistant');
    expect(c.agent.max_steps).toBe(10);
    expect(c.agent.model.provider).toBe('demo');
    expect(c.agent.model.model).toBe('demo');
    expect(c.agent.model.api_key).toBeNull();
    expect(c.governance).toEqual({ enabled: true, default_effect: 'allow', approval_expires_seconds: 86400, rules: [] });
    expect(c.runs).toEqual({
      lease_seconds: 60,
      orphan_sweep: { enabled: true, interval_seconds: 30, max_recoveries: 3, decided_grace_seconds: 30 },
      session_policy: 'enqueue',
      checkpoints: true,
    });
    expect(c.background).toEqual({
      enabled: true,
      agent_id: 'default',
      lease_seconds: 30,
      concurrency: 4,
      workspace_root: join(dir, '.agentd', 'workspaces'),
      max_queued_runs: 10_000,
      poll_interval_ms: 250,
      run_retention: { max_age_days: 30, max_runs_per_task: 1000, sweep_interval_seconds: 60 },
      workspace: { allow_shared_namespaces: false },
    });
    expect(c.telemetry.capture).toBe('full');
    expect(c.telemetry.retention_days).toBe(30);
    expect(c.budgets.run).toEqual([]);
    expect(c.budgets.application).toEqual([]);
    expect(c.auth.api_keys).toEqual([]);
  });

  it('is deeply frozen', () => {
    expect(Object.isFrozen(c)).toBe(true);
    expect(Object.isFrozen(c.server)).toBe(true);
    expect(Object.isFrozen(c.runs.orphan_sweep)).toBe(true);
    expect(Object.isFrozen(c.agent.tools.builtin)).toBe(true);
    expect(() => {
      (c.server as { port: number }).port = 1;
    }).toThrow(TypeError);
  });
});

describe('sources and precedence', () => {
  it('reads the file named by AGENTD_CONFIG, resolving relative paths against it', () => {
    const path = writeConfig({ server: { port: 9001 }, agent: { max_steps: 4 }, background: { workspace_root: 'ws' } });
    const c = loadConfig({ env: { AGENTD_CONFIG: path }, cwd: '/' });
    expect(c.server.port).toBe(9001);
    expect(c.agent.max_steps).toBe(4);
    expect(c.config_path).toBe(path);
    expect(c.background.workspace_root).toBe(join(dir, 'ws'));
  });

  it('env overrides the file; CLI flags override env', () => {
    const path = writeConfig({ server: { host: 'file-host', port: 9001 } });
    const env = { AGENTD_HOST: 'env-host', AGENTD_PORT: '9002', AGENTD_DATA_DIR: join(dir, 'env-data') };
    const fromEnv = loadConfig({ argv: ['--config', path], env });
    expect(fromEnv.server.host).toBe('env-host');
    expect(fromEnv.server.port).toBe(9002);
    expect(fromEnv.data_dir).toBe(join(dir, 'env-data'));
    const fromFlags = loadConfig({
      argv: ['serve', '--config', path, '--host', 'flag-host', '--port=9003', '--data-dir', join(dir, 'flag-data'), '--inspect'],
      env,
    });
    expect(fromFlags.server.host).toBe('flag-host');
    expect(fromFlags.server.port).toBe(9003);
    expect(fromFlags.data_dir).toBe(join(dir, 'flag-data'));
    expect(fromFlags.store.path).toBe(join(dir, 'flag-data'));
  });

  it('--config wins over AGENTD_CONFIG, and configPath over both', () => {
    const a = writeConfig({ agent: { name: 'a' } });
    const b = writeConfig({ agent: { name: 'b' } });
    const c2 = writeConfig({ agent: { name: 'c' } });
    expect(loadConfig({ argv: ['--config', b], env: { AGENTD_CONFIG: a } }).agent.name).toBe('b');
    expect(loadConfig({ argv: ['--config', b], env: { AGENTD_CONFIG: a }, configPath: c2 }).agent.name).toBe('c');
  });

  it('AGENTD_MODEL_BASE_URL with no provider in the file means openai-compatible', () => {
    const c = loadConfig({ env: { AGENTD_MODEL_BASE_URL: 'http://localhost:11434/v1', AGENTD_MODEL: 'llama3' } });
    expect(c.agent.model.provider).toBe('openai-compatible');
    expect(c.agent.model.base_url).toBe('http://localhost:11434/v1');
    expect(c.agent.model.model).toBe('llama3');
    // a provider chosen in the file is kept
    const path = writeConfig({ agent: { model: { provider: 'openai', model: 'gpt-x' } } });
    const kept = loadConfig({ configPath: path, env: { AGENTD_MODEL_BASE_URL: 'http://proxy/v1', OPENAI_API_KEY: 'sk-o' } });
    expect(kept.agent.model.provider).toBe('openai');
    expect(kept.agent.model.base_url).toBe('http://proxy/v1');
  });

  it('API key: AGENTD_MODEL_API_KEY, else OPENAI_API_KEY; never enumerable', () => {
    const env = { AGENTD_MODEL_BASE_URL: 'http://localhost:1/v1', AGENTD_MODEL: 'm', OPENAI_API_KEY: 'sk-openai' };
    expect(loadConfig({ env }).agent.model.api_key).toBe('sk-openai');
    const c = loadConfig({ env: { ...env, AGENTD_MODEL_API_KEY: 'sk-agentd' } });
    expect(c.agent.model.api_key).toBe('sk-agentd');
    expect(JSON.stringify(c)).not.toContain('sk-agentd');
    expect(inspect(c, { depth: 10 })).not.toContain('sk-agentd');
  });

  it('OTEL_EXPORTER_OTLP_ENDPOINT is a fallback for telemetry.otlp.endpoint', () => {
    expect(loadConfig({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://otel:4318' } }).telemetry.otlp.endpoint).toBe('http://otel:4318');
    const path = writeConfig({ telemetry: { otlp: { endpoint: 'http://file:4318' } } });
    expect(loadConfig({ configPath: path, env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://otel:4318' } }).telemetry.otlp.endpoint).toBe('http://file:4318');
  });
});

describe('errors', () => {
  it('one line per bad field, unknown keys named with their path', () => {
    const path = writeConfig({ server: { prot: 8000 }, agent: { max_steps: 0 }, telemetry: { capture: 'some' } });
    const e = configError(() => loadConfig({ configPath: path, env: {} }));
    expect(e.message).toContain(path);
    expect(e.problems).toEqual(
      expect.arrayContaining([
        'unknown key: server.prot',
        'agent.max_steps: expected a positive integer',
        'telemetry.capture: expected one of "full", "metadata_only"',
      ]),
    );
    expect(e.problems).toHaveLength(3);
    for (const p of e.problems) expect(e.message).toContain(p);
  });

  it('names the env var or flag that supplied a bad value', () => {
    expect(configError(() => loadConfig({ env: { AGENTD_PORT: 'eighty' } })).problems).toEqual([
      'server.port (from AGENTD_PORT): expected an integer port between 0 and 65535',
    ]);
    expect(configError(() => loadConfig({ argv: ['--port', '70000'], env: {} })).problems).toEqual([
      'server.port (from --port): expected an integer port between 0 and 65535',
    ]);
    expect(configError(() => loadConfig({ argv: ['--port'], env: {} })).problems).toEqual(['--port: expected a value']);
  });

  it('unknown top-level keys, nested array paths and cross-field rules', () => {
    expect(configError(() => configFromObject({ servr: {} }, { env: {} })).problems).toEqual(['unknown key: servr']);
    expect(configError(() => configFromObject({ agent: { tools: { mcp: [{ name: 'fs', command: 7 }] } } }, { env: {} })).problems).toEqual([
      'agent.tools.mcp[0].command: expected a non-empty string',
    ]);
    expect(configError(() => configFromObject({ store: { kind: 'postgres' } }, { env: {} })).problems).toEqual([
      'store.url: required when store.kind is "postgres"',
    ]);
    expect(configError(() => configFromObject({ budgets: { run: [{ meter: 'cost_usd', limit: 1 }] } }, { env: {} })).problems[0]).toMatch(
      /^pricing: a cost_usd budget needs a price for model "demo"/,
    );
    expect(configError(() => configFromObject({ agent: { model: { provider: 'openai', model: 'gpt-x' } } }, { env: {} })).problems[0]).toMatch(
      /^agent\.model\.api_key: provider "openai" needs an API key/,
    );
    expect(configError(() => configFromObject({ agent: { guardrails: { deny_patterns: ['('] } } }, { env: {} })).problems).toEqual([
      'agent.guardrails.deny_patterns[0]: expected a valid regular expression',
    ]);
    expect(configError(() => configFromObject({ budgets: { session: [{ meter: 'tokens', limit: 0 }] } }, { env: {} })).problems).toEqual([
      'budgets.session[0].limit: expected a number greater than 0',
    ]);
  });

  it('store: AGENTD_STORE_URL picks PostgreSQL unless the file names a kind; pool and timeout keys; a non-postgres URL is refused without echoing it', () => {
    const url = 'postgres://agentd:s3cret-pass@db.internal:5432/agentd';
    const fromEnv = configFromObject({}, { env: { AGENTD_STORE_URL: url } });
    expect(fromEnv.store).toMatchObject({ kind: 'postgres', url, pool_size: 10, statement_timeout_ms: 30000 });
    expect(configFromObject({ store: { kind: 'level' } }, { env: { AGENTD_STORE_URL: url } }).store.kind).toBe('level');
    expect(configFromObject({ store: { kind: 'postgres', url: 'postgres://x/y', pool_size: 3, statement_timeout_ms: 0 } }, { env: {} }).store).toMatchObject({
      pool_size: 3,
      statement_timeout_ms: 0,
      url: 'postgres://x/y',
    });
    const problems = configError(() => configFromObject({ store: { kind: 'postgres', url: 'mysql://u:hunter2-secret@h/db' } }, { env: {} })).problems;
    expect(problems).toEqual(['store.url: expected a postgres:// or postgresql:// connection string']);
    expect(configError(() => configFromObject({ store: { pool_size: 0 } }, { env: {} })).problems).toEqual(['store.pool_size: expected a positive integer']);
  });

  it('a missing or malformed file is a ConfigError', () => {
    expect(configError(() => loadConfig({ configPath: join(dir, 'nope.json'), env: {} })).problems).toEqual(['file not found']);
    expect(configError(() => loadConfig({ configPath: writeConfig('{ not json'), env: {} })).problems[0]).toMatch(/^not valid JSON/);
    expect(configError(() => loadConfig({ configPath: writeConfig('[1]'), env: {} })).problems).toEqual(['(root): expected a JSON object']);
  });
});

describe('a full file', () => {
  it('accepts every section of docs/contract.md §10', () => {
    const c = configFromObject(
      {
        $schema: './agentd.schema.json',
        server: { host: '0.0.0.0', port: 0, max_body_bytes: 2048, request_timeout_seconds: 10, max_concurrent_runs: 2 },
        store: { kind: 'postgres', url: 'postgres://localhost/agentd' },
        agent: {
          name: 'helper',
          system_instruction: 'Be brief.',
          max_steps: 5,
          model: { provider: 'anthropic', model: 'claude-x', api_key_env: 'MY_KEY', max_output_tokens: 512, temperature: 0.2 },
          tools: {
            local: './tools.mjs',
            mcp: [
              { name: 'fs', command: 'npx', args: ['-y', 'server-fs'] },
              { name: 'web', url: 'http://localhost:3001/mcp', headers: { a: 'b' } },
            ],
            builtin: ['clock'],
          },
          subagents: [{ name: 'researcher', description: 'looks things up', tools: ['clock'] }],
          guardrails: { max_input_chars: 1000, deny_patterns: ['pass(word)?'] },
        },
        governance: { enabled: true, default_effect: 'ask', approval_expires_seconds: 60, rules: [{ tools: ['send_*'], effect: 'ask', reason: 'emails' }] },
        budgets: {
          run: [{ meter: 'cost_usd', limit: 0.5 }],
          session: [{ meter: 'tokens', limit: 10000, window: 'day', on_exhausted: 'terminate', warn_at: 0.9 }],
          application_id: 'prod',
        },
        pricing: { 'claude-x': { input_per_million_usd: 3, output_per_million_usd: 15 } },
        runs: { lease_seconds: 20, orphan_sweep: { enabled: false } },
        background: { enabled: false, agent_id: 'bg', concurrency: 1 },
        telemetry: { capture: 'metadata_only', retention_days: 7, otlp: { endpoint: 'http://otel:4318', protocol: 'http/protobuf' } },
        auth: { api_keys: [{ name: 'ops', key_sha256: 'A'.repeat(64), role: 'admin' }], bind_approver: true },
      },
      { env: { MY_KEY: 'sk-ant' }, baseDir: dir, dataDir: join(dir, 'data') },
    );
    expect(c.agent.model.api_key).toBe('sk-ant');
    expect(c.agent.tools.local).toBe(join(dir, 'tools.mjs'));
    expect(c.agent.tools.mcp[0]).toEqual({ name: 'fs', command: 'npx', args: ['-y', 'server-fs'], env: {} });
    expect(c.budgets.run[0]).toEqual({ meter: 'cost_usd', limit: 0.5, window: 'total', on_exhausted: 'pause', warn_at: 0.8 });
    expect(c.auth.api_keys[0].key_sha256).toBe('a'.repeat(64));
    expect(c.runs.orphan_sweep.interval_seconds).toBe(30);
    expect('$schema' in c).toBe(false);
  });
});

describe('configJsonSchema', () => {
  it('is a draft 2020-12 schema with every section and no extra keys allowed', () => {
    const s = configJsonSchema() as {
      $schema: string;
      properties: Record<string, { properties?: Record<string, { default?: unknown }> }>;
      additionalProperties: boolean;
    };
    expect(s.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
    expect(Object.keys(s.properties)).toEqual(
      expect.arrayContaining(['server', 'store', 'agent', 'governance', 'budgets', 'pricing', 'runs', 'background', 'telemetry', 'auth']),
    );
    expect(s.additionalProperties).toBe(false);
    expect(s.properties.server.properties?.port.default).toBe(8000);
  });
});

describe('config schema descriptions', () => {
  it('describes every key, nested ones included (editors show them on hover)', () => {
    const missing: string[] = [];
    const walk = (node: any, path: string): void => {
      if (!node || typeof node !== 'object') return;
      for (const [key, child] of Object.entries<any>(node.properties ?? {})) {
        const at = path ? `${path}.${key}` : key;
        if (!child.description) missing.push(at);
        walk(child, at);
      }
      for (const k of ['items', 'additionalProperties']) if (node[k] && typeof node[k] === 'object') walk(node[k], `${path}[]`);
      for (const k of ['anyOf', 'oneOf', 'allOf']) if (Array.isArray(node[k])) for (const alt of node[k]) walk(alt, path);
    };
    walk(configJsonSchema(), '');
    expect(missing).toEqual([]);
  });
});
