import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresStore, escText, unescText } from '../../src/store/postgres.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { runStoreContract } from './store.contract.js';

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
