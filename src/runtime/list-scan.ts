// One page of a stored list read in either order, with filters the store cannot index applied
// while reading (docs/contract.md §1: GET /runs, GET /background/runs, GET /telemetry/traces).
// The store orders every list by creation (seq) and gives each item's seq, and a cursor is that
// seq encoded (encodeCursor, shared by the three adapters), so a page may stop after any item it
// read and still hand back a cursor the store resumes from.
import { encodeCursor, type ListQuery, type Page } from '../store/store.js';

export type ListOrder = 'asc' | 'desc';

/**
 * At most this many records are read for one page when a filter the store cannot index applies:
 * a filter that matches rarely answers a short page (even an empty one) with a next_cursor, not a
 * read of the whole store.
 */
export const MAX_SCANNED_PER_PAGE = 2000;
/** Store page size while filtering: large enough that a sparse filter does not cost a round trip per match. */
const SCAN_BATCH = 250;

export interface ScanQuery<T> {
  index?: ListQuery['index'];
  cursor?: string | null;
  limit: number;
  order: ListOrder;
  /** Filters the index does not cover; absent, the page is one store read. */
  match?: ((value: T) => boolean) | null;
}

export async function scanPage<T>(list: (q: ListQuery) => Promise<Page<T>>, q: ScanQuery<T>): Promise<{ items: T[]; next_cursor: string | null }> {
  const reverse = q.order === 'desc';
  if (!q.match) {
    const page = await list({ index: q.index, cursor: q.cursor ?? null, limit: q.limit, reverse });
    return { items: page.items.map((i) => i.value), next_cursor: page.next_cursor };
  }
  const items: T[] = [];
  let cursor = q.cursor ?? null;
  let scanned = 0;
  for (;;) {
    const page = await list({ index: q.index, cursor, limit: Math.max(q.limit, SCAN_BATCH), reverse });
    for (let i = 0; i < page.items.length; i++) {
      const item = page.items[i];
      scanned++;
      if (!q.match(item.value)) continue;
      items.push(item.value);
      if (items.length === q.limit) {
        const more = i < page.items.length - 1 || page.next_cursor !== null;
        return { items, next_cursor: more ? encodeCursor(item.seq) : null };
      }
    }
    cursor = page.next_cursor;
    if (cursor === null || scanned >= MAX_SCANNED_PER_PAGE) return { items, next_cursor: cursor };
  }
}

/** True when `iso` lies in [since, until): the time-range filter of the lists. */
export function inTimeRange(iso: string | null | undefined, range: { since?: string; until?: string }): boolean {
  if (!range.since && !range.until) return true;
  const t = iso ? Date.parse(iso) : NaN;
  if (Number.isNaN(t)) return false;
  if (range.since && t < Date.parse(range.since)) return false;
  if (range.until && t >= Date.parse(range.until)) return false;
  return true;
}
