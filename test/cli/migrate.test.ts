// `agentd migrate` (the handler, in process): applies the migrations once, says so without the
// password, is a no-op the second time, refuses a database migrated by a newer agentd, and needs
// a PostgreSQL URL.
import { readdirSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import pg from 'pg';
import { migrateCommand } from '../../src/cli/migrate.js';
import type { Parsed } from '../../src/cli/args.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

const dbs: TestDatabase[] = [];
afterEach(async () => {
  for (const d of dbs.splice(0)) await d.drop();
});

// The migrations this agentd ships (src/store/migrations/NNN_name.sql): each must be applied, in
// version order (versions need not be consecutive: docs/operations.md).
const MIGRATIONS = readdirSync(new URL('../../src/store/migrations/', import.meta.url))
  .map((f) => /^(\d+)_(\w+)\.sql$/.exec(f))
  .filter((m): m is RegExpExecArray => m !== null)
  .map((m) => ({ version: Number(m[1]), name: m[2]! }))
  .sort((a, b) => a.version - b.version);
const LATEST = MIGRATIONS.at(-1)!.version;

const parsed = (values: Record<string, string>): Parsed => ({ values, positionals: [], help: false });
const withPassword = (url: string) => url.replace('postgres://postgres@', 'postgres://postgres:not-checked-pw-123@');

describe('agentd migrate', () => {
  it('applies the schema once, then reports it current; never prints the password', async () => {
    const db = await createTestDatabase();
    dbs.push(db);
    const out: string[] = [];
    const url = withPassword(db.url);
    expect(await migrateCommand(parsed({ 'store-url': url }), undefined, (s) => out.push(s))).toBe(0);
    const applied = MIGRATIONS.map((m) => `applied PostgreSQL migration ${m.version} \\(${m.name}\\)`).join('[\\s\\S]*');
    const all = MIGRATIONS.map((m) => m.version).join(', ');
    expect(out.join('')).toMatch(new RegExp(`${applied}[\\s\\S]*is at schema version ${LATEST} \\(applied ${all}\\)`));
    out.length = 0;
    expect(await migrateCommand(parsed({ 'store-url': url }), undefined, (s) => out.push(s))).toBe(0);
    expect(out.join('')).toMatch(new RegExp(`already at schema version ${LATEST}\\b`));
    expect(out.join('')).not.toContain('not-checked-pw-123');
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      expect((await c.query('SELECT count(*)::int AS n FROM agentd.schema_migrations')).rows[0].n).toBe(LATEST);
      await c.query("INSERT INTO agentd.schema_migrations (version, name) VALUES ($1, 'newer')", [LATEST + 1]);
    } finally {
      await c.end();
    }
    await expect(migrateCommand(parsed({ 'store-url': url }), undefined, () => {})).rejects.toThrow(
      new RegExp(`schema version ${LATEST + 1}, newer than this agentd knows \\(${LATEST}\\)`),
    );
  });

  it('needs a postgres:// URL', async () => {
    await expect(migrateCommand(parsed({ 'store-url': 'mysql://h/db' }), undefined, () => {})).rejects.toThrow(/--store-url: expected a postgres:\/\//);
  });
});
