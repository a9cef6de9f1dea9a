// PostgreSQL Store (issue 11): the same contract as the memory and LevelDB adapters
// (test/store/store.contract.ts runs against all three), on node-postgres with a Pool.
//
// Schema: src/store/migrations/*.sql, applied at open() under an advisory lock (pg-migrate.ts).
//   agentd.records    (kind, id) -> version, seq, value (JSON text), ix (the index values)
//   agentd.record_ix  (kind, name, value, seq) -> id: lists and counts by index, no bodies read
//   agentd.events     cursor -> body (JSON text without the cursor) + the index columns
//   agentd.counters   'event_cursor': the last cursor ever assigned (never reused)
//
// Writes: a group commit like LevelStore's. `commit` and `appendEvents` calls queue in call order;
// a round (one at a time per process, started on a setImmediate) takes every queued job (bounded),
// calls the commits' function forms, and sends them all in ONE statement, agentd.write_round(...):
// one round trip, one transaction, one WAL flush for everything a turn of the event loop wrote
// (a run's commit and its events typically share one). Inside, agentd.commit_batch runs each
// commit in its own subtransaction: a failed check (conflict, stale_version, not_found) undoes
// that commit alone. CAS is `SELECT ... FOR UPDATE` then a version compare inside that statement,
// so a concurrent writer in another process waits on the row lock and then sees the new version
// (READ COMMITTED re-reads locked rows). The events are one INSERT ... SELECT FROM unnest(...).
//
// Event cursors across concurrent writers (several processes on one database): a reader that
// follows "events after cursor X" must never miss an event committed LATER with a SMALLER cursor.
// A plain sequence allows exactly that (T1 takes 5, T2 takes 6, T2 commits, a reader sees 6 and
// moves past 5, then T1 commits 5). So cursors do not come from a sequence: the appending
// statement increments the single row agentd.counters['event_cursor'] and uses the range it got.
// That UPDATE row-locks the counter until the appending transaction commits, so the next
// appender (any process) can only take its range after the previous one is committed and
// visible: cursors become visible in increasing order, and "after X" never skips. The price is
// that appends are serialised across processes for the length of one tiny autocommit statement;
// group commit amortises it (one lock hold per round, whatever the number of events).
//
// Failures: transient PostgreSQL errors (connection loss class 08, serialization_failure 40001,
// deadlock 40P01, admin/crash shutdown 57P01-57P03, too_many_connections 53300, a failover's
// refused connections) are retried with backoff for up to RETRY_WINDOW_MS: reads always; writes
// only when the transaction certainly did not commit (the connection could not be taken, or the
// statement failed with a serialization failure or deadlock). A write whose connection broke or
// whose backend was terminated while it was in flight is not retried (it may have committed just
// before): the caller gets StoreError 'unavailable' saying so. Pool 'error' events (an
// idle connection dropped by the server) are handled and only mark the store unhealthy, which
// `/ready` reports; they never crash the process.
import pg from 'pg';
import { migrate } from './pg-migrate.js';
import { PgChanges, type StoreChanges } from './changes.js';
import { describeStoreUrl } from './pg-url.js';
import {
  EVENT_INDEX_FIELDS,
  StoreError,
  decodeCursor,
  encodeCursor,
  type CommitOps,
  type EventIndexField,
  type EventInput,
  type EventPage,
  type EventQuery,
  type EventTextPage,
  type ListQuery,
  type Page,
  type RecordIndexes,
  type RecordKind,
  type Store,
  type StoredEvent,
  type StoreHealth,
  type Versioned,
  type WriteOp,
} from './store.js';

export interface PostgresStoreOptions {
  /** Connection string (postgres://user:password@host:port/db). Never logged. */
  url: string;
  /** Connections in the pool (default 10). */
  poolSize?: number;
  /** Server-side statement_timeout of every connection, ms (default 30000; 0 = none). */
  statementTimeoutMs?: number;
  /** How long taking a new connection may last, ms (default 5000). */
  connectTimeoutMs?: number;
  /** Apply the migrations at open() (default true). False: refuse a schema that is not current. */
  migrate?: boolean;
  /** One line per notable event (migration applied, database lost / back). Never gets the URL. */
  log?: (level: 'info' | 'warn', msg: string) => void;
  /** How long open() waits for a database that does not accept connections yet, ms (default 30000). */
  openWaitMs?: number;
  /** application_name of the connections (default 'agentd'). */
  applicationName?: string;
  /** LISTEN/NOTIFY change feed on one more connection (default true): see src/store/changes.ts. */
  changes?: boolean;
}

const MAX_LIMIT = 1000;
/**
 * A round of the group commit takes at most this many commits / ops (bounds one statement). Each
 * commit is a subtransaction with its own xid; past 64 in one transaction PostgreSQL's subxid
 * cache overflows and every snapshot gets slower, so a round stays under it.
 */
const ROUND_MAX_COMMITS = 60;
const ROUND_MAX_OPS = 5000;
/** Writes (commits + appends) waiting for a round at most; more are refused ('unavailable'). */
const MAX_QUEUED_JOBS = 20_000;
/** A round of appends takes at most this many events. */
const ROUND_MAX_EVENTS = 5000;
/** Retention deletes in chunks of this many events, one statement each. */
const DELETE_CHUNK = 5000;
/** Transient errors are retried with backoff (50 ms doubling to 1 s) for at most this long. */
const RETRY_WINDOW_MS = 5000;
/** open() waits at most this long for a database that refuses connections (starting, failing over). */
const OPEN_WAIT_MS = 30_000;
/** The background health probe runs this often (timer unref'd). */
const PROBE_INTERVAL_MS = 2000;
const MAX_BIGINT = '9223372036854775807';

const clampLimit = (limit: number | undefined, dflt: number): number =>
  limit === undefined || !Number.isFinite(limit) ? dflt : Math.min(MAX_LIMIT, Math.max(1, Math.floor(limit)));

// PostgreSQL text cannot hold NUL: ids and index values are stored with `\` and NUL escaped
// (`\\`, `\0`), a bijection, so distinct strings stay distinct and ids read back exactly.
const NEEDS_ESC = /[\\\u0000]/;
export const escText = (s: string): string => (NEEDS_ESC.test(s) ? s.replace(/[\\\u0000]/g, (c) => (c === '\\' ? '\\\\' : '\\0')) : s);
export const unescText = (s: string): string => (s.includes('\\') ? s.replace(/\\([\\0])/g, (_m, c: string) => (c === '0' ? '\u0000' : '\\')) : s);

/** Index values as the JSON object text the commit function takes: strings only, escaped. */
const indexJson = (ix: RecordIndexes | undefined): string | null => {
  if (!ix) return null;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(ix)) if (typeof v === 'string') out[escText(k)] = escText(v);
  return JSON.stringify(out);
};

const ERROR_CODES: Record<string, 'conflict' | 'stale_version' | 'not_found'> = { AG409: 'conflict', AG412: 'stale_version', AG404: 'not_found' };

/** SQLSTATEs after which the same statement may succeed when sent again. */
const isTransientCode = (code: string | undefined): boolean =>
  !!code && (code.startsWith('08') || ['40001', '40P01', '57P01', '57P02', '57P03', '53300', '53400'].includes(code));

/** Errors of the connection itself (no SQLSTATE): refused, reset, timed out, terminated. */
const isConnectionError = (e: unknown): boolean => {
  if (e instanceof pg.DatabaseError) return isTransientCode(e.code);
  const err = e as { code?: string; message?: string };
  return (
    (typeof err?.code === 'string' && /^(ECONN|EPIPE|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH)/.test(err.code)) ||
    /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Connection ended/i.test(
      String(err?.message ?? ''),
    )
  );
};

/** A message about a failure that carries no credentials (pg messages never hold the URL; be sure). */
const describe = (e: unknown): string => {
  const err = e as { code?: string; message?: string };
  const msg = String(err?.message ?? e).replace(/postgres(ql)?:\/\/\S*/gi, 'postgres://…');
  return err?.code ? `${msg} (${err.code})` : msg;
};

/** SQLSTATEs saying the database itself cannot be used: gone, login refused, shutting down, full. */
const isUnavailableCode = (code: string | undefined): boolean =>
  !!code && (isTransientCode(code) || code === '3D000' || code.startsWith('28') || code.startsWith('57P') || code.startsWith('53'));

/**
 * The error a caller sees once retrying is over: StoreError 'unavailable' (HTTP 503) when the
 * database cannot be used, with the original as `cause`; any other error unchanged.
 * `inFlightWrite`: the connection broke while a write was in flight, so it may have committed.
 */
const unavailable = (e: unknown, inFlightWrite: boolean): unknown => {
  const code = e instanceof pg.DatabaseError ? e.code : undefined;
  if (!(code ? isUnavailableCode(code) : isConnectionError(e))) return e;
  const err = new StoreError(
    'unavailable',
    inFlightWrite
      ? `the connection to PostgreSQL was lost while a write was in flight; it may or may not have been applied: ${describe(e)}`
      : `PostgreSQL is unreachable: ${describe(e)}`,
  );
  (err as Error & { cause?: unknown }).cause = e;
  return err;
};

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

interface EncodedOp {
  op: WriteOp;
  id: string;
  json: string | null;
  expected: number | null;
  ix: string | null;
}

interface PendingCommit {
  input: CommitOps;
  resolve: (r: Array<Versioned<unknown> | null>) => void;
  reject: (e: unknown) => void;
}

interface EncodedEvent {
  tsMs: number | null;
  fields: Array<string | null>; // EVENT_INDEX_FIELDS order, escaped
  body: string;
}

interface PendingAppend {
  events: EncodedEvent[];
  resolve: (cursors: number) => void; // base: cursors are base+1..base+n
  reject: (e: unknown) => void;
}

type Job = { kind: 'commit'; p: PendingCommit } | { kind: 'append'; p: PendingAppend };
type Taken = { kind: 'commit'; p: PendingCommit; ops: EncodedOp[] } | { kind: 'append'; p: PendingAppend };

type QueryConfig = pg.QueryConfig<unknown[]>;

/** JSON text of an event body with its cursor added last (the stored body has none). */
const withCursor = (body: string, cursor: string): string => (body.length <= 2 ? `{"cursor":"${cursor}"}` : `${body.slice(0, -1)},"cursor":"${cursor}"}`);

const cursorText = (c: string | number): string => String(c).padStart(16, '0');

export class PostgresStore implements Store {
  readonly adapter = 'postgres' as const;
  private state: 'new' | 'opening' | 'open' | 'closing' | 'closed' = 'new';
  private poolRef: pg.Pool | null = null;
  private readonly inflight = new Set<Promise<unknown>>();
  private readonly jobs: Job[] = [];
  private writing: Promise<void> | null = null;
  private health: StoreHealth = { ok: false, error: 'not open' };
  private probeTimer: NodeJS.Timeout | null = null;
  private lastOkAt = 0;
  private opening: Promise<void> | null = null;
  /** The change feed several instances share (LISTEN/NOTIFY, src/store/changes.ts); set by open(). */
  changes?: StoreChanges;

  constructor(private readonly opts: PostgresStoreOptions) {}

  /** The pool (for LISTEN/NOTIFY and the like); throws 'closed' when the store is not open. */
  get pool(): pg.Pool {
    if (!this.poolRef || (this.state !== 'open' && this.state !== 'opening')) throw new StoreError('closed', 'store is not open');
    return this.poolRef;
  }

  async open(): Promise<void> {
    if (this.state === 'open') return;
    if (this.opening) return this.opening;
    if (this.state !== 'new') throw new StoreError('closed', 'store was closed');
    this.state = 'opening';
    this.opening = (async () => {
      const pool = new pg.Pool({
        connectionString: this.opts.url,
        max: this.opts.poolSize ?? 10,
        connectionTimeoutMillis: this.opts.connectTimeoutMs ?? 5000,
        idleTimeoutMillis: 30_000,
        application_name: this.opts.applicationName ?? 'agentd',
        ...(this.opts.statementTimeoutMs !== 0 ? { statement_timeout: this.opts.statementTimeoutMs ?? 30_000 } : {}),
        // Without it a transaction left open by a bug would hold row locks forever.
        idle_in_transaction_session_timeout: 60_000,
      });
      // An idle connection the server closed (restart, failover, pg_terminate_backend) is an
      // 'error' event on the pool: unhandled it would crash the process. The pool drops that
      // client by itself; one dropped connection says little (the next one may work), so the
      // database is asked now instead of /ready flipping on it.
      pool.on('error', () => void this.probe(true));
      this.poolRef = pool;
      try {
        if (this.opts.migrate === false) {
          const { latestSchemaVersion, schemaVersion, SchemaTooNewError } = await import('./pg-migrate.js');
          const client = await pool.connect();
          try {
            const v = await schemaVersion(client);
            if (v > latestSchemaVersion()) throw new SchemaTooNewError(v, latestSchemaVersion());
            if (v < latestSchemaVersion())
              throw new Error(`the PostgreSQL schema is at version ${v}, this agentd needs ${latestSchemaVersion()}: run \`agentd migrate\``);
          } finally {
            client.release();
          }
        } else {
          // A database that is not up yet (a host starting together with it, a failover in
          // progress) is waited for, within OPEN_WAIT_MS; anything else fails start-up at once.
          const started = Date.now();
          for (let attempt = 0; ; attempt++) {
            try {
              await migrate(pool, (msg) => this.opts.log?.('info', msg));
              break;
            } catch (e) {
              const delay = Math.min(2000, 100 * 2 ** attempt);
              if (!isConnectionError(e) || Date.now() - started + delay > (this.opts.openWaitMs ?? OPEN_WAIT_MS)) throw e;
              if (attempt === 0) this.opts.log?.('warn', `agentd: waiting for PostgreSQL at ${describeStoreUrl(this.opts.url)}: ${describe(e)}`);
              await sleep(delay);
            }
          }
        }
      } catch (e) {
        this.poolRef = null;
        this.state = 'closed';
        await pool.end().catch(() => {});
        if (!(e instanceof pg.DatabaseError) && !isConnectionError(e)) throw e;
        throw new Error(`cannot open the PostgreSQL store at ${describeStoreUrl(this.opts.url)}: ${describe(e)}`, { cause: e });
      }
      if (this.opts.changes !== false) {
        const feed = new PgChanges({
          url: this.opts.url,
          log: (level, msg, extra) => this.opts.log?.(level === 'info' ? 'info' : 'warn', `${msg}${extra?.err ? `: ${String(extra.err)}` : ''}`),
        });
        await feed.start();
        this.changes = feed;
      }
      this.health = { ok: true };
      this.state = 'open';
      this.probeTimer = setInterval(() => void this.probe(), PROBE_INTERVAL_MS);
      this.probeTimer.unref();
    })();
    try {
      await this.opening;
    } finally {
      this.opening = null;
    }
  }

  async close(): Promise<void> {
    if (this.state === 'closed' || this.state === 'new') {
      this.state = 'closed';
      return;
    }
    if (this.state === 'closing') {
      while (this.state === 'closing') await sleep(5);
      return;
    }
    if (this.opening) await this.opening.catch(() => {});
    if (this.state !== 'open') return;
    this.state = 'closing';
    if (this.probeTimer) clearInterval(this.probeTimer);
    this.probeTimer = null;
    // Everything accepted before close finishes (queued commits and appends included).
    while (this.inflight.size > 0 || this.writing) {
      await Promise.allSettled([...this.inflight, this.writing]);
    }
    await this.changes?.close();
    const pool = this.poolRef;
    this.poolRef = null;
    this.state = 'closed';
    this.health = { ok: false, error: 'closed' };
    await pool?.end().catch(() => {});
  }

  isOpen(): boolean {
    return this.state === 'open';
  }

  /** Whether the database answered the last query / probe. Synchronous: /ready reads it. */
  healthStatus(): StoreHealth {
    return this.health;
  }

  /** Asks the database now (SELECT 1, bounded by `timeoutMs`) and updates healthStatus(). */
  async ping(timeoutMs = 2000): Promise<StoreHealth> {
    const pool = this.poolRef;
    if (!pool || this.state !== 'open') return { ok: false, error: 'store is not open' };
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        pool.query('SELECT 1'),
        new Promise((_r, reject) => {
          timer = setTimeout(() => reject(new Error(`no answer from PostgreSQL within ${timeoutMs} ms`)), timeoutMs);
        }),
      ]);
      this.markSuccess();
    } catch (e) {
      this.markFailure(e);
    } finally {
      clearTimeout(timer);
    }
    return this.health;
  }

  /** The background probe: skipped while queries keep succeeding (they prove the same, for free). */
  private async probe(force = false): Promise<void> {
    if (!force && this.health.ok && Date.now() - this.lastOkAt < PROBE_INTERVAL_MS) return;
    await this.ping(Math.min(PROBE_INTERVAL_MS, 1500)).catch(() => {});
  }

  private markSuccess(): void {
    this.lastOkAt = Date.now();
    if (!this.health.ok && this.state === 'open') {
      this.opts.log?.('info', 'agentd: PostgreSQL is reachable again');
      this.health = { ok: true };
    }
  }

  private markFailure(e: unknown): void {
    const error = describe(e);
    if (this.health.ok) this.opts.log?.('warn', `agentd: PostgreSQL is unreachable: ${error}`);
    this.health = { ok: false, error };
  }

  /** Runs an operation while the store is open; close() waits for it. */
  private run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.state !== 'open') return Promise.reject(new StoreError('closed', 'store is not open'));
    const p = fn();
    this.inflight.add(p);
    const done = () => this.inflight.delete(p);
    p.then(done, done);
    return p;
  }

  /**
   * One statement on a pooled connection, retried on transient errors within RETRY_WINDOW_MS.
   * `idempotent`: also retried when the connection broke while the statement was in flight
   * (reads, idempotent deletes); otherwise only when it certainly did not take effect.
   */
  async query<R extends pg.QueryResultRow = pg.QueryResultRow>(q: QueryConfig, idempotent: boolean): Promise<pg.QueryResult<R>> {
    const started = Date.now();
    for (let attempt = 0; ; attempt++) {
      const pool = this.poolRef;
      if (!pool) throw new StoreError('closed', 'store is not open');
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (e) {
        this.markFailure(e);
        if (isConnectionError(e) && (await this.backoff(started, attempt))) continue;
        throw unavailable(e, false);
      }
      // A connection that breaks while we hold it emits 'error'; unheard, that would crash us.
      const onError = (e: Error) => this.markFailure(e);
      client.on('error', onError);
      try {
        const r = await client.query<R>(q);
        client.off('error', onError);
        client.release();
        this.markSuccess();
        return r;
      } catch (e) {
        client.off('error', onError);
        const code = e instanceof pg.DatabaseError ? e.code : undefined;
        const broken = !code || isTransientCode(code) || code.startsWith('57');
        client.release(broken ? (e as Error) : undefined);
        if (isConnectionError(e)) this.markFailure(e);
        // A write is sent again only when it certainly rolled back: a serialization failure or a
        // deadlock aborts the statement before its commit. A terminated backend (57P01) or a
        // broken connection may strike after the commit, before the answer arrives: not retried.
        const certainlyRolledBack = code === '40001' || code === '40P01';
        const retry = idempotent ? isConnectionError(e) : certainlyRolledBack;
        if (retry && (await this.backoff(started, attempt))) continue;
        throw unavailable(e, !idempotent && !certainlyRolledBack);
      }
    }
  }

  private isUsable(): boolean {
    return (this.state as string) !== 'closed' && !!this.poolRef;
  }

  /** Waits before the next attempt; false when the retry window is spent or the store closed. */
  private async backoff(started: number, attempt: number): Promise<boolean> {
    const delay = Math.min(1000, 50 * 2 ** attempt) * (0.75 + Math.random() * 0.5);
    if (Date.now() + delay - started > RETRY_WINDOW_MS || this.state === 'closed' || !this.poolRef) return false;
    await sleep(delay);
    return this.isUsable();
  }

  // ---------------------------------------------------------------------------------------------
  // Records

  private view<T>(id: string, version: number, seq: string | number, json: string): Versioned<T> {
    return { id, version, seq: Number(seq), value: JSON.parse(json) as T };
  }

  getRecord<T>(kind: RecordKind, id: string): Promise<Versioned<T> | null> {
    return this.run(async () => {
      const r = await this.query<{ version: number; seq: string; value: string }>(
        { name: 'agentd_get', text: 'SELECT version, seq, value FROM agentd.records WHERE kind = $1 AND id = $2', values: [kind, escText(id)] },
        true,
      );
      const row = r.rows[0];
      return row ? this.view<T>(id, row.version, row.seq, row.value) : null;
    });
  }

  getRecords<T>(kind: RecordKind, ids: string[]): Promise<Array<Versioned<T> | null>> {
    return this.run(async () => {
      if (ids.length === 0) return [];
      const r = await this.query<{ id: string; version: number; seq: string; value: string }>(
        {
          name: 'agentd_get_many',
          text: 'SELECT id, version, seq, value FROM agentd.records WHERE kind = $1 AND id = ANY($2::text[])',
          values: [kind, ids.map(escText)],
        },
        true,
      );
      const byId = new Map(r.rows.map((row) => [row.id, row]));
      return ids.map((id) => {
        const row = byId.get(escText(id));
        return row ? this.view<T>(id, row.version, row.seq, row.value) : null;
      });
    });
  }

  async createRecord<T>(kind: RecordKind, id: string, value: T, indexes?: RecordIndexes): Promise<Versioned<T>> {
    const [r] = await this.commit([{ op: 'create', kind, id, value, indexes }]);
    return r as Versioned<T>;
  }

  async updateRecord<T>(kind: RecordKind, id: string, value: T, expectedVersion: number, indexes?: RecordIndexes): Promise<Versioned<T>> {
    const [r] = await this.commit([{ op: 'update', kind, id, value, expectedVersion, indexes }]);
    return r as Versioned<T>;
  }

  async deleteRecord(kind: RecordKind, id: string, expectedVersion?: number): Promise<void> {
    await this.commit([{ op: 'delete', kind, id, expectedVersion }]);
  }

  listRecords<T>(kind: RecordKind, query: ListQuery = {}): Promise<Page<T>> {
    return this.run(async () => {
      const limit = clampLimit(query.limit, 100);
      const after = query.cursor ? String(decodeCursor(query.cursor)) : query.reverse ? MAX_BIGINT : '0';
      const rev = !!query.reverse;
      const cmp = rev ? '<' : '>';
      const order = rev ? 'DESC' : 'ASC';
      let q: QueryConfig;
      if (query.index) {
        q = {
          name: `agentd_list_ix_${rev ? 'r' : 'f'}`,
          text:
            `SELECT r.id, r.version, r.seq, r.value FROM agentd.record_ix x JOIN agentd.records r ON r.kind = x.kind AND r.id = x.id ` +
            `WHERE x.kind = $1 AND x.name = $2 AND x.value = $3 AND x.seq ${cmp} $4 ORDER BY x.seq ${order} LIMIT $5`,
          values: [kind, escText(query.index.name), escText(query.index.value), after, limit + 1],
        };
      } else {
        q = {
          name: `agentd_list_${rev ? 'r' : 'f'}`,
          text: `SELECT id, version, seq, value FROM agentd.records WHERE kind = $1 AND seq ${cmp} $2 ORDER BY seq ${order} LIMIT $3`,
          values: [kind, after, limit + 1],
        };
      }
      const r = await this.query<{ id: string; version: number; seq: string; value: string }>(q, true);
      const rows = r.rows.slice(0, limit);
      return {
        items: rows.map((row) => this.view<T>(unescText(row.id), row.version, row.seq, row.value)),
        next_cursor: r.rows.length > limit ? encodeCursor(Number(rows[rows.length - 1].seq)) : null,
      };
    });
  }

  countRecords(kind: RecordKind, index?: { name: string; value: string }): Promise<number> {
    return this.run(async () => {
      const r = await this.query<{ n: number }>(
        index
          ? {
              name: 'agentd_count_ix',
              text: 'SELECT count(*)::int AS n FROM agentd.record_ix WHERE kind = $1 AND name = $2 AND value = $3',
              values: [kind, escText(index.name), escText(index.value)],
            }
          : { name: 'agentd_count', text: 'SELECT count(*)::int AS n FROM agentd.records WHERE kind = $1', values: [kind] },
        true,
      );
      return r.rows[0].n;
    });
  }

  commit(input: CommitOps): Promise<Array<Versioned<unknown> | null>> {
    return this.run(
      () =>
        new Promise<Array<Versioned<unknown> | null>>((resolve, reject) => {
          this.enqueue({ kind: 'commit', p: { input, resolve, reject } });
        }),
    );
  }

  /** Appends in call order; see the header for why cursors come from a locked counter row. */
  appendEvents(events: EventInput[]): Promise<StoredEvent[]> {
    return this.run(async () => {
      if (events.length === 0) return [];
      const encoded: EncodedEvent[] = events.map((e) => {
        const body = JSON.stringify(e); // throws on a BigInt: fails this append only
        const t = typeof e.timestamp === 'string' ? Date.parse(e.timestamp) : NaN;
        return {
          tsMs: Number.isNaN(t) ? null : t,
          fields: EVENT_INDEX_FIELDS.map((f) => (typeof e[f] === 'string' ? escText(e[f] as string) : null)),
          body,
        };
      });
      const base = await new Promise<number>((resolve, reject) => {
        this.enqueue({ kind: 'append', p: { events: encoded, resolve, reject } });
      });
      return encoded.map((e, i) => ({ ...(JSON.parse(e.body) as EventInput), cursor: encodeCursor(base + i + 1) }));
    });
  }

  /**
   * Group commit of commits AND appends: jobs queue in call order; a round starts on a
   * setImmediate (as LevelStore's: everything issued in this turn of the event loop joins it),
   * takes the queued jobs (bounded) and writes them in ONE statement, agentd.write_round: one
   * round trip and one transaction (one WAL flush) for all of them. One round at a time per
   * process keeps commits and appends in call order.
   */
  private enqueue(job: Job): void {
    if (this.jobs.length >= MAX_QUEUED_JOBS) {
      // The database is not keeping up (or not answering): refuse instead of queueing without bound.
      job.p.reject(new StoreError('unavailable', `the PostgreSQL write queue is full (${MAX_QUEUED_JOBS} writes waiting)`));
      return;
    }
    this.jobs.push(job);
    if (this.writing) return;
    this.writing = (async () => {
      try {
        while (this.jobs.length > 0) {
          await new Promise<void>((r) => setImmediate(r));
          await this.writeRound();
        }
      } finally {
        this.writing = null;
      }
    })();
  }

  private encodeOps(ops: WriteOp[]): EncodedOp[] {
    return ops.map((op) => {
      if (op.op === 'delete') return { op, id: escText(op.id), json: null, expected: op.expectedVersion ?? null, ix: null };
      const json = JSON.stringify(op.value ?? null); // throws on a BigInt: fails this commit only
      return { op, id: escText(op.id), json, expected: op.op === 'update' ? op.expectedVersion : null, ix: indexJson(op.indexes) };
    });
  }

  /** Takes the queued jobs (in call order, bounded) and writes them in one statement. */
  private async writeRound(): Promise<void> {
    const taken: Taken[] = [];
    let nCommits = 0;
    let nOps = 0;
    let nEvents = 0;
    while (this.jobs.length > 0 && nCommits < ROUND_MAX_COMMITS && nOps < ROUND_MAX_OPS) {
      const job = this.jobs[0];
      if (job.kind === 'append') {
        if (nEvents > 0 && nEvents + job.p.events.length > ROUND_MAX_EVENTS) break;
        this.jobs.shift();
        taken.push(job);
        nEvents += job.p.events.length;
        continue;
      }
      this.jobs.shift();
      let ops: EncodedOp[];
      try {
        // The function form is called now, when the store takes the write (Store.commit).
        ops = this.encodeOps(typeof job.p.input === 'function' ? job.p.input() : job.p.input);
      } catch (e) {
        job.p.reject(e);
        continue;
      }
      if (ops.length === 0) {
        job.p.resolve([]);
        continue;
      }
      taken.push({ kind: 'commit', p: job.p, ops });
      nCommits++;
      nOps += ops.length;
    }
    if (taken.length === 0) return;
    try {
      await this.write(taken);
    } catch (e) {
      if (taken.length > 1 && e instanceof pg.DatabaseError && !isTransientCode(e.code)) {
        // The statement failed as a whole (so it wrote nothing): one job's problem (a value too
        // large for an index, say) must not fail the others, so each is tried alone, in order.
        for (const t of taken) await this.write([t]).catch((err: unknown) => t.p.reject(err));
      } else {
        for (const t of taken) t.p.reject(e);
      }
    }
  }

  private async write(taken: Taken[]): Promise<void> {
    const commitNo: number[] = [];
    const opName: string[] = [];
    const kinds: string[] = [];
    const ids: string[] = [];
    const values: Array<string | null> = [];
    const expected: Array<number | null> = [];
    const ix: Array<string | null> = [];
    const events: EncodedEvent[] = [];
    taken.forEach((t, c) => {
      if (t.kind === 'append') {
        events.push(...t.p.events);
        return;
      }
      for (const e of t.ops) {
        commitNo.push(c);
        opName.push(e.op.op);
        kinds.push(e.op.kind);
        ids.push(e.id);
        values.push(e.json);
        expected.push(e.expected);
        ix.push(e.ix);
      }
    });
    const col = (i: number) => events.map((e) => e.fields[i]);
    const r = await this.query<{ r_version: number | null; r_seq: string | null; r_err: string | null; r_msg: string | null }>(
      {
        name: 'agentd_write_round',
        text:
          'SELECT r_version, r_seq, r_err, r_msg FROM agentd.write_round($1::int[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int[], $7::jsonb[], ' +
          '$8::float8[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[])',
        values: [
          commitNo,
          opName,
          kinds,
          ids,
          values,
          expected,
          ix,
          events.map((e) => e.tsMs),
          col(0),
          col(1),
          col(2),
          col(3),
          col(4),
          events.map((e) => e.body),
        ],
      },
      false,
    );
    // Rows: one per op in order, then (when events were appended) one whose r_seq is the base.
    let base = events.length > 0 ? Number(r.rows[r.rows.length - 1].r_seq) : 0;
    let k = 0;
    for (const t of taken) {
      if (t.kind === 'append') {
        t.p.resolve(base);
        base += t.p.events.length;
        continue;
      }
      const rows = r.rows.slice(k, k + t.ops.length);
      k += t.ops.length;
      const failed = rows.find((row) => row.r_err);
      if (failed) {
        t.p.reject(new StoreError(ERROR_CODES[failed.r_err!] ?? 'conflict', failed.r_msg ?? failed.r_err!));
        continue;
      }
      t.p.resolve(t.ops.map((e, i) => (e.op.op === 'delete' ? null : this.view(e.op.id, rows[i].r_version!, rows[i].r_seq!, e.json!))));
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Events

  async readEvents(query: EventQuery = {}): Promise<EventPage> {
    const page = await this.readEventsJson(query);
    return { events: page.events.map((t) => JSON.parse(t) as StoredEvent), next_cursor: page.next_cursor };
  }

  /**
   * One statement per filter shape (a prepared statement each). A field with one value is an
   * equality the planner serves from that field's (value, cursor) index. When every filtered
   * field has several values, a generic plan of `= ANY(...) ORDER BY cursor LIMIT n` would walk
   * the whole log in cursor order; instead the first such field is walked per value (LATERAL, each
   * an index range of at most n) and the walks are merged by cursor.
   */
  readEventsJson(query: EventQuery = {}): Promise<EventTextPage> {
    return this.run(async () => {
      const limit = clampLimit(query.limit, 200);
      const after = query.after ? String(decodeCursor(query.after)) : '0';
      const values: unknown[] = [after, limit];
      const where: string[] = ['e.cursor > $1'];
      let shape = '';
      let walk: string | null = null;
      const f = query.filters ?? {};
      const lists = EVENT_INDEX_FIELDS.map((field: EventIndexField) => {
        const v = f[field];
        const list = typeof v === 'string' ? [v] : Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
        return [field, [...new Set(list)].map(escText)] as const;
      });
      const anySingle = lists.some(([, list]) => list.length === 1);
      for (const [field, list] of lists) {
        if (list.length === 0) {
          shape += '_';
        } else if (list.length === 1) {
          values.push(list[0]);
          where.push(`e.${field} = $${values.length}`);
          shape += '1';
        } else if (!anySingle && walk === null) {
          values.push(list);
          walk = `unnest($${values.length}::text[]) AS w(v) CROSS JOIN LATERAL (SELECT e.cursor, e.body FROM agentd.events e WHERE e.${field} = w.v AND `;
          shape += 'w';
        } else {
          values.push(list);
          where.push(`e.${field} = ANY($${values.length}::text[])`);
          shape += 'a';
        }
      }
      const text = walk
        ? `SELECT m.cursor, m.body FROM ${walk}${where.join(' AND ')} ORDER BY e.cursor LIMIT $2) m ORDER BY m.cursor LIMIT $2`
        : `SELECT e.cursor, e.body FROM agentd.events e WHERE ${where.join(' AND ')} ORDER BY e.cursor LIMIT $2`;
      const r = await this.query<{ cursor: string; body: string }>({ name: `agentd_ev_${shape}`, text, values }, true);
      const texts = r.rows.map((row) => withCursor(row.body, cursorText(row.cursor)));
      return { events: texts, next_cursor: texts.length === limit ? cursorText(r.rows[r.rows.length - 1].cursor) : null };
    });
  }

  getEvent(cursor: string): Promise<StoredEvent | null> {
    return this.run(async () => {
      let n: number;
      try {
        n = decodeCursor(cursor);
      } catch {
        return null;
      }
      const r = await this.query<{ body: string }>({ name: 'agentd_event', text: 'SELECT body FROM agentd.events WHERE cursor = $1', values: [n] }, true);
      return r.rows[0] ? (JSON.parse(withCursor(r.rows[0].body, encodeCursor(n))) as StoredEvent) : null;
    });
  }

  lastEventCursor(): Promise<string | null> {
    return this.run(async () => {
      const r = await this.query<{ c: string | null }>({ name: 'agentd_last_cursor', text: 'SELECT max(cursor) AS c FROM agentd.events' }, true);
      return r.rows[0].c === null ? null : cursorText(r.rows[0].c);
    });
  }

  /**
   * Retention, as the other adapters: walks from the oldest event and stops at the first one that
   * is not expired (an unparseable timestamp counts as expired). Deletes in chunks, so no one
   * statement runs long; each chunk is idempotent, so it is retried like a read.
   */
  deleteEventsBefore(isoTime: string): Promise<number> {
    return this.run(async () => {
      const cutoff = Date.parse(isoTime);
      if (Number.isNaN(cutoff)) throw new TypeError(`deleteEventsBefore: bad time '${isoTime}'`);
      const stop = await this.query<{ c: string | null }>(
        {
          name: 'agentd_retention_stop',
          text: 'SELECT min(cursor) AS c FROM (SELECT cursor FROM agentd.events WHERE ts_ms >= $1 ORDER BY cursor LIMIT 1) s',
          values: [cutoff],
        },
        true,
      );
      const before = stop.rows[0].c ?? MAX_BIGINT;
      let total = 0;
      for (;;) {
        const r = await this.query(
          {
            name: 'agentd_retention_delete',
            text: 'DELETE FROM agentd.events WHERE cursor IN (SELECT cursor FROM agentd.events WHERE cursor < $1 ORDER BY cursor LIMIT $2)',
            values: [before, DELETE_CHUNK],
          },
          true,
        );
        total += r.rowCount ?? 0;
        if ((r.rowCount ?? 0) < DELETE_CHUNK) return total;
      }
    });
  }
}
