// Budgets of scope `eval` (docs/budgets.md, docs/debugging.md): an evaluation's replays reserve
// against `eval:<eval_id>:<window>`, pause and ask like any budget when it runs out, and the
// evaluation goes on once a person grants; other runs and other evaluations are not covered.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { GOVERNED_OPEN, defaultReplies } from '../helpers/protocol-server.js';
import { EvalDetail, EvalView, RunBudgetResponse, RunResponse } from '../../src/schemas/index.js';

let model: ScriptedOpenAI;
let server: TestServer;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  server = await startTestServer({ ...GOVERNED_OPEN, budgets: { eval: [{ meter: 'model_calls', limit: 2 }] } }, { modelUrl: model.url });
});
afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
});
beforeEach(() => defaultReplies(model));

async function originals(n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    model.enqueue({ text: `answer ${i}` });
    ids.push(RunResponse.parse((await postJson(`${server.url}/run/sync`, { query: `question ${i}` })).body).run_id!);
  }
  return ids;
}

const evalOf = async (id: string) => EvalDetail.parse((await getJson(`${server.url}/evals/${id}`)).body);

describe('budgets of scope eval', () => {
  it("cover an evaluation's replays: out of budget, a replay pauses and asks; a grant lets the evaluation finish", async () => {
    const runIds = await originals(3);
    // The originals are not an evaluation's replays: no eval budget covers them.
    expect(RunBudgetResponse.parse((await getJson(`${server.url}/runs/${runIds[0]}/budget`)).body).budgets).toEqual([]);
    model.setDefault((req) => ({ text: `replayed ${String(req.messages.at(-1)!.content)}` }));
    const created = await postJson(`${server.url}/evals`, {
      name: 'budgeted',
      source: { run_ids: runIds },
      variant: { system_instruction: 'v2' },
      concurrency: 1,
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const { eval_id } = EvalView.parse(created.body);
    const key = `eval:${eval_id}:total`;

    // Two replays fit the budget of two model calls; the third waits for a person.
    const paused = await eventually(async () => {
      const ev = await evalOf(eval_id);
      for (const item of ev.items.filter((i) => i.status === 'running')) {
        const run = (await getJson(`${server.url}/runs/${item.replay_run_id}`)).body;
        if (run.status === 'awaiting_budget') return { ev, run };
      }
      return null;
    });
    expect(paused.ev.status).toBe('running');
    // The two before it are written (an item's outcome is written after its slot is freed: awaited).
    const progress = await eventually(async () => {
      const ev = await evalOf(eval_id);
      return ev.progress.done === 2 ? ev.progress : null;
    });
    expect(progress).toEqual({ total: 3, done: 2, failed: 0 });
    const view = RunBudgetResponse.parse((await getJson(`${server.url}/runs/${paused.run.run_id}/budget`)).body);
    expect(view.budgets).toEqual([expect.objectContaining({ scope: 'eval', key, meter: 'model_calls', limit: 2, spent: 2, reserved: 0 })]);
    expect(view.requests).toEqual([expect.objectContaining({ key, scope: 'eval', meter: 'model_calls', limit: 2, used: 2, shortfall: 1, status: 'pending' })]);

    const grant = await postJson(`${server.url}/runs/${paused.run.run_id}/budget`, { decision: 'grant', approver: 'erin' });
    expect(grant.status, JSON.stringify(grant.body)).toBe(200);
    const done = await eventually(async () => {
      const ev = await evalOf(eval_id);
      return ev.status === 'completed' ? ev : null;
    });
    expect(done.progress).toEqual({ total: 3, done: 3, failed: 0 });
    // The paused item was scored on its replay's end, not its pause.
    const item = done.items.find((i) => i.replay_run_id === paused.run.run_id)!;
    expect(item).toMatchObject({ status: 'done', changed: true });
    expect((await getJson(`${server.url}/runs/${paused.run.run_id}`)).body.status).toBe('completed');
    const after = RunBudgetResponse.parse((await getJson(`${server.url}/runs/${paused.run.run_id}/budget`)).body).budgets[0];
    expect(after).toMatchObject({ scope: 'eval', key, granted: 1, spent: 3, reserved: 0 });

    // Another evaluation has its own budget: one replay fits without asking.
    const second = EvalView.parse(
      (await postJson(`${server.url}/evals`, { name: 'second', source: { run_ids: [runIds[0]] }, variant: { system_instruction: 'v3' } })).body,
    );
    const secondDone = await eventually(async () => {
      const ev = await evalOf(second.eval_id);
      return ev.status === 'completed' ? ev : null;
    });
    expect(secondDone.progress).toEqual({ total: 1, done: 1, failed: 0 });
    const secondBudget = RunBudgetResponse.parse((await getJson(`${server.url}/runs/${secondDone.items[0].replay_run_id}/budget`)).body).budgets;
    expect(secondBudget).toEqual([expect.objectContaining({ key: `eval:${second.eval_id}:total`, spent: 1 })]);
  });

  it("count the judge's runs too: a judge run reserves against the evaluation's budget and pauses and asks when it runs out", async () => {
    const runIds = await originals(2);
    const judgeAgent = String((await getJson(`${server.url}/runs/${runIds[0]}`)).body.agent_id);
    model.setDefault((req) => {
      const last = String(req.messages.at(-1)!.content);
      return { text: last.startsWith('Score from 0 to 1') ? '0.75' : `replayed ${last}` };
    });
    const created = await postJson(`${server.url}/evals`, {
      name: 'judged',
      source: { run_ids: runIds },
      variant: { system_instruction: 'v4' },
      scorer: { type: 'judge', agent_id: judgeAgent },
      concurrency: 1,
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const { eval_id } = EvalView.parse(created.body);
    const key = `eval:${eval_id}:total`;
    const budgetOf = async (runId: string) => RunBudgetResponse.parse((await getJson(`${server.url}/runs/${runId}/budget`)).body);
    const waiting = async (runId: string) => ((await getJson(`${server.url}/runs/${runId}`)).body.status === 'awaiting_budget' ? runId : null);

    // The first replay and its judge spend the budget of two model calls: the second replay asks.
    const first = await eventually(async () => {
      const ev = await evalOf(eval_id);
      return ev.items[0].status === 'done' ? ev.items[0] : null;
    });
    expect(first.score).toBe(0.75);
    const judge0 = `${first.replay_run_id}_judge`;
    expect((await getJson(`${server.url}/runs/${judge0}`)).body).toMatchObject({ status: 'completed', response: '0.75' });
    expect((await budgetOf(judge0)).budgets).toEqual([expect.objectContaining({ scope: 'eval', key, spent: 2, reserved: 0 })]);
    const replay1 = (await evalOf(eval_id)).items[1].replay_run_id!;
    await eventually(() => waiting(replay1));
    expect((await budgetOf(replay1)).requests).toEqual([expect.objectContaining({ key, used: 2, shortfall: 1, status: 'pending' })]);

    // Granted, the replay ends; then its judge needs one more call and asks in turn.
    expect((await postJson(`${server.url}/runs/${replay1}/budget`, { decision: 'grant', approver: 'erin' })).status).toBe(200);
    const judge1 = await eventually(() => waiting(`${replay1}_judge`));
    expect((await budgetOf(judge1)).requests).toEqual([expect.objectContaining({ key, scope: 'eval', used: 3, status: 'pending' })]);
    expect((await evalOf(eval_id)).items[1].status).toBe('running');
    expect((await postJson(`${server.url}/runs/${judge1}/budget`, { decision: 'grant', approver: 'erin' })).status).toBe(200);
    const done = await eventually(async () => {
      const ev = await evalOf(eval_id);
      return ev.status === 'completed' ? ev : null;
    });
    expect(done.items.map((i) => [i.status, i.score])).toEqual([
      ['done', 0.75],
      ['done', 0.75],
    ]);
    expect((await budgetOf(judge1)).budgets).toEqual([expect.objectContaining({ key, granted: 2, spent: 4, reserved: 0 })]);
    // An evaluation's judge runs are its own runs: a filter never selects them (nor its replays).
    const again = await postJson(`${server.url}/evals`, {
      name: 'by filter',
      source: { filter: { agent_id: judgeAgent, limit: 100 } },
      variant: { system_instruction: 'v5' },
    });
    expect(again.status, JSON.stringify(again.body)).toBe(201);
    const selected = (await evalOf(EvalView.parse(again.body).eval_id)).items.map((i) => i.run_id);
    expect(selected).toEqual(expect.arrayContaining(runIds));
    expect(selected.filter((id) => id.startsWith('evalrun_'))).toEqual([]);
    await postJson(`${server.url}/evals/${EvalView.parse(again.body).eval_id}/cancel`, {});
  });
});
