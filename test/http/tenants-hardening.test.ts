// Tenants, the places ids and code could leak across (docs/multi-tenant.md): a tenant's background
// runs show the task id its client chose in events, traces, OTLP spans and workspace files, with
// `tenant` (never the internal key `acme~task`), and their traces are found by session in the
// tenant's namespace; webhook payloads carry `tenant`; a tenant's workspace template stays among its
// own folders even with shared namespaces allowed; and only a global admin key may register a spec
// that loads a tools module. Runs on the configured store (AGENTD_TEST_STORE=postgres: PostgreSQL).
import { createHash } from 'node:crypto';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp-receiver.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

const FIXTURES = path.resolve('test/fixtures/agents');
const sha = (k: string) => createHash('sha256').update(k).digest('hex');
type Who = 'acme' | 'beta' | 'global';
const ROLES = ['reader', 'operator', 'admin'] as const;
type Role = (typeof ROLES)[number];
const keyOf = (who: Who, role: Role) => `hard-key-${who}-${role}`;
const KEYS = (['acme', 'beta', 'global'] as const).flatMap((who) =>
  ROLES.map((role) => ({ name: `${who}-${role}`, role, key_sha256: sha(keyOf(who, role)), ...(who === 'global' ? {} : { tenant: who }) })),
);
const as = (who: Who, role: Role, extra: Record<string, string> = {}) => ({ authorization: `Bearer ${keyOf(who, role)}`, ...extra });
const task = (task_id: string, extra: Record<string, unknown> = {}) => ({ task_id, query: `run ${task_id}`, schedule: { type: 'manual' }, ...extra });

async function send(method: string, url: string, headers: Record<string, string>, body?: unknown) {
  const res = await fetch(url, {
    method,
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, text, body: text ? JSON.parse(text) : null };
}

let model: ScriptedOpenAI;
let hooks: WebhookReceiver;
let otlp: OtlpReceiver;
let s: TestServer;
/** Each tenant's completed background run of its task `nightly`. */
const runs: Record<'acme' | 'beta', { run_id: string; session_id: string }> = { acme: { run_id: '', session_id: '' }, beta: { run_id: '', session_id: '' } };

beforeAll(async () => {
  [model, hooks, otlp] = await Promise.all([startScriptedOpenAI(), startWebhookReceiver(), startOtlpReceiver()]);
  model.setDefault(() => ({ text: 'ok' }));
  s = await startTestServer(
    {
      auth: { api_keys: KEYS },
      agent: { tools: { builtin: [] } },
      agents: { tools_dirs: [FIXTURES], model_hosts: [new URL(model.url).host] },
      background: { poll_interval_ms: 50, workspace: { allow_shared_namespaces: true } },
      webhooks: { endpoints: [{ url: `${hooks.url}/all`, secret: 'test-secret' }] },
      telemetry: { otlp: { endpoint: otlp.url, protocol: 'http/json' } },
    },
    { modelUrl: model.url },
  );
  for (const who of ['acme', 'beta'] as const) {
    expect((await postJson(`${s.url}/background/tasks`, task('nightly'), as(who, 'operator'))).status).toBe(200);
    const r = await postJson(`${s.url}/background/tasks/nightly/run`, { wait: true }, as(who, 'operator'));
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ status: 'completed', task_id: 'nightly', tenant: who });
    runs[who] = { run_id: r.body.run_id, session_id: r.body.session_id };
  }
}, 60_000);

afterAll(async () => {
  await s?.stop();
  s?.cleanup();
  await Promise.all([model?.close(), hooks?.close(), otlp?.close()]);
});

describe("a tenant's background run shows the client's task id", () => {
  it('in its session id, its events (lifecycle and agent run) and its events answer', async () => {
    // The session is named with the client's ids and lives in the tenant's namespace.
    expect(runs.acme.session_id).not.toContain('~');
    expect(runs.acme.session_id).toBe(runs.beta.session_id);
    const ev = await getJson(`${s.url}/telemetry/events?run_id=${runs.acme.run_id}&limit=1000`, as('acme', 'reader'));
    expect(ev.status).toBe(200);
    const types = ev.body.events.map((e: { event_type: string }) => e.event_type);
    expect(types).toContain('background_run_completed');
    expect(types).toContain('final_answer');
    for (const e of ev.body.events) {
      expect(e.task_id, e.event_type).toBe('nightly');
      expect(e.metadata.task_id, e.event_type).toBe('nightly');
      expect(e.metadata.agent_id, e.event_type).toBe('default');
      expect(e.metadata.tenant, e.event_type).toBe('acme');
      if (e.event_type.startsWith('background_')) expect(e.actor.name).toBe('nightly');
    }
    expect(JSON.stringify(ev.body)).not.toContain('acme~');
    // By task id: each tenant its own task's events only.
    for (const who of ['acme', 'beta'] as const) {
      const byTask = await getJson(`${s.url}/telemetry/events?task_id=nightly&limit=1000`, as(who, 'reader'));
      expect(byTask.body.events.length, who).toBeGreaterThan(0);
      for (const e of byTask.body.events) expect(e.metadata.tenant, who).toBe(who);
    }
    const own = await getJson(`${s.url}/background/runs/${runs.acme.run_id}/events`, as('acme', 'reader'));
    expect(own.body.events.length).toBeGreaterThan(0);
    expect(JSON.stringify(own.body)).not.toContain('acme~');
  });

  it('in its traces, found by run, by task and by session in the tenant namespace', async () => {
    const byRun = await getJson(`${s.url}/telemetry/runs/${runs.acme.run_id}/trace`, as('acme', 'reader'));
    expect(byRun.status).toBe(200);
    expect(byRun.body.trace.task_id).toBe('nightly');
    expect(JSON.stringify(byRun.body)).not.toContain('acme~');
    const byTask = await getJson(`${s.url}/telemetry/traces?task_id=nightly`, as('acme', 'reader'));
    expect(byTask.body.count).toBeGreaterThan(0);
    for (const t of byTask.body.traces) expect(t.run_id).toBe(runs.acme.run_id);
    expect(JSON.stringify(byTask.body)).not.toContain('acme~');
    // Both tenants' runs have the same session id: each key finds its own tenant's trace.
    for (const who of ['acme', 'beta'] as const) {
      const bySession = await getJson(`${s.url}/telemetry/sessions/${encodeURIComponent(runs[who].session_id)}/trace`, as(who, 'reader'));
      expect(bySession.status, who).toBe(200);
      expect(bySession.body.trace.run_id, who).toBe(runs[who].run_id);
      expect(bySession.body.trace.task_id, who).toBe('nightly');
    }
    // A global key acting in acme finds acme's.
    const asAcme = await getJson(
      `${s.url}/telemetry/sessions/${encodeURIComponent(runs.acme.session_id)}/trace`,
      as('global', 'reader', { 'x-agentd-tenant': 'acme' }),
    );
    expect(asAcme.body.trace.run_id).toBe(runs.acme.run_id);
  });

  it('in its OTLP spans, which carry the tenant', async () => {
    const spans = await eventually(
      () => {
        const mine = otlp.spans().filter((sp) => sp.attributes['agentd.run_id'] === runs.acme.run_id);
        return mine.some((sp) => sp.parentSpanId === '') && mine;
      },
      10_000,
      "acme's spans exported",
    );
    for (const sp of spans) {
      expect(sp.attributes['agentd.task_id'], sp.name).toBe('nightly');
      expect(sp.attributes['agentd.tenant'], sp.name).toBe('acme');
    }
    expect(JSON.stringify(otlp.spans().map((sp) => sp.attributes))).not.toContain('acme~');
  });

  it('in its workspace files', async () => {
    const lines = await getJson(`${s.url}/background/runs/${runs.acme.run_id}/workspace/files/events.jsonl`, as('acme', 'reader'));
    expect(lines.status).toBe(200);
    const parsed = String(lines.body)
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(parsed.length).toBeGreaterThan(0);
    for (const l of parsed) expect([l.task_id, l.agent_id, l.tenant]).toEqual(['nightly', 'default', 'acme']);
    const run = await eventually(
      async () => {
        const r = await getJson(`${s.url}/background/runs/${runs.acme.run_id}/workspace/files/run.json`, as('acme', 'reader'));
        return typeof r.body === 'object' && r.body?.status === 'completed' && r;
      },
      10_000,
      'run.json of the ended run',
    );
    expect(run.body).toMatchObject({ task_id: 'nightly', agent_id: 'default', tenant: 'acme' });
  });
});

describe('webhook payloads', () => {
  it("carry a tenant's run's tenant; a global key's run keeps the body it had", async () => {
    const global = await postJson(`${s.url}/run/sync`, { query: 'hello' }, as('global', 'operator'));
    expect(global.status).toBe(200);
    const got = await eventually(
      () => {
        const of = (runId: string, type: string) => hooks.received.find((r) => r.json?.type === type && r.json?.data?.run_id === runId);
        const bg = of(runs.acme.run_id, 'background_run.completed');
        const agentRun = of(runs.acme.run_id, 'run.completed');
        const plain = of(global.body.run_id, 'run.completed');
        return bg && agentRun && plain && { bg, agentRun, plain };
      },
      10_000,
      'deliveries received',
    );
    expect(got.bg.json.data).toMatchObject({ tenant: 'acme', task_id: 'nightly' });
    expect(got.agentRun.json.data).toMatchObject({ tenant: 'acme', task_id: 'nightly' });
    expect(got.plain.json.data).not.toHaveProperty('tenant');
    expect(got.bg.body).not.toContain('acme~');
  });
});

describe("a tenant's workspace template with shared namespaces allowed", () => {
  const HOSTILE = [
    'background/default/beta~nightly/{run_id}', // another tenant's task folder
    'background/beta~bot/acme~x/{run_id}', // under another tenant's agent
    'background/{agent_id}/beta~{task_id}', // a key spelled to look like another tenant's
    'sessions/h_0123456789abcdef0123456789abcdef', // a session's folder (every tenant's live there)
    'shared/{run_id}', // anywhere else under the root
    'background/default', // the agent's folder itself
    'background/default/acme~', // a task key with no task
  ];

  it("is refused outside its own tasks' folders (422 at the template), at creation and in PATCH", async () => {
    for (const template of HOSTILE) {
      const r = await postJson(`${s.url}/background/tasks`, task('hostile', { workspace_policy: { namespace_template: template } }), as('acme', 'operator'));
      expect(r.status, template).toBe(422);
      expect(r.body.detail[0].loc, template).toEqual(['body', 'workspace_policy', 'namespace_template']);
      const p = await send('PATCH', `${s.url}/background/tasks/nightly`, as('acme', 'operator'), { workspace_policy: { namespace_template: template } });
      expect(p.status, template).toBe(422);
    }
    expect((await getJson(`${s.url}/background/tasks/hostile`, as('acme', 'reader'))).status).toBe(404);
  });

  it("is allowed among its own tasks' folders; a global key's may point anywhere", async () => {
    for (const [i, template] of ['background/{agent_id}/{task_id}/custom/{run_id}', 'background/default/acme~nightly/shared'].entries()) {
      const r = await postJson(`${s.url}/background/tasks`, task(`own-${i}`, { workspace_policy: { namespace_template: template } }), as('acme', 'operator'));
      expect(r.status, `${template}: ${JSON.stringify(r.body)}`).toBe(200);
    }
    const g = await postJson(
      `${s.url}/background/tasks`,
      task('global-shared', { workspace_policy: { namespace_template: 'shared/{run_id}' } }),
      as('global', 'operator'),
    );
    expect(g.status, JSON.stringify(g.body)).toBe(200);
  });
});

describe('a spec that loads a tools module', () => {
  const spec = (agent_id: string) => ({ agent_id, local_tools_ref: path.join(FIXTURES, 'alt-tools.mjs') });

  it('is refused to every tenant key, admin included, and nothing is stored', async () => {
    for (const role of ['admin', 'operator'] as const) {
      const r = await postJson(`${s.url}/background/agents`, { spec: spec('with-code') }, as('acme', role));
      expect(r.status, role).toBe(403);
      expect(r.body.code, role).toBe('AGT_ERR_TENANT_TOOLS_MODULE');
    }
    expect((await getJson(`${s.url}/background/agents/with-code`, as('acme', 'reader'))).status).toBe(404);
    // Without a tools module a tenant's admin registers its own agent as before.
    const plain = await postJson(`${s.url}/background/agents`, { spec: { agent_id: 'plain' } }, as('acme', 'admin'));
    expect(plain.status, JSON.stringify(plain.body)).toBe(200);
  });

  it("is registered by a global admin key, in a tenant's namespace with x-agentd-tenant", async () => {
    const shared = await postJson(`${s.url}/background/agents`, { spec: spec('shared-code') }, as('global', 'admin'));
    expect(shared.status, JSON.stringify(shared.body)).toBe(200);
    const forAcme = await postJson(`${s.url}/background/agents`, { spec: spec('acme-code') }, as('global', 'admin', { 'x-agentd-tenant': 'acme' }));
    expect(forAcme.status, JSON.stringify(forAcme.body)).toBe(200);
    expect(forAcme.body.tenant).toBe('acme');
    expect((await getJson(`${s.url}/background/agents/acme-code`, as('acme', 'reader'))).status).toBe(200);
    expect((await getJson(`${s.url}/background/agents/acme-code`, as('beta', 'reader'))).status).toBe(404);
  });
});
