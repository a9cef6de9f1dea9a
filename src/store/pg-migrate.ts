// Versioned SQL migrations of the PostgreSQL store (src/store/migrations/NNN_name.sql, shipped in
// the package: scripts/build.mjs copies them to dist/migrations/). Applied at PostgresStore.open()
// and by `agentd migrate`, always under one session-level advisory lock, so instances starting
// together migrate once: the first takes the lock and applies, the others wait, then find nothing
// left to do. Each migration runs in one transaction together with its agentd.schema_migrations
// row. A database whose schema is newer than the newest migration this code ships is refused.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { dropTo, type OnSwallowed } from './store.js';

/** pg_advisory_lock key of the migration lock (any fixed bigint; "agentd:m" in ASCII). */
export const MIGRATION_LOCK_KEY = '7018141953221749101';

/** How long an instance waits for another one's migration before giving up. */
const LOCK_WAIT_MS = 10 * 60_000;

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export interface MigrationResult {
  /** Versions applied by this call, in order. */
  applied: number[];
  /** Schema version after the call. */
  version: number;
}

export class SchemaTooNewError extends Error {
  constructor(
    readonly databaseVersion: number,
    readonly knownVersion: number,
  ) {
    super(
      `the PostgreSQL database has agentd schema version ${databaseVersion}, newer than this agentd knows (${knownVersion}): ` +
        'it was migrated by a newer agentd. Run that version (or newer), or restore a backup taken before the upgrade; this process will not touch it.',
    );
    this.name = 'SchemaTooNewError';
  }
}

/** Where the .sql files are: next to this module (src/store/, tsx and vitest), or dist/migrations/ in the bundle (dist/agentd.js or dist/chunks/*.js). */
function migrationsDir(): string {
  for (const rel of ['./migrations/', '../migrations/']) {
    const dir = fileURLToPath(new URL(rel, import.meta.url));
    if (existsSync(`${dir}001_init.sql`)) return dir;
  }
  throw new Error('the PostgreSQL migrations (migrations/001_init.sql) are missing from this installation');
}

let cached: Migration[] | null = null;

/** Every shipped migration, ascending by version. */
export function loadMigrations(): Migration[] {
  if (cached) return cached;
  const dir = migrationsDir();
  const out: Migration[] = [];
  for (const file of readdirSync(dir).sort()) {
    const m = /^(\d+)_([\w-]+)\.sql$/.exec(file);
    if (!m) continue;
    out.push({ version: Number(m[1]), name: m[2], sql: readFileSync(`${dir}${file}`, 'utf8') });
  }
  // Ascending and unique; a number may be missing (a migration written on a branch next to
  // another one's: both apply, each once, see migrate()).
  out.forEach((mig, i) => {
    if (mig.version < 1 || (i > 0 && mig.version <= out[i - 1]!.version))
      throw new Error(`PostgreSQL migrations must be numbered 1, 2, 3, ... ascending: found ${mig.version} at position ${i + 1}`);
  });
  return (cached = out);
}

/** The newest schema version this code knows. */
export const latestSchemaVersion = (): number => loadMigrations().at(-1)?.version ?? 0;

/** The schema version of the database (0: never migrated), without taking the lock. */
export async function schemaVersion(client: pg.ClientBase): Promise<number> {
  const t = await client.query<{ t: string | null }>("SELECT to_regclass('agentd.schema_migrations')::text AS t");
  if (!t.rows[0].t) return 0;
  const r = await client.query<{ v: number | null }>('SELECT max(version) AS v FROM agentd.schema_migrations');
  return r.rows[0].v ?? 0;
}

/**
 * Brings the schema to the newest version under the migration lock. Throws SchemaTooNewError when
 * the database is ahead of this code. `log` gets one line per applied migration; `onSwallowed` a
 * ROLLBACK, RESET or lock release that failed (the migration's own error is thrown).
 */
export async function migrate(pool: pg.Pool, log: (msg: string) => void = () => {}, onSwallowed?: OnSwallowed): Promise<MigrationResult> {
  const migrations = loadMigrations();
  const client = await pool.connect();
  let broken = false;
  try {
    // A migration may run longer than the service's statement_timeout; the wait for another
    // instance's migration is bounded here instead (polling, so no statement waits unbounded).
    await client.query('SET statement_timeout = 0');
    const deadline = Date.now() + LOCK_WAIT_MS;
    let told = false;
    while (!(await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1::bigint) AS ok', [MIGRATION_LOCK_KEY])).rows[0].ok) {
      if (Date.now() > deadline)
        throw new Error(`another agentd has held the PostgreSQL migration lock for over ${LOCK_WAIT_MS / 1000} s; is a migration stuck?`);
      if (!told) log('agentd: waiting for another instance to finish migrating the PostgreSQL schema');
      told = true;
      await new Promise((r) => setTimeout(r, 200));
    }
    try {
      await client.query('CREATE SCHEMA IF NOT EXISTS agentd');
      await client.query(
        'CREATE TABLE IF NOT EXISTS agentd.schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())',
      );
      const current = await schemaVersion(client);
      const latest = latestSchemaVersion();
      if (current > latest) throw new SchemaTooNewError(current, latest);
      // Every shipped migration the database lacks, in ascending order (not only those above its
      // newest: one numbered below it may have shipped later).
      const done = new Set((await client.query<{ version: number }>('SELECT version FROM agentd.schema_migrations')).rows.map((r) => r.version));
      const applied: number[] = [];
      for (const m of migrations.filter((mig) => !done.has(mig.version))) {
        await client.query('BEGIN');
        try {
          await client.query(m.sql);
          await client.query('INSERT INTO agentd.schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
          await client.query('COMMIT');
        } catch (e) {
          await client.query('ROLLBACK').catch(dropTo(onSwallowed, 'store.pg_migrate.rollback'));
          throw new Error(`PostgreSQL migration ${m.version} (${m.name}) failed: ${(e as Error).message}`, { cause: e });
        }
        applied.push(m.version);
        log(`agentd: applied PostgreSQL migration ${m.version} (${m.name})`);
      }
      return { applied, version: Math.max(current, latest) };
    } finally {
      await client.query('RESET statement_timeout').catch(dropTo(onSwallowed, 'store.pg_migrate.reset_timeout'));
      await client.query('SELECT pg_advisory_unlock($1::bigint)', [MIGRATION_LOCK_KEY]).catch((err: unknown) => {
        broken = true; // a session that cannot unlock is dropped below: closing it releases the lock
        onSwallowed?.('store.pg_migrate.unlock', err);
      });
    }
  } catch (e) {
    if (!(e instanceof SchemaTooNewError)) broken = true;
    throw e;
  } finally {
    client.release(broken);
  }
}
