// A background run's agent run holds its creating write back (up to 200 ms, src/runtime/run-host.ts)
// to fold it with what follows. A reader of that run (GET /runs/{id}) does not wait the window out:
// its read hands the held write to the store and answers once it is in (RunKernel.get).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { api, directModel, waitRun, type Api } from './helpers.js';

let model: ScriptedOpenAI;
let server: TestServer;
let a: Api;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  directModel(model);
  // The creating write's window held open far beyond the test's timeout: only the read's own
  // hand-over can make the run readable in time.
  server = await startTestServer({ background: { poll_interval_ms: 50, concurrency: 1 } }, { modelUrl: model.url, createFoldMs: 60_000 });
  a = api(server.url);
});

afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
});

describe("a background run's agent run whose creating write is held back", () => {
  it('is read with GET /runs/{id} at once, while its model call is still out', async () => {
    let answer!: () => void;
    const answered = new Promise<void>((r) => (answer = r));
    model.enqueue({ text: 'late ok', holdUntil: answered });
    expect((await a.post('/background/tasks', { task_id: 'held-create', schedule: { type: 'manual' }, query: 'just answer' })).status).toBe(200);
    const run = await a.post('/background/tasks/held-create/run', {});
    expect(run.status).toBe(200);
    await model.waitForRequests(1);
    const running = await waitRun(a, run.body.run_id, (r) => r.status === 'running' && typeof r.metadata?.agent_run_id === 'string');
    const agentRun = await a.get(`/runs/${running.metadata.agent_run_id}`);
    expect(agentRun.status).toBe(200);
    expect(agentRun.body).toMatchObject({ run_id: running.metadata.agent_run_id, status: 'running' });
    answer();
    expect((await waitRun(a, run.body.run_id)).status).toBe('completed');
  });
});
