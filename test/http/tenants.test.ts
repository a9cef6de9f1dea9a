// Tenants on API keys (docs/multi-tenant.md): two tenants and a global key, each role, over every
// route of the OpenAPI document. Nothing of tenant A is readable, streamable, decidable, listable
// or countable with a key of tenant B; another tenant's id answers exactly as a missing one; the
// same client-chosen session id in two tenants is two sessions. Runs on the configured store
// (AGENTD_TEST_STORE=postgres runs it on PostgreSQL).
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TENANT_ROUTES } from '../../src/http/tenancy.js';
import { accessOf } from '../../src/http/auth.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, tempDir, type TestServer } from '../helpers/server.js';

const sha = (k: string) => createHash('sha256').update(k).digest('hex');
const ROLES = ['reader', 'operator', 'approver', 'admin'] as const;
type Role = (typeof ROLES)[number];
const keyOf = (tenant: string, role: Role) => `key-${tenant}-${role}`;
const KEYS = [
  ...ROLES.flatMap((role) => ['acme', 'beta'].map((tenant) => ({ name: `${tenant}-${role}`, role, tenant, key_sha256: sha(keyOf(tenant, role)) }))),
  ...ROLES.map((role) => ({ name: `global-${role}`, role, key_sha256: sha(keyOf('global', role)) })),
];
const as = (tenant: 'acme' | 'beta' | 'global', role: Role, extra: Record<string, string> = {}) => ({
  authorization: `Bearer ${keyOf(tenant, role)}`,
  ...extra,
});

const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');
const CONFIG = {
  auth: { api_keys: KEYS },
  agent: { tools: { local: TOOLS, builtin: [] } },
  governance: { rules: [{ tools: ['ledger_*'], effect: 'ask', reason: 'writes to the ledger' }] },
};

let model: ScriptedOpenAI;
let s: TestServer;
/** Tenant A's records: a run waiting for approval, a completed run, both in session S, and a session only A has. */
const A = { paused: '', approval: '', done: '', trace: '', onlySession: 'only-acme', task: 'acme-task', agent: 'acme-agent', bgRun: '', evalId: '' };
let bRun = '';

beforeAll(async () => {
  model = await startScriptedOpenAI();
  const ledger = join(tempDir(), 'ledger.jsonl');
  writeFileSync(ledger, '');
  process.env.AGENTD_TEST_LEDGER = ledger;
  model.setDefault((req) => {
    const last = req.messages.at(-1);
    return last?.role === 'tool' ? { text: 'done' } : { text: `answer to ${String(last?.content)}` };
  });
  s = await startTestServer(CONFIG, { modelUrl: model.url });
  model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'acme pays' } }] });
  const paused = await postJson(`${s.url}/run/sync`, { query: 'acme pays', session_id: 'S' }, as('acme', 'operator'));
  expect(paused.status).toBe(200);
  expect(paused.body.status).toBe('awaiting_approval');
  A.paused = paused.body.run_id;
  A.approval = paused.body.approvals[0].approval_id;
  const done = await postJson(`${s.url}/run/sync`, { query: 'acme hello', session_id: A.onlySession }, as('acme', 'operator'));
  expect(done.body.status).toBe('success');
  A.done = done.body.run_id;
  A.trace = done.body.trace_id;
  // The same session id in tenant B: another session, never a 409 or a wait behind A's run.
  const b = await postJson(`${s.url}/run/sync`, { query: 'beta hello', session_id: 'S' }, as('beta', 'operator'));
  expect(b.status).toBe(200);
  expect(b.body.status).toBe('success');
  bRun = b.body.run_id;
  // A's background agent, task and run, and an evaluation.
  expect((await postJson(`${s.url}/background/agents`, { agent_id: A.agent }, as('acme', 'admin'))).status).toBe(200);
  expect(
    (
      await postJson(
        `${s.url}/background/tasks`,
        { task_id: A.task, query: 'acme task', schedule: { type: 'manual' }, agent_id: A.agent },
        as('acme', 'operator'),
      )
    ).status,
  ).toBe(200);
  const bg = await postJson(`${s.url}/background/tasks/${A.task}/run`, { wait: true }, as('acme', 'operator'));
  expect(bg.body.status).toBe('completed');
  A.bgRun = bg.body.run_id;
  const ev = await postJson(
    `${s.url}/evals`,
    { name: 'acme eval', source: { run_ids: [A.done] }, variant: { system_instruction: 'x' } },
    as('acme', 'operator'),
  );
  expect(ev.status).toBe(201);
  A.evalId = ev.body.eval_id;
}, 60_000);

afterAll(async () => {
  await s?.stop();
  s?.cleanup();
  await model?.close();
});

const aIds = () => [A.paused, A.approval, A.done, A.trace, A.onlySession, A.task, A.agent, A.bgRun, A.evalId];

describe('a tenant key sees only its tenant', () => {
  it('lists and counts only its own runs, each carrying its tenant', async () => {
    const b = await getJson(`${s.url}/runs`, as('beta', 'reader'));
    expect(b.status).toBe(200);
    expect(b.body.runs.map((r: { run_id: string }) => r.run_id)).toEqual([bRun]);
    expect(b.body.total).toBe(1);
    expect(b.body.runs[0].tenant).toBe('beta');
    const waiting = await getJson(`${s.url}/runs?status=awaiting_approval`, as('beta', 'reader'));
    expect(waiting.body).toMatchObject({ runs: [], total: 0 });
    const inS = await getJson(`${s.url}/runs?session_id=S`, as('beta', 'reader'));
    expect(inS.body.runs.map((r: { run_id: string }) => r.run_id)).toEqual([bRun]);
    expect(inS.body.total).toBe(1);
    const a = await getJson(`${s.url}/runs?status=awaiting_approval`, as('acme', 'reader'));
    expect(a.body.runs.map((r: { run_id: string }) => r.run_id)).toEqual([A.paused]);
    expect(a.body.total).toBe(1);
  });

  it('keeps the same session id of two tenants apart', async () => {
    const a = await getJson(`${s.url}/sessions/S/history`, as('acme', 'reader'));
    const b = await getJson(`${s.url}/sessions/S/history`, as('beta', 'reader'));
    expect(b.status).toBe(200);
    expect(JSON.stringify(b.body.messages)).toContain('beta hello');
    expect(JSON.stringify(b.body.messages)).not.toContain('acme');
    // A's run in S waits for a person: no turn yet, so no session (404) or one without B's turn.
    if (a.status === 200) expect(JSON.stringify(a.body.messages)).not.toContain('beta');
    else expect(a.body.code).toBe('AGT_ERR_SESSION_NOT_FOUND');
    expect(b.body.session_id).toBe('S');
  });

  it("answers another tenant's ids exactly as ids that do not exist", async () => {
    const pairs: Array<[string, string]> = [
      [`/runs/${A.paused}`, '/runs/run_missing'],
      [`/runs/${A.paused}/budget`, '/runs/run_missing/budget'],
      [`/runs/${A.paused}/inbox`, '/runs/run_missing/inbox'],
      [`/telemetry/runs/${A.done}/trace`, '/telemetry/runs/run_missing/trace'],
      [`/telemetry/traces/${A.trace}`, '/telemetry/traces/trace_missing'],
      [`/sessions/${A.onlySession}/history`, '/sessions/nobody-has-this/history'],
      [`/telemetry/sessions/${A.onlySession}/trace`, '/telemetry/sessions/nobody-has-this/trace'],
      [`/events/${A.onlySession}/trace`, '/events/nobody-has-this/trace'],
    ];
    for (const [theirs, missing] of pairs) {
      const t = await getJson(`${s.url}${theirs}`, as('beta', 'admin'));
      const m = await getJson(`${s.url}${missing}`, as('beta', 'admin'));
      expect(t.status, theirs).toBe(404);
      expect(t.body.code, theirs).toBe(m.body.code);
      expect(t.body.error, theirs).toBe(m.body.error);
      // A global key acting in tenant A sees it.
      expect((await getJson(`${s.url}${theirs}`, as('global', 'admin', { 'x-agentd-tenant': 'acme' }))).status, theirs).toBe(200);
    }
  });

  it("decides nothing of another tenant's: approvals, budgets, steering, cancel, outcome", async () => {
    const calls: Array<[string, unknown, Role]> = [
      [`/runs/${A.paused}/approvals/${A.approval}`, { decision: 'approve', approver: 'beta-approver' }, 'approver'],
      [`/runs/${A.paused}/budget`, { decision: 'grant', approver: 'beta-approver' }, 'approver'],
      [`/runs/${A.paused}/steer`, { message: 'hi' }, 'operator'],
      [`/runs/${A.paused}/interrupt`, {}, 'operator'],
      [`/runs/${A.paused}/cancel`, {}, 'operator'],
      [`/runs/${A.paused}/resume`, {}, 'operator'],
      [`/runs/${A.paused}/outcome`, { source: 'user', label: 'bad' }, 'operator'],
    ];
    for (const [path, body, role] of calls) {
      for (const who of [role, 'admin'] as const) {
        const r = await postJson(`${s.url}${path}`, body, as('beta', who));
        expect(r.status, `${path} as beta-${who}`).toBe(404);
        expect(r.body.code, path).toBe('AGT_ERR_RUN_NOT_FOUND');
      }
    }
    const after = await getJson(`${s.url}/runs/${A.paused}`, as('acme', 'reader'));
    expect(after.body.status).toBe('awaiting_approval');
    expect(after.body.approvals[0].status).toBe('pending');
    expect(after.body.outcomes).toEqual([]);
  });

  it('lists no event or trace of another tenant, whatever the filter', async () => {
    for (const q of ['', '?session_id=S', `?run_id=${A.paused}`, `?trace_id=${A.trace}`, '?event_type=user_message']) {
      const r = await getJson(`${s.url}/telemetry/events${q}`, as('beta', 'reader'));
      expect(r.status, q).toBe(200);
      for (const e of r.body.events) expect(e.run_id, q).toBe(bRun);
    }
    const own = await getJson(`${s.url}/telemetry/events?session_id=S`, as('beta', 'reader'));
    expect(own.body.events.length).toBeGreaterThan(0);
    const list = await getJson(`${s.url}/events/S/list`, as('beta', 'reader'));
    expect(list.body.events.length).toBeGreaterThan(0);
    for (const e of list.body.events) expect(e.run_id).toBe(bRun);
    const traces = await getJson(`${s.url}/telemetry/traces`, as('beta', 'reader'));
    expect(traces.body.traces.map((t: { run_id: string }) => t.run_id)).toEqual([bRun]);
    const inS = await getJson(`${s.url}/telemetry/traces?session_id=S`, as('beta', 'reader'));
    expect(inS.body.traces.map((t: { run_id: string }) => t.run_id)).toEqual([bRun]);
  });

  it("follows a session without ever carrying another tenant's event", async () => {
    const ctl = new AbortController();
    const res = await fetch(`${s.url}/events/S`, { headers: as('beta', 'reader'), signal: ctl.signal });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    let text = '';
    const reading = (async () => {
      for (;;) {
        const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true }));
        if (done) return;
        text += new TextDecoder().decode(value);
      }
    })();
    // A run of A and then one of B in session S while B follows it.
    const a2 = await postJson(`${s.url}/run/sync`, { query: 'acme again', session_id: 'S', session_policy: 'reject' }, as('acme', 'operator'));
    const b2 = await postJson(`${s.url}/run/sync`, { query: 'beta again', session_id: 'S' }, as('beta', 'operator'));
    expect(b2.body.status).toBe('success');
    await eventually(() => text.includes(b2.body.run_id) && text.includes('final_answer'), 10_000, "B's own live events");
    ctl.abort();
    await reading;
    expect(text).toContain(bRun); // replayed
    for (const id of [A.paused, A.done, a2.body.run_id].filter(Boolean)) expect(text).not.toContain(id);
    expect(text).not.toContain('acme');
  });
});

describe('global keys', () => {
  it('list every tenant, each record carrying its tenant', async () => {
    const g = await getJson(`${s.url}/runs?limit=500`, as('global', 'reader'));
    const byId = new Map(g.body.runs.map((r: { run_id: string; tenant: string | null }) => [r.run_id, r.tenant]));
    expect(byId.get(A.paused)).toBe('acme');
    expect(byId.get(bRun)).toBe('beta');
  });

  it('act in one tenant with x-agentd-tenant', async () => {
    const inAcme = as('global', 'operator', { 'x-agentd-tenant': 'acme' });
    const r = await postJson(`${s.url}/run/sync`, { query: 'from the global key', session_id: A.onlySession }, inAcme);
    expect(r.body.status).toBe('success');
    const view = await getJson(`${s.url}/runs/${r.body.run_id}`, as('acme', 'reader'));
    expect(view.body.tenant).toBe('acme');
    // Acme's session: its history holds both turns.
    const h = await getJson(`${s.url}/sessions/${A.onlySession}/history`, as('acme', 'reader'));
    expect(JSON.stringify(h.body.messages)).toContain('from the global key');
    expect((await getJson(`${s.url}/runs/${r.body.run_id}`, as('global', 'reader', { 'x-agentd-tenant': 'beta' }))).status).toBe(404);
  });

  it('refuse a tenant key naming another tenant, and a malformed header', async () => {
    const r = await getJson(`${s.url}/runs`, as('beta', 'reader', { 'x-agentd-tenant': 'acme' }));
    expect(r.status).toBe(403);
    expect(r.body.code).toBe('AGT_ERR_TENANT_MISMATCH');
    const same = await getJson(`${s.url}/runs`, as('beta', 'reader', { 'x-agentd-tenant': 'beta' }));
    expect(same.status).toBe(200);
    const bad = await getJson(`${s.url}/runs`, as('global', 'reader', { 'x-agentd-tenant': 'a/b' }));
    expect(bad.status).toBe(422);
  });
});

describe('the role × tenant matrix over every route of the OpenAPI document', () => {
  let operations: Array<{ method: string; path: string; pattern: string }> = [];
  beforeAll(async () => {
    const doc = (await getJson(`${s.url}/openapi.json`)).body as { paths: Record<string, Record<string, unknown>> };
    for (const [path, ops] of Object.entries(doc.paths))
      for (const m of Object.keys(ops))
        operations.push({ method: m.toUpperCase(), path, pattern: path.replace(/\{\*\}|\{path\}$/, '*').replace(/\{([^}]+)\}/g, ':$1') });
    operations = operations.filter((o) => o.method !== 'HEAD');
  });

  /** The path with tenant A's ids in it. */
  const withIds = (path: string) =>
    path
      .replace('{approval_id}', A.approval)
      .replace('{trace_id}', A.trace)
      .replace('{session_id}', A.onlySession)
      .replace('{id}', A.onlySession)
      .replace('{task_id}', A.task)
      .replace('{agent_id}', A.agent)
      .replace('{eval_id}', A.evalId)
      .replace(/\{run_id\}/, path.startsWith('/background') ? A.bgRun : path.startsWith('/telemetry') ? A.done : A.paused)
      .replace(/\{[^}]+\}/g, 'x');

  const BODIES: Record<string, unknown> = {
    '/runs/{run_id}/approvals/{approval_id}': { decision: 'approve', approver: 'x' },
    '/runs/{run_id}/budget': { decision: 'grant', approver: 'x' },
    '/runs/{run_id}/steer': { message: 'hi' },
    '/runs/{run_id}/outcome': { source: 'user' },
  };

  it('gives no tenant-B key of any role a record of tenant A, and refuses every route not kept apart', async () => {
    expect(operations.length).toBeGreaterThan(40);
    const failures: string[] = [];
    for (const op of operations) {
      const key = `${op.method} ${op.pattern}`;
      const isPublic = accessOf(op.method, op.pattern) === 'public';
      const aware = TENANT_ROUTES.has(key);
      for (const role of ROLES) {
        const ctl = new AbortController();
        const timer = setTimeout(() => ctl.abort(), 3000);
        const body = op.method === 'GET' || op.method === 'DELETE' ? undefined : JSON.stringify(BODIES[op.path] ?? {});
        let status = 0;
        let text = '';
        try {
          const res = await fetch(`${s.url}${withIds(op.path)}`, {
            method: op.method,
            headers: { ...as('beta', role), ...(body ? { 'content-type': 'application/json' } : {}) },
            body,
            signal: ctl.signal,
          });
          status = res.status;
          // Streams: what arrives in a moment (the abort ends them).
          text = await res.text().catch(() => '');
        } catch {
          /* aborted stream: status and what was read are kept */
        } finally {
          clearTimeout(timer);
        }
        const label = `${key} as beta-${role}: ${status} ${text.slice(0, 160)}`;
        if (status === 0 || status >= 500) failures.push(`no answer or 5xx: ${label}`);
        if (!isPublic && !aware && status !== 403) failures.push(`not kept apart, yet not refused: ${label}`);
        if (!isPublic && !aware && status === 403 && !/AGT_ERR_(TENANT_ROUTE|FORBIDDEN)/.test(text)) failures.push(`wrong refusal: ${label}`);
        if (
          aware &&
          /\{(run_id|trace_id|session_id|task_id|agent_id|eval_id)\}/.test(op.path) &&
          status >= 200 &&
          status < 300 &&
          !op.path.startsWith('/events/{session_id}') &&
          op.path !== '/telemetry/events/stream'
        )
          failures.push(`another tenant's id answered: ${label}`);
        // A 404 echoes the id asked for, as for any missing id; any other answer must not name A's records.
        if (status !== 404)
          for (const id of [...aIds().slice(0, 4), ...aIds().slice(5)]) if (text.includes(id)) failures.push(`tenant A's id ${id} leaked: ${label}`);
      }
    }
    expect(failures).toEqual([]);
  }, 120_000);
});

describe('budgets per tenant (scope tenant)', () => {
  let b: TestServer;
  beforeAll(async () => {
    b = await startTestServer(
      { auth: { api_keys: KEYS }, agent: { tools: { builtin: [] } }, budgets: { tenant: [{ meter: 'model_calls', limit: 1, on_exhausted: 'terminate' }] } },
      { modelUrl: model.url },
    );
  });
  afterAll(async () => {
    await b?.stop();
    b?.cleanup();
  });

  it("covers a tenant's runs, each tenant its own, and no run of a global key", async () => {
    const first = await postJson(`${b.url}/run/sync`, { query: 'one' }, as('acme', 'operator'));
    expect(first.body.status).toBe('success');
    const budget = await getJson(`${b.url}/runs/${first.body.run_id}/budget`, as('acme', 'reader'));
    expect(budget.body.budgets).toEqual([expect.objectContaining({ scope: 'tenant', meter: 'model_calls', limit: 1, spent: 1 })]);
    // acme's one model call is spent: its next run ends on the budget; beta's and a global key's do not.
    const second = await postJson(`${b.url}/run/sync`, { query: 'two' }, as('acme', 'operator'));
    expect(second.body.status).toBe('error');
    expect(second.body.termination_reason).toBe('budget_exhausted');
    expect((await postJson(`${b.url}/run/sync`, { query: 'three' }, as('beta', 'operator'))).body.status).toBe('success');
    const global = await postJson(`${b.url}/run/sync`, { query: 'four' }, as('global', 'operator'));
    expect(global.body.status).toBe('success');
    expect((await getJson(`${b.url}/runs/${global.body.run_id}/budget`, as('global', 'reader'))).body.budgets).toEqual([]);
  });
});
