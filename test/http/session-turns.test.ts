// A session's turns when a parked run of the session is decided while a newer run of it is active
// (src/runtime/run-host.ts finish(), src/runtime/session-gate.ts). On a store one process owns, the
// newer run creates a session it found absent inside its final commit; the resumed run appends its
// turn only once it holds the session's turn again, so neither run's write fails the other's.
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { getJson, postJson, startTestServer, tempDir, type TestServer } from '../helpers/server.js';
import { waitFor } from '../helpers/wait.js';

const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');
const GOVERNED = {
  agent: { tools: { local: TOOLS, builtin: [] } },
  governance: { rules: [{ tools: ['ledger_*'], effect: 'ask', reason: 'writes to the ledger' }] },
};

let model: ScriptedOpenAI;
let server: TestServer;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  process.env.AGENTD_TEST_LEDGER = join(tempDir(), 'ledger.jsonl'); // where ledger_append writes (test/fixtures/run-tools.mjs)
  server = await startTestServer(GOVERNED, { modelUrl: model.url });
});
afterAll(async () => {
  await server?.stop();
  server?.cleanup();
  await model?.close();
});
beforeEach(() => {
  model.reset();
  model.setDefault((req) => {
    const last = req.messages.at(-1);
    return last?.role === 'tool' ? { text: 'first answer' } : { text: 'plain answer' };
  });
});

const runStatus = (runId: string, status: string) =>
  waitFor(async () => ((await getJson(`${server.url}/runs/${runId}`)).body.status === status ? true : null), { what: `run ${runId} ${status}` });

describe('a parked run of a session decided while a newer run of it is active', () => {
  it('a new named session: both turns kept, in the order the runs held the session, no failed commit', async () => {
    const session = `turns-${Date.now()}`;
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 1' } }] });
    const paused = (await postJson(`${server.url}/run/sync`, { query: 'first query', session_id: session })).body;
    expect(paused.status).toBe('awaiting_approval');
    expect((await getJson(`${server.url}/sessions/${session}/history`)).status).toBe(404); // nothing completed yet

    // The newer run starts (finding the session absent) and holds the session while its model call is held.
    let answer!: () => void;
    const held = new Promise<void>((r) => (answer = r));
    model.enqueue({ text: 'second answer', holdUntil: held });
    const requestsBefore = model.requests.length;
    const second = postJson(`${server.url}/run/sync`, { query: 'second query', session_id: session });
    await model.waitForRequests(requestsBefore + 1);

    // The parked run is decided and completes while the newer run is active.
    const decided = await postJson(`${server.url}/runs/${paused.run_id}/approvals/${paused.approvals[0].approval_id}`, {
      decision: 'approve',
      approver: 'alice',
    });
    expect(decided.status).toBe(200);
    await runStatus(paused.run_id, 'completed');

    answer();
    const done = (await second).body;
    expect(done).toMatchObject({ status: 'success', response: 'second answer' });
    await runStatus(done.run_id, 'completed');

    const history = await waitFor(
      async () => {
        const h = (await getJson(`${server.url}/sessions/${session}/history`)).body;
        return h?.total === 4 ? h : null;
      },
      { what: 'both turns in the history' },
    );
    // The newer run held the session first (from its start); the resumed run's turn follows it.
    expect(history.messages.map((m: { role: string; content: string }) => [m.role, m.content])).toEqual([
      ['user', 'second query'],
      ['assistant', 'second answer'],
      ['user', 'first query'],
      ['assistant', 'first answer'],
    ]);
  });
});
