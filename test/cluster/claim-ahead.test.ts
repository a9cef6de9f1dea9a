// Claim ahead on PostgreSQL (HeldAhead, src/store/repos/bg-runs.ts): while a worker runs one
// background run, the queued run it takes next is already held for it (the claim statement's
// advisory hold, not a claim), so no claim statement sits between one run's end and the next run's
// claim. Held rows are not claimed: `background.concurrency` still bounds what runs, a graceful
// stop hands them back at once, and a SIGKILLed instance's holds lapse so another instance runs
// them, each exactly once. The scripted model holds each run's call until the test lets it go.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';
import { killAllChildren } from '../crash/harness.js';
import { api, waitRun, type Api } from '../background/helpers.js';
import { startCluster, type Cluster } from './helpers.js';

let model: ScriptedOpenAI;
/** Queries in the order their model call arrived, the calls in flight, and the lever that answers each. */
const started: string[] = [];
let inFlight = 0;
let maxInFlight = 0;
const levers = new Map<string, () => void>();

beforeAll(async () => {
  model = await startScriptedOpenAI();
  model.setDefault((req) => {
    const q = String(req.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '');
    started.push(q);
    maxInFlight = Math.max(maxInFlight, ++inFlight);
    return {
      text: `ok ${q}`,
      holdUntil: new Promise<void>((r) =>
        levers.set(q, () => {
          inFlight--;
          r();
        }),
      ),
    };
  });
});

afterAll(async () => {
  for (const lever of levers.values()) lever();
  await killAllChildren();
  await model?.close();
});

/** The claim hold of a background run's row: null when no claimer holds it. */
async function holdOf(url: string, runId: string): Promise<{ token: string | null; status: string }> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const r = await c.query("SELECT claim_token, (value::json)->'run'->>'status' AS status FROM agentd.records WHERE kind = 'bg_runs' AND id = $1", [runId]);
    return { token: r.rows[0].claim_token as string | null, status: r.rows[0].status as string };
  } finally {
    await c.end();
  }
}

const atModel = (q: string) => waitFor(() => levers.get(q), { what: `${q} at the model`, timeoutMs: 30_000 });

async function queueRuns(a: Api, taskId: string, queries: string[]): Promise<string[]> {
  const t = await a.post('/background/tasks', { task_id: taskId, query: 'x', schedule: { type: 'manual' }, overlap_policy: 'allow_parallel' });
  expect(t.status, JSON.stringify(t.body)).toBe(200);
  const r = await a.post(`/background/tasks/${taskId}/runs`, { runs: queries.map((query) => ({ query })) });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.runs.map((x: { run: { run_id: string } }) => x.run.run_id);
}

describe('claim ahead, one instance and a graceful stop', () => {
  let db: TestDatabase;
  let x: TestServer;
  let y: TestServer | null = null;
  const cfg = () => ({ store: { kind: 'postgres', url: db.url }, background: { poll_interval_ms: 25, lease_seconds: 30, concurrency: 1 } });
  beforeAll(async () => {
    db = await createTestDatabase('agentd_ahead');
    x = await startTestServer(cfg(), { modelUrl: model.url });
  });
  afterAll(async () => {
    for (const lever of levers.values()) lever();
    await Promise.all([x?.stop(), y?.stop()]);
    x?.cleanup();
    y?.cleanup();
    await db?.drop();
  });

  it('holds the next run while one runs, runs one at a time, each once, and hands the held run back on a graceful stop', async () => {
    const ax = api(x.url);
    const ids = await queueRuns(ax, 'ahead', ['ahead#1', 'ahead#2', 'ahead#3', 'ahead#4']);
    await atModel('ahead#1');
    // The next run is held for this worker (queued, not claimed); the one after it is free.
    await waitFor(async () => (await holdOf(db.url, ids[1])).token !== null, { what: 'ahead#2 held ahead' });
    expect(await holdOf(db.url, ids[1])).toMatchObject({ status: 'queued' });
    expect((await holdOf(db.url, ids[2])).token).toBeNull();
    expect((await ax.get(`/background/runs/${ids[1]}`)).body.status).toBe('queued');
    // It is claimed from the hold once the worker frees; the run after it is held next.
    levers.get('ahead#1')!();
    await atModel('ahead#2');
    await waitFor(async () => (await holdOf(db.url, ids[2])).token !== null, { what: 'ahead#3 held ahead' });
    expect(started).toEqual(['ahead#1', 'ahead#2']);
    // A graceful stop hands the held run back at once (its hold would lapse only after 10 s).
    const stopping = x.stop();
    levers.get('ahead#2')!();
    await stopping;
    expect(await holdOf(db.url, ids[2])).toEqual({ token: null, status: 'queued' });
    // Another instance takes the rest, each run once.
    y = await startTestServer(cfg(), { modelUrl: model.url });
    const ay = api(y.url);
    await atModel('ahead#3');
    levers.get('ahead#3')!();
    await atModel('ahead#4');
    levers.get('ahead#4')!();
    for (const id of ids.slice(2)) expect((await waitRun(ay, id, undefined, 20_000)).status).toBe('completed');
    expect(started.filter((q) => q.startsWith('ahead#'))).toEqual(['ahead#1', 'ahead#2', 'ahead#3', 'ahead#4']);
    expect(maxInFlight).toBe(1);
  });

  it('never runs a held run cancelled meanwhile', async () => {
    const ay = api(y!.url);
    const ids = await queueRuns(ay, 'cancelled', ['cancelled#1', 'cancelled#2', 'cancelled#3']);
    await atModel('cancelled#1');
    await waitFor(async () => (await holdOf(db.url, ids[1])).token !== null, { what: 'cancelled#2 held ahead' });
    expect((await ay.post(`/background/runs/${ids[1]}/cancel`)).status).toBe(200);
    // The cancel's row write ended the hold; the claim from the hold then loses its CAS.
    expect(await holdOf(db.url, ids[1])).toEqual({ token: null, status: 'cancelled' });
    levers.get('cancelled#1')!();
    await atModel('cancelled#3');
    levers.get('cancelled#3')!();
    for (const i of [0, 2]) expect((await waitRun(ay, ids[i], undefined, 20_000)).status).toBe('completed');
    expect(started.filter((q) => q.startsWith('cancelled#'))).toEqual(['cancelled#1', 'cancelled#3']);
    expect(maxInFlight).toBe(1);
  });
});

describe('claim ahead, an instance SIGKILLed while it holds a run', () => {
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await startCluster(1, model.url, { background: { concurrency: 1 } });
  }, 60_000);
  afterAll(async () => {
    for (const lever of levers.values()) lever();
    await cluster?.destroy();
  });

  it('another instance runs the held run once its hold lapses, and every run once', async () => {
    const a = api(cluster.instances[0].url);
    const ids = await queueRuns(a, 'killed', ['killed#1', 'killed#2', 'killed#3']);
    await atModel('killed#1');
    await waitFor(async () => (await holdOf(cluster.db.url, ids[1])).token !== null, { what: 'killed#2 held ahead' });
    await cluster.instances[0].kill('SIGKILL');
    const b = api((await cluster.start(1)).url);
    // killed#1's lease lapses (one attempt allowed: it fails, as any run whose instance died);
    // killed#3 was held by nobody and runs at once; killed#2 once the dead instance's hold lapsed.
    const done = new Set<string>();
    await waitFor(
      () => {
        for (const q of ['killed#2', 'killed#3']) {
          if (started.includes(q) && !done.has(q)) {
            done.add(q);
            levers.get(q)!();
          }
        }
        return done.size === 2;
      },
      { what: 'the held and the free run at the model on the new instance', timeoutMs: 30_000 },
    );
    expect((await waitRun(b, ids[0], undefined, 20_000)).error).toBe('the lease lapsed and no attempts remain');
    for (const id of ids.slice(1)) expect((await waitRun(b, id, undefined, 20_000)).status).toBe('completed');
    expect(started.filter((q) => q.startsWith('killed#')).sort()).toEqual(['killed#1', 'killed#2', 'killed#3']);
  }, 60_000);
});
