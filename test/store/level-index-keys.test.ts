// The LevelDB adapter keeps the index keys of the values it met lately (src/store/level-keys.ts,
// indexKeys: two generations) instead of building them per op of every round. The keys stay the
// layout's, for values met once, met again after their generation was dropped, and escaped ones;
// and a store whose index values outnumber both generations still counts and lists right.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LevelStore } from '../../src/store/level.js';
import { esc, indexCountKey, indexPrefix } from '../../src/store/level-keys.js';

const S = '\u0000';
const layoutPrefix = (k: string, n: string, v: string) => `i${S}${esc(k)}${S}${esc(n)}${S}${esc(v)}${S}`;
const layoutCount = (k: string, n: string, v: string) => `n${S}${esc(k)}${S}${esc(n)}${S}${esc(v)}`;

describe('index keys', () => {
  it('are the key layout, for values met once, again, after their generation went, and escaped', () => {
    const values = ['queued', '', 'a\u0000b', 'c\u0001d\u0000', ...Array.from({ length: 20_000 }, (_, i) => `v${i}`)];
    for (let pass = 0; pass < 3; pass++)
      for (const v of pass === 1 ? [...values].reverse() : values) {
        expect(indexPrefix('runs', 'status', v)).toBe(layoutPrefix('runs', 'status', v));
        expect(indexCountKey('runs', 'status', v)).toBe(layoutCount('runs', 'status', v));
      }
    // Same value under another kind or name: its own keys.
    expect(indexCountKey('traces', 'status', 'queued')).toBe(`n${S}traces${S}status${S}queued`);
    expect(indexPrefix('runs', 'task_id', 'queued')).toBe(`i${S}runs${S}task_id${S}queued${S}`);
    expect(indexCountKey('a\u0000b', 'n\u0001', 'v')).toBe(layoutCount('a\u0000b', 'n\u0001', 'v'));
  });
});

describe('LevelStore with more index values than the key memo holds', () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0)) await c();
  });

  it('counts and lists by index value as written', async () => {
    const path = await mkdtemp(join(tmpdir(), 'agentd-store-ixkeys-'));
    const store = new LevelStore({ path });
    cleanups.push(async () => {
      await store.close();
      await rm(path, { recursive: true, force: true });
    });
    await store.open();
    await store.createRecord('runs', 'keep', { n: 0 }, { status: 'queued', session_id: 's-keep' });
    // 9,000 records with two fresh values each: both generations turn over.
    for (let b = 0; b < 9; b++)
      await store.commit(
        Array.from({ length: 1000 }, (_, i) => ({
          op: 'create' as const,
          kind: 'runs' as const,
          id: `r${b}-${i}`,
          value: { n: i },
          indexes: { status: 'queued', session_id: `s${b}-${i}`, task_id: `t${b}-${i}` },
        })),
      );
    // `s-keep` was met 18,000 values ago: its keys are built again, the same.
    await store.commit([{ op: 'update', kind: 'runs', id: 'keep', value: { n: 1 }, expectedVersion: 1, indexes: { status: 'running', session_id: 's-keep' } }]);
    await store.commit([{ op: 'update', kind: 'runs', id: 'r0-0', value: { n: 1 }, expectedVersion: 1, indexes: { status: 'running', session_id: 's-keep' } }]);
    expect(await store.countRecords('runs', { name: 'session_id', value: 's-keep' })).toBe(2);
    expect(await store.countRecords('runs', { name: 'session_id', value: 's0-0' })).toBe(0);
    expect(await store.countRecords('runs', { name: 'status', value: 'queued' })).toBe(8999);
    expect(await store.countRecords('runs', { name: 'status', value: 'running' })).toBe(2);
    expect(await store.countRecords('runs', { name: 'task_id', value: 't8-999' })).toBe(1);
    const page = await store.listRecords('runs', { index: { name: 'session_id', value: 's-keep' } });
    expect(page.items.map((r) => r.id).sort()).toEqual(['keep', 'r0-0']);
    expect((await store.listRecords('runs', { index: { name: 'session_id', value: 's0-0' } })).items).toEqual([]);
  });
});
