// Pages of a list held whole in one record or in memory (a session's messages, a background run's
// attempts or lifecycle events): the same `limit` / `cursor` / `next_cursor` as the lists read from
// store indexes, with the position in the list as the cursor (OffsetCursor in src/schemas/common.ts).

/**
 * `limit` items from the position `cursor` names; `next_cursor` null on the last page. With
 * `order: 'desc'` the list is read from its end, and the cursor counts positions in that order.
 */
export function pageOf<T>(
  list: readonly T[],
  q: { limit: number; cursor?: string | null; order?: 'asc' | 'desc' },
): { items: T[]; next_cursor: string | null } {
  const items = q.order === 'desc' ? [...list].reverse() : list;
  const start = q.cursor ? Number(q.cursor) : 0;
  const end = start + q.limit;
  return { items: items.slice(start, end), next_cursor: end < items.length ? String(end) : null };
}
