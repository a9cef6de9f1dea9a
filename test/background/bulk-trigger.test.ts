// POST /background/tasks/{task_id}/runs: many manual runs in one call (as BullMQ's addBulk), each
// under the task's overlap policy, each idempotent by its own key, the list bounded; over HTTP
// against a real server.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { TOOLS, api, directModel, waitRun, type Api } from './helpers.js';

let model: ScriptedOpenAI;
let server: TestServer;
let a: Api;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  directModel(model);
  server = await startTestServer(
    {
      agent: { tools: { local: TOOLS } },
      background: { poll_interval_ms: 50, lease_seconds: 30, concurrency: 4 },
    },
    { modelUrl: model.url },
  );
  a = api(server.url);
});

afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
});

let seq = 0;
async function task(body: Record<string, unknown> = {}): Promise<string> {
  const task_id = `bulk${++seq}`;
  const r = await a.post('/background/tasks', { task_id, query: 'the task query', schedule: { type: 'manual' }, overlap_policy: 'allow_parallel', ...body });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return task_id;
}

const locs = (body: any): string[] => (body?.detail ?? []).map((d: any) => d.loc.join('.'));

async function runsOf(taskId: string): Promise<any[]> {
  return (await a.get(`/background/runs?task_id=${taskId}&limit=100`)).body.runs;
}

describe('POST /background/tasks/{task_id}/runs', () => {
  it('queues one run per item, in order, with its own query, and each runs to its end', async () => {
    const t = await task();
    const r = await a.post(`/background/tasks/${t}/runs`, { runs: [{ query: 'first' }, {}, { query: 'third', idempotency_key: 'k3' }] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.created).toBe(3);
    expect(r.body.runs.map((x: any) => x.created)).toEqual([true, true, true]);
    expect(r.body.runs.map((x: any) => x.run.query_snapshot)).toEqual(['first', 'the task query', 'third']);
    for (const { run } of r.body.runs) {
      expect(run).toMatchObject({ task_id: t, trigger_type: 'manual', status: 'queued' });
      expect((await waitRun(a, run.run_id)).status).toBe('completed');
    }
    // A background run's agent run is listed by GET /runs as before.
    const agentRun = await a.get(`/runs/${r.body.runs[0].run.run_id}`);
    expect(agentRun.status).toBe(200);
  });

  it('is idempotent per item: a retried list answers with the runs it queued and queues nothing more; a key given twice queues once', async () => {
    const t = await task();
    const items = [
      { query: 'one', idempotency_key: 'order-1' },
      { query: 'two', idempotency_key: 'order-2' },
      { query: 'one again', idempotency_key: 'order-1' },
    ];
    const first = await a.post(`/background/tasks/${t}/runs`, { runs: items });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body.created).toBe(2);
    const ids = first.body.runs.map((x: any) => x.run.run_id);
    expect(ids[2]).toBe(ids[0]);
    expect(first.body.runs.map((x: any) => x.created)).toEqual([true, true, false]);
    expect(first.body.runs[2].run.query_snapshot).toBe('one');
    // The retry (a lost answer, say), one item more: only the new item queues.
    const again = await a.post(`/background/tasks/${t}/runs`, { runs: [...items, { query: 'three', idempotency_key: 'order-3' }] });
    expect(again.status).toBe(200);
    expect(again.body.created).toBe(1);
    expect(again.body.runs.map((x: any) => x.run.run_id).slice(0, 3)).toEqual(ids);
    expect(again.body.runs.map((x: any) => x.created)).toEqual([false, false, false, true]);
    for (const id of new Set<string>(again.body.runs.map((x: any) => x.run.run_id))) await waitRun(a, id);
    expect((await runsOf(t)).length).toBe(3);
    // The same key on another task is another run.
    const other = await task();
    const o = await a.post(`/background/tasks/${other}/runs`, { runs: [{ idempotency_key: 'order-1' }] });
    expect(o.body.created).toBe(1);
    expect(o.body.runs[0].run.run_id).not.toBe(ids[0]);
    await waitRun(a, o.body.runs[0].run.run_id);
  });

  it("obeys the task's overlap policy item by item", async () => {
    const t = await task({ overlap_policy: 'skip_if_running', query: 'CALL bg_slow {"ms": 300}' });
    const r = await a.post(`/background/tasks/${t}/runs`, { runs: [{}, {}, {}] });
    expect(r.status).toBe(200);
    expect(r.body.runs.map((x: any) => x.run.status)).toEqual(['queued', 'skipped', 'skipped']);
    expect(r.body.created).toBe(3);
    expect((await waitRun(a, r.body.runs[0].run.run_id)).status).toBe('completed');
  });

  it('answers 422 for an empty list, a list over 1,000 runs, an unknown field or a bad key, and queues nothing', async () => {
    const t = await task();
    const cases: Array<[unknown, string]> = [
      [{ runs: [] }, 'body.runs'],
      [{ runs: Array.from({ length: 1001 }, () => ({})) }, 'body.runs'],
      [{ runs: [{ query: 'x', colour: 'red' }] }, 'body.runs.0'],
      [{ runs: [{ idempotency_key: 'with space' }] }, 'body.runs.0.idempotency_key'],
      [{ runs: [{ idempotency_key: 'x'.repeat(256) }] }, 'body.runs.0.idempotency_key'],
      [{}, 'body.runs'],
    ];
    for (const [body, loc] of cases) {
      const r = await a.post(`/background/tasks/${t}/runs`, body);
      expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(422);
      expect(
        locs(r.body).some((l) => l === loc || l.startsWith(`${loc}.`)),
        JSON.stringify(r.body).slice(0, 300),
      ).toBe(true);
    }
    expect(await runsOf(t)).toHaveLength(0);
  });

  it('answers 404 for an unknown or disabled task', async () => {
    expect((await a.post('/background/tasks/nope/runs', { runs: [{}] })).body.code).toBe('AGT_ERR_BACKGROUND_TASK_NOT_FOUND');
    const t = await task({ enabled: false });
    expect((await a.post(`/background/tasks/${t}/runs`, { runs: [{}] })).status).toBe(404);
  });

  it('admits the list against background.max_queued_runs as a whole: 503 ServerBusy with Retry-After, and nothing queued', async () => {
    const small = await startTestServer(
      { agent: { tools: { local: TOOLS } }, background: { poll_interval_ms: 50, lease_seconds: 30, concurrency: 1, max_queued_runs: 5 } },
      { modelUrl: model.url },
    );
    const b = api(small.url);
    try {
      expect(
        (
          await b.post('/background/tasks', {
            task_id: 'bound',
            query: 'CALL bg_slow {"ms": 20000}',
            schedule: { type: 'manual' },
            overlap_policy: 'allow_parallel',
          })
        ).status,
      ).toBe(200);
      // Over the bound on its own: refused whole.
      const tooMany = await b.post('/background/tasks/bound/runs', { runs: Array.from({ length: 6 }, () => ({})) });
      expect(tooMany.status).toBe(503);
      expect(tooMany.body).toMatchObject({ code: 'AGT_ERR_SERVER_BUSY' });
      expect(tooMany.headers.get('retry-after')).toBe('5');
      expect((await b.get('/background/runs?task_id=bound')).body.runs).toHaveLength(0);
      // Up to the bound: taken (one of them holds the one worker, the rest wait).
      const five = await b.post('/background/tasks/bound/runs', { runs: Array.from({ length: 5 }, () => ({})) });
      expect(five.status).toBe(200);
      // At least 4 wait in the queue now: 3 more would pass 5.
      const more = await b.post('/background/tasks/bound/runs', { runs: Array.from({ length: 3 }, () => ({})) });
      expect(more.status).toBe(503);
      expect((await b.get('/background/runs?task_id=bound')).body.runs).toHaveLength(5);
      for (const { run } of five.body.runs) await b.post(`/background/runs/${run.run_id}/cancel`);
    } finally {
      await small.stop();
      small.cleanup();
    }
  }, 60_000);
});
