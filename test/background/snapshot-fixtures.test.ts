// Old background-run rows still restore, as test/runtime/snapshot-fixtures.test.ts
// does for sync runs. Each fixture in test/fixtures/snapshots/bg-run-v<N>-*.json holds the records
// a background run left in the store at one moment, written by the code of the day: paused on an
// approval, and orphaned in the middle of an attempt (its owner died). The test loads them into a
// fresh data dir, starts today's server and drives the run to the end from where it was. A row
// saved by a NEWER background-run machine than this server knows is failed with an error that
// says so, not restored.
//
// Regenerate only when BACKGROUND_RUN_MACHINE_VERSION is bumped (keep the old files):
//   AGENTD_WRITE_SNAPSHOT_FIXTURES=1 npx vitest run test/background/snapshot-fixtures.test.ts
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKGROUND_RUN_MACHINE_VERSION } from '../../machines/background-run.machine.js';
import { runRowIndexes, type BgRunRow } from '../../src/background/types.js';
import { runIndexes, type RunRecord } from '../../src/runtime/run-record.js';
import type { RecordIndexes, RecordKind, Store } from '../../src/store/store.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, startTestServer, type TestServer } from '../helpers/server.js';
import {
  dumpFixture,
  loadFixture,
  readSnapshotFixture,
  writeFixtureFrom,
  clockAfterFixture,
  expectFixturesUpTo,
  snapshotFixtureFiles,
  WRITE_SNAPSHOT_FIXTURES,
  type FixtureRecord,
  type SnapshotFixture,
} from '../helpers/snapshot-fixtures.js';
import { api, directModel, TOOLS, waitRun } from './helpers.js';

const WRITE = WRITE_SNAPSHOT_FIXTURES;
const CONFIG = {
  agent: { tools: { local: TOOLS, builtin: [] } },
  governance: { rules: [{ tools: ['bg_ask'], effect: 'ask' }] },
  background: { poll_interval_ms: 50, lease_seconds: 2, concurrency: 4 },
};

/** Every kind a background run and its agent run write. */
const KINDS: RecordKind[] = [
  'bg_agents',
  'bg_tasks',
  'bg_schedule',
  'bg_runs',
  'bg_attempts',
  'bg_occurrences',
  'runs',
  'snapshots',
  'sessions',
  'traces',
  'meta',
];

type BgFixture = SnapshotFixture<'awaiting_approval' | 'running_orphaned'>;

/** The index values each kind is written with (the store interface does not return them). */
function indexesOf(r: FixtureRecord): RecordIndexes | undefined {
  switch (r.kind) {
    case 'bg_runs':
      return runRowIndexes(r.value as BgRunRow);
    case 'bg_tasks':
      return { agent_id: r.value.agent_id };
    case 'bg_attempts':
      return { run_id: r.value.run_id };
    case 'runs':
      return runIndexes(r.value as RunRecord);
    case 'traces':
      return { run_id: r.value.run_id, session_id: r.value.session_id, task_id: r.value.task_id ?? null };
    default:
      return undefined;
  }
}

const load = (fixture: BgFixture) => loadFixture(fixture, indexesOf, 'agentd-bgfix-');
const dump = (store: Store, scenario: BgFixture['scenario'], runId: string) =>
  dumpFixture(store, KINDS, { scenario, machine_version: BACKGROUND_RUN_MACHINE_VERSION, run_id: runId });
const bgFixtureFiles = () => snapshotFixtureFiles(/^bg-run-v\d+-.*\.json$/);
const readBgFixture = (f: string) => readSnapshotFixture<BgFixture>(f);

let model: ScriptedOpenAI;
const dirs: string[] = [];

beforeAll(async () => {
  model = await startScriptedOpenAI();
  directModel(model);
});
afterAll(async () => {
  await model.close();
  delete process.env.BG_SLOW_MS;
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function runOf(server: TestServer, query: string, extra: Record<string, unknown> = {}): Promise<string> {
  const a = api(server.url);
  const t = await a.post('/background/tasks', { task_id: 'fixture', schedule: { type: 'manual' }, query, ...extra });
  expect(t.status, JSON.stringify(t.body)).toBe(200);
  const r = await a.post('/background/tasks/fixture/run', {});
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.run_id as string;
}

describe.runIf(WRITE)('writing the background fixtures (AGENTD_WRITE_SNAPSHOT_FIXTURES=1)', () => {
  const write = (config: Record<string, unknown>, name: string, reach: (server: TestServer) => Promise<SnapshotFixture>) =>
    writeFixtureFrom(config, model.url, `bg-run-v${BACKGROUND_RUN_MACHINE_VERSION}-${name}.json`, reach);

  it('awaiting_approval', async () => {
    await write(CONFIG, 'awaiting-approval', async (server) => {
      const runId = await runOf(server, 'CALL bg_ask {}');
      await waitRun(api(server.url), runId, (r) => r.status === 'awaiting_approval');
      return dump(server.store, 'awaiting_approval', runId);
    });
  });

  it('orphaned while running', async () => {
    await write(CONFIG, 'running-orphaned', async (server) => {
      // A retry left: the recovery continues the agent run (with none, a lapsed lease fails the run).
      const runId = await runOf(server, 'CALL bg_slow {"ms": 60000}', { retry_policy: { max_retries: 1, initial_delay_seconds: 0 } });
      await waitRun(api(server.url), runId, (r) => r.status === 'running');
      // The agent run's snapshot is saved in the tool call before the dump: what a SIGKILL leaves.
      await eventually(async () => (await server.store.getRecord<{ snapshot: { value: unknown } }>('snapshots', runId)) !== null);
      return dump(server.store, 'running_orphaned', runId);
    });
  });
});

describe.skipIf(WRITE)("background runs written by older code restore on today's server", () => {
  it('there are fixtures, each for a machine version this code knows', () => {
    expectFixturesUpTo(bgFixtureFiles(), 2, BACKGROUND_RUN_MACHINE_VERSION);
  });

  it('a row from a newer background-run machine fails with an error that says so, not restored', async () => {
    const base = readBgFixture(`bg-run-v${BACKGROUND_RUN_MACHINE_VERSION}-awaiting-approval.json`);
    const newer: BgFixture = {
      ...base,
      records: base.records.map((r) => (r.kind === 'bg_runs' ? { ...r, value: { ...r.value, machine_version: BACKGROUND_RUN_MACHINE_VERSION + 1 } } : r)),
    };
    const dataDir = await load(newer);
    dirs.push(dataDir);
    const server = await startTestServer(CONFIG, { modelUrl: model.url, dataDir, clock: clockAfterFixture(newer) });
    try {
      const a = api(server.url);
      expect((await a.post(`/background/runs/${base.run_id}/cancel`, {})).status).toBe(409);
      const run = (await a.get(`/background/runs/${base.run_id}`)).body;
      expect(run.status).toBe('failed');
      expect(run.error).toContain(`saved by a newer agentd (background-run machine v${BACKGROUND_RUN_MACHINE_VERSION + 1}`);
      const events = (await a.get(`/background/runs/${base.run_id}/events`)).body.events.map((e: { event: string }) => e.event);
      expect(events.at(-1)).toBe('background_run_failed');
    } finally {
      await server.stop();
    }
  });

  for (const file of bgFixtureFiles()) {
    const fixture = readBgFixture(file);
    it(`${file}: ${fixture.scenario} goes on to the end`, async () => {
      process.env.BG_SLOW_MS = '10';
      const dataDir = await load(fixture);
      dirs.push(dataDir);
      // 10 minutes after the fixture was taken, whatever today's date: leases lapsed, approvals not expired.
      const server = await startTestServer(CONFIG, { modelUrl: model.url, dataDir, clock: clockAfterFixture(fixture) });
      try {
        const a = api(server.url);
        const runId = fixture.run_id;
        if (fixture.scenario === 'awaiting_approval') {
          expect((await a.get(`/background/runs/${runId}`)).body.status).toBe('awaiting_approval');
          const approval = (await a.get(`/runs/${runId}`)).body.approvals.find((x: { status: string }) => x.status === 'pending');
          const decided = await a.post(`/runs/${runId}/approvals/${approval.approval_id}`, { decision: 'approve', approver: 'fixture' });
          expect(decided.status, JSON.stringify(decided.body)).toBe(200);
          const done = await waitRun(a, runId);
          expect(done).toMatchObject({ status: 'completed', attempt: 1 });
          expect(done.result_preview).toContain('approved_and_ran');
        } else if (fixture.scenario === 'running_orphaned') {
          // The lease has lapsed: the start-up recovery takes the run over and finishes it.
          const done = await waitRun(a, runId, undefined, 20_000);
          expect(done).toMatchObject({ status: 'completed', attempt: 2 });
          const events = (await a.get(`/background/runs/${runId}/events`)).body.events.map((e: { event: string }) => e.event);
          expect(events).toContain('background_run_recovered');
        } else {
          throw new Error(`unknown fixture scenario ${String(fixture.scenario)}`);
        }
      } finally {
        await server.stop();
        delete process.env.BG_SLOW_MS;
      }
    });
  }
});
