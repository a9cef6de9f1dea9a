// Debounced manual triggers over HTTP (docs/flow-control.md "Debounce"): POST
// /background/tasks/{id}/run with debounce_seconds collapses triggers into one run that starts at
// the window's end. The server runs on an injected clock (wall time plus an offset the test moves),
// so windows of a minute pass without sleeping; "has not started yet" is proven by a claim pass
// that ran after the clock moved (another task's run, queued behind it, completed).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Clock } from '../../src/clock.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { eventually, startTestServer, tempDir, type TestServer } from '../helpers/server.js';
import { api, type Api } from '../background/helpers.js';

class OffsetClock implements Clock {
  offset = 0;
  now(): number {
    return Date.now() + this.offset;
  }
  advance(ms: number): void {
    this.offset += ms;
  }
}

let model: ScriptedOpenAI;
beforeAll(async () => {
  model = await startScriptedOpenAI();
  model.setDefault((req) => ({ text: `answered ${String(req.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '')}` }));
});
afterAll(async () => {
  await model.close();
});

const asked = (): string[] => model.requests.map((r) => String(r.messages.filter((m) => m.role === 'user').at(-1)?.content ?? ''));
const config = (extra: Record<string, unknown> = {}) => ({
  background: { poll_interval_ms: 25, lease_seconds: 5, concurrency: 4 },
  server: { request_timeout_seconds: 20 },
  ...extra,
});

async function makeTask(a: Api, task_id: string, query = `base ${task_id}`): Promise<void> {
  const r = await a.post('/background/tasks', { task_id, query, schedule: { type: 'manual' } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
}

async function trigger(a: Api, taskId: string, body: Record<string, unknown>): Promise<any> {
  const r = await a.post(`/background/tasks/${taskId}/run`, body);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body;
}

/** A claim pass ran at the clock's present: a plain run of another task, queued after, completed. */
async function claimPassDone(a: Api, probeTask: string): Promise<void> {
  const probe = await trigger(a, probeTask, { wait: true });
  expect(probe.status).toBe('completed');
}

const waitStatus = (a: Api, runId: string, statuses: string[]) =>
  eventually(async () => {
    const r = await a.get(`/background/runs/${runId}`);
    return statuses.includes(r.body?.status) ? r.body : null;
  }, 15_000);

describe('debounce on LevelDB', () => {
  const clock = new OffsetClock();
  let server: TestServer;
  let a: Api;
  beforeAll(async () => {
    server = await startTestServer(config(), { modelUrl: model.url, clock });
    a = api(server.url);
    await makeTask(a, 'probe');
  });
  afterAll(async () => {
    await server.stop();
    server.cleanup();
  });

  it('collapses triggers into one run at the window end; each extends it; the last query wins', async () => {
    model.reset();
    await makeTask(a, 'digest');
    const first = await trigger(a, 'digest', { debounce_seconds: 60, query: 'first' });
    expect(first.status).toBe('queued');
    expect(first.trigger_metadata.debounce.triggers).toBe(1);
    clock.advance(30_000);
    const second = await trigger(a, 'digest', { debounce_seconds: 60, query: 'second' });
    clock.advance(30_000);
    // 60 s after the first trigger: the first window would have ended; the second moved it to 90 s.
    await claimPassDone(a, 'probe');
    const third = await trigger(a, 'digest', { debounce_seconds: 60, query: 'third' });
    expect(new Set([first.run_id, second.run_id, third.run_id]).size).toBe(1);
    expect(third.status).toBe('queued');
    expect(third.query_snapshot).toBe('third');
    expect(third.trigger_metadata.debounce).toMatchObject({ window_seconds: 60, triggers: 3 });
    const startsAt = Date.parse(third.trigger_metadata.debounce.starts_at);
    // The third trigger came 60 s (plus the test's own wall time) after the first: 120 s after it.
    const fromFirst = startsAt - Date.parse(first.trigger_metadata.debounce.first_triggered_at);
    expect(fromFirst).toBeGreaterThanOrEqual(120_000);
    expect(fromFirst).toBeLessThan(125_000);
    expect(asked().filter((q) => q !== 'base probe')).toEqual([]);

    clock.advance(50_000);
    await claimPassDone(a, 'probe');
    expect((await a.get(`/background/runs/${first.run_id}`)).body.status).toBe('queued');
    clock.advance(10_001);
    const done = await waitStatus(a, first.run_id, ['completed']);
    expect(done.query_snapshot).toBe('third');
    expect(asked().filter((q) => q !== 'base probe')).toEqual(['third']);

    // The window ended: the next trigger opens a new one.
    const next = await trigger(a, 'digest', { debounce_seconds: 5 });
    expect(next.run_id).not.toBe(first.run_id);
    expect(next.query_snapshot).toBe('base digest');
    expect(next.trigger_metadata.debounce.triggers).toBe(1);
    clock.advance(5_001);
    await waitStatus(a, next.run_id, ['completed']);
  });

  it('never extends a window past 10 times its length', async () => {
    await makeTask(a, 'capped');
    const first = await trigger(a, 'capped', { debounce_seconds: 10 });
    let last = first;
    for (let i = 0; i < 11; i++) {
      clock.advance(9_000);
      last = await trigger(a, 'capped', { debounce_seconds: 10, query: `q${i}` });
      expect(last.run_id).toBe(first.run_id);
    }
    // 99 s after the first trigger: the window would end at 109 s; it is held at 100 s.
    const d = last.trigger_metadata.debounce;
    expect(d.triggers).toBe(12);
    expect(d.starts_at).toBe(d.latest_start_at);
    expect(Date.parse(d.latest_start_at) - Date.parse(d.first_triggered_at)).toBe(100_000);
    clock.advance(1_100);
    await waitStatus(a, first.run_id, ['completed']);
    const after = await trigger(a, 'capped', { debounce_seconds: 10 });
    expect(after.run_id).not.toBe(first.run_id);
    clock.advance(10_001);
    await waitStatus(a, after.run_id, ['completed']);
  });

  it('with wait: true every collapsed trigger waits on the one run and gets its end', async () => {
    await makeTask(a, 'waited');
    const fetchTrigger = (query: string) =>
      fetch(`${server.url}/background/tasks/waited/run`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ debounce_seconds: 30, wait: true, query }),
      }).then(async (r) => ({ status: r.status, body: (await r.json()) as any }));
    const one = fetchTrigger('one');
    const queued = await eventually(async () => {
      const r = await a.get('/background/runs?task_id=waited');
      return r.body?.runs?.[0]?.status === 'queued' ? r.body.runs[0] : null;
    });
    const two = fetchTrigger('two');
    await eventually(async () => (await a.get(`/background/runs/${queued.run_id}`)).body?.trigger_metadata?.debounce?.triggers === 2);
    clock.advance(30_001);
    const [r1, r2] = await Promise.all([one, two]);
    for (const r of [r1, r2]) {
      expect(r.status).toBe(200);
      expect(r.body.run_id).toBe(queued.run_id);
      expect(r.body.status).toBe('completed');
    }
    expect(asked().filter((q) => q === 'one' || q === 'two')).toEqual(['two']);
  });

  it('an Idempotency-Key deduplicates before debouncing: a retry joins nothing again', async () => {
    await makeTask(a, 'keyed');
    const post = (body: unknown, key?: string) =>
      fetch(`${server.url}/background/tasks/keyed/run`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
        body: JSON.stringify(body),
      }).then(async (r) => ({ status: r.status, body: (await r.json()) as any }));
    const first = await post({ debounce_seconds: 20, query: 'k1' }, 'key-1');
    expect(first.status).toBe(200);
    clock.advance(10_000);
    const retry = await post({ debounce_seconds: 20, query: 'k1' }, 'key-1');
    expect(retry.body.run_id).toBe(first.body.run_id);
    expect(retry.body.trigger_metadata.debounce.triggers).toBe(1);
    expect(retry.body.trigger_metadata.debounce.starts_at).toBe(first.body.trigger_metadata.debounce.starts_at);
    const other = await post({ debounce_seconds: 20, query: 'k2' }, 'key-2');
    expect(other.body.run_id).toBe(first.body.run_id);
    expect(other.body.trigger_metadata.debounce.triggers).toBe(2);
    clock.advance(20_001);
    await waitStatus(a, first.body.run_id, ['completed']);
  });

  it('refuses a window outside 1..3600 s with 422 at body.debounce_seconds', async () => {
    for (const debounce_seconds of [0, 3601, 1.5]) {
      const r = await a.post('/background/tasks/probe/run', { debounce_seconds });
      expect(r.status).toBe(422);
      expect(JSON.stringify(r.body.detail[0].loc)).toContain('debounce_seconds');
    }
  });
});

/** A window opened, the server stopped, a trigger after the restart joins the same run, which runs once. */
async function survivesRestart(storeConfig: Record<string, unknown>): Promise<void> {
  const clock = new OffsetClock();
  const dataDir = tempDir();
  let server = await startTestServer(config(storeConfig), { modelUrl: model.url, clock, dataDir });
  try {
    let a = api(server.url);
    await makeTask(a, 'durable');
    const first = await trigger(a, 'durable', { debounce_seconds: 120, query: 'before restart' });
    await server.stop();
    clock.advance(60_000);
    server = await startTestServer(config(storeConfig), { modelUrl: model.url, clock, dataDir });
    a = api(server.url);
    const second = await trigger(a, 'durable', { debounce_seconds: 120, query: 'after restart' });
    expect(second.run_id).toBe(first.run_id);
    expect(second.trigger_metadata.debounce.triggers).toBe(2);
    clock.advance(120_001);
    const done = await waitStatus(a, first.run_id, ['completed']);
    expect(done.query_snapshot).toBe('after restart');
    const runs = (await a.get('/background/runs?task_id=durable')).body.runs;
    expect(runs).toHaveLength(1);
    expect(asked().filter((q) => q.endsWith('restart'))).toEqual(['after restart']);
  } finally {
    await server.stop();
    server.cleanup();
  }
}

describe('debounce across a restart', () => {
  let db: TestDatabase | null = null;
  afterAll(async () => {
    await db?.drop();
  });

  it('on LevelDB', async () => {
    model.reset();
    await survivesRestart({});
  });

  it('on PostgreSQL', async () => {
    model.reset();
    db = await createTestDatabase();
    await survivesRestart({ store: { kind: 'postgres', url: db.url } });
  });
});
