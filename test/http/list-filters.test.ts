// order=asc|desc and the agent, task and time-range filters of GET /runs, GET /background/runs and
// GET /telemetry/traces, over real HTTP (docs/contract.md §1): the documented defaults stay, bad
// values are 422 with loc, and a filtered list pages through every match and nothing else.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

/** Every item of a list, following next_cursor `limit` at a time. */
async function all(url: string, key: string, limit: number): Promise<any[]> {
  const items: any[] = [];
  let cursor: string | null = null;
  for (let i = 0; i < 200; i++) {
    const r = await getJson(`${url}${url.includes('?') ? '&' : '?'}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body[key].length).toBeLessThanOrEqual(limit);
    items.push(...r.body[key]);
    cursor = r.body.next_cursor;
    if (cursor === null) return items;
  }
  throw new Error('next_cursor never ended');
}

describe('list order and filters', () => {
  let s: TestServer;
  let model: ScriptedOpenAI;
  const chatRuns: string[] = [];
  let middle = '';
  beforeAll(async () => {
    model = await startScriptedOpenAI({ defaultReply: { text: 'done' } });
    s = await startTestServer({ background: { poll_interval_ms: 50 } }, { modelUrl: model.url });
    for (const agent of ['alpha', 'beta']) {
      expect((await postJson(`${s.url}/background/agents`, { spec: { agent_id: agent, system_instruction: 'be brief' } })).status).toBe(200);
      expect(
        (await postJson(`${s.url}/background/tasks`, { task_id: `task-${agent}`, query: 'q', schedule: { type: 'manual' }, agent_id: agent })).status,
      ).toBe(200);
    }
    for (let i = 0; i < 3; i++) {
      chatRuns.push((await postJson(`${s.url}/run/sync`, { query: `turn ${i}`, session_id: 'lists' })).body.run_id);
      if (i === 0) {
        // A boundary strictly between the first run and the others, read from the server's records.
        const first = (await getJson(`${s.url}/runs/${chatRuns[0]}`)).body;
        const after = Date.parse(first.created_at) + 1;
        while (Date.now() <= after + 1) await new Promise((r) => setTimeout(r, 2));
        middle = new Date(after).toISOString();
      }
    }
    for (const agent of ['alpha', 'beta', 'alpha']) expect((await postJson(`${s.url}/background/tasks/task-${agent}/run`, { wait: true })).status).toBe(200);
  }, 60_000);
  afterAll(async () => {
    await s?.stop();
    s?.cleanup();
    await model?.close();
  });

  it('GET /runs: oldest first by default, newest first with order=desc, the same runs either way', async () => {
    const asc = await all(`${s.url}/runs`, 'runs', 2);
    const desc = await all(`${s.url}/runs?order=desc`, 'runs', 2);
    expect(asc.length).toBe(6);
    expect(desc.map((r) => r.run_id)).toEqual(asc.map((r) => r.run_id).reverse());
    const created = asc.map((r) => Date.parse(r.created_at));
    expect([...created].sort((a, b) => a - b)).toEqual(created);
  });

  it('GET /runs filters by agent, task and time range, a page at a time, and combines them', async () => {
    const alpha = await all(`${s.url}/runs?agent_id=alpha`, 'runs', 1);
    expect(alpha.length).toBe(2);
    expect(alpha.every((r) => r.agent_id === 'alpha' && r.task_id === 'task-alpha')).toBe(true);
    const beta = await all(`${s.url}/runs?task_id=task-beta&order=desc`, 'runs', 1);
    expect(beta.map((r) => r.task_id)).toEqual(['task-beta']);
    expect((await all(`${s.url}/runs?agent_id=alpha&task_id=task-beta`, 'runs', 5)).length).toBe(0);
    // since is inclusive, until exclusive.
    const before = await all(`${s.url}/runs?until=${encodeURIComponent(middle)}`, 'runs', 5);
    expect(before.map((r) => r.run_id)).toEqual([chatRuns[0]]);
    const since = await all(`${s.url}/runs?session_id=lists&since=${encodeURIComponent(middle)}&order=desc`, 'runs', 1);
    expect(since.map((r) => r.run_id)).toEqual([chatRuns[2], chatRuns[1]]);
    const status = await all(`${s.url}/runs?status=completed&agent_id=beta`, 'runs', 1);
    expect(status.map((r) => r.agent_id)).toEqual(['beta']);
  });

  it('GET /background/runs and GET /telemetry/traces take order, agent and time range too', async () => {
    const bgAsc = await all(`${s.url}/background/runs`, 'runs', 2);
    const bgDesc = await all(`${s.url}/background/runs?order=desc`, 'runs', 2);
    expect(bgAsc.length).toBe(3);
    expect(bgDesc.map((r) => r.run_id)).toEqual(bgAsc.map((r) => r.run_id).reverse());
    expect((await all(`${s.url}/background/runs?agent_id=alpha`, 'runs', 1)).map((r) => r.agent_id)).toEqual(['alpha', 'alpha']);
    expect((await all(`${s.url}/background/runs?until=${encodeURIComponent(middle)}`, 'runs', 5)).length).toBe(0);

    const tDesc = await all(`${s.url}/telemetry/traces?session_id=lists`, 'traces', 2);
    const tAsc = await all(`${s.url}/telemetry/traces?session_id=lists&order=asc`, 'traces', 2);
    expect(tDesc.length).toBe(3);
    expect(tAsc.map((t) => t.trace_id)).toEqual(tDesc.map((t) => t.trace_id).reverse());
    expect((await all(`${s.url}/telemetry/traces?run_id=${chatRuns[1]}&since=${encodeURIComponent(middle)}`, 'traces', 5)).map((t) => t.run_id)).toEqual([
      chatRuns[1],
    ]);
  });

  it("GET /background/tasks and a run's attempts and events take order, and their cursors page either way", async () => {
    const tasksAsc = await all(`${s.url}/background/tasks`, 'tasks', 1);
    const tasksDesc = await all(`${s.url}/background/tasks?order=desc`, 'tasks', 1);
    expect(tasksAsc.map((t) => t.task_id)).toEqual(['task-alpha', 'task-beta']);
    expect(tasksDesc.map((t) => t.task_id)).toEqual(['task-beta', 'task-alpha']);
    const run = (await all(`${s.url}/background/runs?agent_id=beta`, 'runs', 5))[0];
    const evAsc = await all(`${s.url}/background/runs/${run.run_id}/events`, 'events', 2);
    const evDesc = await all(`${s.url}/background/runs/${run.run_id}/events?order=desc`, 'events', 2);
    expect(evAsc.length).toBeGreaterThan(2);
    expect(evAsc.map((e) => e.sequence)).toEqual(evAsc.map((_, i) => i + 1));
    expect(evDesc.map((e) => e.sequence)).toEqual(evAsc.map((e) => e.sequence).reverse());
    const atAsc = await all(`${s.url}/background/runs/${run.run_id}/attempts`, 'attempts', 1);
    const atDesc = await all(`${s.url}/background/runs/${run.run_id}/attempts?order=desc`, 'attempts', 1);
    expect(atAsc.length).toBeGreaterThan(0);
    expect(atDesc.map((a) => a.attempt_number)).toEqual(atAsc.map((a) => a.attempt_number).reverse());
    for (const path of [
      '/background/tasks?order=newest',
      `/background/runs/${run.run_id}/events?order=x`,
      `/background/runs/${run.run_id}/attempts?order=DESC`,
    ]) {
      const r = await getJson(`${s.url}${path}`);
      expect(r.status, path).toBe(422);
      expect(r.body.detail.map((d: { loc: string[] }) => d.loc.join('.'))).toContain('query.order');
    }
  });

  it('refuses a bad order, a time without a timezone and a range that ends before it starts (422 with loc)', async () => {
    const bad: Array<[string, string]> = [
      ['/runs?order=newest', 'order'],
      ['/runs?since=2026-01-01T00:00:00', 'since'],
      ['/runs?since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z', 'until'],
      ['/background/runs?order=up', 'order'],
      ['/background/runs?until=yesterday', 'until'],
      ['/telemetry/traces?order=1', 'order'],
      ['/telemetry/traces?since=2026-02-01T00:00:00Z&until=2026-02-01T00:00:00Z', 'until'],
    ];
    for (const [path, field] of bad) {
      const r = await getJson(`${s.url}${path}`);
      expect(r.status, path).toBe(422);
      expect(
        r.body.detail.map((d: { loc: string[] }) => d.loc.join('.')),
        path,
      ).toContain(`query.${field}`);
    }
  });
});
