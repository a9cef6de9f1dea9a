// Two in-process instances on one PostgreSQL database, the second with a clock ten minutes ahead:
// both write and judge leases on the database's clock (src/lease-clock.ts, docs/architecture.md
// "Which instance owns a run"), so B does not take over a run live on A whose lease has not lapsed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { readSse } from '../helpers/sse.js';

const TEN_MINUTES = 600_000;
let model: ScriptedOpenAI;
let db: TestDatabase;
let a: TestServer;
let b: TestServer;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  db = await createTestDatabase('agentd_lease_clock');
  const config = { store: { kind: 'postgres', url: db.url }, runs: { lease_seconds: 30 } };
  a = await startTestServer(config, { modelUrl: model.url });
  b = await startTestServer(config, { modelUrl: model.url, clock: { now: () => Date.now() + TEN_MINUTES } });
}, 60_000);

afterAll(async () => {
  await b?.stop();
  await a?.stop();
  a?.cleanup();
  b?.cleanup();
  await model?.close();
  await db?.drop().catch(() => undefined);
});

describe('leases on the store clock', () => {
  it('an instance whose clock runs ten minutes ahead does not take over a run live on another', async () => {
    model.enqueue({ hang: true });
    const controller = new AbortController();
    const res = await fetch(`${a.url}/run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: 'hang until stopped' }),
      signal: controller.signal,
    });
    // The stream stays open (a client that leaves cancels its run): read on, and go on once the model is called.
    let runId = '';
    const calling = new Promise<void>((resolve) => {
      void (async () => {
        for await (const f of readSse(res)) {
          if (f.event === 'session') runId = f.data.run_id;
          if (f.event === 'model_call') resolve();
        }
      })().catch(() => undefined);
    });
    await calling;
    try {
      const live = (await getJson(`${b.url}/runs/${runId}`)).body;
      expect(live.status).toBe('running');
      // B's own clock is past the lease's expiry (30 s); the database's is not.
      const refused = await postJson(`${b.url}/runs/${runId}/resume`, {});
      expect(refused.status).toBe(409);
      expect(refused.body.code).toBe('AGT_ERR_RUN_ALREADY_LIVE');
    } finally {
      controller.abort();
    }
  });
});
