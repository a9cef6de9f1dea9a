// Tenants on background agents, tasks and runs (docs/multi-tenant.md): a tenant's task and agent
// ids live in its namespace (the same task id in two tenants is two tasks, never a 409), every
// list, get, count and action is its own, another tenant's id answers exactly as a missing one;
// agents of a global key are shared (run and read by every tenant, changed only by global keys).
// Runs on the configured store (AGENTD_TEST_STORE=postgres runs it on PostgreSQL).
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

const sha = (k: string) => createHash('sha256').update(k).digest('hex');
const ROLES = ['reader', 'operator', 'admin'] as const;
type Role = (typeof ROLES)[number];
type Who = 'acme' | 'beta' | 'global';
const keyOf = (who: Who, role: Role) => `bg-key-${who}-${role}`;
const KEYS = [
  ...ROLES.flatMap((role) => (['acme', 'beta'] as const).map((tenant) => ({ name: `${tenant}-${role}`, role, tenant, key_sha256: sha(keyOf(tenant, role)) }))),
  ...ROLES.map((role) => ({ name: `global-${role}`, role, key_sha256: sha(keyOf('global', role)) })),
];
const as = (who: Who, role: Role, extra: Record<string, string> = {}) => ({ authorization: `Bearer ${keyOf(who, role)}`, ...extra });

async function call(method: string, url: string, headers: Record<string, string>, body?: unknown) {
  const res = await fetch(url, {
    method,
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: any = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed, text };
}

let model: ScriptedOpenAI;
let hooks: WebhookReceiver;
let s: TestServer;
const task = (task_id: string, extra: Record<string, unknown> = {}) => ({ task_id, query: `run ${task_id}`, schedule: { type: 'manual' }, ...extra });
/** Tenant A's records: a completed background run of its task `same` and a task only it has. */
const A = { run: '', onlyTask: 'first-only', agent: 'acme-writer' };
let bRun = '';

beforeAll(async () => {
  model = await startScriptedOpenAI();
  model.setDefault(() => ({ text: 'ok' }));
  hooks = await startWebhookReceiver();
  s = await startTestServer(
    {
      auth: { api_keys: KEYS },
      agent: { tools: { builtin: [] } },
      background: { poll_interval_ms: 50 },
      webhooks: { endpoints: [{ url: `${hooks.url}/all`, secret: 'test-secret' }] },
    },
    { modelUrl: model.url },
  );
  // The same task id in both tenants: two tasks.
  for (const who of ['acme', 'beta'] as const) {
    const r = await postJson(`${s.url}/background/tasks`, task('same'), as(who, 'operator'));
    expect(r.status, who).toBe(200);
    expect(r.body).toMatchObject({ task_id: 'same', agent_id: 'default', tenant: who });
  }
  expect((await postJson(`${s.url}/background/tasks`, task(A.onlyTask), as('acme', 'operator'))).status).toBe(200);
  const a = await postJson(`${s.url}/background/tasks/same/run`, { wait: true }, as('acme', 'operator'));
  expect(a.status).toBe(200);
  expect(a.body).toMatchObject({ status: 'completed', task_id: 'same', agent_id: 'default', tenant: 'acme' });
  A.run = a.body.run_id;
}, 60_000);

afterAll(async () => {
  await s?.stop();
  s?.cleanup();
  await model?.close();
  await hooks?.close();
});

describe('background tasks and runs per tenant', () => {
  it('lists, counts and answers only the tenant its own tasks and runs', async () => {
    const tasks = await getJson(`${s.url}/background/tasks`, as('beta', 'reader'));
    expect(tasks.status).toBe(200);
    expect(tasks.body.tasks.map((t: { task_id: string }) => t.task_id)).toEqual(['same']);
    expect(tasks.body.total).toBe(1);
    expect(tasks.body.tasks[0].tenant).toBe('beta');
    const runs = await getJson(`${s.url}/background/runs`, as('beta', 'reader'));
    expect(runs.body).toMatchObject({ runs: [], total: 0 });
    for (const q of ['?task_id=same', '?status=completed', '?task_id=same&status=completed', '?agent_id=default'])
      expect((await getJson(`${s.url}/background/runs${q}`, as('beta', 'reader'))).body, q).toMatchObject({ runs: [], total: 0 });
    const status = await getJson(`${s.url}/background/status`, as('beta', 'reader'));
    expect(status.body).toMatchObject({ tasks: 1, runs: 0, active_runs: 0 });
    expect(status.body.status_counts.completed).toBe(0);
    const taskStatus = await getJson(`${s.url}/background/tasks/same/status`, as('beta', 'reader'));
    expect(taskStatus.body).toMatchObject({ task_id: 'same', runs: 0, latest_run: null });
    // Acme sees its own.
    const mine = await getJson(`${s.url}/background/runs?task_id=same`, as('acme', 'reader'));
    expect(mine.body.runs.map((r: { run_id: string }) => r.run_id)).toEqual([A.run]);
    expect(mine.body.total).toBe(1);
    expect((await getJson(`${s.url}/background/status`, as('acme', 'reader'))).body).toMatchObject({ tasks: 2, runs: 1 });
    expect((await getJson(`${s.url}/background/runs?agent_id=default`, as('acme', 'reader'))).body.runs).toHaveLength(1);
  });

  it('runs each tenant its own task of the same id, its agent run stamped with the tenant', async () => {
    const b = await postJson(`${s.url}/background/tasks/same/run`, { wait: true }, as('beta', 'operator'));
    expect(b.status).toBe(200);
    expect(b.body).toMatchObject({ status: 'completed', task_id: 'same', tenant: 'beta' });
    bRun = b.body.run_id;
    expect(b.body.session_id).not.toContain('acme');
    // The agent run of each attempt is the tenant's (GET /runs filters it).
    const own = await getJson(`${s.url}/runs`, as('beta', 'reader'));
    expect(own.body.runs.map((r: { tenant?: string }) => r.tenant)).toEqual(['beta']);
    const other = await getJson(`${s.url}/runs`, as('acme', 'reader'));
    expect(other.body.runs.map((r: { tenant?: string }) => r.tenant)).toEqual(['acme']);
    // GET /runs by the task id the tenant chose: its own task's agent runs, shown with that id.
    for (const who of ['acme', 'beta'] as const) {
      const byTask = await getJson(`${s.url}/runs?task_id=same`, as(who, 'reader'));
      expect(
        byTask.body.runs.map((r: { tenant?: string; task_id: string }) => [r.tenant, r.task_id]),
        who,
      ).toEqual([[who, 'same']]);
      expect(byTask.body.total, who).toBe(1);
    }
    expect((await getJson(`${s.url}/background/tasks/same/status`, as('acme', 'reader'))).body.runs).toBe(1);
    expect((await getJson(`${s.url}/background/tasks/same/status`, as('beta', 'reader'))).body.runs).toBe(1);
  });

  it("answers another tenant's task and run ids exactly as ids that do not exist", async () => {
    const pairs: Array<[string, string, string, unknown?]> = [
      ['GET', `/background/tasks/${A.onlyTask}`, '/background/tasks/missing-task'],
      ['GET', `/background/tasks/${A.onlyTask}/status`, '/background/tasks/missing-task/status'],
      ['GET', `/background/tasks/${A.onlyTask}/schedule`, '/background/tasks/missing-task/schedule'],
      ['PATCH', `/background/tasks/${A.onlyTask}`, '/background/tasks/missing-task', { query: 'changed' }],
      ['DELETE', `/background/tasks/${A.onlyTask}`, '/background/tasks/missing-task'],
      ['POST', `/background/tasks/${A.onlyTask}/run`, '/background/tasks/missing-task/run', {}],
      ['POST', `/background/tasks/${A.onlyTask}/runs`, '/background/tasks/missing-task/runs', { runs: [{}] }],
      ['POST', `/background/tasks/${A.onlyTask}/pause`, '/background/tasks/missing-task/pause', {}],
      ['POST', `/background/tasks/${A.onlyTask}/resume`, '/background/tasks/missing-task/resume', {}],
      ['GET', `/background/runs/${A.run}`, '/background/runs/bgrun_missing'],
      ['GET', `/background/runs/${A.run}/attempts`, '/background/runs/bgrun_missing/attempts'],
      ['GET', `/background/runs/${A.run}/events`, '/background/runs/bgrun_missing/events'],
      ['GET', `/background/runs/${A.run}/workspace`, '/background/runs/bgrun_missing/workspace'],
      ['GET', `/background/runs/${A.run}/workspace/files/run.json`, '/background/runs/bgrun_missing/workspace/files/run.json'],
      ['POST', `/background/runs/${A.run}/cancel`, '/background/runs/bgrun_missing/cancel', {}],
      ['POST', `/background/runs/${A.run}/resume`, '/background/runs/bgrun_missing/resume', {}],
    ];
    for (const [method, theirs, missing, body] of pairs) {
      const t = await call(method, `${s.url}${theirs}`, as('beta', 'admin'), body);
      const m = await call(method, `${s.url}${missing}`, as('beta', 'admin'), body);
      expect(t.status, `${method} ${theirs}`).toBe(404);
      expect(m.status, `${method} ${missing}`).toBe(404);
      expect(t.body.code, theirs).toBe(m.body.code);
      expect(t.text, theirs).not.toContain('acme');
    }
    // Nothing of A's changed; a global key acting in acme sees it.
    const inAcme = as('global', 'reader', { 'x-agentd-tenant': 'acme' });
    const still = await getJson(`${s.url}/background/tasks/${A.onlyTask}`, inAcme);
    expect(still.status).toBe(200);
    expect(still.body).toMatchObject({ query: `run ${A.onlyTask}`, tenant: 'acme' });
    expect((await getJson(`${s.url}/background/runs/${A.run}/events`, inAcme)).body.events[0]).toMatchObject({ task_id: 'same', agent_id: 'default' });
    expect((await getJson(`${s.url}/background/runs/${A.run}/workspace/files/run.json`, inAcme)).status).toBe(200);
  });

  it("writes a tenant's run workspace files with the client's ids and the tenant (run.json, events.jsonl lines without data)", async () => {
    const inAcme = as('global', 'reader', { 'x-agentd-tenant': 'acme' });
    const files = `${s.url}/background/runs/${A.run}/workspace/files`;
    // The terminal step's files: run.json completed, and its line.
    const run = await eventually(async () => {
      const r = await getJson(`${files}/run.json`, inAcme);
      return r.status === 200 && r.body.status === 'completed' ? r.body : null;
    });
    expect(run).toMatchObject({ run_id: A.run, task_id: 'same', agent_id: 'default', tenant: 'acme' });
    const lines = await eventually(async () => {
      const r = await call('GET', `${files}/events.jsonl`, inAcme);
      const parsed =
        r.status === 200
          ? r.text
              .trim()
              .split('\n')
              .map((l) => JSON.parse(l) as Record<string, unknown>)
          : [];
      return parsed.at(-1)?.status === 'completed' ? parsed : null;
    });
    for (const l of lines) {
      expect(l).toMatchObject({ run_id: A.run, task_id: 'same', agent_id: 'default', tenant: 'acme' });
      expect(Object.keys(l)).toEqual([
        'sequence',
        'event',
        'timestamp',
        'run_id',
        'task_id',
        'agent_id',
        'status',
        'attempt',
        'worker_id',
        'lease_generation',
        'tenant',
      ]);
    }
  });

  it('lists every tenant to a global key, each record carrying its tenant', async () => {
    const tasks = await getJson(`${s.url}/background/tasks?limit=100`, as('global', 'reader'));
    const same = tasks.body.tasks.filter((t: { task_id: string }) => t.task_id === 'same').map((t: { tenant?: string }) => t.tenant);
    expect(same.sort()).toEqual(['acme', 'beta']);
    const runs = await getJson(`${s.url}/background/runs`, as('global', 'reader'));
    const byId = new Map(runs.body.runs.map((r: { run_id: string; tenant?: string }) => [r.run_id, r.tenant]));
    expect(byId.get(A.run)).toBe('acme');
    expect(byId.get(bRun)).toBe('beta');
    expect((await getJson(`${s.url}/background/status`, as('global', 'reader'))).body).toMatchObject({ tasks: 3, runs: 2 });
    // The no-tenant namespace of a global key holds neither tenant's task.
    expect((await getJson(`${s.url}/background/tasks/same`, as('global', 'reader'))).status).toBe(404);
  });
});

describe('background agents per tenant', () => {
  it("keeps a tenant's agent in its namespace and shares a global key's with every tenant", async () => {
    const shared = await postJson(`${s.url}/background/agents`, { agent_id: 'shared-agent' }, as('global', 'admin'));
    expect(shared.status).toBe(200);
    expect(shared.body.tenant).toBeUndefined();
    const own = await postJson(`${s.url}/background/agents`, { agent_id: A.agent }, as('acme', 'operator'));
    expect(own.status).toBe(200);
    expect(own.body).toMatchObject({ agent_id: A.agent, tenant: 'acme' });
    // The same id in beta: its own, never a 409.
    expect((await postJson(`${s.url}/background/agents`, { agent_id: A.agent }, as('beta', 'operator'))).body.tenant).toBe('beta');
    const other = await postJson(`${s.url}/background/agents`, { agent_id: 'only-acme-agent' }, as('acme', 'operator'));
    expect(other.status).toBe(200);

    const list = await getJson(`${s.url}/background/agents`, as('beta', 'reader'));
    const ids = list.body.agents.map((x: { agent_id: string }) => x.agent_id).sort();
    expect(ids).toEqual([A.agent, 'default', 'shared-agent']);
    expect(list.body.total).toBe(3);
    expect((await getJson(`${s.url}/background/status`, as('beta', 'reader'))).body.agents).toBe(3);
    const theirs = await getJson(`${s.url}/background/agents/only-acme-agent`, as('beta', 'reader'));
    const missing = await getJson(`${s.url}/background/agents/no-such-agent`, as('beta', 'reader'));
    expect(theirs.status).toBe(404);
    expect(theirs.body.code).toBe(missing.body.code);
    // A task of beta may run the shared agent, not acme's own.
    const onShared = await postJson(`${s.url}/background/tasks`, task('on-shared', { agent_id: 'shared-agent' }), as('beta', 'operator'));
    expect(onShared.status).toBe(200);
    expect(onShared.body.agent_id).toBe('shared-agent');
    const onTheirs = await postJson(`${s.url}/background/tasks`, task('on-theirs', { agent_id: 'only-acme-agent' }), as('beta', 'operator'));
    expect(onTheirs.status).toBe(404);
    expect(onTheirs.body.code).toBe('AGT_ERR_BACKGROUND_AGENT_NOT_FOUND');
    const ran = await postJson(`${s.url}/background/tasks/on-shared/run`, { wait: true }, as('beta', 'operator'));
    expect(ran.body).toMatchObject({ status: 'completed', agent_id: 'shared-agent', tenant: 'beta' });
    // Only global keys change a shared agent; a tenant deletes its own.
    const del = await call('DELETE', `${s.url}/background/agents/shared-agent`, as('beta', 'admin'));
    expect(del.status).toBe(403);
    expect(del.body.code).toBe('AGT_ERR_TENANT_SHARED_AGENT');
    expect((await call('DELETE', `${s.url}/background/agents/only-acme-agent`, as('beta', 'admin'))).status).toBe(404);
    expect((await call('DELETE', `${s.url}/background/agents/${A.agent}`, as('beta', 'admin'))).status).toBe(200);
    expect((await getJson(`${s.url}/background/agents/${A.agent}`, as('acme', 'reader'))).status).toBe(200);
    expect((await getJson(`${s.url}/background/agents/shared-agent`, as('acme', 'reader'))).status).toBe(200);
  });
});

describe('webhook deliveries per tenant', () => {
  it("lists a tenant its own runs' deliveries only; receivers get the client's task id", async () => {
    // Acme's background run: its completion and its agent run's are delivered.
    await eventually(
      () => hooks.received.some((r) => r.json?.type === 'background_run.completed' && r.json?.data?.run_id === A.run),
      10_000,
      "acme's background run delivered",
    );
    const delivered = hooks.received.find((r) => r.json?.type === 'background_run.completed' && r.json?.data?.run_id === A.run);
    expect(delivered?.json?.data?.task_id).toBe('same');
    const mine = await eventually(
      async () => {
        const r = await getJson(`${s.url}/webhooks/deliveries?limit=500`, as('acme', 'reader'));
        return r.body.deliveries.some((d: { run_id: string }) => d.run_id === A.run) && r;
      },
      10_000,
      "acme's deliveries listed",
    );
    expect(mine.body.deliveries.length).toBeGreaterThan(0);
    for (const d of mine.body.deliveries) expect(d.tenant).toBe('acme');
    expect(mine.body.total).toBe(mine.body.deliveries.length);
    const theirs = await getJson(`${s.url}/webhooks/deliveries?run_id=${A.run}`, as('beta', 'reader'));
    expect(theirs.status).toBe(200);
    expect(theirs.body).toMatchObject({ deliveries: [], total: 0, next_cursor: null });
    const beta = await getJson(`${s.url}/webhooks/deliveries?limit=500`, as('beta', 'reader'));
    for (const d of beta.body.deliveries) expect(d.tenant).toBe('beta');
    expect(JSON.stringify(beta.body)).not.toContain(A.run);
    for (const st of ['pending', 'delivered', 'failed']) {
      const r = await getJson(`${s.url}/webhooks/deliveries?status=${st}&limit=500`, as('beta', 'reader'));
      for (const d of r.body.deliveries) expect(d.tenant, st).toBe('beta');
      expect(r.body.total, st).toBe(r.body.deliveries.length);
    }
    const all = await getJson(`${s.url}/webhooks/deliveries?limit=500`, as('global', 'reader'));
    const tenants = new Set(all.body.deliveries.map((d: { tenant?: string }) => d.tenant));
    expect(tenants.has('acme')).toBe(true);
    expect(tenants.has('beta')).toBe(true);
  });
});
