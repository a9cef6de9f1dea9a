// A drain at background.concurrency 1 on the embedded store: a run's end frees its worker at once
// and its commit waits for the next run's claim, so the two share one group-commit round (one
// fsync, one atomic batch) instead of the claim waiting for the end to be durable.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import type { CommitOps, WriteOp } from '../../src/store/store.js';
import { api, directModel, waitRun, type Api } from './helpers.js';

let model: ScriptedOpenAI;
let server: TestServer;
let a: Api;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  directModel(model);
  server = await startTestServer({ background: { poll_interval_ms: 50, concurrency: 1 } }, { modelUrl: model.url });
  a = api(server.url);
});

afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
});

describe('draining at concurrency 1', () => {
  it("writes a run's end in the same store round as the next run's claim", async () => {
    const store = server.store as typeof server.store & { stats?: { groupCommitRounds: number } };
    if (!store.stats) return; // the embedded store only (AGENTD_TEST_STORE=postgres counts no rounds)
    // The round each lifecycle event was written in: the rounds counter when its commit resolved
    // (the commits of one round resolve together, before the next round can be written).
    const rounds = { claimed: new Set<number>(), completed: [] as number[] };
    const { commitWithEvents } = store;
    store.commitWithEvents = (ops, events) =>
      commitWithEvents.call(store, ops, events).then((r) => {
        const at = store.stats!.groupCommitRounds;
        for (const e of r.events) {
          if (e.event_type === 'background_run_claimed') rounds.claimed.add(at);
          if (e.event_type === 'background_run_completed') rounds.completed.push(at);
        }
        return r;
      });
    let ids: string[];
    try {
      expect(
        (await a.post('/background/tasks', { task_id: 'drain', schedule: { type: 'manual' }, query: 'just answer', overlap_policy: 'allow_parallel' })).status,
      ).toBe(200);
      const created = await Promise.all(Array.from({ length: 6 }, () => a.post('/background/tasks/drain/run', {})));
      ids = created.map((r) => (expect(r.status).toBe(200), r.body.run_id as string));
      for (const id of ids) expect((await waitRun(a, id)).status).toBe('completed');
    } finally {
      store.commitWithEvents = commitWithEvents;
    }
    expect(rounds.completed).toHaveLength(6);
    // Timing decides how many (a claim pass slower than the 5 ms wait misses it); before, none could.
    expect(rounds.completed.filter((r) => rounds.claimed.has(r)).length).toBeGreaterThan(0);
  });
});

describe("an agent run's end carries its background run's", () => {
  it("writes a failed agent run and its background run's failure in one commit", async () => {
    const store = server.store as typeof server.store & { stats?: unknown };
    if (!store.stats) return; // the embedded store only: on PostgreSQL the background run's step is a write of its own
    // Each commit's record statuses (kind:status) and the lifecycle events it appended.
    const commits: Array<{ statuses: string[]; events: string[] }> = [];
    const { commitWithEvents } = store;
    store.commitWithEvents = (ops, events) => {
      const seen = { statuses: [] as string[], events: [] as string[] };
      commits.push(seen);
      const note = (list: WriteOp[]) => {
        for (const o of list) {
          const v = (o as { value?: { status?: string; run?: { status?: string } } }).value;
          seen.statuses.push(`${o.kind}:${v?.status ?? v?.run?.status ?? ''}`);
        }
        return list;
      };
      const wrapped: CommitOps = typeof ops === 'function' ? () => note(ops()) : note(ops);
      return commitWithEvents.call(store, wrapped, events).then((r) => {
        for (const e of r.events) seen.events.push(e.event_type);
        return r;
      });
    };
    try {
      expect((await a.post('/background/tasks', { task_id: 'fails', schedule: { type: 'manual' }, query: 'FAIL now' })).status).toBe(200);
      const run = await a.post('/background/tasks/fails/run', {});
      expect(run.status).toBe(200);
      expect((await waitRun(a, run.body.run_id)).status).toBe('failed');
    } finally {
      store.commitWithEvents = commitWithEvents;
    }
    const end = commits.find((c) => c.statuses.includes('runs:failed'));
    expect(end?.statuses).toContain('bg_runs:failed');
    expect(end?.events).toContain('background_run_failed');
  });
});
