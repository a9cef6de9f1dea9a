// A group-commit round writes each key once: a row written twice in one round (a run's trace
// created and rewritten by its final commit) goes to LevelDB once, and an index entry put and
// deleted in the same round (a run created and claimed together) not at all, nor its counter.
// What the store answers is the same as with every operation written.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Level } from 'level';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { coalesceRound } from '../../src/store/level-coalesce.js';
import { LevelStore } from '../../src/store/level.js';
import { indexCountKey, indexPrefix, recordKey, seqPrefix, type BatchOp } from '../../src/store/level-keys.js';

const put = (key: string, value = 'v'): BatchOp => ({ type: 'put', key, value });
const del = (key: string): BatchOp => ({ type: 'del', key });

describe('coalesceRound', () => {
  const row = recordKey('traces', 't1');
  const queued = indexPrefix('bg_runs', 'status', 'queued') + '0000000000000007';
  const running = indexPrefix('bg_runs', 'status', 'running') + '0000000000000007';
  const seq = seqPrefix('traces') + '0000000000000009';

  it('keeps the last put of a row written twice, and drops an index entry put then deleted', () => {
    const batch = [
      put(row, 'first'),
      put(seq, 't1'),
      put(queued, 'r1'),
      del(queued),
      put(running, 'r1'),
      put(row, 'second'),
      put('e\u00000000000000000001', '{}'),
    ];
    expect(coalesceRound(batch, 3, 2)).toEqual([put(seq, 't1'), put(running, 'r1'), put(row, 'second'), put('e\u00000000000000000001', '{}')]);
  });

  it('keeps the del of an entry that existed before the round, and the put of one that came back', () => {
    // running -> queued -> running in one round: `running` was on disk, `queued` was not.
    const batch = [del(running), put(queued, 'r1'), del(queued), put(running, 'r1')];
    expect(coalesceRound(batch, 2, 1)).toEqual([put(running, 'r1')]);
    expect(coalesceRound([del(running), put(queued, 'r1')], 2, 1)).toEqual([del(running), put(queued, 'r1')]);
  });

  it("tells an entry's first operation from its last however often it repeats", () => {
    // First a del (the entry may be on disk): its last del stays. First a put: put..del is nothing.
    expect(coalesceRound([del(queued), put(queued, 'r1'), del(queued)], 3, 1)).toEqual([del(queued)]);
    expect(coalesceRound([put(queued, 'r1'), del(queued), put(queued, 'r1'), del(queued)], 4, 1)).toEqual([]);
    expect(coalesceRound([put(queued, 'r1'), del(queued), put(queued, 'r2')], 3, 1)).toEqual([put(queued, 'r2')]);
  });

  it("keeps a row's del even when the row was put earlier in the round", () => {
    expect(coalesceRound([put(row), del(row)], 2, 1)).toEqual([del(row)]);
  });

  it('returns the batch as it is when no record is written twice', () => {
    const batch = [put(row), put(queued, 'r1')];
    expect(coalesceRound(batch, 1, 1)).toBe(batch);
  });
});

describe('LevelStore rounds with a record written twice', () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    vi.restoreAllMocks();
    for (const c of cleanups.splice(0)) await c();
  });

  /** The keys of the operations handed to LevelDB's chained batches (`put:key`, `del:key`). */
  const spyOnBatches = (): string[] => {
    const seen: string[] = [];
    const batch = Level.prototype.batch;
    vi.spyOn(Level.prototype, 'batch').mockImplementation(function (this: Level<string, string>, ...args: unknown[]) {
      const b = (batch as (...a: unknown[]) => ReturnType<Level<string, string>['batch']>).apply(this, args);
      const [p, d] = [b.put.bind(b), b.del.bind(b)];
      b.put = (key: string, value: string) => (seen.push(`put:${key}`), p(key, value));
      b.del = (key: string) => (seen.push(`del:${key}`), d(key));
      return b;
    } as never);
    return seen;
  };

  it('answers as if every write landed: rows, versions, lists, counts, and what the disk holds', async () => {
    const path = await mkdtemp(join(tmpdir(), 'agentd-store-coalesce-'));
    cleanups.push(() => rm(path, { recursive: true, force: true }));
    const store = new LevelStore({ path });
    await store.open();
    await store.createRecord('runs', 'old', { n: 0 }, { status: 'running' });
    // One commit: created queued, moved to running, rewritten; and, issued in the same turn (one
    // round), another commit that moves `old` to completed and back to running.
    const ops = spyOnBatches();
    const [one, two] = await Promise.all([
      store.commit([
        { op: 'create', kind: 'runs', id: 'r1', value: { n: 1 }, indexes: { status: 'queued' } },
        { op: 'update', kind: 'runs', id: 'r1', value: { n: 2 }, expectedVersion: 1, indexes: { status: 'running' } },
        { op: 'update', kind: 'runs', id: 'r1', value: { n: 3 }, expectedVersion: 2 },
      ]),
      store.commit([
        { op: 'update', kind: 'runs', id: 'old', value: { n: 1 }, expectedVersion: 1, indexes: { status: 'completed' } },
        { op: 'update', kind: 'runs', id: 'old', value: { n: 2 }, expectedVersion: 2, indexes: { status: 'running' } },
      ]),
    ]);
    expect(one.map((r) => r?.version)).toEqual([1, 2, 3]);
    // Each row once; nothing of `queued` or `completed`, which only passed through (entries nor counters).
    expect(ops.filter((k) => k === `put:${recordKey('runs', 'r1')}`)).toHaveLength(1);
    expect(ops.filter((k) => k === `put:${recordKey('runs', 'old')}`)).toHaveLength(1);
    expect(ops.filter((k) => k.includes('\u0000queued') || k.includes('\u0000completed'))).toEqual([]);
    vi.restoreAllMocks();
    expect(two.map((r) => r?.version)).toEqual([2, 3]);
    expect(await store.getRecord('runs', 'r1')).toMatchObject({ version: 3, value: { n: 3 } });
    expect(await store.getRecord('runs', 'old')).toMatchObject({ version: 3, value: { n: 2 } });
    const ids = async (status: string) => (await store.listRecords('runs', { index: { name: 'status', value: status } })).items.map((r) => r.id);
    expect(await ids('running')).toEqual(['old', 'r1']);
    expect(await ids('queued')).toEqual([]);
    expect(await ids('completed')).toEqual([]);
    expect(await store.countRecords('runs', { name: 'status', value: 'running' })).toBe(2);
    expect(await store.countRecords('runs', { name: 'status', value: 'queued' })).toBe(0);
    expect(await store.countRecords('runs')).toBe(2);
    // The next write over r1 stages from what landed (its cached head).
    await store.updateRecord('runs', 'r1', { n: 4 }, 3, { status: 'completed' });
    expect(await store.countRecords('runs', { name: 'status', value: 'running' })).toBe(1);
    await store.close();

    // On disk: no entry nor counter of a value only passed through, and the rows' last texts.
    const db = new Level<string, string>(path, { keyEncoding: 'utf8', valueEncoding: 'utf8' });
    try {
      const keys = await db.keys().all();
      expect(keys.filter((k) => k.startsWith(indexPrefix('runs', 'status', 'queued')))).toEqual([]);
      expect(keys).not.toContain(indexCountKey('runs', 'status', 'queued'));
      expect(keys.filter((k) => k.startsWith(indexPrefix('runs', 'status', 'completed')))).toHaveLength(1);
      expect(JSON.parse((await db.get(recordKey('runs', 'old')))!)).toMatchObject({ version: 3, value: { n: 2 }, ix: { status: 'running' } });
    } finally {
      await db.close();
    }
  });
});
