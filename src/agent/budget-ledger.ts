// The budget ledger (docs/contract.md §5): reserve-then-settle on every covering key, all-or-none.
//
// Each (ledger key, meter) is one record of kind 'budget_ledger', id `<key>|<meter>`, created on
// first use. A reservation reads every covering entry, checks them all, and writes them all in ONE
// `store.commit` whose update ops name the versions read. Two writers that read the same version
// cannot both commit (the loser gets 'stale_version', re-reads and re-checks), so concurrent runs
// on one key never overspend, across processes too. Inside one process an ordered per-record lock
// queues writers first, so a burst of runs on one session does not turn into a CAS retry storm.
//
// Every reservation also writes a small record `reservation|<reservation_id>` (same kind,
// index `reservation_run` = run id) in the same commit. It is what makes the operations
// idempotent under replay (architecture fact 3: a promise actor saved while active runs again):
// reserve finds it and returns it, settle/release find it gone and do nothing. It also lets a
// resumed or recovered run drop the holds of its dead attempt by run id (`releaseRun`).

import type { Clock } from '../clock.js';
import type { Store, Versioned, WriteOp } from '../store/store.js';
import { casUpdate, CasExhaustedError } from '../store/cas.js';
import { repos, type Repos } from '../store/repos/index.js';
import {
  BUDGET_METERS,
  BUDGET_SCOPES,
  checkReserve,
  coveringBudgets,
  crossesWarn,
  findLimit,
  ledgerRecordId,
  parseLedgerKey,
  remainingOf,
  usageRatio,
  type BudgetMeter,
  type BudgetScope,
  type BudgetShortfall,
  type BudgetsConfig,
  type BudgetSubject,
  type BudgetWindow,
  type CoveringBudget,
  type MeterAmounts,
  type OnExhausted,
} from '../../machines/policies/budget.js';

const RESERVATION_PREFIX = 'reservation|';
/** Index on reservation records only: lets `releaseRun` find a run's holds without a scan. */
const RUN_INDEX = 'reservation_run';
/** How many applied grant ids an entry remembers (grant idempotency under replay). */
const GRANT_IDS_KEPT = 200;

/** Stored value of one ledger entry. */
export interface LedgerEntryValue {
  scope: BudgetScope;
  meter: BudgetMeter;
  window: BudgetWindow;
  /** `total`, `YYYY-MM-DD` or `YYYY-MM`. */
  period: string;
  identity: string;
  key: string;
  /** The configured limit when last written; reads use the current config's limit. */
  limit: number;
  granted: number;
  spent: number;
  reserved: number;
  /** reservation_id -> amount held on this entry. */
  holds: Record<string, number>;
  /** Set in the commit that crossed `warn_at`, so `budget_warning` is emitted once per entry. */
  warned: boolean;
  grant_ids: string[];
}

export interface ReservationHold {
  /** Entry record id `<key>|<meter>`. */
  id: string;
  key: string;
  scope: BudgetScope;
  meter: BudgetMeter;
  amount: number;
}

export interface Reservation {
  reservation_id: string;
  run_id: string;
  session_id: string;
  agent_id: string;
  /** The instant the windows were resolved at; settle hits the same day/month keys even after midnight. */
  now_ms: number;
  holds: ReservationHold[];
}

export interface ReserveRequest {
  /**
   * Make it deterministic for the call it guards (e.g. `<run_id>:<attempt>:<step>`), so a replayed
   * reserve finds the reservation it already made instead of holding twice.
   */
  reservation_id: string;
  run_id: string;
  session_id: string;
  agent_id: string;
  /** The run's tenant: its tenant budgets cover it (none without). */
  tenant?: string | null;
  /** The evaluation the run is a replay for: its eval budgets cover it (none without). */
  eval_id?: string | null;
  /** Meters to hold. Only entries whose meter is named are touched; 0 holds nothing but lets settle count actual use. */
  amounts: MeterAmounts;
  /** Defaults to the ledger's clock. */
  nowMs?: number;
  /**
   * Awaited before a reservation is written (not when nothing is budgeted, so nothing is written):
   * a run whose own record may not be written yet waits there until it may (a background run's
   * agent run, until its claim is stored: src/runtime/persistence.ts RecordWriter.mayWrite). When
   * it rejects, nothing is held.
   */
  beforeWrite?: () => Promise<void>;
}

/** A `warn_at` crossing; the caller emits `budget_warning` with it. */
export interface BudgetWarning {
  key: string;
  scope: BudgetScope;
  meter: BudgetMeter;
  window: BudgetWindow;
  limit: number;
  granted: number;
  spent: number;
  reserved: number;
  ratio: number;
  warn_at: number;
}

export type ReserveResult =
  { ok: true; reservation: Reservation; warnings: BudgetWarning[]; replayed: boolean } | { ok: false; shortfall: BudgetShortfall; on_exhausted: OnExhausted };

export interface SettleResult {
  /** False when there was no such reservation (already settled or released): nothing changed. */
  applied: boolean;
  warnings: BudgetWarning[];
}

/** One entry as GET /runs/{run_id}/budget shows it (docs/contract.md §5). */
export interface BudgetEntryView {
  scope: BudgetScope;
  meter: BudgetMeter;
  window: BudgetWindow;
  key: string;
  limit: number;
  granted: number;
  spent: number;
  reserved: number;
  /** limit + granted - spent - reserved; negative when a call used more than it reserved. */
  remaining: number;
}

export type BudgetLedgerErrorCode = 'contention' | 'unknown_budget' | 'invalid_amount';

export class BudgetLedgerError extends Error {
  constructor(
    readonly code: BudgetLedgerErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'BudgetLedgerError';
  }
}

export interface BudgetLedgerOptions {
  /** CAS attempts per operation before giving up with 'contention'. Default 64. */
  maxAttempts?: number;
  /** Upper bound of the randomized backoff between attempts, in ms. Default 20. */
  maxBackoffMs?: number;
}

/**
 * Queues async work per record id in this process. Locks are taken in sorted order, so two
 * operations over overlapping key sets cannot deadlock (run+session vs session+agent, ...).
 */
class OrderedLocks {
  private readonly tails = new Map<string, Promise<void>>();

  async run<T>(ids: string[], fn: () => Promise<T>): Promise<T> {
    const releases: Array<() => void> = [];
    try {
      for (const id of [...new Set(ids)].sort()) releases.push(await this.acquire(id));
      return await fn();
    } finally {
      for (const release of releases.reverse()) release();
    }
  }

  private async acquire(id: string): Promise<() => void> {
    const prev = this.tails.get(id) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => {
      release = resolve;
    });
    const tail = prev.then(() => mine);
    this.tails.set(id, tail);
    await prev;
    return () => {
      release();
      if (this.tails.get(id) === tail) this.tails.delete(id);
    };
  }
}

const reservationRecordId = (reservationId: string): string => `${RESERVATION_PREFIX}${reservationId}`;

function freshEntry(c: CoveringBudget): LedgerEntryValue {
  return {
    scope: c.scope,
    meter: c.meter,
    window: c.window,
    period: c.period,
    identity: c.identity,
    key: c.key,
    limit: c.limit,
    granted: 0,
    spent: 0,
    reserved: 0,
    holds: {},
    warned: false,
    grant_ids: [],
  };
}

function cloneEntry(v: LedgerEntryValue): LedgerEntryValue {
  return { ...v, holds: { ...v.holds }, grant_ids: [...(v.grant_ids ?? [])], warned: v.warned ?? false };
}

function validAmounts(amounts: MeterAmounts, what: string): void {
  for (const [meter, n] of Object.entries(amounts)) {
    if (!(BUDGET_METERS as readonly string[]).includes(meter)) throw new BudgetLedgerError('invalid_amount', `${what}: unknown meter '${meter}'`);
    if (n !== undefined && (typeof n !== 'number' || !Number.isFinite(n) || n < 0)) {
      throw new BudgetLedgerError('invalid_amount', `${what}: ${meter} must be a finite number >= 0`);
    }
  }
}

export class BudgetLedger {
  private readonly locks = new OrderedLocks();
  private readonly maxAttempts: number;
  private readonly maxBackoffMs: number;
  /** Kind `budget_ledger`: the entries (`<key>|<meter>`) and the reservations (indexed by run). */
  private readonly ledger: Repos['budgetLedger'];

  constructor(
    private readonly store: Store,
    private readonly config: BudgetsConfig | undefined,
    private readonly clock: Clock,
    options: BudgetLedgerOptions = {},
  ) {
    this.maxAttempts = options.maxAttempts ?? 64;
    this.maxBackoffMs = options.maxBackoffMs ?? 20;
    this.ledger = repos(store).budgetLedger;
    this.budgeted = BUDGET_SCOPES.some((scope) => (config?.[scope]?.length ?? 0) > 0);
  }

  /**
   * False when no budget is configured at all: then nothing is ever held (reserve writes nothing)
   * and settle / release / releaseRun return at once instead of looking for holds, which takes
   * two or three store round trips off every run. Holds written under an earlier configuration
   * that had budgets stay where they are until one is configured again.
   */
  private readonly budgeted: boolean;

  /** True when some budget is configured (fixed for the process): runs reserve before each call. */
  get isBudgeted(): boolean {
    return this.budgeted;
  }

  /** The budgets covering a run right now (or at `nowMs`). */
  covering(subject: Omit<BudgetSubject, 'nowMs'> & { nowMs?: number }): CoveringBudget[] {
    return coveringBudgets(this.config, { ...subject, nowMs: subject.nowMs ?? this.clock.now() });
  }

  async reserve(req: ReserveRequest): Promise<ReserveResult> {
    validAmounts(req.amounts, 'reserve');
    const nowMs = req.nowMs ?? this.clock.now();
    const covering = coveringBudgets(this.config, { ...req, nowMs }).filter((c) => req.amounts[c.meter] !== undefined);
    const resId = reservationRecordId(req.reservation_id);
    const base: Reservation = {
      reservation_id: req.reservation_id,
      run_id: req.run_id,
      session_id: req.session_id,
      agent_id: req.agent_id,
      now_ms: nowMs,
      holds: [],
    };
    // Nothing budgeted for these meters: nothing to hold, nothing to settle, no write at all.
    if (covering.length === 0) return { ok: true, reservation: base, warnings: [], replayed: false };

    await req.beforeWrite?.();
    const ids = covering.map((c) => c.id);
    return this.locks.run([resId, ...ids], () =>
      this.withRetries<ReserveResult>('reserve', async () => {
        const [resRec, ...recs] = await this.ledger.getMany<unknown>([resId, ...ids]);
        if (resRec) return { ok: true, reservation: resRec.value as Reservation, warnings: [], replayed: true };

        const before = covering.map((c, i) => {
          const v = recs[i] ? cloneEntry(recs[i]!.value as LedgerEntryValue) : freshEntry(c);
          v.limit = c.limit; // config is the source of truth for the limit
          return v;
        });
        const check = checkReserve(
          before.map((v, i) => ({ ...v, on_exhausted: covering[i].on_exhausted })),
          req.amounts,
        );
        if (!check.ok) return { ok: false, shortfall: check.shortfall, on_exhausted: covering[check.index].on_exhausted };

        const warnings: BudgetWarning[] = [];
        const ops: WriteOp[] = [];
        const reservation: Reservation = { ...base, holds: [] };
        covering.forEach((c, i) => {
          const amount = req.amounts[c.meter] ?? 0;
          const prev = before[i];
          const next = cloneEntry(prev);
          next.reserved += amount;
          next.holds[req.reservation_id] = amount;
          this.noteWarning(c.warn_at, prev, next, warnings);
          ops.push(this.writeOp(c.id, next, recs[i] as Versioned<unknown> | null));
          reservation.holds.push({ id: c.id, key: c.key, scope: c.scope, meter: c.meter, amount });
        });
        ops.push(this.ledger.createOp(resId, reservation, { [RUN_INDEX]: req.run_id }));
        await this.store.commit(ops);
        return { ok: true, reservation, warnings, replayed: false };
      }),
    );
  }

  /**
   * Ends a reservation at the real usage: per held entry, reserved -= hold and spent += actual.
   * An actual above the hold still counts in full (it is what was used). A meter missing from
   * `actual` is charged its held amount, the conservative reading of "usage unknown".
   */
  async settle(target: Reservation | string, actual: MeterAmounts): Promise<SettleResult> {
    validAmounts(actual, 'settle');
    return this.finish(target, (meter, hold) => actual[meter] ?? hold, 'settle');
  }

  /** Drops a reservation's holds without spending (a dead attempt's call that never completed). */
  async release(target: Reservation | string): Promise<SettleResult> {
    return this.finish(target, () => 0, 'release');
  }

  /** Releases every reservation a run still holds (resume / recovery of a dead attempt). Returns how many. */
  async releaseRun(runId: string): Promise<number> {
    if (!this.budgeted) return 0;
    let released = 0;
    for (;;) {
      const page = await this.ledger.list<Reservation>({ index: { name: RUN_INDEX, value: runId }, limit: 100 });
      if (page.items.length === 0) return released;
      for (const rec of page.items) {
        if ((await this.release(rec.value.reservation_id)).applied) released++;
      }
      // Released records are deleted, so the next first page holds whatever is left.
    }
  }

  /**
   * Adds `amount` to a key's `granted` for one meter (a person's budget grant). Creates the entry
   * when the refused reservation never wrote it. `grant_id` (e.g. the budget request id) makes a
   * replayed grant a no-op.
   */
  async grant(key: string, meter: BudgetMeter, amount: number, opts: { grant_id?: string } = {}): Promise<BudgetEntryView> {
    if (!Number.isFinite(amount) || amount <= 0) throw new BudgetLedgerError('invalid_amount', 'grant amount must be a finite number > 0');
    const parsed = parseLedgerKey(key);
    const line = parsed ? findLimit(this.config, parsed.scope, parsed.window, meter) : null;
    if (!parsed || !line) throw new BudgetLedgerError('unknown_budget', `no configured ${meter} budget for key '${key}'`);
    const id = ledgerRecordId(key, meter);
    const covering: CoveringBudget = {
      key,
      id,
      scope: parsed.scope,
      identity: parsed.identity,
      meter,
      window: parsed.window,
      period: parsed.period,
      limit: line.limit,
      on_exhausted: line.on_exhausted ?? 'pause',
      warn_at: line.warn_at ?? 0.8,
    };
    return this.locks.run([id], () =>
      this.withRetries('grant', async () => {
        const rec = await this.ledger.get<LedgerEntryValue>(id);
        const next = rec ? cloneEntry(rec.value) : freshEntry(covering);
        next.limit = line.limit;
        if (opts.grant_id !== undefined && next.grant_ids.includes(opts.grant_id)) return view(next);
        next.granted += amount;
        if (opts.grant_id !== undefined) next.grant_ids = [...next.grant_ids, opts.grant_id].slice(-GRANT_IDS_KEPT);
        await this.store.commit([this.writeOp(id, next, rec as Versioned<unknown> | null)]);
        return view(next);
      }),
    );
  }

  /** The §5 entries covering a run, zero-valued where nothing was written yet. */
  async entriesForRun(subject: Omit<BudgetSubject, 'nowMs'> & { nowMs?: number }): Promise<BudgetEntryView[]> {
    const covering = this.covering(subject);
    if (covering.length === 0) return [];
    const recs = await this.ledger.getMany<LedgerEntryValue>(covering.map((c) => c.id));
    return covering.map((c, i) => {
      const v = recs[i] ? cloneEntry(recs[i]!.value) : freshEntry(c);
      v.limit = c.limit;
      return view(v);
    });
  }

  /** One stored entry by key and meter, or null (tests, diagnostics). */
  async getEntry(key: string, meter: BudgetMeter): Promise<(LedgerEntryValue & { version: number }) | null> {
    const rec = await this.ledger.get<LedgerEntryValue>(ledgerRecordId(key, meter));
    return rec ? { ...cloneEntry(rec.value), version: rec.version } : null;
  }

  private async finish(target: Reservation | string, spend: (meter: BudgetMeter, hold: number) => number, what: string): Promise<SettleResult> {
    if (!this.budgeted || (typeof target !== 'string' && target.holds.length === 0)) return { applied: false, warnings: [] };
    const reservationId = typeof target === 'string' ? target : target.reservation_id;
    const resId = reservationRecordId(reservationId);
    const first = await this.ledger.get<Reservation>(resId);
    if (!first) return { applied: false, warnings: [] };
    const holds = first.value.holds;
    const ids = holds.map((h) => h.id);
    return this.locks.run([resId, ...ids], () =>
      this.withRetries<SettleResult>(what, async () => {
        const [resRec, ...recs] = await this.ledger.getMany<unknown>([resId, ...ids]);
        if (!resRec) return { applied: false, warnings: [] };
        const ops: WriteOp[] = [];
        const warnings: BudgetWarning[] = [];
        holds.forEach((h, i) => {
          const rec = recs[i] as Versioned<LedgerEntryValue> | null;
          if (!rec) return; // an entry deleted by an operator: nothing left to settle against
          const prev = cloneEntry(rec.value);
          const held = prev.holds[reservationId];
          if (held === undefined) return;
          const next = cloneEntry(prev);
          next.reserved = Math.max(0, next.reserved - held);
          next.spent += spend(h.meter, held);
          delete next.holds[reservationId];
          const line = findLimit(this.config, prev.scope, prev.window, prev.meter);
          if (line) next.limit = line.limit;
          this.noteWarning(line?.warn_at ?? 0.8, prev, next, warnings);
          ops.push(this.writeOp(h.id, next, rec as Versioned<unknown>));
        });
        ops.push(this.ledger.deleteOp(resId, resRec.version));
        await this.store.commit(ops);
        return { applied: true, warnings };
      }),
    );
  }

  private noteWarning(warnAt: number, prev: LedgerEntryValue, next: LedgerEntryValue, out: BudgetWarning[]): void {
    if (next.warned || !crossesWarn(prev, next, warnAt)) return;
    next.warned = true;
    out.push({
      key: next.key,
      scope: next.scope,
      meter: next.meter,
      window: next.window,
      limit: next.limit,
      granted: next.granted,
      spent: next.spent,
      reserved: next.reserved,
      ratio: usageRatio(next),
      warn_at: warnAt,
    });
  }

  private writeOp(id: string, value: LedgerEntryValue, rec: Versioned<unknown> | null): WriteOp {
    return this.ledger.putOp(id, value, rec);
  }

  private async withRetries<T>(what: string, attempt: () => Promise<T>): Promise<T> {
    try {
      // Randomized, growing backoff (2, 4, 8 … ms, at most maxBackoffMs and 32): writers from other
      // processes that collided stop colliding.
      return await casUpdate(attempt, {
        attempts: this.maxAttempts,
        baseDelayMs: 2,
        maxDelayMs: Math.min(this.maxBackoffMs, 32),
        retryOn: ['stale_version', 'conflict'],
      });
    } catch (e) {
      if (e instanceof CasExhaustedError) throw new BudgetLedgerError('contention', `budget ${what}: gave up after ${e.attempts} conflicting writes`);
      throw e;
    }
  }
}

function view(v: LedgerEntryValue): BudgetEntryView {
  return {
    scope: v.scope,
    meter: v.meter,
    window: v.window,
    key: v.key,
    limit: v.limit,
    granted: v.granted,
    spent: v.spent,
    reserved: v.reserved,
    remaining: remainingOf(v),
  };
}
