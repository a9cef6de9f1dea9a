// A background run's completion rides in its agent run's final commit (RunHosts.foldInto), on
// every store, PostgreSQL included: one commit for both ends. On a store other instances share, the
// row's CAS in that commit may be refused (another instance took the run over): then nothing of the
// commit applies, the agent run's end is written alone right after (RecordWriter.retryWithout), as
// before the fold, and the run is settled from that end by whoever holds it now.
// Runs on the embedded store, and on PostgreSQL with AGENTD_TEST_STORE=postgres.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { repos } from '../../src/store/repos/index.js';
import { runRowIndexes, type BgRunRow } from '../../src/background/types.js';
import { isStoreError, type CommitOps, type WriteOp } from '../../src/store/store.js';
import { waitFor } from '../helpers/wait.js';
import { api, waitRun, type Api } from './helpers.js';

let model: ScriptedOpenAI;
let server: TestServer;
let a: Api;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  // Heartbeats every 2 s (lease/4): none between the claim and the end of these short runs. Lease
  // checks every 2 s: a run whose lease lapsed is recovered soon.
  server = await startTestServer({ background: { poll_interval_ms: 50, lease_seconds: 8, concurrency: 1 } }, { modelUrl: model.url });
  a = api(server.url);
  const t = await a.post('/background/tasks', { task_id: 'fold', query: 'answer', schedule: { type: 'manual' }, overlap_policy: 'allow_parallel' });
  expect(t.status, JSON.stringify(t.body)).toBe(200);
});

afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
});

/** Every commit of the store while `fn` runs: its ops (kind:status of each record) and its events, and whether it applied. */
async function commitsDuring(fn: () => Promise<void>) {
  const store = server.store;
  const commits: Array<{ ops: string[]; ids: string[]; events: string[]; refused: unknown }> = [];
  const { commit, commitWithEvents } = store;
  const watch = (ops: CommitOps, c: (typeof commits)[number]): CommitOps => {
    const note = (list: WriteOp[]) => {
      for (const o of list) {
        const v = (o as { value?: { status?: string; run?: { status?: string } } }).value;
        c.ops.push(`${o.kind}:${v?.status ?? v?.run?.status ?? ''}`);
        c.ids.push(o.id);
      }
      return list;
    };
    return typeof ops === 'function' ? () => note(ops()) : note(ops);
  };
  const entry = () => {
    const c = { ops: [] as string[], ids: [] as string[], events: [] as string[], refused: null as unknown };
    commits.push(c);
    return c;
  };
  store.commit = (ops) => {
    const c = entry();
    return commit.call(store, watch(ops, c)).catch((err: unknown) => {
      c.refused = err;
      throw err;
    });
  };
  store.commitWithEvents = (ops, events) => {
    const c = entry();
    return commitWithEvents.call(store, watch(ops, c), events).then(
      (r) => {
        c.events.push(...r.events.map((e) => e.event_type));
        return r;
      },
      (err: unknown) => {
        c.refused = err;
        throw err;
      },
    );
  };
  try {
    await fn();
  } finally {
    store.commit = commit;
    store.commitWithEvents = commitWithEvents;
  }
  return commits;
}

describe("a background run's end in its agent run's final commit", () => {
  it('writes the agent run completed and its background run completed in one commit', async () => {
    let runId = '';
    const commits = await commitsDuring(async () => {
      const r = await a.post('/background/tasks/fold/run', {});
      expect(r.status).toBe(200);
      runId = r.body.run_id;
      expect((await waitRun(a, runId)).status).toBe('completed');
    });
    const ends = commits.filter((c) => c.ops.includes('bg_runs:completed'));
    expect(ends).toHaveLength(1);
    // The agent run's record (its id is the background run's for a first attempt) in that same commit, with its lifecycle event.
    expect(ends[0].ids).toContain(runId);
    expect(ends[0].ops).toEqual(expect.arrayContaining(['runs:completed', 'bg_runs:completed', 'bg_attempts:completed']));
    expect(ends[0].events).toContain('background_run_completed');
    expect(ends[0].refused).toBeNull();
    expect((await a.get(`/runs/${runId}`)).body.status).toBe('completed');
  });

  it('a lease lost to another instance: the carrying commit does not apply, the agent run ends alone, and the run is settled from that end', async () => {
    // Only another instance moves a row this process holds: a store several instances share.
    if (!server.store.capabilities.sharedByInstances) return;
    const store = server.store;
    let answer!: () => void;
    const held = new Promise<void>((r) => (answer = r));
    model.enqueue({ text: 'the answer', holdUntil: held });
    const before = model.requests.length;
    let runId = '';
    const commits = await commitsDuring(async () => {
      const r = await a.post('/background/tasks/fold/run', {});
      expect(r.status).toBe(200);
      runId = r.body.run_id;
      await waitFor(() => model.requests.length > before, { what: "the run's model request" });
      // Another instance takes the run over, as its recovery of a lapsed lease would: a CAS on the
      // row with its own owner, token and generation. Its lease has lapsed too, so this process
      // recovers the run once it has let go of its copy.
      const row = (await repos(store).bgRuns.get<BgRunRow>(runId))!;
      const next: BgRunRow = {
        ...row.value,
        run: {
          ...row.value.run,
          lease_owner: 'another-instance',
          lease_token: 'lease_other',
          lease_generation: row.value.run.lease_generation + 1,
          lease_expires_at: new Date(Date.now() - 60_000).toISOString(),
        },
      };
      await store.commit([repos(store).bgRuns.updateOp(runId, next, row.version, runRowIndexes(next))]);
      answer();
      // The agent run's end is written all the same (its own record's CAS holds).
      await waitFor(async () => (await a.get(`/runs/${runId}`)).body.status === 'completed', { what: 'the agent run completed' });
      // The run is settled from its agent run's end, without another attempt.
      const done = await waitRun(a, runId);
      expect(done.status).toBe('completed');
      expect(done.attempt).toBe(1);
    });
    // The commit that carried both ends was refused as a whole (the row's CAS)...
    const refused = commits.filter((c) => c.refused !== null);
    expect(refused).toHaveLength(1);
    expect(isStoreError(refused[0].refused, 'stale_version')).toBe(true);
    expect(refused[0].ops).toEqual(expect.arrayContaining(['runs:completed', 'bg_runs:completed']));
    // ...and the agent run's end went again alone, without the background run's write or event.
    const alone = commits.filter((c) => c.refused === null && c.ops.includes('runs:completed'));
    expect(alone).toHaveLength(1);
    expect(alone[0].ops.some((o) => o.startsWith('bg_runs:'))).toBe(false);
    expect(alone[0].events).not.toContain('background_run_completed');
    // The completion this process then wrote is the recovery's, on the other instance's row.
    const completions = commits.filter((c) => c.refused === null && c.ops.includes('bg_runs:completed'));
    expect(completions).toHaveLength(1);
    expect(completions[0].ops).not.toContain('runs:completed');
    // One model call: nothing ran twice.
    expect(model.requests.length).toBe(before + 1);
    const events = await a.get(`/background/runs/${runId}/events`);
    expect(events.status).toBe(200);
    const names = events.body.events.map((e: { event: string }) => e.event);
    expect(names.filter((n: string) => n === 'background_run_completed')).toHaveLength(1);
  });
});
