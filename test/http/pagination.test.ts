// Every list route answers a page at a time (`limit`, `cursor`, `next_cursor`, as GET /runs), so
// no answer grows with what the store holds: before, GET /background/agents ignored `limit` and
// 40 agents with 1 MiB instructions made each answer 41.6 MB. Over real HTTP.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

/** Follows next_cursor from the first page; every page's items, in order. */
async function pageThrough(url: string, key: string, limit: number): Promise<{ pages: unknown[][]; last: Record<string, unknown> }> {
  const pages: unknown[][] = [];
  let cursor: string | null = null;
  let last: Record<string, unknown> = {};
  for (let i = 0; i < 100; i++) {
    const sep = url.includes('?') ? '&' : '?';
    const r = await getJson(`${url}${sep}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    last = r.body;
    const items = r.body[key] as unknown[];
    expect(items.length).toBeLessThanOrEqual(limit);
    expect(r.body).toHaveProperty('next_cursor');
    if (items.length > 0) pages.push(items);
    cursor = r.body.next_cursor;
    if (cursor === null) return { pages, last };
  }
  throw new Error('next_cursor never ended');
}

describe('pagination of every list route', () => {
  let s: TestServer;
  let model: ScriptedOpenAI;
  let bgRunId: string;
  beforeAll(async () => {
    model = await startScriptedOpenAI({ defaultReply: { text: 'done' } });
    s = await startTestServer({ background: { poll_interval_ms: 50 } }, { modelUrl: model.url });
    // Instruction-only specs: what any operator may register. Large instructions: the answer of
    // a page must not carry the others.
    const big = 'x'.repeat(64 * 1024);
    for (let i = 0; i < 5; i++) {
      const r = await postJson(`${s.url}/background/agents`, { spec: { agent_id: `paged-${i}`, system_instruction: `${i}${big}` } });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    }
    for (let i = 0; i < 4; i++) {
      const r = await postJson(`${s.url}/background/tasks`, { task_id: `task-${i}`, query: `q${i}`, schedule: { type: 'manual' }, agent_id: 'paged-0' });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    }
    const run = await postJson(`${s.url}/background/tasks/task-0/run`, { wait: true });
    expect(run.status, JSON.stringify(run.body)).toBe(200);
    bgRunId = run.body.run_id;
    // A session of several messages, with a run (and a trace) per turn.
    for (let i = 0; i < 3; i++) expect((await postJson(`${s.url}/run/sync`, { query: `turn ${i}`, session_id: 'paged-session' })).status).toBe(200);
  }, 60_000);
  afterAll(async () => {
    await s.stop();
    s.cleanup();
    await model.close();
  });

  it('GET /background/agents?limit=1 pages through all agents, one at a time', async () => {
    // The five, and the served agent (registered at start-up as `default`).
    const all = await getJson(`${s.url}/background/agents?limit=100`);
    expect(all.body.total).toBe(6);
    const { pages } = await pageThrough(`${s.url}/background/agents`, 'agents', 1);
    expect(pages.every((p) => p.length === 1)).toBe(true);
    const ids = pages.flat().map((a) => (a as { agent_id: string }).agent_id);
    expect(ids.sort()).toEqual(['default', 'paged-0', 'paged-1', 'paged-2', 'paged-3', 'paged-4']);
    // One page holds one agent's instruction, not all of them.
    const first = await fetch(`${s.url}/background/agents?limit=1`);
    expect(Number((await first.text()).length)).toBeLessThan(2 * 64 * 1024);
    // Without limit: a page of 20 (agent specs can be large); limit at most 100.
    const dflt = await getJson(`${s.url}/background/agents`);
    expect(dflt.body.agents.length).toBe(6);
    expect((await getJson(`${s.url}/background/agents?limit=101`)).status).toBe(422);
  });

  it('GET /background/tasks pages, with and without agent_id', async () => {
    const { pages, last } = await pageThrough(`${s.url}/background/tasks`, 'tasks', 3);
    expect(pages.map((p) => p.length)).toEqual([3, 1]);
    expect(last.total).toBe(4);
    const byAgent = await pageThrough(`${s.url}/background/tasks?agent_id=paged-0`, 'tasks', 1);
    expect(byAgent.pages.flat().map((t) => (t as { task_id: string }).task_id)).toEqual(['task-0', 'task-1', 'task-2', 'task-3']);
  });

  it("GET /background/runs/{id}/events and /attempts page through a run's lists", async () => {
    const whole = await getJson(`${s.url}/background/runs/${bgRunId}/events`);
    expect(whole.body.events.length).toBeGreaterThan(2);
    expect(whole.body.next_cursor).toBeNull();
    const { pages } = await pageThrough(`${s.url}/background/runs/${bgRunId}/events`, 'events', 1);
    expect(pages.flat()).toEqual(whole.body.events);
    expect(pages.flat().map((e) => (e as { sequence: number }).sequence)).toEqual(whole.body.events.map((_: unknown, i: number) => i + 1));
    const attempts = await pageThrough(`${s.url}/background/runs/${bgRunId}/attempts`, 'attempts', 1);
    expect(attempts.pages.flat().length).toBeGreaterThanOrEqual(1);
    expect((await getJson(`${s.url}/background/runs/${bgRunId}/events?cursor=not-a-cursor`)).status).toBe(422);
  });

  it('GET /sessions/{id}/history pages through the conversation', async () => {
    const whole = await getJson(`${s.url}/sessions/paged-session/history`);
    expect(whole.body.total).toBe(whole.body.messages.length);
    expect(whole.body.total).toBeGreaterThanOrEqual(6);
    const { pages, last } = await pageThrough(`${s.url}/sessions/paged-session/history`, 'messages', 2);
    expect(pages.flat()).toEqual(whole.body.messages);
    expect(last.total).toBe(whole.body.total);
    expect(last.count).toBe((last.messages as unknown[]).length);
    expect((await getJson(`${s.url}/sessions/paged-session/history?cursor=-1`)).status).toBe(422);
  });

  it('GET /telemetry/traces pages with a cursor, newest first', async () => {
    const whole = await getJson(`${s.url}/telemetry/traces?session_id=paged-session`);
    expect(whole.body.traces.length).toBe(3);
    const { pages } = await pageThrough(`${s.url}/telemetry/traces?session_id=paged-session`, 'traces', 1);
    expect(pages.flat().map((t) => (t as { trace_id: string }).trace_id)).toEqual(whole.body.traces.map((t: { trace_id: string }) => t.trace_id));
  });

  it('GET /events/{session_id}/list takes a limit', async () => {
    const whole = await getJson(`${s.url}/events/paged-session/list`);
    expect(whole.body.events.length).toBeGreaterThan(5);
    const { pages } = await pageThrough(`${s.url}/events/paged-session/list`, 'events', 4);
    expect(pages.flat()).toEqual(whole.body.events);
  });
});
