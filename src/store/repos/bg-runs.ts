// Background run rows (kind `bg_runs`) and the claim of queued ones. The claimer asks for due
// queued rows a page at a time, in queue order: the `queue_order` index (a queued run's priority
// rank, src/background/types.ts queueRank), then creation order, so higher priority first and
// equal priorities first come, first served. A store several instances share takes them with one
// statement that skips rows another claimer holds (StoreCapabilities.queueClaims: PostgreSQL), a
// store one process owns is walked on that index (ListQuery.sortedBy; the claimer is the only
// one), and what a walk listed is kept for the next passes (QueuedRunBuffer), so claiming one run
// does not list the queue again.
import { randomUUID } from 'node:crypto';
import { decodeSortedCursor, sortedCursor, type QueueClaims, type Store, type Versioned } from '../store.js';
import { KindRepo } from './kind-repo.js';
import type { ValueOf } from './values.js';

type Row = Versioned<ValueOf<'bg_runs'>>;

/** The index of queued runs in claim order (written by src/background/types.ts runRowIndexes; pg-claim.ts walks it too). */
export const QUEUE_ORDER_INDEX = 'queue_order';

/** At most this many rows are read by one pass (a queue of runs blocked by their task's policy is not walked whole). */
const MAX_SCANNED = 2000;

/** Most run ids a QueuedRunBuffer holds (ids only: ~100 KB at most). */
const BUFFER_MAX = 2000;

/** Rows a buffered scan lists at once: a listing serves this many claims, not one. */
const LIST_BATCH = 32;

/** What the store reads of a row to decide it is due (the background-run machine's context). */
const notBefore = (value: unknown): number | null => {
  const at = (value as { internal?: { not_before?: string | null } }).internal?.not_before;
  return at ? Date.parse(at) : null;
};

/**
 * The `queue_order` index value of a queued run: its place by priority (higher first), as three
 * digits (priority 100 -> `000`, 0 -> `100`, -100 -> `200`); the store lists it sorted by this
 * value, then by creation order (ListQuery.sortedBy), so equal priorities are first come, first
 * served. A run stored without a priority counts as 0.
 */
export function queueRank(priority: number | null | undefined): string {
  const p = Math.max(-100, Math.min(100, Math.trunc(priority ?? 0)));
  return String(100 - p).padStart(3, '0');
}

/** A listed queued row's `queue_order` value (the store listed it under it), for the buffer's cursor. */
const rankOf = (value: ValueOf<'bg_runs'>): string => queueRank(value.run.priority);

export class BgRunRepo extends KindRepo<'bg_runs'> {
  constructor(store: Store) {
    super(store, 'bg_runs');
  }

  /**
   * Starts a claim pass at `now` (the lease clock, src/lease-clock.ts). Rows a shared store hands out are held for
   * the pass until `now + holdMs`, or until `release()`.
   */
  claimPass(now: number, holdMs: number, buffer?: QueuedRunBuffer, ahead?: HeldAhead): QueueClaimPass {
    const claims = this.store.capabilities.queueClaims ?? null;
    // Only where this process is the queue's one claimer: elsewhere another instance takes rows
    // between two passes, and a shared store's claim statement holds what it hands out.
    const own = claims === null && !this.store.capabilities.sharedByInstances;
    return new QueueClaimPass(this, claims, now, holdMs, own ? (buffer ?? null) : null, claims ? (ahead ?? null) : null);
  }

  /** Ends the holds of rows held ahead (the claimer stops: they go back to the queue at once). */
  releaseAhead(ahead: HeldAhead): Promise<void> {
    return ahead.release(this.store.capabilities.queueClaims ?? null);
  }
}

/**
 * The queued runs earlier claim passes listed, kept across passes by the one claimer of a store
 * this process owns, so that claiming one run does not list the queue again (an index scan: a
 * trip through LevelDB's thread pool, and a parse of every row of the page).
 *
 * `ids` is a prefix of the queue in its order: every row that was queued, up to the index entry
 * `cursor`, when it was listed, minus rows known to have left it. Each pass reads the rows again
 * by id (the row cache answers for rows this process wrote: no disk read) and drops those no
 * longer queued; the claim itself is still the row's CAS write, so a row cancelled, deleted or
 * claimed meanwhile is never run. Rows created later sort after `cursor` (a new row's seq is
 * larger than every seq already written) and are listed when a pass walks past the buffer, unless
 * their priority is higher than the last listed row's: the claimer reports every new queued run
 * (arrived()), and such a one drops the buffer. A row
 * that comes BACK to the queue keeps its old place, maybe inside the prefix: the engine calls
 * drop() then (RunEngine.afterWrite), and so does the claimer on any doubt (a claim that did not
 * happen, a failed pass), and the claimer drops it once it is a second old, so a way back to
 * the queue nobody reported delays a run by that much at most, never for good.
 * Dropped, the next pass lists from the head of the queue again.
 */
export class QueuedRunBuffer {
  ids: string[] = [];
  /** The index cursor of the last listed entry: listing resumes after it (null: from the head). */
  cursor: string | null = null;
  /** Bumped by drop(): a pass that began before a drop stops using the buffer. */
  generation = 0;
  /** When (the claimer's clock) the buffer was first listed from the head of the queue; null while empty. */
  since: number | null = null;

  drop(): void {
    this.ids = [];
    this.cursor = null;
    this.since = null;
    this.generation++;
  }

  /**
   * A run was queued with this `queue_order` rank: one of higher priority than the buffer's last
   * listed row sorts inside the buffer, so the next pass lists the queue from its head. Equal or
   * lower priority sorts after it (its seq is larger), where a pass lists anyway.
   */
  arrived(rank: string): void {
    if (this.cursor !== null && rank < decodeSortedCursor(this.cursor).value) this.drop();
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
  /** Rows handed to this pass and not carried ahead, with the token of the pass that holds them (an earlier one's, for a row carried ahead). */
  private readonly held = new Map<string, string>();
  /** A statement of this pass found fewer due rows than it asked for: the queue has no more now (no top-up). */
  private exhausted = false;
  /** Buffered scan: the buffer's generation at the start of the pass, the next id to read, ids that left the queue. */
  private readonly generation: number;
  private pos = 0;
  private readonly gone = new Set<string>();
  /** Listed rows still extend the buffer (every row listed so far this pass went into it). */
  private extending = true;
  /** Where this pass's listing goes on (undefined: after the buffer). */
  private listCursor: string | null | undefined = undefined;

  constructor(
    private readonly repo: BgRunRepo,
    private readonly claims: QueueClaims | null,
    private readonly now: number,
    private readonly holdMs: number,
    private readonly buffer: QueuedRunBuffer | null = null,
    private readonly ahead: HeldAhead | null = null,
  ) {
    this.generation = buffer?.generation ?? 0;
  }

  /** The store holds what it hands out (queueClaims: PostgreSQL): every row handed out is due, and held from other instances' claimers until release. */
  get holds(): boolean {
    return this.claims !== null;
  }

  /** A buffer is in use (a store this process owns): `limit` is then the rows the caller wants, not a page size. */
  get buffered(): boolean {
    return this.buffer !== null;
  }

  /**
   * The caller claims this row: it leaves the buffer (the caller drops the buffer if the claim does
   * not happen). On a store that holds rows, the claim's own row write ends its hold (PostgreSQL's
   * write_round, migration 005), so release() leaves it out.
   */
  taken(id: string): void {
    this.gone.add(id);
  }

  /** The claim of a row `taken` did not happen (refused, or not tried): release() ends its hold. */
  untaken(id: string): void {
    this.gone.delete(id);
  }

  /** Up to `limit` due queued rows not handed out before in this pass (fewer when a page held rows not due). */
  async claimQueued(limit: number): Promise<Row[]> {
    if (this.done) return [];
    if (this.buffer) return this.fromBuffer(limit);
    if (this.claims) {
      // Rows an earlier pass held ahead go first: they are the head of the queue as that pass saw it.
      // Those no longer are (or whose hold runs out soon) are released first, so this statement
      // can hand them out again, in their place.
      if (this.ahead) await this.ahead.prune(this.claims, this.now, this.holdMs);
      const carried = this.ahead ? this.ahead.take(limit, this.held) : [];
      if (carried.length > 0) return carried;
      // One statement asks for the free workers' rows and for what the held-ahead rows lack.
      const extra = this.ahead ? this.ahead.room() : 0;
      const items = await this.hold(limit + extra);
      this.done = items.length < limit + extra || this.scanned >= MAX_SCANNED;
      const mine = items.slice(0, limit);
      for (const item of mine) this.held.set(item.id, this.token);
      this.ahead?.carry(items.slice(limit), this.token, this.now + this.holdMs);
      return mine;
    }
    const page = await this.repo.list({ sortedBy: QUEUE_ORDER_INDEX, cursor: this.cursor, limit });
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

  /**
   * The buffered scan: the buffer's rows first, read again by id, then the queue after the
   * buffer, listed at least LIST_BATCH rows at a time; listed ids join the buffer (up to BUFFER_MAX).
   */
  private async fromBuffer(limit: number): Promise<Row[]> {
    const buf = this.buffer!;
    // Dropped during this pass (a run came back to the queue): the pass ends, and whoever
    // dropped it asks for a new one.
    const dropped = (): boolean => {
      if (buf.generation !== this.generation) this.done = true;
      return this.done;
    };
    if (dropped()) return [];
    const due: Row[] = [];
    if (this.pos < buf.ids.length) {
      const ids = buf.ids.slice(this.pos, this.pos + limit);
      this.pos += ids.length;
      this.scanned += ids.length;
      const rows = await this.repo.getMany(ids);
      if (dropped()) return [];
      if (this.scanned >= MAX_SCANNED) this.done = true;
      rows.forEach((row, i) => {
        if (!row || row.value.run.status !== 'queued') this.gone.add(ids[i]);
        else this.keepIfDue(row, due);
      });
      return due;
    }
    const cursor = this.listCursor === undefined ? buf.cursor : this.listCursor;
    if (cursor === null && buf.since === null) buf.since = this.now;
    const page = await this.repo.list({ sortedBy: QUEUE_ORDER_INDEX, cursor, limit: Math.min(100, Math.max(limit, LIST_BATCH)) });
    if (dropped()) return [];
    this.scanned += page.items.length;
    this.listCursor = page.next_cursor;
    this.done = !page.next_cursor || this.scanned >= MAX_SCANNED;
    for (const item of page.items) {
      // Once one listed row does not fit, none after it joins: the buffer stays a prefix of the queue.
      if (this.extending && buf.ids.length < BUFFER_MAX) {
        buf.ids.push(item.id);
        buf.cursor = sortedCursor(rankOf(item.value), item.seq);
        this.pos = buf.ids.length;
      } else this.extending = false;
      this.keepIfDue(item, due);
    }
    return due;
  }

  private keepIfDue(row: Row, due: Row[]): void {
    const at = notBefore(row.value);
    if (at !== null && at > this.now) this.seeDue(at);
    else due.push(row);
  }

  /**
   * Ends the holds of this pass: rows it claimed left the queue, and their claims' writes ended
   * their holds; the rows handed out and not claimed are free again. A pass that claimed every
   * row it was handed (the usual one: it asks for one row per free worker) sends nothing.
   */
  async release(): Promise<void> {
    this.done = true;
    const unclaimed = [...this.held].filter(([id]) => !this.gone.has(id));
    this.held.clear();
    if (this.claims && unclaimed.length > 0) await releaseHeld(this.claims, unclaimed);
    const buf = this.buffer;
    if (buf && buf.generation === this.generation && this.gone.size > 0) buf.ids = buf.ids.filter((id) => !this.gone.has(id));
  }

  /**
   * Claim ahead: after the pass issued its claims (their writes are on their way), the held-ahead
   * rows are topped up with one more statement, so the pass after the next run ends finds its row
   * here, with no statement of its own between two runs. Only once half of them are used, so a
   * busy process fetches them in batches; not after a statement found the queue empty.
   */
  async topUp(): Promise<void> {
    const ahead = this.ahead;
    if (!this.claims || !ahead || this.exhausted || this.scanned >= MAX_SCANNED) return;
    await ahead.prune(this.claims, this.now, this.holdMs);
    if (!ahead.wantsMore()) return;
    const want = ahead.room();
    ahead.carry(await this.hold(want), this.token, this.now + this.holdMs);
  }

  /** One claim statement: up to `limit` due queued rows, held for this pass's token. */
  private async hold(limit: number): Promise<Row[]> {
    const r = await this.claims!.claimQueued({ limit, now: this.now, token: this.token, holdUntil: this.now + this.holdMs });
    const items = r.items as Row[];
    this.scanned += items.length;
    this.seeDue(r.nextDueAt);
    if (items.length < limit) this.exhausted = true;
    return items;
  }

  private seeDue(at: number | null): void {
    if (at !== null && (this.nextDueAt === null || at < this.nextDueAt)) this.nextDueAt = at;
  }
}

/** Ends holds, each under the token of the pass that took it. */
async function releaseHeld(claims: QueueClaims, held: Iterable<[string, string]>): Promise<void> {
  const byToken = new Map<string, string[]>();
  for (const [id, token] of held) byToken.set(token, [...(byToken.get(token) ?? []), id]);
  await Promise.all([...byToken].map(([token, ids]) => claims.release(token, ids)));
}

/**
 * Claim ahead, on a store that holds what it hands out (PostgreSQL): queued rows a claim pass held
 * beyond its free workers, kept (still queued, still held from other instances' claimers) for the
 * next passes, which claim them first with no claim statement of their own, as pg-boss's worker
 * fetches a batch of jobs and Graphile Worker a batch of its queue. So at concurrency 1 the
 * statement that finds run N+1 runs while run N's claim is written, not between run N's end and
 * run N+1's claim. The rows are not claimed: nothing of them is written, they count in no
 * worker's share (background.concurrency bounds what runs, as before), a cancel meanwhile just
 * writes the row (which ends the hold) and the claim's CAS then fails. A row is used only while
 * half its hold is left (the hold is the lease-like bound: a process that dies holding rows frees
 * them when it lapses), and every held row goes back at once when the queue's order may have
 * changed under it (a run back in the queue, one of higher priority queued) and when the
 * claimer stops (release()).
 */
export class HeldAhead {
  /** In queue order: the row as the claim statement returned it, its hold's token and end (lease clock). */
  private rows: Array<{ row: Row; token: string; until: number }> = [];
  /** The queue's order may have changed: the next pass releases every held row instead of using it. */
  private stale = false;

  /** `max`: rows held ahead at most (0: none; set by the claimer from background.concurrency). */
  constructor(public max = 0) {}

  get size(): number {
    return this.rows.length;
  }

  /** Rows the next claim statement may add. */
  room(): number {
    return Math.max(0, this.max - this.rows.length);
  }

  carry(rows: Row[], token: string, until: number): void {
    for (const row of rows) this.rows.push({ row, token, until });
  }

  /** A run came back to the queue, or one of this rank was queued: held rows it sorts before are no longer the queue's head. */
  reordered(rank?: string): void {
    if (rank === undefined || this.rows.some((r) => rankOf(r.row.value) > rank)) this.stale = true;
  }

  /** The row left the queue (its write ended the hold). */
  forget(id: string): void {
    this.rows = this.rows.filter((r) => r.row.id !== id);
  }

  /** Up to `limit` held rows for a pass, which then holds them (`held`: the pass releases those it does not claim). */
  take(limit: number, held: Map<string, string>): Row[] {
    const out = this.rows.splice(0, limit);
    for (const r of out) held.set(r.row.id, r.token);
    return out.map((r) => r.row);
  }

  /** At most half are left: a top-up is due. */
  wantsMore(): boolean {
    return this.max > 0 && this.rows.length * 2 <= this.max && this.room() > 0;
  }

  /** Ends every hold (the claimer stopped). */
  async release(claims: QueueClaims | null): Promise<void> {
    const rows = this.rows.splice(0);
    if (claims && rows.length > 0)
      await releaseHeld(
        claims,
        rows.map((r) => [r.row.id, r.token] as [string, string]),
      );
  }

  /** Releases the rows past half their hold, or every row when the queue's order changed under them. */
  async prune(claims: QueueClaims, now: number, holdMs: number): Promise<void> {
    const keep = this.rows.filter((r) => !this.stale && r.until - now > holdMs / 2);
    const drop = this.rows.filter((r) => !keep.includes(r));
    this.rows = keep;
    this.stale = false;
    if (drop.length > 0)
      await releaseHeld(
        claims,
        drop.map((r) => [r.row.id, r.token] as [string, string]),
      );
  }
}
