// `agentd migrate` (the handler, in process): applies the migrations once, says so without the
// password, is a no-op the second time, refuses a database migrated by a newer agentd, and needs
// a PostgreSQL URL.
import { afterEach, describe, expect, it } from 'vitest';
import pg from 'pg';
import { migrateCommand } from '../../src/cli/migrate.js';
import type { Parsed } from '../../src/cli/args.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

const dbs: TestDatabase[] = [];
afterEach(async () => {
  for (const d of dbs.splice(0)) await d.drop();
});

const parsed = (values: Record<string, string>): Parsed => ({ values, positionals: [], help: false });
const withPassword = (url: string) => url.replace('postgres://postgres@', 'postgres://postgres:not-checked-pw-123@');

describe('agentd migrate', () => {
  it('applies the schema once, then reports it current; never prints the password', async () => {
    const db = await createTestDatabase();
    dbs.push(db);
    const out: string[] = [];
    const url = withPassword(db.url);
    expect(await migrateCommand(parsed({ 'store-url': url }), undefined, (s) => out.push(s))).toBe(0);
    expect(out.join('')).toMatch(
      /applied PostgreSQL migration 1 \(init\)[\s\S]*applied PostgreSQL migration 2 \(queue_claims\)[\s\S]*applied PostgreSQL migration 3 \(records_fillfactor\)[\s\S]*applied PostgreSQL migration 4 \(holders_op\)[\s\S]*applied PostgreSQL migration 5 \(commit_events\)[\s\S]*applied PostgreSQL migration 6 \(flow_key_order\)[\s\S]*is at schema version 6 \(applied 1, 2, 3, 4, 5, 6\)/,
    );
    out.length = 0;
    expect(await migrateCommand(parsed({ 'store-url': url }), undefined, (s) => out.push(s))).toBe(0);
    expect(out.join('')).toMatch(/already at schema version 6/);
    expect(out.join('')).not.toContain('not-checked-pw-123');
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      expect((await c.query('SELECT count(*)::int AS n FROM agentd.schema_migrations')).rows[0].n).toBe(6);
      await c.query("INSERT INTO agentd.schema_migrations (version, name) VALUES (7, 'newer')");
    } finally {
      await c.end();
    }
    await expect(migrateCommand(parsed({ 'store-url': url }), undefined, () => {})).rejects.toThrow(/schema version 7, newer than this agentd knows \(6\)/);
  });

  it('needs a postgres:// URL', async () => {
    await expect(migrateCommand(parsed({ 'store-url': 'mysql://h/db' }), undefined, () => {})).rejects.toThrow(/--store-url: expected a postgres:\/\//);
  });
});
