// A private PostgreSQL database per test file (or per test): created with a random name on the
// server CI runs (AGENTD_TEST_PG_URL, default postgres://postgres@127.0.0.1:5432, trust auth) and
// dropped afterwards (WITH (FORCE): connections a test left open do not keep it alive).
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export const PG_ADMIN_URL = process.env.AGENTD_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestDatabase {
  name: string;
  url: string;
  drop(): Promise<void>;
}

const withUrlDb = (url: string, db: string): string => {
  const u = new URL(url);
  u.pathname = `/${db}`;
  return u.toString();
};

/** Runs one statement on the admin database. */
export async function adminQuery(sql: string, values: unknown[] = []): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: PG_ADMIN_URL });
  await client.connect();
  try {
    return await client.query(sql, values);
  } finally {
    await client.end();
  }
}

export async function createTestDatabase(prefix = 'agentd_test'): Promise<TestDatabase> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  await adminQuery(`CREATE DATABASE ${name}`);
  let dropped = false;
  return {
    name,
    url: withUrlDb(PG_ADMIN_URL, name),
    async drop() {
      if (dropped) return;
      dropped = true;
      await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}
