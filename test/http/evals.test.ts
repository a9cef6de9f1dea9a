// Evaluations through HTTP (docs/contract.md §3.7): a batch of past runs replayed against a variant
// model (a second scripted server), scored, summed up; cancel, delete, roles.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { AUTH, GOVERNED_OPEN, KEYS, defaultReplies, useLedger } from '../helpers/protocol-server.js';
import { EvalDetail, EvalView } from '../../src/schemas/index.js';

const ledger = useLedger();
let model: ScriptedOpenAI;
let variant: ScriptedOpenAI;
let server: TestServer;
const op = { authorization: `Bearer ${KEYS.operator}` };
const reader = { authorization: `Bearer ${KEYS.reader}` };

beforeAll(async () => {
  model = await startScriptedOpenAI();
  variant = await startScriptedOpenAI();
  server = await startTestServer({ ...GOVERNED_OPEN, auth: AUTH, agents: { model_hosts: [new URL(variant.url).host] } }, { modelUrl: model.url });
});
afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
  await variant.close();
});
beforeEach(() => {
  ledger.reset();
  defaultReplies(model);
  variant.reset();
});

const deleteJson = async (url: string, headers: Record<string, string>) => {
  const res = await fetch(url, { method: 'DELETE', headers });
  return { status: res.status, body: await res.json() };
};

describe('evaluations', () => {
  it('replays every selected run once against the variant, scores it and sums up, outcomes included', async () => {
    const session = `eval-src-${Date.now()}`;
    const runIds: string[] = [];
    for (let i = 0; i < 6; i++) {
      model.enqueue({ text: `answer ${i}` });
      const r = (await postJson(`${server.url}/run/sync`, { query: `question ${i}`, session_id: session }, op)).body;
      runIds.push(r.run_id);
    }
    // Two originals carry a reported outcome.
    await postJson(`${server.url}/runs/${runIds[0]}/outcome`, { source: 'user', label: 'thumbs_down' }, op);
    await postJson(`${server.url}/runs/${runIds[1]}/outcome`, { source: 'user', label: 'thumbs_down' }, op);
    // The variant answers the even questions as the original did, the odd ones otherwise.
    variant.setDefault((req) => {
      const q = String(req.messages.at(-1)!.content);
      const n = Number(q.split(' ')[1]);
      return { text: n % 2 === 0 ? `answer ${n}` : `better ${n}` };
    });
    const created = await postJson(
      `${server.url}/evals`,
      {
        name: 'candidate',
        source: { filter: { session_id: session, limit: 50 } },
        variant: { model: { provider: 'openai-compatible', base_url: variant.url, model: 'candidate' } },
        scorer: { type: 'exact' },
        concurrency: 3,
      },
      op,
    );
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const ev = EvalView.parse(created.body);
    expect(ev.progress.total).toBe(6);
    const done = await eventually(async () => {
      const d = (await getJson(`${server.url}/evals/${ev.eval_id}`, reader)).body;
      return d.status === 'completed' ? EvalDetail.parse(d) : null;
    });
    expect(done.progress).toEqual({ total: 6, done: 6, failed: 0 });
    expect(done.items.map((i) => i.run_id).sort()).toEqual([...runIds].sort());
    expect(variant.requests).toHaveLength(6); // one replay per item
    expect(done.aggregates.changed_pct).toBeCloseTo(50);
    expect(done.aggregates.mean_score).toBeCloseTo(0.5);
    expect(done.aggregates.outcomes.thumbs_down.items).toBe(2);
    const item1 = done.items.find((i) => i.run_id === runIds[1])!;
    expect(item1).toMatchObject({ status: 'done', changed: true, score: 0 });
    // The replay is a run that says where it came from.
    const cmp = (await getJson(`${server.url}/runs/${runIds[1]}/compare/${item1.replay_run_id}`, reader)).body;
    expect(cmp.diff.response_diff).toContain('+better 1');

    const listed = (await getJson(`${server.url}/evals`, reader)).body;
    expect(listed.evals.map((e: { eval_id: string }) => e.eval_id)).toContain(ev.eval_id);
    // A second evaluation over the same session does not select the first one's replays.
    const again = await postJson(
      `${server.url}/evals`,
      { name: 'again', source: { filter: { session_id: session, limit: 50 } }, variant: { system_instruction: 'x' } },
      op,
    );
    expect(again.body.progress.total).toBe(6);
    expect((await postJson(`${server.url}/evals/${ev.eval_id}/cancel`, {}, op)).body.code).toBe('AGT_ERR_EVAL_ENDED');
    expect((await deleteJson(`${server.url}/evals/${ev.eval_id}`, op)).status).toBe(200);
    expect((await getJson(`${server.url}/evals/${ev.eval_id}`, reader)).body.code).toBe('AGT_ERR_EVAL_NOT_FOUND');
  });

  it('needs an operator to create; refuses unknown runs and bad bodies with 422', async () => {
    const body = { name: 'x', source: { run_ids: ['run_missing'] }, variant: { system_instruction: 'y' } };
    expect((await postJson(`${server.url}/evals`, body, reader)).status).toBe(403);
    const missing = await postJson(`${server.url}/evals`, body, op);
    expect(missing.status).toBe(422);
    expect(missing.body.detail[0].loc).toEqual(['body', 'source', 'run_ids', 0]);
    expect((await postJson(`${server.url}/evals`, { ...body, scorer: { type: 'nope' } }, op)).status).toBe(422);
    expect((await postJson(`${server.url}/evals`, { ...body, source: { filter: { limit: 5000 } } }, op)).status).toBe(422);
    // A model config is checked before anything is stored: a key in it, or a host not listed, is a 422.
    const model = { provider: 'openai-compatible', base_url: variant.url, model: 'm', api_key: 'sk-secret-value' };
    const keyed = await postJson(`${server.url}/evals`, { ...body, variant: { model } }, op);
    expect(keyed.status).toBe(422);
    expect(JSON.stringify((await getJson(`${server.url}/evals`, reader)).body)).not.toContain('sk-secret-value');
    const host = await postJson(`${server.url}/evals`, { ...body, variant: { model: { ...model, api_key: undefined, base_url: 'http://10.0.0.1/v1' } } }, op);
    expect(host.status).toBe(422);
  });
});
