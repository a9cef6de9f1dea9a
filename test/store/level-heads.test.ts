// A row this process wrote keeps its head (version, seq, index values) next to its text in the
// write queue's cache: the next write over it is staged without parsing that text again (a run's
// row, record and snapshot are rewritten on every step), and a holders op still sees its value.
// A write over a known row loads only the counters it moves: its kind's and those of the index
// values it changes.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LevelStore } from '../../src/store/level.js';

describe('LevelStore staging over rows it wrote', () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    vi.restoreAllMocks();
    for (const c of cleanups.splice(0)) await c();
  });
  const open = async (dir?: string) => {
    const path = dir ?? (await mkdtemp(join(tmpdir(), 'agentd-store-heads-')));
    const store = new LevelStore({ path });
    await store.open();
    if (!dir)
      cleanups.push(async () => {
        await store.close();
        await rm(path, { recursive: true, force: true });
      });
    return { store, path };
  };
  /** JSON.parse calls on stored texts of the row marked `marker` while `fn` runs. */
  const parsesOf = async (marker: string, fn: () => Promise<unknown>): Promise<number> => {
    const parse = JSON.parse;
    let n = 0;
    vi.spyOn(JSON, 'parse').mockImplementation((text: string, reviver?: (this: unknown, key: string, value: unknown) => unknown) => {
      if (typeof text === 'string' && text.includes(marker)) n++;
      return parse(text, reviver);
    });
    try {
      await fn();
    } finally {
      vi.mocked(JSON.parse).mockRestore();
    }
    return n;
  };

  it('stages updates over a row it wrote from the cached head: no parse of its text, versions, indexes and counts exact', async () => {
    const { store } = await open();
    const big = 'x'.repeat(4000);
    await store.commit([{ op: 'create', kind: 'runs', id: 'r1', value: { marker: 'ROW-R1', big, n: 0 }, indexes: { status: 'queued' } }]);
    const parses = await parsesOf('ROW-R1', async () => {
      for (let v = 1; v <= 3; v++) {
        const status = v === 3 ? 'completed' : 'running';
        const [w] = await store.commit([
          { op: 'update', kind: 'runs', id: 'r1', value: { marker: 'ROW-R1', big, n: v }, expectedVersion: v, indexes: { status } },
        ]);
        expect(w?.version).toBe(v + 1);
      }
      // A stale CAS is still refused (the head's version is the row's).
      await expect(store.commit([{ op: 'update', kind: 'runs', id: 'r1', value: { marker: 'ROW-R1', n: 9 }, expectedVersion: 2 }])).rejects.toMatchObject({
        code: 'stale_version',
      });
    });
    expect(parses).toBe(0);
    expect((await store.getRecord('runs', 'r1'))?.value).toMatchObject({ n: 3 });
    expect(await store.countRecords('runs', { name: 'status', value: 'queued' })).toBe(0);
    expect(await store.countRecords('runs', { name: 'status', value: 'running' })).toBe(0);
    expect(await store.countRecords('runs', { name: 'status', value: 'completed' })).toBe(1);
    const page = await store.listRecords('runs', { index: { name: 'status', value: 'completed' } });
    expect(page.items.map((i) => i.id)).toEqual(['r1']);
    // An update without indexes keeps the row's index values (taken from the head).
    await store.commit([{ op: 'update', kind: 'runs', id: 'r1', value: { marker: 'ROW-R1', n: 4 }, expectedVersion: 4 }]);
    expect(await store.countRecords('runs', { name: 'status', value: 'completed' })).toBe(1);
    expect((await store.listRecords('runs', { index: { name: 'status', value: 'completed' } })).items.map((i) => i.value)).toEqual([
      { marker: 'ROW-R1', n: 4 },
    ]);
  });

  it("a holders op over a row it wrote applies to that row's stored value", async () => {
    const { store } = await open();
    await store.commit([{ op: 'holders', kind: 'meta', id: 'key:a', add: { run_id: 'run_1', since: 1, limit: 2 }, fields: { key: 'a' } }]);
    await store.commit([{ op: 'holders', kind: 'meta', id: 'key:a', add: { run_id: 'run_2', since: 2, limit: 2 } }]);
    await expect(store.commit([{ op: 'holders', kind: 'meta', id: 'key:a', add: { run_id: 'run_3', since: 3, limit: 2 } }])).rejects.toMatchObject({
      code: 'full',
    });
    await store.commit([{ op: 'holders', kind: 'meta', id: 'key:a', remove: ['run_1'] }]);
    expect((await store.getRecord('meta', 'key:a'))?.value).toEqual({ key: 'a', holders: [{ run_id: 'run_2', since: 2, limit: 2 }] });
  });

  it('a row known only from the disk (after a reopen) is parsed once per round that stages over it', async () => {
    const { store, path } = await open();
    await store.commit([{ op: 'create', kind: 'runs', id: 'r2', value: { marker: 'ROW-R2', n: 0 }, indexes: { status: 'queued' } }]);
    await store.close();
    const again = await open(path);
    cleanups.push(async () => {
      await again.store.close();
      await rm(path, { recursive: true, force: true });
    });
    const first = await parsesOf('ROW-R2', () =>
      again.store.commit([{ op: 'update', kind: 'runs', id: 'r2', value: { marker: 'ROW-R2', n: 1 }, expectedVersion: 1 }]),
    );
    expect(first).toBe(1);
    const next = await parsesOf('ROW-R2', () =>
      again.store.commit([{ op: 'update', kind: 'runs', id: 'r2', value: { marker: 'ROW-R2', n: 2 }, expectedVersion: 2 }]),
    );
    expect(next).toBe(0);
    expect(await again.store.countRecords('runs', { name: 'status', value: 'queued' })).toBe(1);
  });

  it('a write over a known row looks up only the counters it moves: its kind and the index values it changes', async () => {
    const { store } = await open();
    const indexes = { task_id: 't1', status: 'queued', agent: 'a1', tenant: 'x' };
    await store.commit([{ op: 'create', kind: 'runs', id: 'r3', value: { n: 0 }, indexes }]);
    const counters = (store as unknown as { writer: { cache: { counters: Map<string, number> } } }).writer.cache.counters;
    const looked: string[] = [];
    const get = counters.get.bind(counters);
    vi.spyOn(counters, 'get').mockImplementation((k: string) => (looked.push(k), get(k)));
    await store.commit([{ op: 'update', kind: 'runs', id: 'r3', value: { n: 1 }, expectedVersion: 1, indexes: { ...indexes, status: 'running' } }]);
    expect(new Set(looked.map((k) => k.split('\u0000').slice(1).join('/')))).toEqual(new Set(['runs', 'runs/status/queued', 'runs/status/running']));
    // An update naming no indexes moves none.
    looked.length = 0;
    await store.commit([{ op: 'update', kind: 'runs', id: 'r3', value: { n: 2 }, expectedVersion: 2 }]);
    expect(looked.map((k) => k.split('\u0000').slice(1).join('/'))).toEqual(['runs']);
    // A delete moves all of them; the counts stay exact throughout.
    await store.commit([{ op: 'create', kind: 'runs', id: 'r4', value: { n: 0 }, indexes }]);
    expect(await store.countRecords('runs', { name: 'status', value: 'running' })).toBe(1);
    expect(await store.countRecords('runs', { name: 'status', value: 'queued' })).toBe(1);
    expect(await store.countRecords('runs', { name: 'task_id', value: 't1' })).toBe(2);
    await store.commit([{ op: 'delete', kind: 'runs', id: 'r3' }]);
    expect(await store.countRecords('runs', { name: 'status', value: 'running' })).toBe(0);
    expect(await store.countRecords('runs', { name: 'task_id', value: 't1' })).toBe(1);
    expect(await store.countRecords('runs')).toBe(1);
  });

  it('several writes over one row in one round keep every count exact', async () => {
    const { store } = await open();
    await store.commit([{ op: 'create', kind: 'runs', id: 'r5', value: { n: 0 }, indexes: { status: 'a' } }]);
    // Issued in one turn: one round stages A -> B -> A -> C, then C -> C.
    await Promise.all([
      store.commit([{ op: 'update', kind: 'runs', id: 'r5', value: { n: 1 }, expectedVersion: 1, indexes: { status: 'b' } }]),
      store.commit([{ op: 'update', kind: 'runs', id: 'r5', value: { n: 2 }, expectedVersion: 2, indexes: { status: 'a' } }]),
      store.commit([{ op: 'update', kind: 'runs', id: 'r5', value: { n: 3 }, expectedVersion: 3, indexes: { status: 'c' } }]),
      store.commit([{ op: 'update', kind: 'runs', id: 'r5', value: { n: 4 }, expectedVersion: 4 }]),
    ]);
    for (const [v, n] of [
      ['a', 0],
      ['b', 0],
      ['c', 1],
    ] as const)
      expect(await store.countRecords('runs', { name: 'status', value: v })).toBe(n);
    expect((await store.listRecords('runs', { index: { name: 'status', value: 'c' } })).items.map((i) => i.value)).toEqual([{ n: 4 }]);
  });
});
