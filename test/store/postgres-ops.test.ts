// The PostgreSQL store beyond the contract: migrations (two instances opening together migrate
// once; a newer schema is refused and left alone), event cursors under concurrent writers in
// separate pools (what separate processes look like to the database), transient failures
// (terminated backends are retried), and a database that is gone (health false, no crash).
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import pg from 'pg';
import { PostgresStore } from '../../src/store/postgres.js';
import { latestSchemaVersion, loadMigrations, migrate } from '../../src/store/pg-migrate.js';
import { StoreError, type StoredEvent } from '../../src/store/store.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { storeErrorCode } from './store.contract.js';
import { waitFor } from '../helpers/wait.js';

const dbs: TestDatabase[] = [];
const stores: PostgresStore[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close().catch(() => {});
  for (const d of dbs.splice(0)) await d.drop();
});
const freshDb = async () => {
  const d = await createTestDatabase();
  dbs.push(d);
  return d;
};
const store = (url: string, opts: Partial<ConstructorParameters<typeof PostgresStore>[0]> = {}) => {
  const s = new PostgresStore({ url, poolSize: 3, ...opts });
  stores.push(s);
  return s;
};
const sql = async (url: string, text: string, values: unknown[] = []) => {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await c.query(text, values);
  } finally {
    await c.end();
  }
};

describe('PostgreSQL migrations', () => {
  it('two instances opening a fresh database together migrate it once, and both work on it', async () => {
    const db = await freshDb();
    const logs: string[] = [];
    const log = (_level: string, msg: string) => logs.push(msg);
    const [a, b] = [store(db.url, { log }), store(db.url, { log })];
    await Promise.all([a.open(), b.open()]);
    expect(logs.filter((l) => l.includes('applied PostgreSQL migration 1'))).toHaveLength(1);
    expect(logs.filter((l) => l.includes('applied PostgreSQL migration 2'))).toHaveLength(1);
    expect(logs.filter((l) => l.includes('applied PostgreSQL migration 3'))).toHaveLength(1);
    expect(logs.filter((l) => l.includes('applied PostgreSQL migration 4'))).toHaveLength(1);
    expect(logs.filter((l) => l.includes('applied PostgreSQL migration 5'))).toHaveLength(1);
    const rows = (await sql(db.url, 'SELECT version, name FROM agentd.schema_migrations ORDER BY version')).rows;
    expect(rows).toEqual([
      { version: 1, name: 'init' },
      { version: 2, name: 'queue_claims' },
      { version: 3, name: 'records_fillfactor' },
      { version: 4, name: 'holders_op' },
      { version: 5, name: 'commit_events' },
      { version: 6, name: 'flow_key_order' },
      { version: 7, name: 'indexed_updates' },
    ]);
    expect(rows).toHaveLength(loadMigrations().length);
    expect(rows.at(-1)!.version).toBe(latestSchemaVersion());
    await a.createRecord('runs', 'r1', { from: 'a' });
    expect((await b.getRecord('runs', 'r1'))?.value).toEqual({ from: 'a' });
    // A third open finds nothing to do.
    const c = store(db.url, { log });
    await c.open();
    expect(logs.filter((l) => l.includes('applied'))).toHaveLength(loadMigrations().length);
  });

  it('applies a shipped migration the database lacks even when it is numbered below the newest one applied', async () => {
    const db = await freshDb();
    const first = store(db.url);
    await first.open();
    await first.close();
    // As a database migrated by a build that shipped 6 but not yet 4 would look (004 is idempotent: CREATE OR REPLACE).
    await sql(db.url, 'DELETE FROM agentd.schema_migrations WHERE version = 4');
    const logs: string[] = [];
    const again = store(db.url, { log: (_level: string, msg: string) => logs.push(msg) });
    await again.open();
    expect(logs.filter((l) => l.includes('applied'))).toEqual(['agentd: applied PostgreSQL migration 4 (holders_op)']);
    const rows = (await sql(db.url, 'SELECT version FROM agentd.schema_migrations ORDER BY version')).rows.map((r) => r.version);
    expect(rows).toEqual(loadMigrations().map((m) => m.version));
    await again.close();
  });

  it('refuses a database whose schema is newer than this code, and leaves it untouched', async () => {
    const db = await freshDb();
    const first = store(db.url);
    await first.open();
    await first.close();
    await sql(db.url, "INSERT INTO agentd.schema_migrations (version, name) VALUES (99, 'from_the_future')");
    const s = store(db.url);
    await expect(s.open()).rejects.toThrow(new RegExp(`schema version 99, newer than this agentd knows \\(${latestSchemaVersion()}\\)`));
    expect(s.isOpen()).toBe(false);
    const rows = (await sql(db.url, 'SELECT version FROM agentd.schema_migrations ORDER BY version')).rows.map((r) => r.version);
    expect(rows).toEqual([...loadMigrations().map((m) => m.version), 99]);
  });

  it('a lock release that fails is reported to onSwallowed, and its session is dropped, not reused', async () => {
    const db = await freshDb();
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const client = await pool.connect();
      const query = client.query.bind(client) as (text: string, values?: unknown[]) => Promise<unknown>;
      // The unlock fails as it would on a connection reset between the migration and the release.
      (client as unknown as { query: typeof query }).query = (text, values) =>
        text.includes('pg_advisory_unlock') ? Promise.reject(new Error('connection reset')) : query(text, values);
      const released: boolean[] = [];
      const release = client.release.bind(client);
      (client as unknown as { release: (b?: boolean) => void }).release = (b?: boolean) => {
        released.push(b === true);
        release(b);
      };
      const fakePool = { connect: async () => client } as unknown as pg.Pool;
      const seen: Array<{ site: string; err: string }> = [];
      const r = await migrate(
        fakePool,
        () => {},
        (site, err) => seen.push({ site, err: String(err) }),
      );
      expect(r.version).toBe(latestSchemaVersion());
      expect(seen).toEqual([{ site: 'store.pg_migrate.unlock', err: 'Error: connection reset' }]);
      expect(released).toEqual([true]); // destroyed: closing it releases the advisory lock
    } finally {
      await pool.end();
    }
  });

  it('with migrate: false, refuses a database that is not migrated yet and says how to fix it', async () => {
    const db = await freshDb();
    await expect(store(db.url, { migrate: false }).open()).rejects.toThrow(/schema is at version 0.*agentd migrate/);
    expect((await sql(db.url, "SELECT to_regclass('agentd.records') AS t")).rows[0].t).toBeNull();
  });
});

describe('PostgreSQL event cursors across processes', () => {
  it('a reader following "after cursor" never skips an event committed later by another writer', async () => {
    const db = await freshDb();
    const [w1, w2, reader] = [store(db.url), store(db.url), store(db.url)];
    await w1.open();
    await Promise.all([w2.open(), reader.open()]);
    const total = 2 * 40 * 3;
    const write = async (w: PostgresStore, tag: string) => {
      for (let i = 0; i < 40; i++) {
        await w.appendEvents(Array.from({ length: 3 }, (_, j) => ({ event_id: `${tag}-${i}-${j}`, event_type: 'x', timestamp: new Date().toISOString() })));
      }
    };
    const seen: StoredEvent[] = [];
    let after: string | null = null;
    let writing = true;
    const follow = (async () => {
      while (writing || seen.length < total) {
        const page = await reader.readEvents({ after, limit: 50 });
        seen.push(...page.events);
        if (page.events.length) after = page.events[page.events.length - 1].cursor;
        else await new Promise((r) => setTimeout(r, 2)); // part of the scenario: a reader tailing the log while they write
      }
    })();
    await Promise.all([write(w1, 'a'), write(w2, 'b')]);
    writing = false;
    await follow;
    const cs = seen.map((e) => Number(e.cursor));
    expect(seen).toHaveLength(total);
    expect(new Set(seen.map((e) => e.event_id)).size).toBe(total);
    // no gaps: the cursors the reader saw are exactly 1..total, in order
    expect(cs).toEqual(Array.from({ length: total }, (_, i) => i + 1));
  });
});

describe('PostgreSQL failures', () => {
  it('open() waits for a database that does not accept connections yet, then migrates', async () => {
    const db = await freshDb();
    // A port where nothing listens yet; a proxy to the real server appears there after 700 ms.
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()));
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const target = new URL(db.url);
    const sockets = new Set<net.Socket>();
    const proxy = net.createServer((client) => {
      const upstream = net.connect(Number(target.port || 5432), target.hostname);
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on('error', () => {});
      }
      client.pipe(upstream).pipe(client);
    });
    const logs: string[] = [];
    const url = new URL(db.url);
    url.port = String(port);
    const s = store(url.toString(), { log: (_l, m) => logs.push(m), openWaitMs: 10_000 });
    const timer = setTimeout(() => proxy.listen(port, '127.0.0.1'), 700);
    try {
      const t0 = Date.now();
      await s.open();
      expect(Date.now() - t0).toBeGreaterThanOrEqual(600);
      expect(logs[0]).toMatch(/waiting for PostgreSQL at 127\.0\.0\.1:\d+\/agentd_test_\w+: .*ECONNREFUSED/);
      expect(logs.some((l) => l.includes('applied PostgreSQL migration 1'))).toBe(true);
      await s.createRecord('runs', 'r', 1);
      await s.close();
    } finally {
      clearTimeout(timer);
      for (const sock of sockets) sock.destroy();
      await new Promise<void>((r) => proxy.close(() => r()));
    }
    // Without the wait, a refused connection fails open() with where and why.
    const t1 = Date.now();
    await expect(store(url.toString(), { openWaitMs: 0 }).open()).rejects.toThrow(
      /cannot open the PostgreSQL store at 127\.0\.0\.1:\d+\/agentd_test_\w+: .*ECONNREFUSED/,
    );
    expect(Date.now() - t1).toBeLessThan(2000);
  });

  it('retries reads and writes after its connections are terminated (admin shutdown, failover) and stays healthy', async () => {
    const db = await freshDb();
    const s = store(db.url, { applicationName: 'agentd-kill-test' });
    await s.open();
    await s.createRecord('runs', 'r', { n: 1 });
    // Warm the pool so every connection is one to kill.
    await Promise.all(Array.from({ length: 3 }, () => s.getRecord('runs', 'r')));
    const killed = await sql(db.url, "SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = 'agentd-kill-test'");
    expect(killed.rows[0].n).toBeGreaterThan(0);
    expect((await s.getRecord('runs', 'r'))?.value).toEqual({ n: 1 });
    expect((await s.updateRecord('runs', 'r', { n: 2 }, 1)).version).toBe(2);
    expect((await s.appendEvents([{ event_id: 'e', event_type: 'x', timestamp: '2026-01-01T00:00:00Z' }]))[0].cursor).toBe('0000000000000001');
    expect((await s.ping()).ok).toBe(true);
    expect(s.healthStatus()).toEqual({ ok: true });
  });

  it('applies statement_timeout (store.statement_timeout_ms) and the idle-in-transaction bound to every connection', async () => {
    const db = await freshDb();
    const s = store(db.url, { statementTimeoutMs: 200 });
    await s.open();
    const settings = await s.queries.query<{ st: string; it: string }>(
      { text: "SELECT current_setting('statement_timeout') AS st, current_setting('idle_in_transaction_session_timeout') AS it" },
      true,
    );
    expect(settings.rows[0]).toEqual({ st: '200ms', it: '1min' });
    await expect(s.queries.query({ text: 'SELECT pg_sleep(2)' }, true)).rejects.toMatchObject({ code: '57014' });
    expect((await s.ping()).ok).toBe(true);
  });

  it('a statement whose backend is terminated mid-flight: a read is sent again, a write is not (it may have committed)', async () => {
    const db = await freshDb();
    const s = store(db.url, { applicationName: 'agentd-midflight' });
    await s.open();
    const killSoon = () =>
      waitFor(
        async () =>
          (
            await sql(
              db.url,
              "SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = 'agentd-midflight' AND query LIKE '%pg_sleep(0.5)%' AND state = 'active'",
            )
          ).rows[0].n > 0,
        { what: 'the statement in flight (to terminate its backend)', intervalMs: 20 },
      );
    const read = s.queries.query<{ ok: number }>({ text: 'SELECT 1 AS ok, pg_sleep(0.5)' }, true);
    await killSoon();
    expect((await read).rows[0].ok).toBe(1); // sent again on a new connection
    const write = s.queries.query({ text: "SELECT pg_sleep(0.5), 'write'" }, false);
    const [, err] = await Promise.all([
      killSoon(),
      write.then(
        () => null,
        (e: unknown) => e,
      ),
    ]);
    expect(err).toBeInstanceOf(StoreError);
    expect((err as StoreError).code).toBe('unavailable');
    expect((err as StoreError).message).toMatch(/may or may not have been applied/);
  });

  it('with its database gone: health turns false with the reason, operations fail fast, nothing crashes; back when it returns', async () => {
    const db = await freshDb();
    const s = store(db.url, { connectTimeoutMs: 1000 });
    await s.open();
    await s.createRecord('runs', 'r', 1);
    expect(s.healthStatus().ok).toBe(true);
    await db.drop(); // WITH (FORCE): the pool's connections are terminated too
    const h = await s.ping(1500);
    expect(h.ok).toBe(false);
    expect(h.error).toMatch(/does not exist|terminat/);
    expect(h.error).not.toContain('postgres://');
    const started = Date.now();
    expect(await storeErrorCode(s.getRecord('runs', 'r'))).toBe('unavailable');
    expect(Date.now() - started).toBeLessThan(6000); // bounded by the retry window
    expect(s.healthStatus().ok).toBe(false);
    // The database comes back (recreated empty here): the probe notices.
    await sql(db.url.replace(/\/[^/]+$/, '/postgres'), `CREATE DATABASE ${db.name}`);
    (db as { drop: () => Promise<void> }).drop = async () => {
      await sql(db.url.replace(/\/[^/]+$/, '/postgres'), `DROP DATABASE IF EXISTS ${db.name} WITH (FORCE)`);
    };
    expect((await s.ping(3000)).ok).toBe(true);
    expect(s.healthStatus()).toEqual({ ok: true });
  });
});
