// Approvals, budgets and outcomes through HTTP, including a restart while a run waits for a person.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, tempDir, type TestServer } from '../helpers/server.js';
import { ApprovalView, BudgetDecisionResponse, OutcomeResponse, RunBudgetResponse, RunResponse } from '../../src/schemas/index.js';

const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');
const GOVERNED = {
  agent: { tools: { local: TOOLS, builtin: [] } },
  governance: {
    rules: [
      { tools: ['ledger_*'], effect: 'ask', reason: 'writes to the ledger' },
      { tools: ['explode'], effect: 'deny', reason: 'never' },
    ],
  },
};

let model: ScriptedOpenAI;
let ledger: string;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  ledger = join(tempDir(), 'ledger.jsonl');
  process.env.AGENTD_TEST_LEDGER = ledger;
});
afterAll(async () => {
  await model.close();
});
beforeEach(() => {
  model.reset();
  writeFileSync(ledger, '');
  model.setDefault((req) => {
    const last = req.messages.at(-1);
    return last?.role === 'tool' ? { text: `saw: ${String(last.content)}` } : { text: 'plain answer' };
  });
});

const ledgerLines = () =>
  readFileSync(ledger, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
const waitForStatus = (url: string, runId: string | null, status: string) =>
  eventually(async () => {
    const v = (await getJson(`${url}/runs/${runId}`)).body;
    return v.status === status ? v : null;
  });

describe('approvals', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(GOVERNED, { modelUrl: model.url });
  });
  afterAll(async () => {
    await server.stop();
    server.cleanup();
  });

  it('pauses before an ask call, then runs exactly the approved call once', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 10' } }] });
    const paused = RunResponse.parse((await postJson(`${server.url}/run/sync`, { query: 'pay' })).body);
    expect(paused.status).toBe('awaiting_approval');
    expect(paused.response).toBeNull();
    expect(paused.approvals).toHaveLength(1);
    const approval = paused.approvals![0] as { approval_id: string; status: string; tool_name: string; arguments: unknown; expires_at: string };
    expect(approval).toMatchObject({ status: 'pending', tool_name: 'ledger_append', arguments: { entry: 'pay 10' } });
    expect(ledgerLines()).toHaveLength(0);
    const view = (await getJson(`${server.url}/runs/${paused.run_id}`)).body;
    expect(view.status).toBe('awaiting_approval');
    // Paused runs are listed as waiting for a person.
    const waiting = (await getJson(`${server.url}/runs?status=awaiting_approval`)).body;
    expect(waiting.runs.map((r: { run_id: string }) => r.run_id)).toContain(paused.run_id);

    const decided = await postJson(`${server.url}/runs/${paused.run_id}/approvals/${approval.approval_id}`, {
      decision: 'approve',
      approver: 'alice',
      arguments: { entry: 'pay 5' },
    });
    expect(decided.status).toBe(200);
    expect(ApprovalView.parse(decided.body)).toMatchObject({ status: 'approved', approver: 'alice', edited_arguments: { entry: 'pay 5' } });
    const done = await waitForStatus(server.url, paused.run_id!, 'completed');
    expect(done.response).toBe('saw: {"appended":"pay 5"}');
    const lines = ledgerLines();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ entry: 'pay 5', run_id: paused.run_id, idempotency_key: expect.stringContaining(String(paused.run_id)) });
    expect(done.trace_ids).toHaveLength(2); // one trace per segment

    // A second decision on the same approval is refused.
    const again = await postJson(`${server.url}/runs/${paused.run_id}/approvals/${approval.approval_id}`, { decision: 'deny', approver: 'bob' });
    expect(again.status).toBe(409);
    expect(again.body.error).toBe('Conflict');
    // The domain code tells this 409 apart from the run's other conflicts (docs/errors.md).
    expect(again.body).toMatchObject({ code: 'AGT_ERR_APPROVAL_ALREADY_DECIDED', detail: 'used' }); // approved, then used by the call
  });

  it("deny: the tool never runs and the approver's note reaches the model", async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 99' } }] });
    const paused = (await postJson(`${server.url}/run/sync`, { query: 'pay big' })).body;
    const approvalId = paused.approvals[0].approval_id;
    const denied = await postJson(`${server.url}/runs/${paused.run_id}/approvals/${approvalId}`, {
      decision: 'deny',
      approver: 'carol',
      note: 'too much money',
    });
    expect(denied.body.status).toBe('denied');
    const done = await waitForStatus(server.url, paused.run_id, 'completed');
    expect(ledgerLines()).toHaveLength(0);
    const toolMsg = model.requests.at(-1)!.messages.at(-1)!;
    expect(toolMsg.role).toBe('tool');
    expect(String(toolMsg.content)).toContain('Denied by carol: too much money');
    expect(done.tool_calls[0].outcome).toBe('denied');
  });

  it('policy deny never runs the tool; arguments with deny and unknown ids are refused', async () => {
    model.enqueue({ tool_calls: [{ name: 'explode', arguments: {} }] });
    const res = (await postJson(`${server.url}/run/sync`, { query: 'explode' })).body;
    expect(res.status).toBe('success');
    expect(res.response).toContain('Denied by policy: never');

    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'x' } }] });
    const paused = (await postJson(`${server.url}/run/sync`, { query: 'pay x' })).body;
    const id = paused.approvals[0].approval_id;
    const denyWithArgs = await postJson(`${server.url}/runs/${paused.run_id}/approvals/${id}`, { decision: 'deny', approver: 'a', arguments: { entry: 'y' } });
    expect(denyWithArgs.status).toBe(409);
    expect(denyWithArgs.body.code).toBe('AGT_ERR_DENY_WITH_ARGUMENTS');
    expect((await postJson(`${server.url}/runs/${paused.run_id}/approvals/approval_nope`, { decision: 'approve', approver: 'a' })).status).toBe(404);
    expect((await postJson(`${server.url}/runs/run_nope/approvals/${id}`, { decision: 'approve', approver: 'a' })).status).toBe(404);
    const bad = await postJson(`${server.url}/runs/${paused.run_id}/approvals/${id}`, { decision: 'maybe', approver: '' });
    expect(bad.status).toBe(422);
    expect(bad.body.detail.map((d: { loc: string[] }) => d.loc.join('.'))).toEqual(expect.arrayContaining(['body.decision', 'body.approver']));
    const missing = await postJson(`${server.url}/runs/${paused.run_id}/approvals/${id}`, {});
    expect(missing.body.detail.find((d: { loc: string[] }) => d.loc.join('.') === 'body.decision').type).toBe('missing');
  });

  it('cancels a run that waits for a person', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'c' } }] });
    const paused = (await postJson(`${server.url}/run/sync`, { query: 'pay c' })).body;
    expect((await postJson(`${server.url}/runs/${paused.run_id}/cancel`, {})).body).toEqual({ status: 'cancel_requested', run_id: paused.run_id });
    expect((await getJson(`${server.url}/runs/${paused.run_id}`)).body.status).toBe('cancelled');
    const again = await postJson(`${server.url}/runs/${paused.run_id}/cancel`, {});
    expect(again.status).toBe(409);
    expect(again.body.code).toBe('AGT_ERR_RUN_ENDED');
  });

  it('records outcomes on a run', async () => {
    const run = (await postJson(`${server.url}/run/sync`, { query: 'hello' })).body;
    const out = await postJson(`${server.url}/runs/${run.run_id}/outcome`, { source: 'evaluator', label: 'good', reward: 1, detail: { why: 'correct' } });
    expect(out.status).toBe(200);
    expect(OutcomeResponse.parse(out.body)).toMatchObject({ source: 'evaluator', label: 'good', reward: 1 });
    expect((await getJson(`${server.url}/runs/${run.run_id}`)).body.outcomes).toHaveLength(1);
    expect((await postJson(`${server.url}/runs/${run.run_id}/outcome`, { source: '' })).status).toBe(422);
    expect((await postJson(`${server.url}/runs/run_missing/outcome`, { source: 'x' })).status).toBe(404);
  });
});

describe('a restart while a run awaits approval', () => {
  it('approve after the restart: the run completes and the tool runs once', async () => {
    const dataDir = tempDir();
    const first = await startTestServer(GOVERNED, { modelUrl: model.url, dataDir });
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'after restart' } }] });
    const paused = (await postJson(`${first.url}/run/sync`, { query: 'pay later' })).body;
    expect(paused.status).toBe('awaiting_approval');
    await first.stop();

    const second = await startTestServer(GOVERNED, { modelUrl: model.url, dataDir });
    try {
      expect((await getJson(`${second.url}/runs/${paused.run_id}`)).body.status).toBe('awaiting_approval');
      const ok = await postJson(`${second.url}/runs/${paused.run_id}/approvals/${paused.approvals[0].approval_id}`, { decision: 'approve', approver: 'dave' });
      expect(ok.status).toBe(200);
      const done = await waitForStatus(second.url, paused.run_id, 'completed');
      expect(done.response).toBe('saw: {"appended":"after restart"}');
      expect(ledgerLines()).toHaveLength(1);
    } finally {
      await second.stop();
      second.cleanup();
    }
  });
});

describe('approval latency', () => {
  it.skipIf(process.env.AGENTD_TEST_STORE === 'postgres')(
    "the decision and the resume's claim land in one store round (one fsynced batch), rows read from disk",
    async () => {
      const dataDir = tempDir();
      const first = await startTestServer(GOVERNED, { modelUrl: model.url, dataDir });
      model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 1' } }] });
      const paused = (await postJson(`${first.url}/run/sync`, { query: 'pay one' })).body;
      expect(paused.status).toBe('awaiting_approval');
      await first.stop();
      // A fresh process: the run's rows are not in the store's row cache, as with a run paused
      // long ago among many (the approvals benchmark's 100,000).
      const server = await startTestServer(GOVERNED, { modelUrl: model.url, dataDir });
      // Watch the embedded store's write rounds (LevelWriter.stage, the write queue of LevelStore:
      // commits are staged once per round, and each round is one LevelDB batch and fsync): the
      // statuses this run's record is written with, round by round.
      const store = (server.store as unknown as { writer: { stage(jobs: Array<{ type: string; ops?: unknown }>): Promise<unknown> } }).writer;
      const rounds: string[][] = [];
      const original = store.stage;
      store.stage = function (this: unknown, jobs) {
        const statuses: string[] = [];
        for (const j of jobs) {
          if (j.type !== 'records' || !Array.isArray(j.ops)) continue;
          for (const op of j.ops as Array<{ kind: string; id: string; value?: { status?: string; decision?: string | null } }>) {
            if (op.kind === 'runs' && op.id === paused.run_id) statuses.push(`${op.value?.status}${op.value?.decision ? `:${op.value.decision}` : ''}`);
          }
        }
        if (statuses.length) rounds.push(statuses);
        return original.call(this, jobs);
      };
      try {
        const decided = await postJson(`${server.url}/runs/${paused.run_id}/approvals/${paused.approvals[0].approval_id}`, {
          decision: 'approve',
          approver: 'dana',
        });
        expect(decided.status).toBe(200);
        await waitForStatus(server.url, paused.run_id, 'completed');
        // Before: the decision was one round and the claim (status running) the next, two fsyncs
        // in a row before the resumed run could start.
        expect(rounds[0]).toEqual(['awaiting_approval:approval', 'running:approval']);
        expect(ledgerLines()).toHaveLength(1);
      } finally {
        store.stage = original;
        await server.stop();
        server.cleanup();
      }
    },
  );
});

describe('budgets', () => {
  it('pauses a run that cannot afford its next call; a grant of the shortfall resumes it', async () => {
    const server = await startTestServer({ ...GOVERNED, budgets: { session: [{ meter: 'model_calls', limit: 1 }] } }, { modelUrl: model.url });
    try {
      model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] });
      const paused = RunResponse.parse((await postJson(`${server.url}/run/sync`, { query: 'two calls', session_id: 'budgeted' })).body);
      expect(paused.status).toBe('awaiting_budget');
      expect(paused.response).toBeNull();
      expect(paused.budget_request).toMatchObject({
        key: 'session:budgeted:total',
        meter: 'model_calls',
        limit: 1,
        used: 1,
        needed: 1,
        shortfall: 1,
        status: 'pending',
      });
      const view = RunBudgetResponse.parse((await getJson(`${server.url}/runs/${paused.run_id}/budget`)).body);
      expect(view.budgets).toEqual([
        expect.objectContaining({ scope: 'session', meter: 'model_calls', key: 'session:budgeted:total', limit: 1, spent: 1, reserved: 0 }),
      ]);

      const grant = await postJson(`${server.url}/runs/${paused.run_id}/budget`, { decision: 'grant', approver: 'erin' });
      expect(BudgetDecisionResponse.parse(grant.body)).toMatchObject({ status: 'granted', amount: 1, meter: 'model_calls' });
      const done = await waitForStatus(server.url, paused.run_id, 'completed');
      expect(done.response).toBe('saw: echo: x');
      const after = (await getJson(`${server.url}/runs/${paused.run_id}/budget`)).body.budgets[0];
      expect(after).toMatchObject({ granted: 1, spent: 2, reserved: 0 });
      expect((await postJson(`${server.url}/runs/${paused.run_id}/budget`, { decision: 'grant', approver: 'erin' })).status).toBe(409);
      expect((await postJson(`${server.url}/runs/${paused.run_id}/budget`, { decision: 'grant', approver: 'erin', amount: 0 })).status).toBe(422);
    } finally {
      await server.stop();
      server.cleanup();
    }
  });

  it('deny ends the run with error / budget_exhausted', async () => {
    const server = await startTestServer({ ...GOVERNED, budgets: { run: [{ meter: 'model_calls', limit: 1 }] } }, { modelUrl: model.url });
    try {
      model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] });
      const paused = (await postJson(`${server.url}/run/sync`, { query: 'deny me' })).body;
      expect(paused.status).toBe('awaiting_budget');
      expect((await postJson(`${server.url}/runs/${paused.run_id}/budget`, { decision: 'deny', approver: 'frank', note: 'no' })).body.status).toBe('denied');
      const done = await waitForStatus(server.url, paused.run_id, 'failed');
      expect(done.termination_reason).toBe('budget_exhausted');
    } finally {
      await server.stop();
      server.cleanup();
    }
  });

  it('200 concurrent runs on one agent budget never overspend', async () => {
    const limit = 5_000;
    const server = await startTestServer(
      {
        server: { max_concurrent_runs: 256 },
        agent: { tools: { builtin: [] }, model: { max_output_tokens: 64 } },
        budgets: { agent: [{ meter: 'tokens', limit, on_exhausted: 'terminate' }] },
      },
      { modelUrl: model.url },
    );
    try {
      model.setDefault({ text: 'ok', usage: { prompt_tokens: 40, completion_tokens: 10 } });
      const results = await Promise.all(Array.from({ length: 200 }, (_, i) => postJson(`${server.url}/run/sync`, { query: `q${i}`, session_id: `s${i}` })));
      const statuses = results.map((r) => r.body.status);
      expect(statuses.filter((s) => s === 'success').length).toBeGreaterThan(0);
      expect(statuses.filter((s) => s === 'error').length).toBeGreaterThan(0); // the budget really ran out
      const anyRun = results[0].body.run_id;
      const entry = (await getJson(`${server.url}/runs/${anyRun}/budget`)).body.budgets[0];
      expect(entry.spent + entry.reserved).toBeLessThanOrEqual(limit + entry.granted);
      expect(entry.reserved).toBe(0);
    } finally {
      await server.stop();
      server.cleanup();
    }
  });
});
