// The PostgreSQL adapter's reads of the event log and its retention (agentd.events).
import { MAX_BIGINT, clampLimit, cursorText, escText, withCursor, type Queryable } from './pg-text.js';
import {
  EVENT_INDEX_FIELDS,
  decodeCursor,
  encodeCursor,
  type EventIndexField,
  type EventPage,
  type EventQuery,
  type EventTextPage,
  type StoredEvent,
} from './store.js';

/** Retention deletes in chunks of this many events, one statement each. */
const DELETE_CHUNK = 5000;

export class PgEventReader {
  constructor(private readonly db: Queryable) {}

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
  async readEventsJson(query: EventQuery = {}): Promise<EventTextPage> {
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
    const r = await this.db.query<{ cursor: string; body: string }>({ name: `agentd_ev_${shape}`, text, values }, true);
    const texts = r.rows.map((row) => withCursor(row.body, cursorText(row.cursor)));
    return { events: texts, next_cursor: texts.length === limit ? cursorText(r.rows[r.rows.length - 1].cursor) : null };
  }

  async getEvent(cursor: string): Promise<StoredEvent | null> {
    let n: number;
    try {
      n = decodeCursor(cursor);
    } catch {
      return null;
    }
    const r = await this.db.query<{ body: string }>({ name: 'agentd_event', text: 'SELECT body FROM agentd.events WHERE cursor = $1', values: [n] }, true);
    return r.rows[0] ? (JSON.parse(withCursor(r.rows[0].body, encodeCursor(n))) as StoredEvent) : null;
  }

  async lastEventCursor(): Promise<string | null> {
    const r = await this.db.query<{ c: string | null }>({ name: 'agentd_last_cursor', text: 'SELECT max(cursor) AS c FROM agentd.events' }, true);
    return r.rows[0].c === null ? null : cursorText(r.rows[0].c);
  }

  /**
   * Retention, as the other adapters: walks from the oldest event and stops at the first one that
   * is not expired (an unparseable timestamp counts as expired). Deletes in chunks, so no one
   * statement runs long; each chunk is idempotent, so it is retried like a read.
   */
  async deleteEventsBefore(isoTime: string): Promise<number> {
    const cutoff = Date.parse(isoTime);
    if (Number.isNaN(cutoff)) throw new TypeError(`deleteEventsBefore: bad time '${isoTime}'`);
    const stop = await this.db.query<{ c: string | null }>(
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
      const r = await this.db.query(
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
  }
}
