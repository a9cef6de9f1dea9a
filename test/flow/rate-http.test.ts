// Model-provider rate limits over HTTP against real servers and the scripted model
// (docs/flow-control.md, docs/contract.md §3.4): measured at the fake model, where calls arrive.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { useScriptedOpenAI } from '../helpers/scripted-model.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

let model: ScriptedOpenAI;
useScriptedOpenAI((m) => (model = m));

/** The most arrivals any sliding window of `windowMs` holds. */
function maxInWindow(times: number[], windowMs: number): number {
  const t = [...times].sort((a, b) => a - b);
  let best = 0;
  let lo = 0;
  for (let hi = 0; hi < t.length; hi++) {
    while (t[hi]! - t[lo]! >= windowMs) lo++;
    best = Math.max(best, hi - lo + 1);
  }
  return best;
}

describe('requests_per_minute on the served model', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(
      { server: { max_concurrent_runs: 256, request_timeout_seconds: 120 }, agent: { model: { rate_limit: { requests_per_minute: 600 } } } },
      { modelUrl: model.url },
    );
  });
  afterAll(async () => {
    await server.stop();
    server.cleanup();
  });

  it('a burst of 200 runs at 600/min: no 1 s window at the model holds more than 10 calls (+1 for transit), none fails, each waits with model_throttled', async () => {
    model.setDefault({ text: 'ok' });
    const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => postJson(`${server.url}/run/sync`, { query: `burst ${i}` })));
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    expect(answers.filter((a) => a.body.status !== 'success')).toEqual([]);
    expect(model.arrivals).toHaveLength(200);
    // Transit from agentd to the model may bunch two calls a little: a tolerance of one call.
    expect(maxInWindow(model.arrivals, 1000)).toBeLessThanOrEqual(11);
    // The whole burst took at least what the limit allows (199 gaps of 100 ms), less the same tolerance.
    expect(Math.max(...model.arrivals) - Math.min(...model.arrivals)).toBeGreaterThanOrEqual(19_000);
    const throttled = await getJson(`${server.url}/telemetry/events?event_type=model_throttled&limit=500`);
    expect(throttled.status).toBe(200);
    const events = throttled.body.events ?? throttled.body.items ?? [];
    expect(events.length).toBeGreaterThan(100);
    expect(events[0].metadata).toMatchObject({ reason: 'rate_limit', provider: expect.any(String), model: 'scripted' });
    const metrics = await fetch(`${server.url}/metrics/prometheus`).then((r) => r.text());
    expect(metrics).toMatch(/agentd_model_throttled_total\{[^}]*reason="rate_limit"[^}]*\} \d+/);
    expect(metrics).toContain('agentd_model_rate_wait_seconds_bucket');
  }, 120_000);
});

describe('two instances on PostgreSQL', () => {
  let db: TestDatabase;
  let a: TestServer;
  let b: TestServer;
  beforeAll(async () => {
    db = await createTestDatabase('agentd_flow');
    const cfg = { store: { kind: 'postgres', url: db.url }, flow: { poll_ms: 50 } };
    a = await startTestServer(cfg, { modelUrl: model.url });
    b = await startTestServer(cfg, { modelUrl: model.url });
  });
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    a?.cleanup();
    b?.cleanup();
    await db?.drop();
  });

  it('a 429 with Retry-After: 2 makes every instance wait 2 s, then every run completes', async () => {
    let rejected = false;
    model.setDefault(() => {
      if (!rejected) {
        rejected = true;
        return { status: 429, retry_after: 2 };
      }
      return { text: 'after the pause' };
    });
    const first = postJson(`${a.url}/run/sync`, { query: 'meets the 429' });
    await model.waitForRequests(1);
    const t429 = model.arrivals[0]!;
    // Instance B learns the pause through the change feed: its metrics say so.
    await eventually(
      async () => /agentd_model_rate_paused\{[^}]*\} 1/.test(await fetch(`${b.url}/metrics/prometheus`).then((r) => r.text())),
      5000,
      'B paused',
    );
    // Runs on both instances after the 429: none reaches the model before the pause ends.
    const later = await Promise.all([postJson(`${b.url}/run/sync`, { query: 'on b' }), postJson(`${a.url}/run/sync`, { query: 'on a' }), first]);
    expect(later.map((r) => r.body.status)).toEqual(['success', 'success', 'success']);
    const after = model.arrivals.slice(1);
    expect(after.length).toBeGreaterThanOrEqual(3);
    for (const t of after) expect(t - t429).toBeGreaterThanOrEqual(1900);
  }, 30_000);

  it('a concurrency key limit holds across both instances', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    model.setDefault({ text: 'done', holdUntil: gate });
    model.resetPeak();
    const key = { key: 'shared:1', limit: 2 };
    const runs = Array.from({ length: 8 }, (_, i) => postJson(`${(i % 2 ? a : b).url}/run/sync`, { query: `shared ${i}`, concurrency: key }));
    await model.waitForRequests(2);
    // Two hold the key; the other six wait queued on either instance.
    await eventually(async () => (await getJson(`${a.url}/runs?status=queued`)).body.total === 6, 10_000, 'six queued');
    expect(model.inFlight()).toBe(2);
    release();
    const done = await Promise.all(runs);
    expect(done.map((d) => d.body.status)).toEqual(done.map(() => 'success'));
    expect(model.maxInFlight()).toBeLessThanOrEqual(2);
  }, 60_000);
});
