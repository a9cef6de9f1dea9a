import { LevelStore } from './level.js';
import { MemoryStore } from './memory.js';
import type { Store } from './store.js';

export interface OpenStoreOptions {
  kind: 'memory' | 'level' | 'postgres';
  /** PostgreSQL connection string; required for 'postgres'. */
  url?: string;
  /** Data directory; required for 'level'. */
  path?: string;
  /** LevelDB only: fsync every batch (default true), see LevelStoreOptions.sync. */
  sync?: boolean;
}

/** Builds the configured adapter and opens it (StoreError 'locked' when another process holds the dir). */
export async function openStore(opts: OpenStoreOptions): Promise<Store> {
  let store: Store;
  switch (opts.kind) {
    case 'memory':
      store = new MemoryStore();
      break;
    case 'level':
      if (!opts.path) throw new Error("openStore: store kind 'level' needs a path");
      store = new LevelStore({ path: opts.path, sync: opts.sync });
      break;
    case 'postgres': {
      if (!opts.url) throw new Error("openStore: store kind 'postgres' needs a url");
      const { PostgresStore } = await import('./postgres.js');
      store = new PostgresStore({ url: opts.url });
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
