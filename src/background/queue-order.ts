// The claim order of queued background runs is the `queue_order` index (priority, then creation
// order: src/store/repos/bg-runs.ts). Runs queued by an agentd that did not write it yet have no
// entry there, and the claimer would never see them. Once per data set (a `meta` marker), the
// first claimer to start gives every queued row without an entry its indexes (a CAS write of the
// row as it is: runRowIndexes; no priority stored counts as 0). The same on every store: the
// index is an index value like the others, so PostgreSQL needs no schema change for it.
import { isStoreError } from '../store/store.js';
import { QUEUE_ORDER_INDEX } from '../store/repos/bg-runs.js';
import { repos } from '../store/repos/index.js';
import type { Page, Store } from '../store/store.js';
import { runRowIndexes, type BgRunRow } from './types.js';

/** The marker: written once every queued row had its `queue_order` entry. */
export const QUEUE_ORDER_MARKER = 'bg_queue_order_v1';

/** Indexes the queued rows stored without a `queue_order` entry (once per store); how many it wrote. */
export async function indexQueuedRuns(store: Store, nowIso: string): Promise<number> {
  const r = repos(store);
  if (await r.meta.get(QUEUE_ORDER_MARKER)) return 0;
  const indexed = new Set<string>();
  let cursor: string | null = null;
  do {
    const page: Page<BgRunRow> = await r.bgRuns.list({ sortedBy: QUEUE_ORDER_INDEX, cursor, limit: 1000 });
    for (const item of page.items) indexed.add(item.id);
    cursor = page.next_cursor;
  } while (cursor);
  let written = 0;
  cursor = null;
  do {
    const page: Page<BgRunRow> = await r.bgRuns.list({ index: { name: 'status', value: 'queued' }, cursor, limit: 1000 });
    for (const row of page.items) {
      if (indexed.has(row.id)) continue;
      try {
        await r.bgRuns.update(row.id, row.value, row.version, runRowIndexes(row.value));
        written++;
      } catch (err) {
        // Written since it was listed: by this code, so with its indexes (or it left the queue).
        if (!isStoreError(err, 'stale_version') && !isStoreError(err, 'not_found')) throw err;
      }
    }
    cursor = page.next_cursor;
  } while (cursor);
  try {
    await r.meta.create(QUEUE_ORDER_MARKER, { indexed_at: nowIso, rows: written });
  } catch (err) {
    if (!isStoreError(err, 'conflict')) throw err; // another instance finished first
  }
  return written;
}
