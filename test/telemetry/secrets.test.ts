// The registry of configured secret values and `agentd config check`,
// which printed OTLP/MCP header values, MCP env tokens and the store URL's password as they were.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { configFromObject } from '../../src/config.js';
import { REDACTED } from '../../src/telemetry/redact.js';
import { configCheckJson, configuredSecrets, redactorForConfig } from '../../src/telemetry/secrets.js';

const MODEL_KEY = 'mk-' + 'Zr5Tq8Wn2Yp6Lc4V';
const OTLP_TOKEN = 'otlp-' + 'Hh3Jk8Ll1Mm6';
const MCP_BEARER = 'mcp-' + 'Pp9Oo8Ii7Uu6';
const MCP_ENV_TOKEN = 'gh-env-' + 'Yy5Tt4Rr3Ee2';
const DB_PASSWORD = 'pg-' + 'Qq1Ww2Ee3Rr4';
const MCP_DB_PASSWORD = 'mcpdb-' + 'Aa1Ss2Dd3';

const file = {
  store: { kind: 'postgres', url: `postgres://agentd:${DB_PASSWORD}@db:5432/agentd` },
  agent: {
    model: { provider: 'openai-compatible', base_url: 'http://127.0.0.1:9/v1', model: 'm' },
    tools: {
      builtin: [],
      mcp: [
        { name: 'remote', url: 'https://mcp.example/mcp', headers: { Authorization: `Bearer ${MCP_BEARER}`, 'X-Tenant': 'acme' } },
        {
          name: 'local',
          command: 'node',
          args: ['server.js'],
          env: { GITHUB_TOKEN: MCP_ENV_TOKEN, NODE_ENV: 'production', LOG_LEVEL: 'debug', DATABASE_URL: `postgres://u:${MCP_DB_PASSWORD}@h/db` },
        },
      ],
    },
  },
  telemetry: { otlp: { endpoint: 'http://127.0.0.1:4318', headers: { 'x-honeycomb-team': OTLP_TOKEN } } },
};
const config = configFromObject(file, { env: { AGENTD_MODEL_API_KEY: MODEL_KEY }, dataDir: '/tmp/agentd-secrets-test' });

describe('configuredSecrets', () => {
  it('collects the model key, header values (with and without the scheme), credential env values and URL passwords', () => {
    const secrets = configuredSecrets(config);
    for (const s of [MODEL_KEY, OTLP_TOKEN, `Bearer ${MCP_BEARER}`, MCP_BEARER, MCP_ENV_TOKEN, DB_PASSWORD, MCP_DB_PASSWORD]) {
      expect(secrets).toContain(s);
    }
  });

  it('leaves out plain settings and values too short to be meaningful', () => {
    const secrets = configuredSecrets(config);
    expect(secrets).not.toContain('production'); // NODE_ENV: not a credential name
    expect(secrets).not.toContain('debug');
    expect(secrets).not.toContain('acme'); // a header value, but under 8 characters
  });

  it('the process redactor scrubs each of them from any text', () => {
    const redactor = redactorForConfig(config);
    const text = `echoed ${MODEL_KEY} ${OTLP_TOKEN} ${MCP_BEARER} ${MCP_ENV_TOKEN} ${DB_PASSWORD} ${MCP_DB_PASSWORD} in production`;
    expect(redactor.text(text)).toBe(`echoed ${Array(6).fill(REDACTED).join(' ')} in production`);
    expect(redactorForConfig(config)).toBe(redactor); // built once per config
  });
});

describe('agentd config check', () => {
  const secrets = [MODEL_KEY, OTLP_TOKEN, MCP_BEARER, MCP_ENV_TOKEN, DB_PASSWORD, MCP_DB_PASSWORD];

  it('configCheckJson masks every configured secret and keeps the rest readable', () => {
    const text = configCheckJson(config);
    for (const s of secrets) expect(text).not.toContain(s);
    const printed = JSON.parse(text);
    expect(printed.telemetry.otlp.headers).toEqual({ 'x-honeycomb-team': REDACTED });
    expect(printed.agent.tools.mcp[0].headers).toEqual({ Authorization: REDACTED, 'X-Tenant': 'acme' });
    expect(printed.agent.tools.mcp[1].env).toMatchObject({ GITHUB_TOKEN: REDACTED, NODE_ENV: 'production', DATABASE_URL: `postgres://u:${REDACTED}@h/db` });
    expect(printed.store.url).toBe(`postgres://agentd:${REDACTED}@db:5432/agentd`);
    expect(printed.agent.model.base_url).toBe('http://127.0.0.1:9/v1');
  });

  const dir = mkdtempSync(join(tmpdir(), 'agentd-config-check-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('the CLI prints the masked config', () => {
    const path = join(dir, 'agentd.json');
    writeFileSync(path, JSON.stringify(file));
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'config', 'check', '--config', path], {
      cwd: join(import.meta.dirname, '../..'),
      env: { PATH: process.env.PATH, AGENTD_MODEL_API_KEY: MODEL_KEY, AGENTD_DATA_DIR: dir },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.status, r.stderr).toBe(0);
    const printed = JSON.parse(r.stdout);
    expect(printed.telemetry.otlp.headers['x-honeycomb-team']).toBe(REDACTED);
    for (const s of secrets) expect(r.stdout).not.toContain(s);
  });
});
