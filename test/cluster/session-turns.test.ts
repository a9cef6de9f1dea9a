// A new named session's first runs on two agentd instances sharing one PostgreSQL database, both
// at once: each instance's session gate is its own, so both runs find the session absent. Neither
// run's final commit may fail on the other's create, and neither turn may be lost
// (src/runtime/run-host.ts sessionCreateInCommit: on a shared store the create is a job of its own).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { waitFor } from '../helpers/wait.js';

let model: ScriptedOpenAI;
let db: TestDatabase;
let one: TestServer;
let two: TestServer;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  db = await createTestDatabase('agentd_session_turns');
  const config = { store: { kind: 'postgres', url: db.url, pool_size: 4 } };
  one = await startTestServer(config, { modelUrl: model.url });
  two = await startTestServer(config, { modelUrl: model.url });
}, 60_000);

afterAll(async () => {
  await one?.stop();
  await two?.stop();
  one?.cleanup();
  two?.cleanup();
  await db?.drop();
  await model?.close();
});

describe('a new named session started on two instances at once', () => {
  it('keeps both first turns and fails neither run', async () => {
    for (let round = 0; round < 5; round++) {
      const session = `both-${round}`;
      // Both model calls are answered together, so the two runs end (and write the session) together.
      let answer!: () => void;
      const held = new Promise<void>((r) => (answer = r));
      model.enqueue({ text: `answer ${round}`, holdUntil: held }, { text: `answer ${round}`, holdUntil: held });
      const before = model.requests.length;
      const runs = Promise.all([one, two].map((s, i) => postJson(`${s.url}/run/sync`, { query: `query ${round}.${i}`, session_id: session })));
      await model.waitForRequests(before + 2);
      answer();
      const [a, b] = await runs;
      expect(a.body.status).toBe('success');
      expect(b.body.status).toBe('success');
      for (const s of [one, two]) {
        const history = await waitFor(
          async () => {
            const h = (await getJson(`${s.url}/sessions/${session}/history`)).body;
            return h?.total === 4 ? h : null;
          },
          { what: `both turns of ${session}` },
        );
        const queries = history.messages.filter((m: { role: string }) => m.role === 'user').map((m: { content: string }) => m.content);
        expect(queries.sort()).toEqual([`query ${round}.0`, `query ${round}.1`]);
      }
    }
  });
});
