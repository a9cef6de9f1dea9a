// prefetch({fresh}): a record whose id (and some index values) the caller just generated is taken
// as absent without a disk read, and the counts stay exact.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LevelStore } from '../../src/store/level.js';

describe('LevelStore prefetch with fresh ids', () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0)) await c();
  });
  const open = async () => {
    const dir = await mkdtemp(join(tmpdir(), 'agentd-store-fresh-'));
    const store = new LevelStore({ path: dir });
    await store.open();
    cleanups.push(async () => {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    });
    // Count the disk reads (LevelDB getMany) the store makes.
    const db = (store as unknown as { db: { getMany: (...a: unknown[]) => Promise<unknown> } }).db;
    let reads = 0;
    const orig = db.getMany.bind(db);
    db.getMany = (...a: unknown[]) => {
      reads++;
      return orig(...a);
    };
    return { store, reads: () => reads };
  };

  it('creates a fresh record and its index postings without reading the disk; counts stay exact', async () => {
    const { store, reads } = await open();
    // Warm the kind and shared-value counters once (as the first run of a process does).
    store.prefetch([{ kind: 'runs', id: 'run_0', indexes: { status: 'running', session_id: 's_0' } }]);
    await store.commit([{ op: 'create', kind: 'runs', id: 'run_0', value: { n: 0 }, indexes: { status: 'running', session_id: 's_0' } }]);
    const before = reads();
    for (let i = 1; i <= 5; i++) {
      const indexes = { status: 'running', session_id: `s_${i}` };
      store.prefetch([{ kind: 'runs', id: `run_${i}`, indexes, fresh: ['session_id'] }]);
      await store.commit([{ op: 'create', kind: 'runs', id: `run_${i}`, value: { n: i }, indexes }]);
    }
    expect(reads() - before).toBe(0);
    expect(await store.countRecords('runs')).toBe(6);
    expect(await store.countRecords('runs', { name: 'status', value: 'running' })).toBe(6);
    expect(await store.countRecords('runs', { name: 'session_id', value: 's_3' })).toBe(1);
    expect((await store.getRecord('runs', 'run_3'))?.value).toEqual({ n: 3 });
  });

  it('without the hint the same creates read their rows and counters', async () => {
    const { store, reads } = await open();
    store.prefetch([{ kind: 'runs', id: 'run_0', indexes: { status: 'running', session_id: 's_0' } }]);
    await store.commit([{ op: 'create', kind: 'runs', id: 'run_0', value: { n: 0 }, indexes: { status: 'running', session_id: 's_0' } }]);
    const before = reads();
    const indexes = { status: 'running', session_id: 's_1' };
    store.prefetch([{ kind: 'runs', id: 'run_1', indexes }]);
    await store.commit([{ op: 'create', kind: 'runs', id: 'run_1', value: { n: 1 }, indexes }]);
    expect(reads() - before).toBeGreaterThan(0);
  });
});
