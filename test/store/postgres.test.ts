import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresStore } from '../../src/store/postgres.js';
import { escText, unescText } from '../../src/store/pg-text.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { queueRun } from './queue-claims.contract.js';
import { runStoreContract } from './store.contract.js';
import { repos } from '../../src/store/repos/index.js';

// One database for the file; each test gets an empty schema by truncating (a new database per
// test would cost ~100 ms each).
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  const s = new PostgresStore({ url: db.url });
  await s.open(); // migrates
  await s.close();
});
afterAll(async () => {
  await db?.drop();
});

runStoreContract('postgres', async () => {
  const store = new PostgresStore({ url: db.url, poolSize: 4 });
  await store.open();
  await store.query({ text: 'TRUNCATE agentd.records, agentd.record_ix, agentd.events; UPDATE agentd.counters SET value = 0' }, false);
  return { store, cleanup: () => store.close() };
});

describe('PostgreSQL text escaping (ids and index values; text cannot hold NUL)', () => {
  it('is a bijection that leaves ordinary text alone', () => {
    const samples = ['', 'run_1', 'a\\b', '\\0', '\u0000', 'a\u0000b\\\u0000', '\\\\0', 'é✓\u0001'];
    for (const s of samples) {
      const e = escText(s);
      expect(e).not.toContain('\u0000');
      expect(unescText(e)).toBe(s);
    }
    expect(escText('run_abc-1')).toBe('run_abc-1');
    expect(new Set(samples.map(escText)).size).toBe(samples.length);
  });
});

describe('PostgreSQL queue claims (FOR UPDATE SKIP LOCKED)', () => {
  const T0 = Date.parse('2030-01-01T00:00:00.000Z');
  const open = async () => {
    const s = new PostgresStore({ url: db.url, poolSize: 4, changes: false });
    await s.open();
    return s;
  };

  it('two claimers on two connections pools never get the same row, and together get every due row', async () => {
    const [a, b] = [await open(), await open()];
    try {
      await a.query({ text: 'TRUNCATE agentd.records, agentd.record_ix' }, false);
      for (let i = 0; i < 120; i++) await queueRun(a, `run_${String(i).padStart(3, '0')}`);
      const drain = async (s: PostgresStore) => {
        const pass = repos(s).bgRuns.claimPass(T0, 10_000);
        const got: string[] = [];
        while (!pass.done) got.push(...(await pass.claimQueued(7)).map((r) => r.id));
        return { pass, got };
      };
      // Several rounds of two concurrent passes, the holds kept until both are done.
      const [ra, rb] = await Promise.all([drain(a), drain(b)]);
      expect(ra.got.filter((id) => rb.got.includes(id))).toEqual([]);
      expect([...ra.got, ...rb.got].sort()).toHaveLength(120);
      expect(new Set([...ra.got, ...rb.got]).size).toBe(120);
      // While held, a third pass gets nothing; once released, everything is queued again.
      expect(await repos(a).bgRuns.claimPass(T0, 10_000).claimQueued(10)).toEqual([]);
      await Promise.all([ra.pass.release(), rb.pass.release()]);
      expect(await repos(b).bgRuns.claimPass(T0, 10_000).claimQueued(10)).toHaveLength(10);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('hands a held row out again once its hold lapsed (a claimer that died mid-pass)', async () => {
    const s = await open();
    try {
      await s.query({ text: 'TRUNCATE agentd.records, agentd.record_ix' }, false);
      await queueRun(s, 'lonely');
      expect((await repos(s).bgRuns.claimPass(T0, 1_000).claimQueued(5)).map((r) => r.id)).toEqual(['lonely']);
      expect(
        await repos(s)
          .bgRuns.claimPass(T0 + 999, 1_000)
          .claimQueued(5),
      ).toEqual([]);
      expect(
        (
          await repos(s)
            .bgRuns.claimPass(T0 + 1_000, 1_000)
            .claimQueued(5)
        ).map((r) => r.id),
      ).toEqual(['lonely']);
    } finally {
      await s.close();
    }
  });
});
