// How the PostgreSQL store keeps agentd.record_ix in step with a record's indexes on update
// (src/store/migrations/007_indexed_updates.sql): only the index rows whose value changed are
// rewritten, and a refused commit of a round leaves its records' index rows as they were while the
// other commits of that round apply.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresStore } from '../../src/store/postgres.js';
import { StoreError } from '../../src/store/store.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
let s: PostgresStore;
beforeAll(async () => {
  db = await createTestDatabase();
  s = new PostgresStore({ url: db.url, poolSize: 2, changes: false });
  await s.open();
});
afterAll(async () => {
  await s?.close();
  await db?.drop();
});

/** A record's index rows as name -> [value, xmin] (xmin: the transaction that wrote the row version). */
async function ixRows(kind: string, id: string): Promise<Record<string, [string, string]>> {
  const r = await s.queries.query<{ name: string; value: string; x: string }>(
    { text: 'SELECT name, value, xmin::text AS x FROM agentd.record_ix WHERE kind = $1 AND id = $2', values: [kind, id] },
    true,
  );
  return Object.fromEntries(r.rows.map((row) => [row.name, [row.value, row.x]]));
}

describe('PostgreSQL index rows on update', () => {
  it('an update that changes one indexed value rewrites only that index row; unchanged indexes write none', async () => {
    const ix = { status: 'queued', task_id: 't1', tenant: 'acme', task_status: 't1:queued' };
    await s.commit([{ op: 'create', kind: 'bg_runs', id: 'run_a', value: { n: 1 }, indexes: ix }]);
    const before = await ixRows('bg_runs', 'run_a');
    expect(Object.keys(before).sort()).toEqual(['status', 'task_id', 'task_status', 'tenant']);

    // CAS update, two values change, one index goes away.
    const moved = { status: 'running', task_id: 't1', task_status: 't1:running' };
    await s.commit([{ op: 'update', kind: 'bg_runs', id: 'run_a', value: { n: 2 }, expectedVersion: 1, indexes: moved }]);
    const after = await ixRows('bg_runs', 'run_a');
    expect(Object.fromEntries(Object.entries(after).map(([k, v]) => [k, v[0]]))).toEqual(moved);
    expect(after.task_id).toEqual(before.task_id); // the same row version: not deleted and inserted again
    expect(after.status[1]).not.toBe(before.status[1]);
    expect(after.task_status[1]).not.toBe(before.task_status[1]);

    // Same indexes again (CAS, then create-or-replace): no index row is written.
    await s.commit([{ op: 'update', kind: 'bg_runs', id: 'run_a', value: { n: 3 }, expectedVersion: 2, indexes: moved }]);
    await s.commit([{ op: 'update', kind: 'bg_runs', id: 'run_a', value: { n: 4 }, expectedVersion: null, indexes: moved }]);
    expect(await ixRows('bg_runs', 'run_a')).toEqual(after);
    const listed = await s.listRecords('bg_runs', { index: { name: 'status', value: 'running' } });
    expect(listed.items.map((r) => [r.id, r.version, r.value])).toEqual([['run_a', 4, { n: 4 }]]);
    expect(await s.countRecords('bg_runs', { name: 'tenant', value: 'acme' })).toBe(0);

    // Create-or-replace of a new record with indexes creates it with its index rows.
    await s.commit([{ op: 'update', kind: 'bg_runs', id: 'run_b', value: { n: 1 }, expectedVersion: null, indexes: { status: 'queued' } }]);
    expect(Object.keys(await ixRows('bg_runs', 'run_b'))).toEqual(['status']);
  });

  it('create-or-replace with indexes racing on two connections: every write applies, and the index rows mirror the last one', async () => {
    const other = new PostgresStore({ url: db.url, poolSize: 2, changes: false });
    await other.open();
    try {
      for (let i = 0; i < 10; i++) {
        const id = `race_${i}`;
        const write = (st: PostgresStore, who: string, n: number) =>
          st.commit([{ op: 'update', kind: 'bg_runs', id, value: { who, n }, expectedVersion: null, indexes: { status: `${who}${n}`, owner: who } }]);
        await Promise.all([write(s, 'a', 1), write(other, 'b', 1), write(s, 'a', 2), write(other, 'b', 2)]);
        const rec = await s.queries.query<{ version: number; ix: Record<string, string> }>(
          { text: "SELECT version, ix FROM agentd.records WHERE kind = 'bg_runs' AND id = $1", values: [id] },
          true,
        );
        expect(rec.rows[0].version).toBe(4);
        const rows = await ixRows('bg_runs', id);
        expect(Object.fromEntries(Object.entries(rows).map(([k, v]) => [k, v[0]]))).toEqual(rec.rows[0].ix);
      }
    } finally {
      await other.close();
    }
  });

  it('a round mixing a refused commit and an applied one: the refused one changes no record or index row, the other applies whole', async () => {
    await s.commit([
      { op: 'create', kind: 'bg_runs', id: 'run_x', value: { n: 1 }, indexes: { status: 'queued', task_id: 't2' } },
      { op: 'create', kind: 'bg_runs', id: 'run_y', value: { n: 1 }, indexes: { status: 'queued', task_id: 't2' } },
    ]);
    const xBefore = await ixRows('bg_runs', 'run_x');
    // Issued in one turn: one round, one statement. The first commit's second op fails its CAS.
    const [refused, applied] = await Promise.allSettled([
      s.commit([
        { op: 'update', kind: 'bg_runs', id: 'run_x', value: { n: 2 }, expectedVersion: 1, indexes: { status: 'running', task_id: 't2' } },
        { op: 'update', kind: 'bg_runs', id: 'run_y', value: { n: 2 }, expectedVersion: 7, indexes: { status: 'running', task_id: 't2' } },
      ]),
      s.commit([
        { op: 'update', kind: 'bg_runs', id: 'run_y', value: { n: 3 }, expectedVersion: 1, indexes: { status: 'done', task_id: 't3' } },
        { op: 'create', kind: 'bg_runs', id: 'run_z', value: { n: 1 }, indexes: { status: 'queued' } },
      ]),
    ]);
    expect(refused.status).toBe('rejected');
    expect(((refused as PromiseRejectedResult).reason as StoreError).code).toBe('stale_version');
    expect(applied.status).toBe('fulfilled');
    expect((await s.getRecord('bg_runs', 'run_x'))?.version).toBe(1);
    expect(await ixRows('bg_runs', 'run_x')).toEqual(xBefore);
    const y = await ixRows('bg_runs', 'run_y');
    expect([y.status[0], y.task_id[0]]).toEqual(['done', 't3']);
    expect((await s.getRecord('bg_runs', 'run_y'))?.value).toEqual({ n: 3 });
    expect(Object.keys(await ixRows('bg_runs', 'run_z'))).toEqual(['status']);
  });
});
