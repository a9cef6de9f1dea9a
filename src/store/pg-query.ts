// How the PostgreSQL adapter runs one statement (PostgresStore's writer, reads, events and queue
// claims all go through it): a pooled connection, the health report of every answer, and the
// retries of transient failures within RETRY_WINDOW_MS. Reads are retried on any connection
// failure; writes only when they certainly did not commit (the header of postgres.ts says why).
import pg from 'pg';
import { isConnectionError, isTransientCode, unavailable } from './pg-errors.js';
import type { PgHealth } from './pg-health.js';
import type { Queryable } from './pg-text.js';
import { StoreError } from './store.js';

/** Transient errors are retried with backoff (50 ms doubling to 1 s) for at most this long. */
const RETRY_WINDOW_MS = 5000;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** What a statement needs of the store it runs for. */
export interface PgConnection {
  /** The pool, or null once the store closed. */
  pool(): pg.Pool | null;
  /** The store is open (an answer while it opens or closes is not "reachable again"). */
  isOpen(): boolean;
  /** The store was closed: no retry is worth waiting for. */
  isClosed(): boolean;
  readonly health: PgHealth;
}

export class PgQueries implements Queryable {
  constructor(private readonly conn: PgConnection) {}

  /**
   * One statement on a pooled connection, retried on transient errors within RETRY_WINDOW_MS.
   * `idempotent`: also retried when the connection broke while the statement was in flight
   * (reads, idempotent deletes); otherwise only when it certainly did not take effect.
   */
  async query<R extends pg.QueryResultRow = pg.QueryResultRow>(q: pg.QueryConfig<unknown[]>, idempotent: boolean): Promise<pg.QueryResult<R>> {
    const { health } = this.conn;
    const started = Date.now();
    for (let attempt = 0; ; attempt++) {
      const pool = this.conn.pool();
      if (!pool) throw new StoreError('closed', 'store is not open');
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (e) {
        health.failure(e);
        if (isConnectionError(e) && (await this.backoff(started, attempt))) continue;
        throw unavailable(e, false);
      }
      // A connection that breaks while we hold it emits 'error'; unheard, that would crash us.
      const onError = (e: Error) => health.failure(e);
      client.on('error', onError);
      try {
        const r = await client.query<R>(q);
        client.off('error', onError);
        client.release();
        health.success(this.conn.isOpen());
        return r;
      } catch (e) {
        client.off('error', onError);
        const code = e instanceof pg.DatabaseError ? e.code : undefined;
        const broken = !code || isTransientCode(code) || code.startsWith('57');
        client.release(broken ? (e as Error) : undefined);
        if (isConnectionError(e)) health.failure(e);
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

  /** Waits before the next attempt; false when the retry window is spent or the store closed. */
  private async backoff(started: number, attempt: number): Promise<boolean> {
    const delay = Math.min(1000, 50 * 2 ** attempt) * (0.75 + Math.random() * 0.5);
    const usable = () => !this.conn.isClosed() && this.conn.pool() !== null;
    if (Date.now() + delay - started > RETRY_WINDOW_MS || !usable()) return false;
    await sleep(delay);
    return usable();
  }
}
