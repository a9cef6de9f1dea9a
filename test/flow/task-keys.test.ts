// Concurrency keys and priorities of background tasks over HTTP (docs/flow-control.md): a task's
// key is templated from its metadata; its runs are admitted where they are claimed, against the
// same limit as the runs of POST /run naming the key (the lowest limit wins between them). The
// scripted model holds every call until the test lets it go, so "running at once" is what the
// model sees in flight.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { api, type Api } from '../background/helpers.js';

let model: ScriptedOpenAI;
let server: TestServer;
let a: Api;
/** Calls in flight per query, and the most there ever were at once. */
const inFlight = new Map<string, number>();
const peak = new Map<string, number>();
let release: () => void = () => {};
let gate: Promise<void> = Promise.resolve();

function closeGate(): void {
  gate = new Promise((r) => (release = r));
}

beforeAll(async () => {
  model = await startScriptedOpenAI();
  model.setDefault((req) => {
    const q = String(req.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '');
    const group = q.split('#')[0]!;
    const n = (inFlight.get(group) ?? 0) + 1;
    inFlight.set(group, n);
    peak.set(group, Math.max(peak.get(group) ?? 0, n));
    const held = gate.then(() => inFlight.set(group, (inFlight.get(group) ?? 1) - 1));
    return { text: `ok ${q}`, holdUntil: held };
  });
  server = await startTestServer(
    { background: { poll_interval_ms: 25, lease_seconds: 5, concurrency: 8 }, server: { request_timeout_seconds: 30 } },
    { modelUrl: model.url },
  );
  a = api(server.url);
});
afterAll(async () => {
  release();
  await server.stop();
  server.cleanup();
  await model.close();
});

async function makeTask(task_id: string, body: Record<string, unknown>): Promise<void> {
  const r = await a.post('/background/tasks', {
    task_id,
    schedule: { type: 'manual' },
    overlap_policy: 'allow_parallel',
    session_policy: { mode: 'run' },
    ...body,
  });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
}

async function trigger(taskId: string, query: string): Promise<any> {
  const r = await a.post(`/background/tasks/${taskId}/run`, { query });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body;
}

const runsOf = async (taskId: string): Promise<any[]> => (await a.get(`/background/runs?task_id=${taskId}&limit=100`)).body.runs;

it("a task's key, templated from its metadata, admits its limit of runs at once; another key's run starts meanwhile", async () => {
  closeGate();
  await makeTask('acme', { query: 'x', metadata: { customer_id: 'c1' }, concurrency: { key: 'customer:{metadata.customer_id}', limit: 2 }, priority: 5 });
  await makeTask('globex', { query: 'x', metadata: { customer_id: 'c2' }, concurrency: { key: 'customer:{metadata.customer_id}', limit: 2 } });
  const ids: string[] = [];
  for (let i = 0; i < 6; i++) ids.push((await trigger('acme', `acme#${i}`)).run_id);
  const first = (await a.get(`/background/runs/${ids[0]}`)).body;
  expect(first.concurrency).toEqual({ key: 'customer:c1', limit: 2 });
  expect(first.priority).toBe(5);
  // Two of acme's run; four wait queued, holding no worker (8 workers).
  await eventually(() => inFlight.get('acme') === 2);
  const other = await trigger('globex', 'globex#0');
  await eventually(() => inFlight.get('globex') === 1, 10_000, "globex's run to reach the model while acme's key is full");
  const statuses = (await runsOf('acme')).map((r) => r.status);
  expect(statuses.filter((s) => s === 'running')).toHaveLength(2);
  expect(statuses.filter((s) => s === 'queued')).toHaveLength(4);
  release();
  for (const id of [...ids, other.run_id]) {
    await eventually(async () => (await a.get(`/background/runs/${id}`)).body.status === 'completed', 20_000, `run ${id} completed`);
  }
  expect(peak.get('acme')).toBe(2);
});

it('POST /run and a task naming one key share its limit, and the lowest limit wins', async () => {
  closeGate();
  // A run of POST /run holds the key with limit 1; the task asks for 5 on the same key.
  const sync = postJson(`${server.url}/run/sync`, { query: 'shared#sync', concurrency: { key: 'shared', limit: 1 } });
  await eventually(() => inFlight.get('shared') === 1);
  await makeTask('wide', { query: 'x', concurrency: { key: 'shared', limit: 5 } });
  const run = await trigger('wide', 'shared#task');
  // A claim pass ran after it (another task's run, queued later, reached the model); it did not start.
  await makeTask('probe', { query: 'x' });
  await trigger('probe', 'probe#0');
  await eventually(() => inFlight.get('probe') === 1);
  expect((await a.get(`/background/runs/${run.run_id}`)).body.status).toBe('queued');
  expect(peak.get('shared')).toBe(1);
  release();
  expect((await sync).status).toBe(200);
  await eventually(async () => (await a.get(`/background/runs/${run.run_id}`)).body.status === 'completed', 20_000);
  expect(peak.get('shared')).toBe(1);
});

it('refuses a task key over 256 characters or a limit under 1 with 422 at body.concurrency', async () => {
  for (const concurrency of [
    { key: 'k'.repeat(257), limit: 1 },
    { key: 'k', limit: 0 },
  ]) {
    const r = await a.post('/background/tasks', { task_id: 'bad', query: 'x', schedule: { type: 'manual' }, concurrency });
    expect(r.status).toBe(422);
    expect(JSON.stringify(r.body.detail[0].loc)).toContain('concurrency');
  }
});
