// A run that waited `queued` for its concurrency key, once admitted, reaches the model without
// reading its inbox from the store: nothing can have written it while it was queued (steer and
// interrupt refuse a queued run), and on PostgreSQL that read was a store round between the run's
// start and its model call, so the run admitted after it could reach the model first and a key's
// FIFO order up to the model broke now and then (test/flow/concurrency.test.ts, 40 runs). Only a
// store several instances share reads an inbox at all, so this runs on PostgreSQL whatever store
// the suite runs on.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import type { RecordKind } from '../../src/store/store.js';

let model: ScriptedOpenAI;
let db: TestDatabase;
let s: TestServer;
/** Runs whose inbox was read from the store. */
const inboxReads: string[] = [];

beforeAll(async () => {
  model = await startScriptedOpenAI();
  model.setDefault(() => ({ text: 'ok' }));
  db = await createTestDatabase('agentd_inbox');
  s = await startTestServer(
    { store: { kind: 'postgres', url: db.url }, agent: { tools: { builtin: [] } }, background: { enabled: false } },
    { modelUrl: model.url },
  );
  const get = s.store.getRecord.bind(s.store);
  s.store.getRecord = <T>(kind: RecordKind, id: string) => {
    if (kind === 'run_inbox') inboxReads.push(id);
    return get<T>(kind, id);
  };
});

afterAll(async () => {
  await s?.stop();
  s?.cleanup();
  await db?.drop();
  await model?.close();
});

it('a queued run, once its key admits it, reaches the model without reading its inbox', async () => {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  model.setDefault(() => ({ text: 'ok', holdUntil: gate }));
  const key = { key: 'inbox', limit: 1 };
  const first = postJson(`${s.url}/run/sync`, { query: 'first', concurrency: key });
  await model.waitForRequests(model.requests.length + 1);
  const second = postJson(`${s.url}/run/sync`, { query: 'second', concurrency: key });
  await eventually(async () => (await getJson(`${s.url}/runs?status=queued`)).body.total === 1);
  release();
  const [a, b] = await Promise.all([first, second]);
  expect([a.body.status, b.body.status]).toEqual(['success', 'success']);
  expect(inboxReads.filter((id) => id === a.body.run_id || id === b.body.run_id)).toEqual([]);
});
