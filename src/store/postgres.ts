// PostgreSQL Store: the same contract as the memory and LevelDB adapters
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
// (a run's commit and its events typically share one; a commitWithEvents' events ride in its commit
// and are stored only if it applies). Inside, agentd.commit_batch runs each
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
// Change-feed notifications (LISTEN/NOTIFY, src/store/changes.ts: the cluster link's event
// ranges, cancels, task edits, inbox writes) are not sent as statements of their own: they queue
// in the group commit and the next round's statement sends them (pg_notify) inside its
// transaction, so PostgreSQL delivers them when that round commits. At c=32 a round is nearly
// always under way or about to start: a notification costs no transaction, round trip or WAL
// flush; alone, it makes a round of its own (one statement, as before).
//
// Failures: transient PostgreSQL errors (connection loss class 08, serialization_failure 40001,
// deadlock 40P01, admin/crash shutdown 57P01-57P03, too_many_connections 53300, a failover's
// refused connections) are retried with backoff (pg-query.ts) for a few seconds: reads always; writes
// only when the transaction certainly did not commit (the connection could not be taken, or the
// statement failed with a serialization failure or deadlock). A write whose connection broke or
// whose backend was terminated while it was in flight is not retried (it may have committed just
// before): the caller gets StoreError 'unavailable' saying so. Pool 'error' events (an
// idle connection dropped by the server) are handled and only mark the store unhealthy, which
// `/ready` reports; they never crash the process.
import pg from 'pg';
import { migrate } from './pg-migrate.js';
import { PgChanges } from './changes.js';
import type { StoreChanges } from './change-feed.js';
import { PgQueueClaims } from './pg-claim.js';
import { describe, isConnectionError } from './pg-errors.js';
import { PgQueries } from './pg-query.js';
import { PgEventReader } from './pg-events.js';
import { PgHealth } from './pg-health.js';
import { PgRecordReader } from './pg-reads.js';
import { describeStoreUrl } from './pg-url.js';
import { PgWriter } from './pg-writer.js';
import {
  StoreError,
  dropTo,
  type CommitEvents,
  type CommitOps,
  type EventInput,
  type EventPage,
  type EventQuery,
  type EventTextPage,
  type ListQuery,
  type OnSwallowed,
  type Page,
  type RecordKind,
  type Store,
  type StoreCapabilities,
  type StoredEvent,
  type StoreHealth,
  type Versioned,
} from './store.js';
import { RecordWrites } from './record-writes.js';

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
  /** Errors caught and dropped (closing the pool, a ROLLBACK, the change feed's connections): see OnSwallowed. */
  onSwallowed?: OnSwallowed;
}

/** open() waits at most this long for a database that refuses connections (starting, failing over). */
const OPEN_WAIT_MS = 30_000;
/** The background health probe runs this often (timer unref'd). */
const PROBE_INTERVAL_MS = 2000;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export class PostgresStore extends RecordWrites implements Store {
  readonly adapter = 'postgres' as const;
  private state: 'new' | 'opening' | 'open' | 'closing' | 'closed' = 'new';
  private poolRef: pg.Pool | null = null;
  private readonly inflight = new Set<Promise<unknown>>();
  private readonly health: PgHealth;
  /** Every statement goes through it: pooled connection, health report, retries (pg-query.ts). */
  readonly queries: PgQueries;
  private readonly writer: PgWriter;
  private readonly events: PgEventReader;
  private readonly reads: PgRecordReader;
  /** Shared by instances; claims of queued runs skip rows another claimer holds (pg-claim.ts). */
  readonly capabilities: StoreCapabilities;
  private probeTimer: NodeJS.Timeout | null = null;
  private opening: Promise<void> | null = null;
  /** The change feed several instances share (LISTEN/NOTIFY, src/store/changes.ts); set by open(). */
  changes?: StoreChanges;

  constructor(private readonly opts: PostgresStoreOptions) {
    super();
    this.health = new PgHealth(opts.log);
    this.queries = new PgQueries({
      pool: () => this.poolRef,
      isOpen: () => this.state === 'open',
      isClosed: () => this.state === 'closed',
      health: this.health,
    });
    this.writer = new PgWriter(this.queries);
    this.events = new PgEventReader(this.queries);
    this.reads = new PgRecordReader(this.queries);
    this.capabilities = { sharedByInstances: true, queueClaims: new PgQueueClaims(this.queries), atomicCommitEvents: true, ordersKeyWaiters: true };
  }

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
              await migrate(pool, (msg) => this.opts.log?.('info', msg), this.opts.onSwallowed);
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
        await pool.end().catch(dropTo(this.opts.onSwallowed, 'store.pg.pool_end'));
        if (!(e instanceof pg.DatabaseError) && !isConnectionError(e)) throw e;
        throw new Error(`cannot open the PostgreSQL store at ${describeStoreUrl(this.opts.url)}: ${describe(e)}`, { cause: e });
      }
      if (this.opts.changes !== false) {
        const feed = new PgChanges({
          url: this.opts.url,
          log: (level, msg, extra) => this.opts.log?.(level === 'info' ? 'info' : 'warn', `${msg}${extra?.err ? `: ${String(extra.err)}` : ''}`),
          onSwallowed: this.opts.onSwallowed,
          // Notifications ride in the group commit's next round (no transaction of their own).
          send: (channel, payload) => (this.poolRef ? this.writer.notify(channel, payload) : Promise.resolve()),
          // Event appends are announced by the rounds that store them (pg-writer.ts).
          announce: (announce) => (this.writer.announcer = announce),
        });
        await feed.start();
        this.changes = feed;
      }
      this.health.status = { ok: true };
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
    // Not a swallow: open()'s caller gets its failure; close only waits for it to settle.
    if (this.opening) await this.opening.catch(() => {});
    if (this.state !== 'open') return;
    this.state = 'closing';
    if (this.probeTimer) clearInterval(this.probeTimer);
    this.probeTimer = null;
    // Everything accepted before close finishes (queued commits and appends included).
    while (this.inflight.size > 0 || this.writer.writing) {
      await Promise.allSettled([...this.inflight, this.writer.writing]);
    }
    await this.changes?.close();
    const pool = this.poolRef;
    this.poolRef = null;
    this.state = 'closed';
    this.health.status = { ok: false, error: 'closed' };
    await pool?.end().catch(dropTo(this.opts.onSwallowed, 'store.pg.pool_end'));
  }

  isOpen(): boolean {
    return this.state === 'open';
  }

  /** Whether the database answered the last query / probe. Synchronous: /ready reads it. */
  healthStatus(): StoreHealth {
    return this.health.status;
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
      this.health.success(this.state === 'open');
    } catch (e) {
      this.health.failure(e);
    } finally {
      clearTimeout(timer);
    }
    return this.health.status;
  }

  /** The database server's clock: `clock_timestamp()` (the time now, not the transaction's start). */
  async serverTimeMs(): Promise<number> {
    if (this.state !== 'open') throw new StoreError('closed', 'store is not open');
    const r = await this.pool.query<{ ms: string }>('SELECT (extract(epoch from clock_timestamp()) * 1000)::float8::text AS ms');
    return Math.round(Number(r.rows[0].ms));
  }

  /** The background probe: skipped while queries keep succeeding (they prove the same, for free). */
  private async probe(force = false): Promise<void> {
    if (!force && this.health.status.ok && Date.now() - this.health.lastOkAt < PROBE_INTERVAL_MS) return;
    // ping() answers every failure as a health status; this catch only guards the timer.
    await this.ping(Math.min(PROBE_INTERVAL_MS, 1500)).catch(dropTo(this.opts.onSwallowed, 'store.pg.probe'));
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

  // ---------------------------------------------------------------------------------------------
  // Records

  /** Batched per turn of the event loop (pg-reads.ts). */
  getRecord<T>(kind: RecordKind, id: string): Promise<Versioned<T> | null> {
    return this.run(() => this.reads.getRecord<T>(kind, id));
  }

  getRecords<T>(kind: RecordKind, ids: string[]): Promise<Array<Versioned<T> | null>> {
    return this.run(() => this.reads.getRecords<T>(kind, ids));
  }

  listRecords<T>(kind: RecordKind, query: ListQuery = {}): Promise<Page<T>> {
    return this.run(() => this.reads.listRecords<T>(kind, query));
  }

  countRecords(kind: RecordKind, index?: { name: string; value: string }): Promise<number> {
    return this.run(() => this.reads.countRecords(kind, index));
  }

  commit(input: CommitOps): Promise<Array<Versioned<unknown> | null>> {
    return this.run(() => this.writer.commit(input));
  }

  /**
   * The commit and its events in one statement and transaction: write_round stores the events
   * only if every op applied (migration 005), so a crash leaves both or neither.
   */
  commitWithEvents(ops: CommitOps, events: CommitEvents): Promise<{ records: Array<Versioned<unknown> | null>; events: StoredEvent[] }> {
    return this.run(() => this.writer.commitWithEvents(ops, events));
  }

  // ---------------------------------------------------------------------------------------------
  // Events: appends join the group commit (pg-writer.ts); reads and retention are pg-events.ts.

  /** Appends in call order; see the header for why cursors come from a locked counter row. */
  appendEvents(events: EventInput[]): Promise<StoredEvent[]> {
    return this.run(() => this.writer.append(events));
  }

  readEvents(query: EventQuery = {}): Promise<EventPage> {
    return this.run(() => this.events.readEvents(query));
  }

  readEventsJson(query: EventQuery = {}): Promise<EventTextPage> {
    return this.run(() => this.events.readEventsJson(query));
  }

  getEvent(cursor: string): Promise<StoredEvent | null> {
    return this.run(() => this.events.getEvent(cursor));
  }

  lastEventCursor(): Promise<string | null> {
    return this.run(() => this.events.lastEventCursor());
  }

  deleteEventsBefore(isoTime: string): Promise<number> {
    return this.run(() => this.events.deleteEventsBefore(isoTime));
  }
}
