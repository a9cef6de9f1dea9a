// Evaluations (docs/contract.md §3.7): a batch of past runs, each replayed against one variant
// (src/runtime/debug/), scored, and summed up. Durable: the evaluation and one item per run are
// records; the instance that drives an evaluation holds a lease on it (a lapsed one is taken over,
// the rule of machines/policies/lease.ts), and each item's replay run id is fixed when the item is
// made, so a replay cut off by a crash is found again (and continued by the orphan sweep, from its
// recording) and never started a second time: the run's creating write refuses a second create.
import type { LeaseClock } from '../../lease-clock.js';
import type { Clock } from '../../clock.js';
import { domainError, HttpValidationFailure, notFound } from '../../errors.js';
import { newId } from '../../ids.js';
import { isSharedStore } from '../../store/changes.js';
import { repos } from '../../store/repos/index.js';
import { isStoreError, type Page, type Store, type WriteOp } from '../../store/store.js';
import type { AppLogger } from '../../telemetry/logger.js';
import { swallow } from '../../telemetry/swallowed.js';
import { TERMINAL_RUN_STATUSES, WAITING_RUN_STATUSES, type RunRecord } from '../run-record.js';
import type { StartedRun, StartOptions } from '../run-types.js';
import type { ReplayVariant } from '../debug/origin.js';
import type { ReplayRequest, StoredRun } from '../debug/runs-debug.js';
import { EvalDrive } from './eval-drive.js';
import { aggregatesOf, evalIndexes, itemId, itemIndexes, replayRunId, type EvalItem, type EvalRecord, type Scorer } from './eval-types.js';
import { selectRuns, type EvalSource } from './eval-source.js';
import { GLOBAL_SCOPE, visibleIn, type TenantScope } from '../tenancy.js';

export interface EvalDeps {
  store: Store;
  clock: Clock;
  /** The one clock leases are written and judged on (src/lease-clock.ts), as for runs. */
  leases: LeaseClock;
  workerId: string;
  logger: AppLogger;
  runs: {
    start(query: string, sessionId: string | null | undefined, opts?: StartOptions): Promise<StartedRun>;
    onSettled(listener: (record: RunRecord) => void): () => void;
  };
  /** The original's replay (RunsDebug.replay), from the original as read ahead. */
  replay(runId: string, body: ReplayRequest, original: StoredRun): Promise<StartedRun>;
  /** Runs as stored (RunsDebug.readMany): an evaluation reads its next items' originals ahead. */
  readRuns(runIds: string[]): Promise<Array<StoredRun | null>>;
  /**
   * How long the driving instance's lease on an evaluation lasts without renewal (renewed three
   * times in it); another instance takes over once it lapsed. runs.lease_seconds: the same time
   * as a run's, so a dead instance's evaluations and their replay runs are taken over together.
   */
  leaseMs?: number;
  /** How often an idle instance looks for evaluations to drive (at most every 5 s). */
  scanMs?: number;
  /** Checks a `model` variant as a registered agent's model_config is checked (a 422 otherwise), before anything is stored. */
  checkModel(modelConfig: Record<string, unknown>): Promise<unknown>;
}

export interface EvalCreate {
  name: string;
  source: EvalSource;
  variant: ReplayVariant;
  tools?: 'recorded' | 'live';
  concurrency?: number;
  scorer?: Scorer | null;
}

const DEFAULT_LEASE_MS = 30_000;
const SETTLED_RUN_STATUSES: ReadonlySet<string> = new Set([...TERMINAL_RUN_STATUSES, ...WAITING_RUN_STATUSES]);
/** How often an idle instance looks for evaluations to drive (one whose owner died, a new one elsewhere). */
const MAX_SCAN_MS = 5_000;
/** How often an item whose replay another process runs is read again. */
const POLL_MS = 250;
/** Items made per commit. */
const ITEM_BATCH = 250;

export class EvalService {
  private readonly driving = new Map<string, Promise<void>>();
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private readonly waiters = new Map<string, Array<(r: RunRecord) => void>>();
  private unsubscribe: () => void = () => {};

  constructor(private readonly deps: EvalDeps) {}

  private get leaseMs(): number {
    return this.deps.leaseMs ?? DEFAULT_LEASE_MS;
  }

  private get r() {
    return repos(this.deps.store);
  }

  private now(): string {
    return new Date(this.deps.clock.now()).toISOString();
  }

  start(): void {
    this.unsubscribe = this.deps.runs.onSettled((rec) => {
      const ws = this.waiters.get(rec.run_id);
      if (!ws) return;
      this.waiters.delete(rec.run_id);
      for (const w of ws) w(rec);
    });
    this.timer = setInterval(() => void this.scan(), Math.min(MAX_SCAN_MS, this.deps.scanMs ?? MAX_SCAN_MS));
    this.timer.unref();
    void this.scan();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.unsubscribe();
    for (const ws of this.waiters.values()) for (const w of ws) w(null as unknown as RunRecord);
    this.waiters.clear();
  }

  // ------------------------------------------------------------------ requests

  /** `scope`: a request acting in a tenant evaluates that tenant's runs only, and owns the evaluation. */
  async create(body: EvalCreate, scope: TenantScope = GLOBAL_SCOPE): Promise<EvalRecord> {
    // A model config that could carry a key (`api_key`) or name a host the operator did not list is refused before it is stored.
    if (body.variant.model) await this.deps.checkModel(body.variant.model);
    const runs = await selectRuns(this.deps.store, body.source, scope);
    if (runs.length === 0) throw new HttpValidationFailure([{ loc: ['body', 'source'], msg: 'no run matches the source', type: 'value_error' }]);
    const now = this.now();
    const eval_id = newId('eval');
    const rec: EvalRecord = {
      eval_id,
      name: body.name,
      status: 'queued',
      variant: body.variant,
      tools: body.tools ?? 'recorded',
      concurrency: body.concurrency ?? 4,
      scorer: body.scorer ?? null,
      total: runs.length,
      created_at: now,
      updated_at: now,
      ended_at: null,
      owner: null,
      lease_expires_at: null,
      error: null,
      ...(scope.tenant ? { tenant: scope.tenant } : {}),
    };
    const items: WriteOp[] = runs.map((run, index) => {
      const item: EvalItem = {
        eval_id,
        index,
        run_id: run.run_id,
        replay_run_id: replayRunId(eval_id, index),
        status: 'pending',
        changed: null,
        score: null,
        token_delta: null,
        cost_delta_usd: null,
        original_outcomes: run.outcomes.map((o) => ({ label: o.label, reward: o.reward })),
        replay_status: null,
        error: null,
      };
      return this.r.evalItems.createOp(itemId(eval_id, index), item, itemIndexes(item));
    });
    // Items first, the evaluation last: nobody drives an evaluation whose items are not all there.
    for (let i = 0; i < items.length; i += ITEM_BATCH) await this.deps.store.commit(items.slice(i, i + ITEM_BATCH));
    await this.r.evals.create(eval_id, rec, evalIndexes(rec));
    void this.scan();
    return rec;
  }

  /** The evaluation when `scope` may see it: another tenant's is not found, as one that does not exist. */
  private async visible(evalId: string, scope: TenantScope) {
    const rec = await this.r.evals.get(evalId);
    if (!rec || !visibleIn(scope, rec.value.tenant)) throw notFound('eval', evalId);
    return rec;
  }

  async get(evalId: string, scope: TenantScope = GLOBAL_SCOPE): Promise<{ record: EvalRecord; items: EvalItem[] }> {
    const rec = await this.visible(evalId, scope);
    return { record: rec.value, items: await this.items(evalId) };
  }

  async progress(e: EvalRecord): Promise<{ total: number; done: number; failed: number }> {
    const count = (s: string) => this.r.evalItems.count({ name: 'eval_status', value: `${e.eval_id}:${s}` });
    const [done, failed] = await Promise.all([count('done'), count('failed')]);
    return { total: e.total, done, failed };
  }

  async list(limit: number, cursor: string | null, scope: TenantScope = GLOBAL_SCOPE): Promise<{ evals: EvalRecord[]; next_cursor: string | null }> {
    const index = scope.all ? undefined : { name: 'tenant', value: scope.tenant ?? '' };
    const page = await this.r.evals.list({ ...(index ? { index } : {}), limit, cursor, reverse: true });
    return { evals: page.items.map((i) => i.value), next_cursor: page.next_cursor };
  }

  async cancel(evalId: string, scope: TenantScope = GLOBAL_SCOPE): Promise<EvalRecord> {
    const rec = await this.visible(evalId, scope);
    if (rec.value.status !== 'queued' && rec.value.status !== 'running') throw domainError('AGT_ERR_EVAL_ENDED', [evalId, rec.value.status]);
    // Replays already started finish (each at most once); no new one starts.
    return this.finish(evalId, 'cancelled');
  }

  async delete(evalId: string, scope: TenantScope = GLOBAL_SCOPE): Promise<void> {
    await this.visible(evalId, scope);
    // The evaluation goes first (nobody drives it any more), then its items. Replay runs stay: they are runs.
    await this.r.evals.delete(evalId);
    for (;;) {
      const page = await this.r.evalItems.list({ index: { name: 'eval_id', value: evalId }, limit: 500 });
      if (page.items.length === 0) break;
      await this.deps.store.commit(page.items.map((i) => this.r.evalItems.deleteOp(i.id)));
    }
  }

  aggregates = aggregatesOf;

  private async items(evalId: string): Promise<EvalItem[]> {
    const out: EvalItem[] = [];
    let cursor: string | null = null;
    do {
      const page: Page<EvalItem> = await this.r.evalItems.list({ index: { name: 'eval_id', value: evalId }, limit: 1000, cursor });
      out.push(...page.items.map((i) => i.value));
      cursor = page.next_cursor;
    } while (cursor);
    return out.sort((a, b) => a.index - b.index);
  }

  // ------------------------------------------------------------------ driving

  /** Takes every evaluation that waits or whose owner's lease lapsed, and drives it. */
  private async scan(): Promise<void> {
    if (this.stopped) return;
    for (const status of ['queued', 'running'] as const) {
      const page = await this.r.evals.list({ index: { name: 'status', value: status }, limit: 100 }).catch(swallow('evals.scan'));
      for (const e of page?.items ?? []) {
        if (this.driving.has(e.id)) continue;
        const v = e.value;
        // Only one process opens an embedded store: another owner there is a process that died
        // (this one restarted), so its evaluations are taken at once, not after its lease.
        const ownerMayLive = isSharedStore(this.deps.store) && v.owner !== null && v.owner !== this.deps.workerId;
        if (ownerMayLive && !this.deps.leases.lapsed(v.lease_expires_at)) continue;
        const claimed = await this.r.evals
          .update(
            e.id,
            { ...v, status: 'running', owner: this.deps.workerId, lease_expires_at: this.leaseEnd(), updated_at: this.now() },
            e.version,
            evalIndexes({ ...v, status: 'running' }),
          )
          .catch(() => null); // another instance took it first
        if (!claimed) continue;
        const run = this.drive(e.id).catch((err: unknown) => this.deps.logger.error({ err: String(err), eval_id: e.id }, 'evaluation driver failed'));
        this.driving.set(
          e.id,
          run.finally(() => this.driving.delete(e.id)),
        );
      }
    }
  }

  private leaseEnd(): string {
    return this.deps.leases.expiresAt(this.leaseMs);
  }

  /** Replays the evaluation's items, `concurrency` at a time, until none is left; then completes it (eval-drive.ts). */
  private drive(evalId: string): Promise<void> {
    const { store, clock, workerId, runs, replay, readRuns } = this.deps;
    return new EvalDrive(
      {
        store,
        clock,
        workerId,
        leaseMs: this.leaseMs,
        stopped: () => this.stopped,
        leaseEnd: () => this.leaseEnd(),
        startRun: (query, sessionId, opts) => runs.start(query, sessionId, opts),
        replay,
        readRuns,
        settledRun: (runId, statuses) => this.settledRun(runId, statuses),
        finish: (id, status) => this.finish(id, status),
      },
      evalId,
    ).run();
  }

  /**
   * Resolves once the run has one of `statuses` (by default: ended or waiting for a person),
   * wherever it runs (a recovered replay is continued by the sweep).
   */
  private settledRun(runId: string, statuses: ReadonlySet<string> = SETTLED_RUN_STATUSES): Promise<RunRecord> {
    return new Promise<RunRecord>((resolve, reject) => {
      let done = false;
      const finish = (r: RunRecord | null) => {
        if (done) return;
        done = true;
        clearInterval(timer);
        if (r) resolve(r);
        else reject(new Error('the evaluation stopped'));
      };
      // Settling in another status (a pause before the end) keeps waiting.
      const waiter = (r: RunRecord | null) => {
        if (r && !statuses.has(r.status)) this.waiters.set(runId, [...(this.waiters.get(runId) ?? []), waiter]);
        else finish(r);
      };
      this.waiters.set(runId, [...(this.waiters.get(runId) ?? []), waiter]);
      const timer = setInterval(() => {
        if (this.stopped) return finish(null);
        void this.r.runs.get(runId).then(
          (rec) => {
            if (rec && statuses.has(rec.value.status)) finish(rec.value);
          },
          swallow('evals.poll_run', { run_id: runId }),
        );
      }, POLL_MS);
      timer.unref();
    });
  }

  /**
   * The item's judge run's score. The judge run is the evaluation's: its origin names it, so it
   * reserves and settles against the evaluation's budget (budgets.eval) and pauses and asks when
   * that runs out, like the replays; its id is fixed (judgeRunId), so at most one per item.
   */
  private async finish(evalId: string, status: 'completed' | 'cancelled'): Promise<EvalRecord> {
    for (let i = 0; ; i++) {
      const cur = await this.r.evals.get(evalId);
      if (!cur) throw notFound('eval', evalId);
      const now = this.now();
      const next: EvalRecord = { ...cur.value, status, ended_at: now, updated_at: now, owner: null, lease_expires_at: null };
      try {
        await this.r.evals.update(evalId, next, cur.version, evalIndexes(next));
        return next;
      } catch (err) {
        if (!isStoreError(err, 'stale_version') || i >= 9) throw err;
      }
    }
  }
}
