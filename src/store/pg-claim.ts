// The PostgreSQL adapter's queue claims (StoreCapabilities.queueClaims): a claimer takes due
// queued background runs with ONE statement that locks them FOR UPDATE SKIP LOCKED and marks
// them held by its pass (claim_token, claim_until; migration 002), so claimers on several
// instances divide the queue between them instead of each reading the same oldest rows and all
// but one losing the claim's CAS. The claim itself stays the run row's CAS write (the machine's
// CLAIM + START), so a hold is advisory: a claimer slower than its hold is still fenced.
import type pg from 'pg';
import type { QueryConfig } from 'pg';
import { escText, unescText } from './pg-text.js';
import type { QueueClaimQuery, QueueClaims, Versioned } from './store.js';

interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(q: QueryConfig, idempotent: boolean): Promise<pg.QueryResult<R>>;
}

// The run's `internal.not_before` is read from the row's JSON text (json, not jsonb: jsonb
// refuses \u0000, which a run's text may hold). Rows are walked in queue order on the
// `queue_order` index (priority rank, then creation order: src/store/repos/bg-runs.ts), which is
// the primary key of agentd.record_ix, (kind, name, value, seq): one index walk, no sort.
const NOT_BEFORE = `((r.value::json)->'internal'->>'not_before')`;

const CLAIM_SQL =
  `WITH due AS (` +
  ` SELECT r.kind, r.id, x.value AS rank FROM agentd.record_ix x JOIN agentd.records r ON r.kind = x.kind AND r.id = x.id` +
  ` WHERE x.kind = 'bg_runs' AND x.name = 'queue_order'` +
  ` AND (r.claim_until IS NULL OR r.claim_until <= $1)` +
  ` AND (${NOT_BEFORE} IS NULL OR ${NOT_BEFORE}::timestamptz <= to_timestamp($1 / 1000.0))` +
  ` ORDER BY x.value, x.seq LIMIT $2 FOR UPDATE OF r SKIP LOCKED)` +
  ` UPDATE agentd.records r SET claim_token = $3, claim_until = $4 FROM due` +
  ` WHERE r.kind = due.kind AND r.id = due.id RETURNING r.id, r.version, r.seq, r.value, due.rank`;

// Among the first MAX_SCANNED queued rows, as the embedded stores' scan (src/store/repos/bg-runs.ts).
const NEXT_DUE_SQL =
  `SELECT min(s.at) AS at FROM (SELECT ${NOT_BEFORE}::timestamptz AS at FROM agentd.record_ix x` +
  ` JOIN agentd.records r ON r.kind = x.kind AND r.id = x.id` +
  ` WHERE x.kind = 'bg_runs' AND x.name = 'queue_order' ORDER BY x.value, x.seq LIMIT 2000) s` +
  ` WHERE s.at > to_timestamp($1 / 1000.0)`;

export class PgQueueClaims implements QueueClaims {
  constructor(private readonly db: Queryable) {}

  async claimQueued(q: QueueClaimQuery): Promise<{ items: Versioned<unknown>[]; nextDueAt: number | null }> {
    const r = await this.db.query<{ id: string; version: number; seq: string; value: string; rank: string }>(
      { name: 'agentd_claim_queued', text: CLAIM_SQL, values: [q.now, q.limit, escText(q.token), q.holdUntil] },
      // Sent again after a broken connection: rows a lost first attempt held carry the same token
      // and are released with the pass.
      true,
    );
    // UPDATE ... RETURNING does not keep the CTE's order: sorted again by (rank, seq).
    const items = r.rows
      .sort((a, b) => (a.rank === b.rank ? Number(a.seq) - Number(b.seq) : a.rank < b.rank ? -1 : 1))
      .map((row) => ({ id: unescText(row.id), version: row.version, seq: Number(row.seq), value: JSON.parse(row.value) as unknown }));
    if (items.length >= q.limit) return { items, nextDueAt: null };
    const next = await this.db.query<{ at: Date | null }>({ name: 'agentd_claim_next_due', text: NEXT_DUE_SQL, values: [q.now] }, true);
    const at = next.rows[0]?.at;
    return { items, nextDueAt: at ? at.getTime() : null };
  }

  async release(token: string, ids: string[]): Promise<void> {
    if (ids.length === 0) return;
    await this.db.query(
      {
        name: 'agentd_claim_release',
        text: "UPDATE agentd.records SET claim_token = NULL, claim_until = NULL WHERE kind = 'bg_runs' AND id = ANY($2::text[]) AND claim_token = $1",
        values: [escText(token), ids.map(escText)],
      },
      true,
    );
  }
}
