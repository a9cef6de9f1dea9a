// Old snapshots still restore. Each fixture in test/fixtures/snapshots/ holds
// the records a run left in the store at one moment, as written by the code of the day named in
// the file: paused on an approval, paused on a budget, and orphaned in the middle of a model call
// (its owner died). The test loads them into a fresh data dir, starts today's server and checks
// that the run goes on to the end from where it was: a change to the run machine that cannot read
// an old snapshot (a renamed state, a reshaped context) fails here, before it reaches a user whose
// runs are paused in production.
//
// Regenerate only when the run machine's version is bumped (and keep the old files: a newer
// server must still restore them, or refuse them with a clear error):
//   AGENTD_WRITE_SNAPSHOT_FIXTURES=1 npx vitest run test/runtime/snapshot-fixtures.test.ts
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startModelWithLedger, stopModelAndDirs } from '../helpers/model-ledger.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
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
import type { RecordIndexes, RecordKind, Store } from '../../src/store/store.js';
import { runIndexes, type RunRecord } from '../../src/runtime/run-record.js';
import { RUN_MACHINE_VERSION } from '../../machines/run.machine.js';

const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');
const WRITE = WRITE_SNAPSHOT_FIXTURES;
const GOVERNED = {
  agent: { tools: { local: TOOLS, builtin: [] } },
  governance: { rules: [{ tools: ['ledger_*'], effect: 'ask', reason: 'writes to the ledger' }] },
};
const BUDGETED = { ...GOVERNED, budgets: { session: [{ meter: 'model_calls', limit: 1 }] } };

/** The kinds a sync run writes; the fixture keeps every record of them. */
const KINDS: RecordKind[] = ['runs', 'snapshots', 'sessions', 'traces', 'budget_ledger'];

type Fixture = SnapshotFixture;

/**
 * The index values each kind is written with (the store interface does not return them). Kept
 * here, not imported, where the runtime computes them inline, so a change there shows up as a
 * failing lookup rather than a silently matching fixture.
 */
function indexesOf(r: FixtureRecord): RecordIndexes | undefined {
  switch (r.kind) {
    case 'runs':
      return runIndexes(r.value as RunRecord);
    case 'traces':
      return { run_id: r.value.run_id, session_id: r.value.session_id, task_id: r.value.task_id ?? null };
    case 'budget_ledger':
      return typeof r.value?.run_id === 'string' && r.value?.reservation_id !== undefined ? { reservation_run: r.value.run_id } : undefined;
    default:
      return undefined;
  }
}

const load = (fixture: Fixture) => loadFixture(fixture, indexesOf, 'agentd-snapfix-');
const dump = (store: Store, scenario: string, runId: string) => dumpFixture(store, KINDS, { scenario, machine_version: RUN_MACHINE_VERSION, run_id: runId });
const fixtureFiles = () => snapshotFixtureFiles(/^run-v\d+-.*\.json$/); // bg-run-*: test/background/snapshot-fixtures.test.ts
const readFixture = (f: string) => readSnapshotFixture<Fixture>(f);

let model: ScriptedOpenAI;
let ledger: string;
const dirs: string[] = [];

beforeAll(async () => {
  ({ model, ledger } = await startModelWithLedger(dirs));
  process.env.AGENTD_TEST_LEDGER = ledger;
  model.setDefault((req) => {
    const last = req.messages.at(-1);
    return last?.role === 'tool' ? { text: `saw: ${String(last.content)}` } : { text: 'plain answer' };
  });
});
afterAll(async () => {
  await stopModelAndDirs(model, dirs);
});

const ledgerLines = () =>
  readFileSync(ledger, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
const waitForStatus = (url: string, runId: string, status: string) =>
  eventually(
    async () => {
      const v = (await getJson(`${url}/runs/${runId}`)).body;
      return v.status === status ? v : null;
    },
    15_000,
    `run ${runId} ${status}`,
  );

describe.runIf(WRITE)('writing the fixtures (AGENTD_WRITE_SNAPSHOT_FIXTURES=1)', () => {
  const write = (config: Record<string, unknown>, name: string, reach: (server: TestServer) => Promise<SnapshotFixture>) =>
    writeFixtureFrom(config, model.url, `run-v${RUN_MACHINE_VERSION}-${name}.json`, reach);

  it('awaiting_approval', async () => {
    await write(GOVERNED, 'awaiting-approval', async (server) => {
      model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 10' } }] });
      const paused = (await postJson(`${server.url}/run/sync`, { query: 'pay', session_id: 'fixture-approval' })).body;
      expect(paused.status).toBe('awaiting_approval');
      return dump(server.store, 'awaiting_approval', paused.run_id);
    });
  });

  it('awaiting_budget', async () => {
    await write(BUDGETED, 'awaiting-budget', async (server) => {
      model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text: 'hi' } }] });
      const paused = (await postJson(`${server.url}/run/sync`, { query: 'two calls', session_id: 'fixture-budget' })).body;
      expect(paused.status).toBe('awaiting_budget');
      return dump(server.store, 'awaiting_budget', paused.run_id);
    });
  });

  it('orphaned while calling the model', async () => {
    await write(GOVERNED, 'calling-orphaned', async (server) => {
      model.enqueue({ hang: true });
      const started = fetch(`${server.url}/run/sync`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ query: 'hang', session_id: 'fixture-calling' }),
      }).catch(() => null);
      const runId = await eventually(async () => (await getJson(`${server.url}/runs?status=running`)).body.runs[0]?.run_id as string | undefined);
      // The snapshot is saved in `calling` before the request reaches the model.
      await eventually(async () => {
        const snap = await server.store.getRecord<{ snapshot: { value: string } }>('snapshots', runId);
        return snap?.value.snapshot.value === 'calling';
      });
      // Taken while the owner is alive: exactly what a SIGKILL at this moment leaves behind.
      const fixture = await dump(server.store, 'calling_orphaned', runId);
      void started;
      return fixture;
    });
  });
});

describe.skipIf(WRITE)("snapshots written by older code restore on today's server", () => {
  it('every fixture is for a machine version this code knows', () => {
    expectFixturesUpTo(fixtureFiles(), 3, RUN_MACHINE_VERSION);
  });

  it('a snapshot from a newer run machine is left for a server that knows it, decision kept', async () => {
    const base = readFixture(`run-v${RUN_MACHINE_VERSION}-awaiting-approval.json`);
    const newer: Fixture = {
      ...base,
      records: base.records.map((r) => (r.kind === 'snapshots' ? { ...r, value: { ...r.value, machine_version: RUN_MACHINE_VERSION + 1 } } : r)),
    };
    writeFileSync(ledger, '');
    const dataDir = await load(newer);
    dirs.push(dataDir);
    const server = await startTestServer(GOVERNED, { modelUrl: model.url, dataDir, clock: clockAfterFixture(newer) });
    try {
      const view = (await getJson(`${server.url}/runs/${base.run_id}`)).body;
      const decided = await postJson(`${server.url}/runs/${base.run_id}/approvals/${view.approvals[0].approval_id}`, {
        decision: 'approve',
        approver: 'fixture',
      });
      expect(decided.status).toBe(200);
      // Part of the scenario: proves nothing happens (no resume, no tool call) for a while after the decision.
      await new Promise((r) => setTimeout(r, 300));
      const after = (await getJson(`${server.url}/runs/${base.run_id}`)).body;
      // Not misread into a failure or a half-run: still paused, the person's decision recorded.
      expect(after.status).toBe('awaiting_approval');
      expect(after.approvals[0].status).toBe('approved');
      expect(ledgerLines()).toHaveLength(0);
      expect(model.requests).toHaveLength(0);
    } finally {
      await server.stop();
    }
  });

  for (const file of fixtureFiles()) {
    const fixture = readFixture(file);
    it(`${file}: ${fixture.scenario} goes on to the end`, async () => {
      writeFileSync(ledger, '');
      model.reset();
      const dataDir = await load(fixture);
      dirs.push(dataDir);
      let server: TestServer | null = null;
      try {
        const config = fixture.scenario === 'awaiting_budget' ? BUDGETED : GOVERNED;
        // The server starts 10 minutes after the fixture was taken, whatever today's date: the
        // orphan's lease has lapsed (so the start-up sweep takes it over) and no approval has expired.
        server = await startTestServer(config, { modelUrl: model.url, dataDir, clock: clockAfterFixture(fixture) });
        const url = server.url;
        const runId = fixture.run_id;
        if (fixture.scenario === 'awaiting_approval') {
          const view = (await getJson(`${url}/runs/${runId}`)).body;
          expect(view.status).toBe('awaiting_approval');
          const approval = view.approvals[0];
          expect(approval).toMatchObject({ tool_name: 'ledger_append', arguments: { entry: 'pay 10' } });
          const decided = await postJson(`${url}/runs/${runId}/approvals/${approval.approval_id}`, { decision: 'approve', approver: 'fixture' });
          expect(decided.status, JSON.stringify(decided.body)).toBe(200);
          const done = await waitForStatus(url, runId, 'completed');
          expect(done.response).toBe('saw: {"appended":"pay 10"}');
          expect(ledgerLines()).toHaveLength(1);
        } else if (fixture.scenario === 'awaiting_budget') {
          expect((await getJson(`${url}/runs/${runId}`)).body.status).toBe('awaiting_budget');
          const grant = await postJson(`${url}/runs/${runId}/budget`, { decision: 'grant', approver: 'fixture' });
          expect(grant.status, JSON.stringify(grant.body)).toBe(200);
          const done = await waitForStatus(url, runId, 'completed');
          expect(done.response).toBe('saw: echo: hi');
        } else if (fixture.scenario === 'calling_orphaned') {
          const done = await waitForStatus(url, runId, 'completed');
          expect(done.response).toBe('plain answer');
          // The replayed call sent the conversation the snapshot held: the user's query.
          expect(model.requests.at(-1)!.messages.some((m) => m.role === 'user' && String(m.content).includes('hang'))).toBe(true);
          const resumed = (await getJson(`${url}/telemetry/events?run_id=${runId}&event_type=run_resumed`)).body.events;
          expect(resumed).toHaveLength(1);
        } else {
          throw new Error(`unknown fixture scenario ${fixture.scenario}`);
        }
      } finally {
        await server?.stop();
      }
    });
  }
});
