// Background run rows (kind `bg_runs`) and the claim of queued ones. The claimer asks for due
// queued rows a page at a time; a store several instances share takes them with one statement
// that skips rows another claimer holds (StoreCapabilities.queueClaims: PostgreSQL), a store one
// process owns is scanned on its `status` index (the claimer is the only one).
import { randomUUID } from 'node:crypto';
import type { QueueClaims, Store, Versioned } from '../store.js';
import { KindRepo } from './kind-repo.js';
import type { ValueOf } from './values.js';

type Row = Versioned<ValueOf<'bg_runs'>>;

/** At most this many rows are read by one pass (a queue of runs blocked by their task's policy is not walked whole). */
const MAX_SCANNED = 2000;

/** What the store reads of a row to decide it is due (the background-run machine's context). */
const notBefore = (value: unknown): number | null => {
  const at = (value as { internal?: { not_before?: string | null } }).internal?.not_before;
  return at ? Date.parse(at) : null;
};

export class BgRunRepo extends KindRepo<'bg_runs'> {
  constructor(store: Store) {
    super(store, 'bg_runs');
  }

  /**
   * Starts a claim pass at `now` (the claimer's clock). Rows a shared store hands out are held for
   * the pass until `now + holdMs`, or until `release()`.
   */
  claimPass(now: number, holdMs: number): QueueClaimPass {
    return new QueueClaimPass(this, this.store.capabilities.queueClaims ?? null, now, holdMs);
  }
}

/** One claimer's walk over the queue, oldest first; call `release()` when the pass ends. */
export class QueueClaimPass {
  /** Nothing more to hand out in this pass. */
  done = false;
  /** The earliest `not_before` of a queued row not due yet (a wake-up for the claimer), if seen. */
  nextDueAt: number | null = null;
  private cursor: string | null = null;
  private scanned = 0;
  private readonly token = `pass_${randomUUID()}`;
  private readonly held: string[] = [];

  constructor(
    private readonly repo: BgRunRepo,
    private readonly claims: QueueClaims | null,
    private readonly now: number,
    private readonly holdMs: number,
  ) {}

  /** Up to `limit` due queued rows not handed out before in this pass (fewer when a page held rows not due). */
  async claimQueued(limit: number): Promise<Row[]> {
    if (this.done) return [];
    if (this.claims) {
      const r = await this.claims.claimQueued({ limit, now: this.now, token: this.token, holdUntil: this.now + this.holdMs });
      const items = r.items as Row[];
      for (const item of items) this.held.push(item.id);
      this.scanned += items.length;
      this.seeDue(r.nextDueAt);
      this.done = items.length < limit || this.scanned >= MAX_SCANNED;
      return items;
    }
    const page = await this.repo.list({ index: { name: 'status', value: 'queued' }, cursor: this.cursor, limit });
    this.scanned += page.items.length;
    this.cursor = page.next_cursor;
    this.done = !this.cursor || this.scanned >= MAX_SCANNED;
    const due: Row[] = [];
    for (const item of page.items) {
      const at = notBefore(item.value);
      if (at !== null && at > this.now) this.seeDue(at);
      else due.push(item);
    }
    return due;
  }

  /** Ends the holds of this pass (rows it claimed have left the queue; the others are free again). */
  async release(): Promise<void> {
    this.done = true;
    if (this.claims && this.held.length > 0) await this.claims.release(this.token, this.held.splice(0));
  }

  private seeDue(at: number | null): void {
    if (at !== null && (this.nextDueAt === null || at < this.nextDueAt)) this.nextDueAt = at;
  }
}
