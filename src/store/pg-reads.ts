// The PostgreSQL adapter's point reads of records (agentd.records by kind and id). Point reads
// issued in one turn of the event loop go to the database together: one statement per kind
// (`id = ANY(...)`), one round trip and one snapshot for all of them, instead of one each (at
// c=32 the runs of one process read their inbox rows at the same boundaries). Each read is still
// sent after it was asked, so it sees every write acknowledged before it. Lists and counts walk
// agentd.records by seq, or agentd.record_ix by index value (no bodies read for a count), or by
// the index's value order (ListQuery.sortedBy, listSorted).
import type pg from 'pg';
import { MAX_BIGINT, clampLimit, escText, recordView, unescText, type Queryable } from './pg-text.js';
import { decodeCursor, decodeSortedCursor, encodeCursor, sortedCursor, type ListQuery, type Page, type RecordKind, type Versioned } from './store.js';

type Row = { id?: string; version: number; seq: string; value: string };
type Waiter = { resolve: (v: Versioned<unknown> | null) => void; reject: (e: unknown) => void };

const GET_ONE = 'SELECT version, seq, value FROM agentd.records WHERE kind = $1 AND id = $2';
const GET_MANY = 'SELECT id, version, seq, value FROM agentd.records WHERE kind = $1 AND id = ANY($2::text[])';

export class PgRecordReader {
  /** Reads asked in this turn of the event loop, by kind and id (one id may have several callers). */
  private readonly pending = new Map<RecordKind, Map<string, Waiter[]>>();
  private scheduled = false;

  constructor(private readonly db: Queryable) {}

  getRecord<T>(kind: RecordKind, id: string): Promise<Versioned<T> | null> {
    return new Promise<Versioned<T> | null>((resolve, reject) => {
      let byKind = this.pending.get(kind);
      if (!byKind) this.pending.set(kind, (byKind = new Map()));
      const w: Waiter = { resolve: resolve as Waiter['resolve'], reject };
      const waiters = byKind.get(id);
      if (waiters) waiters.push(w);
      else byKind.set(id, [w]);
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  async getRecords<T>(kind: RecordKind, ids: string[]): Promise<Array<Versioned<T> | null>> {
    if (ids.length === 0) return [];
    const r = await this.db.query<Row>({ name: 'agentd_get_many', text: GET_MANY, values: [kind, ids.map(escText)] }, true);
    const byId = new Map(r.rows.map((row) => [row.id, row]));
    return ids.map((id) => {
      const row = byId.get(escText(id));
      return row ? recordView<T>(id, row.version, row.seq, row.value) : null;
    });
  }

  async listRecords<T>(kind: RecordKind, query: ListQuery): Promise<Page<T>> {
    const limit = clampLimit(query.limit, 100);
    if (query.sortedBy !== undefined) return listSorted<T>(this.db, kind, query.sortedBy, query, limit);
    const after = query.cursor ? String(decodeCursor(query.cursor)) : query.reverse ? MAX_BIGINT : '0';
    const rev = !!query.reverse;
    const cmp = rev ? '<' : '>';
    const order = rev ? 'DESC' : 'ASC';
    let q: pg.QueryConfig<unknown[]>;
    if (query.index) {
      q = {
        name: `agentd_list_ix_${rev ? 'r' : 'f'}`,
        text:
          `SELECT r.id, r.version, r.seq, r.value FROM agentd.record_ix x JOIN agentd.records r ON r.kind = x.kind AND r.id = x.id ` +
          `WHERE x.kind = $1 AND x.name = $2 AND x.value = $3 AND x.seq ${cmp} $4 ORDER BY x.seq ${order} LIMIT $5`,
        values: [kind, escText(query.index.name), escText(query.index.value), after, limit + 1],
      };
    } else {
      q = {
        name: `agentd_list_${rev ? 'r' : 'f'}`,
        text: `SELECT id, version, seq, value FROM agentd.records WHERE kind = $1 AND seq ${cmp} $2 ORDER BY seq ${order} LIMIT $3`,
        values: [kind, after, limit + 1],
      };
    }
    const r = await this.db.query<{ id: string; version: number; seq: string; value: string }>(q, true);
    const rows = r.rows.slice(0, limit);
    return {
      items: rows.map((row) => recordView<T>(unescText(row.id), row.version, row.seq, row.value)),
      next_cursor: r.rows.length > limit ? encodeCursor(Number(rows[rows.length - 1].seq)) : null,
    };
  }

  async countRecords(kind: RecordKind, index?: { name: string; value: string }): Promise<number> {
    const r = await this.db.query<{ n: number }>(
      index
        ? {
            name: 'agentd_count_ix',
            text: 'SELECT count(*)::int AS n FROM agentd.record_ix WHERE kind = $1 AND name = $2 AND value = $3',
            values: [kind, escText(index.name), escText(index.value)],
          }
        : { name: 'agentd_count', text: 'SELECT count(*)::int AS n FROM agentd.records WHERE kind = $1', values: [kind] },
      true,
    );
    return r.rows[0].n;
  }

  private flush(): void {
    this.scheduled = false;
    const all = [...this.pending];
    this.pending.clear();
    for (const [kind, byKind] of all) {
      const ids = [...byKind.keys()];
      const single = ids.length === 1;
      this.db
        .query<Row>(
          single
            ? { name: 'agentd_get', text: GET_ONE, values: [kind, escText(ids[0])] }
            : { name: 'agentd_get_many', text: GET_MANY, values: [kind, ids.map(escText)] },
          true,
        )
        .then(
          (r) => {
            const rows = new Map(r.rows.map((row) => [row.id, row]));
            for (const [id, waiters] of byKind) {
              const row = single ? r.rows[0] : rows.get(escText(id));
              // Each caller gets its own object (a caller may change what it read).
              for (const w of waiters) w.resolve(row ? recordView(id, row.version, row.seq, row.value) : null);
            }
          },
          (e: unknown) => {
            for (const waiters of byKind.values()) for (const w of waiters) w.reject(e);
          },
        );
    }
  }
}

/** ListQuery.sortedBy: one walk of the primary key of agentd.record_ix, (kind, name, value, seq). */
export async function listSorted<T>(db: Queryable, kind: RecordKind, name: string, query: ListQuery, limit: number): Promise<Page<T>> {
  const rev = !!query.reverse;
  const c = query.cursor ? decodeSortedCursor(query.cursor) : null;
  const where = c ? ` AND (x.value, x.seq) ${rev ? '<' : '>'} ($3, $4)` : '';
  const order = rev ? 'x.value DESC, x.seq DESC' : 'x.value, x.seq';
  const r = await db.query<Row & { id: string; ixv: string }>(
    {
      name: `agentd_list_sorted_${rev ? 'r' : 'f'}${c ? 'c' : ''}`,
      text:
        `SELECT r.id, r.version, r.seq, r.value, x.value AS ixv FROM agentd.record_ix x JOIN agentd.records r ON r.kind = x.kind AND r.id = x.id ` +
        `WHERE x.kind = $1 AND x.name = $2${where} ORDER BY ${order} LIMIT ${c ? '$5' : '$3'}`,
      values: c ? [kind, escText(name), escText(c.value), c.seq, limit + 1] : [kind, escText(name), limit + 1],
    },
    true,
  );
  const rows = r.rows.slice(0, limit);
  const last = rows[rows.length - 1];
  return {
    items: rows.map((row) => recordView<T>(unescText(row.id), row.version, row.seq, row.value)),
    next_cursor: r.rows.length > limit ? sortedCursor(unescText(last.ixv), Number(last.seq)) : null,
  };
}
