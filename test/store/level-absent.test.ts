// The LevelDB store's absence filter (src/store/level-absent.ts): a run naming a session that was
// never stored reads nothing from the disk before it starts, while a session stored before the
// open, or written since (and gone from the row cache), is still read, and counts stay exact.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LevelStore } from '../../src/store/level.js';
import type { RecordIndexes } from '../../src/store/store.js';
import { waitFor } from '../helpers/wait.js';

interface Internals {
  db: { getMany: (...a: unknown[]) => Promise<unknown>; get: (...a: unknown[]) => Promise<unknown> };
  writer: { cache: { absent: { built: boolean } } };
}

describe('LevelStore: a never-stored session is known absent without a disk read', () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0)) await c();
  });

  /** Opens (or reopens) the store in `dir`, counting its disk reads once the absence filter is built. */
  const open = async (dir: string, rowCacheSize?: number) => {
    const store = new LevelStore({ path: dir, rowCacheSize });
    await store.open();
    cleanups.unshift(() => store.close());
    const inner = store as unknown as Internals;
    await waitFor(() => inner.writer.cache.absent.built, { what: 'the absence filter built' });
    let reads = 0;
    for (const m of ['getMany', 'get'] as const) {
      const orig = inner.db[m].bind(inner.db);
      inner.db[m] = (...a: unknown[]) => {
        reads++;
        return orig(...a);
      };
    }
    return { store, reads: () => reads };
  };

  /** What RunStarter.start prefetches and commits for a new run of session `s`, and its read of the session. */
  const runOf = async (store: LevelStore, s: string, n: number) => {
    const runIx: RecordIndexes = { status: 'running', session_id: s };
    const traceIx: RecordIndexes = { run_id: `run_${n}`, session_id: s };
    store.prefetch([
      { kind: 'runs', id: `run_${n}`, indexes: runIx, fresh: [] },
      { kind: 'traces', id: `trace_${n}`, indexes: traceIx, fresh: ['run_id'] },
      { kind: 'sessions', id: s },
    ]);
    const session = await store.getRecord('sessions', s);
    await store.commit([
      { op: 'create', kind: 'runs', id: `run_${n}`, value: { n }, indexes: runIx },
      { op: 'create', kind: 'traces', id: `trace_${n}`, value: { n }, indexes: traceIx },
      session
        ? { op: 'update', kind: 'sessions', id: s, value: { turns: (session.value as { turns: number }).turns + 1 }, expectedVersion: session.version }
        : { op: 'create', kind: 'sessions', id: s, value: { turns: 1 } },
    ]);
    return session;
  };

  it('reads nothing for new sessions, and still reads the ones stored before the open or written since', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'agentd-store-absent-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const first = await open(dir);
    await runOf(first.store, 'old', 0);
    // A session whose runs are gone (retention): its row stays, its runs' counter does not.
    await runOf(first.store, 'kept', 100);
    await first.store.commit([
      { op: 'delete', kind: 'runs', id: 'run_100' },
      { op: 'delete', kind: 'traces', id: 'trace_100' },
    ]);
    await first.store.close();

    // Reopened with a row cache of 8 rows (a run here touches 3): a session written 3 runs ago is no longer cached.
    const { store, reads } = await open(dir, 8);
    await runOf(store, 'warm', 1); // the kind counters, read once per process
    const before = reads();
    for (let i = 2; i < 7; i++) expect(await runOf(store, `new_${i}`, i)).toBeNull();
    expect(reads() - before).toBe(0);
    expect(await store.countRecords('runs', { name: 'session_id', value: 'new_3' })).toBe(1);
    expect(await store.countRecords('traces', { name: 'session_id', value: 'new_3' })).toBe(1);

    // Stored before the open: found by the scan, read, its turn added.
    const old = await runOf(store, 'old', 7);
    expect(old?.value).toEqual({ turns: 1 });
    expect(await store.countRecords('runs', { name: 'session_id', value: 'old' })).toBe(2);
    expect((await runOf(store, 'kept', 9))?.value).toEqual({ turns: 1 });
    // Written since the open (no longer in the row cache): learnt when its batch landed, so read.
    const beforeAgain = reads();
    const again = await runOf(store, 'new_4', 10);
    expect(again?.value).toEqual({ turns: 1 });
    expect(reads() - beforeAgain).toBeGreaterThan(0);
    expect((await store.getRecord('sessions', 'new_4'))?.value).toEqual({ turns: 2 });
    expect(await store.countRecords('runs', { name: 'session_id', value: 'new_4' })).toBe(2);
    expect(await store.countRecords('sessions')).toBe(8);
  });
});
