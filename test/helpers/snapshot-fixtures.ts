// Shared plumbing of the snapshot-fixture tests (test/runtime/ and test/background/
// snapshot-fixtures.test.ts): a fixture is every record of some kinds a run left in the store at
// one moment, saved as JSON in test/fixtures/snapshots/ and loaded into a fresh store (testStoreOf).
// What each test keeps for itself: which kinds it dumps and the index values each kind is written
// with, so that a change in the runtime's indexes fails there instead of matching here.
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { Clock } from '../../src/clock.js';
import { openStore } from '../../src/store/open.js';
import type { RecordIndexes, RecordKind, Store } from '../../src/store/store.js';
import { startTestServer, tempDir, testStoreOf, type TestServer } from './server.js';

export const SNAPSHOT_FIXTURES_DIR = join(import.meta.dirname, '../fixtures/snapshots');
/** Set to write new fixture files instead of testing the old ones. */
export const WRITE_SNAPSHOT_FIXTURES = process.env.AGENTD_WRITE_SNAPSHOT_FIXTURES === '1';

export interface FixtureRecord {
  kind: RecordKind;
  id: string;
  value: any;
}
export interface SnapshotFixture<Scenario extends string = string> {
  scenario: Scenario;
  written_by: string;
  machine_version: number;
  run_id: string;
  records: FixtureRecord[];
}

/** Every record of `kinds` in the store, as a fixture dated today. */
export async function dumpFixture<S extends string>(
  store: Store,
  kinds: RecordKind[],
  meta: { scenario: S; machine_version: number; run_id: string },
): Promise<SnapshotFixture<S>> {
  const records: FixtureRecord[] = [];
  for (const kind of kinds) {
    let cursor: string | null = null;
    do {
      const page: Awaited<ReturnType<Store['listRecords']>> = await store.listRecords(kind, { cursor, limit: 1000 });
      for (const it of page.items) records.push({ kind, id: it.id, value: it.value });
      cursor = page.next_cursor;
    } while (cursor);
  }
  return { scenario: meta.scenario, written_by: new Date().toISOString().slice(0, 10), machine_version: meta.machine_version, run_id: meta.run_id, records };
}

/** A new data dir whose store (LevelDB, or its PostgreSQL database under AGENTD_TEST_STORE=postgres) holds the fixture's records; the caller removes it. */
export async function loadFixture(fixture: SnapshotFixture, indexesOf: (r: FixtureRecord) => RecordIndexes | undefined, dirPrefix: string): Promise<string> {
  const dataDir = tempDir(dirPrefix);
  const store = await openStore(await testStoreOf(dataDir));
  try {
    for (const r of fixture.records) await store.createRecord(r.kind, r.id, r.value, indexesOf(r));
  } finally {
    await store.close();
  }
  return dataDir;
}

/** The moment the fixture was taken: the newest `updated_at` among its records. */
function fixtureMoment(fixture: SnapshotFixture): number {
  const times = fixture.records.map((r) => Date.parse(r.value?.updated_at ?? '')).filter((t) => Number.isFinite(t));
  if (times.length === 0) throw new Error(`fixture ${fixture.run_id} has no record with updated_at`);
  return Math.max(...times);
}

/**
 * The clock a server restoring `fixture` runs on: it starts `afterMs` after the moment the fixture
 * was taken and then moves with real time. A fixture holds absolute times (an approval's
 * `expires_at`, a lease's end) written on the day it was made; restored on the system clock, it
 * would behave differently as the calendar moves on (approvals expired a day after the fixture was
 * written). On this clock the restore is the same whatever today's date: `afterMs` is how long the
 * old server has been gone (long enough for its leases to lapse, short of any approval's expiry).
 */
export function clockAfterFixture(fixture: SnapshotFixture, afterMs = 10 * 60_000): Clock {
  const start = fixtureMoment(fixture) + afterMs;
  const realStart = performance.now();
  return { now: () => Math.round(start + (performance.now() - realStart)) };
}

/** The fixture files whose names match, sorted (oldest machine version first). */
export const snapshotFixtureFiles = (name: RegExp): string[] =>
  (existsSync(SNAPSHOT_FIXTURES_DIR) ? readdirSync(SNAPSHOT_FIXTURES_DIR).filter((f) => name.test(f)) : []).sort();

export const readSnapshotFixture = <F extends SnapshotFixture>(file: string): F => JSON.parse(readFileSync(join(SNAPSHOT_FIXTURES_DIR, file), 'utf8')) as F;

function saveSnapshotFixture(file: string, fixture: SnapshotFixture): void {
  mkdirSync(SNAPSHOT_FIXTURES_DIR, { recursive: true });
  writeFileSync(join(SNAPSHOT_FIXTURES_DIR, file), `${JSON.stringify(fixture, null, 1)}\n`);
}

/**
 * Writes one fixture: starts a server on a fresh data dir, lets `reach` bring a run to the moment
 * to keep and dump it, saves that as `file`, then stops the server and removes its data dir.
 */
export async function writeFixtureFrom(
  config: Record<string, unknown>,
  modelUrl: string,
  file: string,
  reach: (server: TestServer) => Promise<SnapshotFixture>,
): Promise<void> {
  const server = await startTestServer(config, { modelUrl });
  try {
    saveSnapshotFixture(file, await reach(server));
  } finally {
    await server.stop();
    server.cleanup();
  }
}

/** There are at least `atLeast` fixture files, and none written by a newer machine than `machineVersion`. */
export function expectFixturesUpTo(files: string[], atLeast: number, machineVersion: number): void {
  expect(files.length).toBeGreaterThanOrEqual(atLeast);
  for (const f of files) expect(readSnapshotFixture(f).machine_version, f).toBeLessThanOrEqual(machineVersion);
}
