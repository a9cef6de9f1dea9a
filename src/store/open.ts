import { LevelStore } from './level.js';
import { MemoryStore } from './memory.js';
import type { Store } from './store.js';

export interface OpenStoreOptions {
  kind: 'memory' | 'level';
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
    default: {
      const kind: string = (opts as { kind: string }).kind;
      if (kind === 'postgres') throw new Error("openStore: the 'postgres' store is not implemented yet; use 'level' or 'memory'");
      throw new Error(`openStore: unknown store kind '${kind}'`);
    }
  }
  await store.open();
  return store;
}
