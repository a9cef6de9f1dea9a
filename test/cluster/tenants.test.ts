// Tenants on two agentd instances sharing one PostgreSQL database (docs/multi-tenant.md): a run of
// tenant A paused on instance 1 is invisible and undecidable through tenant B's keys on instance 2,
// lists and totals on either instance count only the caller's tenant, the same session id is two
// sessions across instances, and B's follow stream on instance 2 never carries an event of A's
// run live on instance 1 (the change feed delivers every event to every instance).
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { eventually, getJson, postJson, startTestServer, tempDir, type TestServer } from '../helpers/server.js';

const sha = (k: string) => createHash('sha256').update(k).digest('hex');
const KEYS = ['acme', 'beta'].flatMap((tenant) =>
  ['reader', 'operator', 'approver', 'admin'].map((role) => ({ name: `${tenant}-${role}`, role, tenant, key_sha256: sha(`k-${tenant}-${role}`) })),
);
const as = (tenant: string, role: string) => ({ authorization: `Bearer k-${tenant}-${role}` });
const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');

let model: ScriptedOpenAI;
let db: TestDatabase;
let one: TestServer;
let two: TestServer;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  const ledger = join(tempDir(), 'ledger.jsonl');
  writeFileSync(ledger, '');
  process.env.AGENTD_TEST_LEDGER = ledger;
  model.setDefault((req) => ({ text: `answer to ${String(req.messages.at(-1)?.content)}` }));
  db = await createTestDatabase('agentd_tenants');
  const config = {
    store: { kind: 'postgres', url: db.url, pool_size: 4 },
    auth: { api_keys: KEYS },
    agent: { tools: { local: TOOLS, builtin: [] } },
    governance: { rules: [{ tools: ['ledger_*'], effect: 'ask' }] },
  };
  one = await startTestServer(config, { modelUrl: model.url });
  two = await startTestServer(config, { modelUrl: model.url });
}, 60_000);

afterAll(async () => {
  await one?.stop();
  await two?.stop();
  one?.cleanup();
  two?.cleanup();
  await db?.drop();
  await model?.close();
});

describe('two instances, two tenants', () => {
  it("keeps tenant A's paused run from tenant B on the other instance", async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'acme' } }] });
    const a = await postJson(`${one.url}/run/sync`, { query: 'acme pays', session_id: 'S' }, as('acme', 'operator'));
    expect(a.body.status).toBe('awaiting_approval');
    const b = await postJson(`${two.url}/run/sync`, { query: 'beta hello', session_id: 'S' }, as('beta', 'operator'));
    expect(b.body.status).toBe('success');

    for (const url of [one.url, two.url]) {
      const list = await getJson(`${url}/runs`, as('beta', 'reader'));
      expect(list.body).toMatchObject({ total: 1, runs: [{ run_id: b.body.run_id, tenant: 'beta' }] });
      expect((await getJson(`${url}/runs?status=awaiting_approval`, as('beta', 'reader'))).body.total).toBe(0);
      expect((await getJson(`${url}/runs/${a.body.run_id}`, as('beta', 'admin'))).status).toBe(404);
      expect((await getJson(`${url}/runs/${a.body.run_id}`, as('acme', 'reader'))).status).toBe(200);
      const events = await getJson(`${url}/telemetry/events?session_id=S`, as('beta', 'reader'));
      for (const e of events.body.events) expect(e.run_id).toBe(b.body.run_id);
    }
    const decided = await postJson(
      `${two.url}/runs/${a.body.run_id}/approvals/${a.body.approvals[0].approval_id}`,
      { decision: 'approve', approver: 'beta-approver' },
      as('beta', 'approver'),
    );
    expect(decided.status).toBe(404);
    expect(decided.body.code).toBe('AGT_ERR_RUN_NOT_FOUND');
    expect((await getJson(`${one.url}/runs/${a.body.run_id}`, as('acme', 'reader'))).body.approvals[0].status).toBe('pending');
    const hb = await getJson(`${one.url}/sessions/S/history`, as('beta', 'reader'));
    expect(JSON.stringify(hb.body.messages)).toContain('beta hello');
    expect(JSON.stringify(hb.body.messages)).not.toContain('acme');
  });

  it("B's follow stream on one instance never carries A's live events from the other", async () => {
    const ctl = new AbortController();
    const res = await fetch(`${two.url}/events/F`, { headers: as('beta', 'reader'), signal: ctl.signal });
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
    const a = await postJson(`${one.url}/run/sync`, { query: 'acme in F', session_id: 'F' }, as('acme', 'operator'));
    expect(a.body.status).toBe('success');
    const b = await postJson(`${one.url}/run/sync`, { query: 'beta in F', session_id: 'F' }, as('beta', 'operator'));
    await eventually(() => text.includes(b.body.run_id) && text.includes('final_answer'), 15_000, "B's live events through the change feed");
    ctl.abort();
    await reading;
    expect(text).not.toContain(a.body.run_id);
    expect(text).not.toContain('acme in F');
  });
});

describe('two instances, background work of two tenants', () => {
  it("keeps the same task id of two tenants two tasks across instances, each tenant's runs and counts its own", async () => {
    const task = { task_id: 'nightly', query: 'nightly summary', schedule: { type: 'manual' } };
    expect((await postJson(`${one.url}/background/tasks`, task, as('acme', 'operator'))).body.tenant).toBe('acme');
    expect((await postJson(`${two.url}/background/tasks`, task, as('beta', 'operator'))).body.tenant).toBe('beta');
    // Acme's run, triggered on instance 2 (either instance may claim it).
    const run = await postJson(`${two.url}/background/tasks/nightly/run`, { wait: true }, as('acme', 'operator'));
    expect(run.body).toMatchObject({ status: 'completed', task_id: 'nightly', tenant: 'acme' });
    for (const url of [one.url, two.url]) {
      expect((await getJson(`${url}/background/runs/${run.body.run_id}`, as('beta', 'admin'))).status, url).toBe(404);
      expect((await getJson(`${url}/background/runs/${run.body.run_id}`, as('acme', 'reader'))).status, url).toBe(200);
      const b = await getJson(`${url}/background/runs`, as('beta', 'reader'));
      expect(b.body, url).toMatchObject({ runs: [], total: 0 });
      expect((await getJson(`${url}/background/tasks/nightly/status`, as('beta', 'reader'))).body.runs, url).toBe(0);
      expect((await getJson(`${url}/background/status`, as('acme', 'reader'))).body, url).toMatchObject({ tasks: 1, runs: 1 });
      expect((await getJson(`${url}/background/status`, as('beta', 'reader'))).body, url).toMatchObject({ tasks: 1, runs: 0 });
    }
    // The run's agent run is acme's on both instances.
    await eventually(
      async () => (await getJson(`${one.url}/runs?limit=500`, as('acme', 'reader'))).body.runs.some((r: { task_id: string | null }) => r.task_id !== null),
      10_000,
      "acme's agent run listed",
    );
    const beta = await getJson(`${one.url}/runs?limit=500`, as('beta', 'reader'));
    expect(beta.body.runs.some((r: { task_id: string | null }) => r.task_id !== null)).toBe(false);
  }, 60_000);
});
