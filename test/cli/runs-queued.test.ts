// `agentd runs ls --status queued` (docs/flow-control.md): the runs waiting for a concurrency key,
// listed by the real CLI against a real server; the scripted model holds the call of the run that
// fills the key, so two more runs of it wait queued while the CLI reads the list.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { buildCli, cliEnv, removeCli, runCli } from './helpers.js';

let model: ScriptedOpenAI;
let server: TestServer;
let release: () => void = () => {};
const gate = new Promise<void>((r) => (release = r));

beforeAll(async () => {
  model = await startScriptedOpenAI();
  model.setDefault(() => ({ text: 'ok', holdUntil: gate }));
  [server] = await Promise.all([startTestServer({ server: { request_timeout_seconds: 30 } }, { modelUrl: model.url }), buildCli()]);
});
afterAll(async () => {
  release();
  await server?.stop();
  server?.cleanup();
  await model.close();
  removeCli();
});

it('lists the queued runs, and only them, in the table and as JSON', async () => {
  const key = { key: 'cli:queue', limit: 1 };
  const runs = ['head', 'second', 'third'].map((q) => postJson(`${server.url}/run/sync`, { query: q, session_id: `cli-${q}`, concurrency: key }));
  const queued = await eventually(async () => {
    const r = await getJson(`${server.url}/runs?status=queued`);
    return r.body.runs.length === 2 ? (r.body.runs as Array<{ run_id: string }>).map((x) => x.run_id).sort() : null;
  });
  const env = cliEnv({ AGENTD_URL: server.url });
  const [json, table] = await Promise.all([runCli(['runs', 'ls', '--status', 'queued', '--json'], env), runCli(['runs', 'ls', '--status', 'queued'], env)]);
  expect(json.code, json.stderr).toBe(0);
  const page = JSON.parse(json.stdout) as { runs: Array<{ run_id: string; status: string }> };
  expect(page.runs.map((r) => r.run_id).sort()).toEqual(queued);
  expect(page.runs.every((r) => r.status === 'queued')).toBe(true);
  expect(table.code, table.stderr).toBe(0);
  const lines = table.stdout.trim().split('\n');
  expect(lines[0]).toMatch(/^RUN\s+STATUS/);
  expect(
    lines
      .slice(1)
      .map((l) => l.split(/\s+/)[0])
      .sort(),
  ).toEqual(queued);
  for (const l of lines.slice(1)) expect(l.split(/\s+/)[1]).toBe('queued');
  release();
  for (const r of await Promise.all(runs)) expect(r.status).toBe(200);
  const after = await runCli(['runs', 'ls', '--status', 'queued', '--json'], env);
  expect(JSON.parse(after.stdout).runs).toEqual([]);
});
