import { afterAll, beforeAll } from 'vitest';
import { PostgresStore } from '../../src/store/postgres.js';
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
  await store.query({ text: "TRUNCATE agentd.records, agentd.record_ix, agentd.events; UPDATE agentd.counters SET value = 0" }, false);
  return { store, cleanup: () => store.close() };
});
