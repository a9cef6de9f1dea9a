import { LevelStore } from './level.js';
import { MemoryStore } from './memory.js';
import type { OnSwallowed, Store } from './store.js';

export interface OpenStoreOptions {
  kind: 'memory' | 'level' | 'postgres';
  /** Data directory; required for 'level'. */
  path?: string;
  /** LevelDB only: fsync every batch (default true), see LevelStoreOptions.sync. */
  sync?: boolean;
  /** PostgreSQL only: connection string (required), pool size, statement timeout (see PostgresStoreOptions). */
  url?: string;
  poolSize?: number;
  statementTimeoutMs?: number;
  /** PostgreSQL only: apply pending migrations at open (default true). */
  migrate?: boolean;
  /** Notable store events (PostgreSQL: migrations applied, database lost / back). */
  log?: (level: 'info' | 'warn', msg: string) => void;
  /** Errors the adapter catches and drops (closing a pool, a ROLLBACK, a prefetch, the change feed): see OnSwallowed. */
  onSwallowed?: OnSwallowed;
}

/**
 * Builds the configured adapter and opens it (StoreError 'locked' when another process holds the
 * LevelDB dir; PostgreSQL: migrates under an advisory lock, refuses a newer schema).
 */
export async function openStore(opts: OpenStoreOptions): Promise<Store> {
  let store: Store;
  switch (opts.kind) {
    case 'memory':
      store = new MemoryStore();
      break;
    case 'level':
      if (!opts.path) throw new Error("openStore: store kind 'level' needs a path");
      store = new LevelStore({ path: opts.path, sync: opts.sync, onSwallowed: opts.onSwallowed });
      break;
    case 'postgres': {
      if (!opts.url) throw new Error("openStore: store kind 'postgres' needs a url");
      // Loaded only when configured: the LevelDB default never pays for node-postgres at start-up.
      const { PostgresStore } = await import('./postgres.js');
      store = new PostgresStore({
        url: opts.url,
        poolSize: opts.poolSize,
        statementTimeoutMs: opts.statementTimeoutMs,
        migrate: opts.migrate,
        log: opts.log,
        onSwallowed: opts.onSwallowed,
      });
      break;
    }
    default: {
      const kind: string = (opts as { kind: string }).kind;
      throw new Error(`openStore: unknown store kind '${kind}'`);
    }
  }
  await store.open();
  return store;
}
