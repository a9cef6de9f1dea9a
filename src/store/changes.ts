// The change feed: an optional capability of a store that several agentd processes share (nothing
// assumes one process per store). The PostgreSQL adapter implements it with
// LISTEN/NOTIFY on one dedicated connection; the embedded stores (LevelDB, memory) have none,
// because only one process can open them and every change is already seen in-process.
//
// A notification is a hint, never the data: whoever receives one reads the store (events by
// cursor, rows by id), so a lost or duplicated notification costs latency, not correctness. Every
// guarantee (fenced leases, one run per occurrence, budgets) rests on the store's CAS writes; the
// periodic sweeps still find whatever a lost notification did not wake.
import { dropTo, type OnSwallowed, type Store } from './store.js';
import { CHANGE_CHANNELS, MAX_CHANGE_PAYLOAD, type AppendAnnouncer, type ChangeChannel, type FeedState, type StoreChanges } from './change-feed.js';

/** A notification waiting to be sent. */
interface QueuedNotification {
  channel: string;
  payload: string;
}

/**
 * True when other processes may write the same store concurrently: then no start-up sweep may
 * take a `running` row for dead, and in-process views (task schedules, in-flight runs) are hints
 * that the store's CAS checks, not the truth.
 */
export function isSharedStore(store: Store): boolean {
  return store.capabilities.sharedByInstances;
}

/**
 * An in-process feed for several runtimes over one in-memory store (unit tests of the
 * multi-instance logic without processes). Delivery is asynchronous, like a real NOTIFY.
 */
export class LocalChanges implements StoreChanges {
  private readonly subs = new Map<string, Set<(payload: string) => void>>();
  private readonly reconnects = new Set<() => void>();

  subscribe(channel: ChangeChannel, fn: (payload: string) => void): () => void {
    let set = this.subs.get(channel);
    if (!set) this.subs.set(channel, (set = new Set()));
    set.add(fn);
    return () => set.delete(fn);
  }

  /** In-process delivery never drops anything: always listening, since forever. */
  listening(): FeedState | null {
    return { generation: 1, sinceMs: -Infinity };
  }

  async notify(channel: ChangeChannel, payload: string): Promise<void> {
    if (payload.length > MAX_CHANGE_PAYLOAD) return;
    const set = this.subs.get(channel);
    if (!set) return;
    setImmediate(() => {
      for (const fn of [...set]) safe(() => fn(payload));
    });
  }

  onReconnect(fn: () => void): () => void {
    this.reconnects.add(fn);
    return () => this.reconnects.delete(fn);
  }

  async close(): Promise<void> {
    this.subs.clear();
  }
}

/** Calls one listener; its failure must not stop the others (reported to `onSwallowed` when given). */
function safe(fn: () => void, onSwallowed?: OnSwallowed): void {
  try {
    fn();
  } catch (err) {
    onSwallowed?.('store.changes.listener', err);
  }
}

// ------------------------------------------------------------------ PostgreSQL LISTEN/NOTIFY

/** What PgChanges needs of node-postgres' Client (kept narrow so this file imports pg lazily). */
interface PgClientLike {
  connect(): Promise<void>;
  query(text: string, values?: unknown[]): Promise<unknown>;
  end(): Promise<void>;
  on(event: 'notification', fn: (msg: { channel: string; payload?: string }) => void): unknown;
  on(event: 'error', fn: (err: Error) => void): unknown;
  on(event: 'end', fn: () => void): unknown;
  removeAllListeners(): unknown;
}

export interface PgChangesOptions {
  /** Connection string of the database (the store's `store.url`). */
  url: string;
  /** Most notifications waiting to be sent while the connection is down or busy; older ones are dropped. Default 1000. */
  maxQueued?: number;
  log?: (level: 'info' | 'warn' | 'error', msg: string, extra?: Record<string, unknown>) => void;
  /** A listener's fault, a connection that fails to close: see OnSwallowed. */
  onSwallowed?: OnSwallowed;
  /**
   * Sends a notification another way than this feed's own connection: the PostgreSQL store hands
   * it to its group commit, whose next round's statement carries it (src/store/pg-writer.ts), so
   * it costs no transaction of its own. Never rejects. Without it, notifications are sent on the
   * LISTEN connection, batched, one statement per batch.
   */
  send?: (channel: ChangeChannel, payload: string) => Promise<void>;
  /**
   * The store announces event appends itself, in the rounds that store them (StoreChanges.announceAppends):
   * the PostgreSQL store's group commit. Without it, announceAppends answers false.
   */
  announce?: (announce: AppendAnnouncer | null) => void;
  /** Test seam: builds the client (default: `new pg.Client({ connectionString: url })`). */
  client?: () => Promise<PgClientLike>;
}

/**
 * LISTEN/NOTIFY on ONE dedicated connection (a pooled connection cannot LISTEN: the pool hands it
 * to others). Reconnects with capped exponential backoff; on each reconnect it LISTENs again and
 * tells `onReconnect` listeners, who re-read what they follow. Sends go through `send` when given
 * (the store's group commit), else through the same connection, one at a time, from a bounded queue.
 */
export class PgChanges implements StoreChanges {
  private readonly subs = new Map<string, Set<(payload: string) => void>>();
  private readonly reconnects = new Set<() => void>();
  private client: PgClientLike | null = null;
  private connecting: Promise<void> | null = null;
  private closed = false;
  private backoffMs = 100;
  private retryTimer: NodeJS.Timeout | null = null;
  private queue: QueuedNotification[] = [];
  private sending = false;
  private readonly maxQueued: number;
  /** Connections so far (see FeedState) and when the current one started listening. */
  private generation = 0;
  private sinceMs = 0;

  /** A connection's end() that failed (it is being dropped anyway). */
  private readonly dropped: (err: unknown) => undefined;

  constructor(private readonly opts: PgChangesOptions) {
    this.maxQueued = opts.maxQueued ?? 1000;
    this.dropped = dropTo(opts.onSwallowed, 'store.changes.end');
  }

  /** Connects and LISTENs; resolves once the feed is up, or (it could not connect) once a retry is scheduled. */
  async start(): Promise<void> {
    try {
      await this.connect();
    } catch (err) {
      this.opts.log?.('warn', 'change feed: could not connect; retrying', { err: String(err) });
      this.retry();
    }
  }

  subscribe(channel: ChangeChannel, fn: (payload: string) => void): () => void {
    let set = this.subs.get(channel);
    if (!set) this.subs.set(channel, (set = new Set()));
    set.add(fn);
    return () => set.delete(fn);
  }

  onReconnect(fn: () => void): () => void {
    this.reconnects.add(fn);
    return () => this.reconnects.delete(fn);
  }

  listening(): FeedState | null {
    return this.client && !this.closed ? { generation: this.generation, sinceMs: this.sinceMs } : null;
  }

  announceAppends(announce: AppendAnnouncer | null): boolean {
    if (!this.opts.announce) return false;
    this.opts.announce(announce);
    return true;
  }

  notify(channel: ChangeChannel, payload: string): Promise<void> {
    if (this.closed || payload.length > MAX_CHANGE_PAYLOAD) return Promise.resolve();
    if (this.opts.send) {
      // PostgreSQL's limit is in bytes: a payload over it would fail the whole round carrying it
      // (its other writes then retried one by one), so it is dropped here, as an oversized one is.
      if (Buffer.byteLength(payload) > MAX_CHANGE_PAYLOAD) return Promise.resolve();
      return this.opts.send(channel, payload);
    }
    if (this.queue.length >= this.maxQueued) this.queue.shift();
    this.queue.push({ channel, payload });
    return this.pump();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.queue = [];
    const c = this.client;
    this.client = null;
    if (c) {
      c.removeAllListeners();
      c.on('error', () => undefined);
      await c.end().catch(this.dropped);
    }
    this.subs.clear();
  }

  private async pump(): Promise<void> {
    if (this.sending) return;
    this.sending = true;
    try {
      while (this.queue.length > 0 && this.client && !this.closed) {
        // Several notifications in one round trip; `SELECT pg_notify` takes bind parameters (NOTIFY does not).
        const batch = this.queue.splice(0, 50);
        const values: string[] = [];
        const calls = batch.map((n, i) => {
          values.push(n.channel, n.payload);
          return `pg_notify($${2 * i + 1}, $${2 * i + 2})`;
        });
        try {
          await this.client.query(`SELECT ${calls.join(', ')}`, values);
        } catch (err) {
          this.opts.log?.('warn', 'change feed: notify failed (the sweeps cover it)', { err: String(err) });
          break;
        }
      }
    } finally {
      this.sending = false;
    }
  }

  private connect(): Promise<void> {
    if (this.connecting) return this.connecting;
    this.connecting = (async () => {
      const client = this.opts.client ? await this.opts.client() : await defaultClient(this.opts.url);
      client.on('error', (err) => {
        this.opts.log?.('warn', 'change feed connection error', { err: String(err) });
        this.lost(client);
      });
      client.on('end', () => this.lost(client));
      client.on('notification', (msg) => {
        const set = this.subs.get(msg.channel);
        if (!set || msg.payload === undefined) return;
        for (const fn of [...set]) safe(() => fn(msg.payload!), this.opts.onSwallowed);
      });
      try {
        await client.connect();
        for (const ch of Object.values(CHANGE_CHANNELS)) await client.query(`LISTEN ${ch}`);
      } catch (err) {
        client.removeAllListeners();
        client.on('error', () => undefined);
        await client.end().catch(this.dropped);
        throw err;
      }
      if (this.closed) {
        await client.end().catch(this.dropped);
        return;
      }
      this.client = client;
      this.generation++;
      this.sinceMs = performance.now();
      this.backoffMs = 100;
      void this.pump();
    })().finally(() => {
      this.connecting = null;
    });
    return this.connecting;
  }

  private lost(client: PgClientLike): void {
    if (this.client !== client) return;
    this.client = null;
    client.removeAllListeners();
    client.on('error', () => undefined);
    void client.end().catch(this.dropped);
    this.retry();
  }

  private retry(): void {
    if (this.closed || this.retryTimer) return;
    const delay = this.backoffMs;
    this.backoffMs = Math.min(5000, this.backoffMs * 2);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.connect().then(
        () => {
          for (const fn of [...this.reconnects]) safe(fn);
        },
        (err) => {
          this.opts.log?.('warn', 'change feed: reconnect failed; retrying', { err: String(err), retry_ms: this.backoffMs });
          this.retry();
        },
      );
    }, delay);
    this.retryTimer.unref();
  }
}

async function defaultClient(url: string): Promise<PgClientLike> {
  const pg = (await import('pg')).default;
  return new pg.Client({ connectionString: url, application_name: 'agentd-changes' }) as unknown as PgClientLike;
}
