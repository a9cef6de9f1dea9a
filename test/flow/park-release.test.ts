// A run that parks for a person (awaiting_approval) lets go of its concurrency key's slot
// (docs/flow-control.md): a queued run of the key starts and completes while the first waits,
// and the approved run goes on without taking the slot again.
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, tempDir, type TestServer } from '../helpers/server.js';

const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');

let model: ScriptedOpenAI;
let server: TestServer;
beforeAll(async () => {
  model = await startScriptedOpenAI();
  process.env.AGENTD_TEST_LEDGER = join(tempDir(), 'ledger.jsonl');
  model.setDefault((req) => (req.messages.at(-1)?.role === 'tool' ? { text: 'done' } : { text: 'plain answer' }));
  server = await startTestServer(
    { agent: { tools: { local: TOOLS, builtin: [] } }, governance: { rules: [{ tools: ['ledger_*'], effect: 'ask', reason: 'a person approves' }] } },
    { modelUrl: model.url },
  );
});
afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
});

it('a run parked for approval frees its key: the next run of the key completes meanwhile', async () => {
  const key = { key: 'park:k', limit: 1 };
  model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'x' } }] });
  const parked = (await postJson(`${server.url}/run/sync`, { query: 'pay', concurrency: key })).body;
  expect(parked.status).toBe('awaiting_approval');
  const next = (await postJson(`${server.url}/run/sync`, { query: 'other', concurrency: key })).body;
  expect(next.status).toBe('success');
  const approval = parked.approvals[0].approval_id as string;
  const decided = await postJson(`${server.url}/runs/${parked.run_id}/approvals/${approval}`, { decision: 'approve', approver: 'alice' });
  expect(decided.status).toBeLessThan(300);
  await eventually(async () => (await getJson(`${server.url}/runs/${parked.run_id}`)).body.status === 'completed');
  // Nothing holds the key now: a third run starts at once.
  expect((await postJson(`${server.url}/run/sync`, { query: 'third', concurrency: key })).body.status).toBe('success');
});
