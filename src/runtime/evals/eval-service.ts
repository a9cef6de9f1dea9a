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
import { isStoreError, type Page, type Store, type Versioned, type WriteOp } from '../../store/store.js';
import type { AppLogger } from '../../telemetry/logger.js';
import { swallow } from '../../telemetry/swallowed.js';
import { TERMINAL_RUN_STATUSES, WAITING_RUN_STATUSES, type RunRecord } from '../run-record.js';
import type { StartedRun, StartOptions } from '../run-types.js';
import type { ReplayVariant } from '../debug/origin.js';
import type { ReplayRequest } from '../debug/runs-debug.js';
import {
  aggregatesOf,
  evalIndexes,
  itemId,
  itemIndexes,
  judgeRunId,
  judgeScore,
  replayRunId,
  scoreOf,
  type EvalItem,
  type EvalRecord,
  type Scorer,
} from './eval-types.js';
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
  replay(runId: string, body: ReplayRequest): Promise<StartedRun>;
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

/** An item this driver holds, with its version as written and whether its replay cannot exist yet. */
interface ClaimedItem {
  item: EvalItem;
  version: number;
  fresh: boolean;
}

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

  /** Replays the evaluation's items, `concurrency` at a time, until none is left; then completes it. */
  private async drive(evalId: string): Promise<void> {
    const inflight = new Set<Promise<void>>();
    // Items claimed ahead, up to one round of `concurrency`: one claim commit serves several item
    // starts instead of one commit per start (nextItems). Given back if the drive stops first.
    const ahead: ClaimedItem[] = [];
    let lastBeat = this.deps.clock.now();
    try {
      await this.driveLoop(evalId, inflight, ahead, lastBeat);
    } finally {
      await this.giveBack(ahead);
    }
    await Promise.all(inflight);
  }

  private async driveLoop(evalId: string, inflight: Set<Promise<void>>, ahead: ClaimedItem[], lastBeat: number): Promise<void> {
    for (;;) {
      if (this.stopped) break;
      const rec = await this.r.evals.get(evalId);
      if (!rec || rec.value.status !== 'running' || rec.value.owner !== this.deps.workerId) break; // cancelled, deleted or taken over
      const e = rec.value;
      if (this.deps.clock.now() - lastBeat > this.leaseMs / 3) {
        lastBeat = this.deps.clock.now();
        await this.r.evals.update(evalId, { ...e, lease_expires_at: this.leaseEnd() }, rec.version).catch(() => undefined);
      }
      // Items a previous owner left running first (their replay may exist), then pending ones.
      const room = e.concurrency - inflight.size;
      if (room > 0) {
        if (ahead.length < room) ahead.push(...(await this.nextItems(evalId, room + e.concurrency - ahead.length, inflight.size === 0 && ahead.length === 0)));
        const next = ahead.splice(0, room);
        for (const claimed of next) {
          const p: Promise<void> = this.runItem(e, claimed).finally(() => inflight.delete(p));
          inflight.add(p);
        }
        if (next.length === 0 && inflight.size === 0) {
          await this.finish(evalId, 'completed');
          break;
        }
      }
      if (inflight.size > 0) await Promise.race([...inflight, new Promise((r) => setTimeout(r, this.leaseMs / 3).unref())]);
    }
  }

  /** Items claimed ahead but not started go back to pending (best effort: a later driver takes a running one as an orphan anyway). */
  private async giveBack(ahead: ClaimedItem[]): Promise<void> {
    for (const { item, version } of ahead.splice(0)) {
      const id = itemId(item.eval_id, item.index);
      const pending = { ...item, status: 'pending' as const };
      await this.r.evalItems.update(id, pending, version, itemIndexes(pending)).catch(swallow('evals.give_back', { eval_id: item.eval_id }));
      this.claimed.delete(id);
    }
  }

  private readonly claimed = new Set<string>();

  /**
   * Up to `room` items this driver now holds: with `orphansToo`, those a previous owner left
   * running (their replay may exist), then pending ones, claimed (`fresh`: no replay of it can
   * exist yet, since a replay starts only after its item's claim). `version`: the item's as written.
   */
  private async nextItems(evalId: string, room: number, orphansToo: boolean): Promise<ClaimedItem[]> {
    const out: ClaimedItem[] = [];
    const statuses = orphansToo ? (['running', 'pending'] as const) : (['pending'] as const);
    for (const status of statuses) {
      if (out.length >= room) break;
      const page = await this.r.evalItems.list({ index: { name: 'eval_status', value: `${evalId}:${status}` }, limit: room + this.claimed.size });
      const fresh = page.items.filter((it) => !this.claimed.has(it.id)).slice(0, room - out.length);
      if (status === 'running') {
        for (const it of fresh) {
          out.push({ item: it.value, version: it.version, fresh: false });
          this.claimed.add(it.id);
        }
        continue;
      }
      // pending -> running: every item of the page in one commit (one group-commit round, not one
      // per item); when another instance took one of them meanwhile, each is claimed on its own.
      const running = fresh.map((it) => ({ it, next: { ...it.value, status: 'running' as const } }));
      const all = await this.deps.store
        .commit(running.map(({ it, next }) => this.r.evalItems.updateOp(it.id, next, it.version, itemIndexes(next))))
        .catch(() => null);
      for (const [k, { it, next }] of running.entries()) {
        const written = all ? all[k] : await this.r.evalItems.update(it.id, next, it.version, itemIndexes(next)).catch(() => null);
        if (!written) continue;
        out.push({ item: next, version: written.version, fresh: true });
        this.claimed.add(it.id);
      }
    }
    return out;
  }

  private async runItem(e: EvalRecord, { item, version, fresh }: ClaimedItem): Promise<void> {
    const id = itemId(e.eval_id, item.index);
    try {
      const original = await this.r.runs.get(item.run_id);
      if (!original) throw notFound('run', item.run_id);
      let replay = await this.replayOnce(e, item, fresh);
      // A replay that waits for a person (its eval budget ran out: budgets.eval; a live call asks
      // for approval) stays the item's until it ends: the person decides, the run resumes on any
      // instance, then the item is scored.
      if (WAITING_RUN_STATUSES.has(replay.status)) replay = await this.settledRun(replay.run_id, TERMINAL_RUN_STATUSES);
      const o = original.value;
      let score = scoreOf(e.scorer, o.response, replay.response);
      if (e.scorer?.type === 'judge' && replay.response !== null) score = await this.judge(e, item, o, replay);
      await this.settleItem(
        id,
        { item, version },
        {
          status: 'done',
          changed: (replay.response ?? '') !== (o.response ?? ''),
          score,
          token_delta: replay.usage.total_tokens - o.usage.total_tokens,
          cost_delta_usd: replay.usage.estimated_cost_usd - o.usage.estimated_cost_usd,
          replay_status: replay.status,
          error: null,
        },
      );
    } catch (err) {
      await this.settleItem(id, { item, version }, { status: 'failed', error: err instanceof Error ? err.message : String(err) }).catch(
        swallow('evals.item_failed', { eval_id: e.eval_id }),
      );
    } finally {
      this.claimed.delete(id);
    }
  }

  /** The item's one replay run, as it settles: started here if it does not exist yet, else awaited. */
  private async replayOnce(e: EvalRecord, item: EvalItem, fresh: boolean): Promise<RunRecord> {
    const existing = fresh ? null : await this.r.runs.get(item.replay_run_id);
    if (!existing) {
      try {
        const started = await this.deps.replay(item.run_id, { variant: e.variant, tools: e.tools, eval_id: e.eval_id, run_id: item.replay_run_id });
        return await started.settled;
      } catch (err) {
        // Created meanwhile (by a previous owner's start that landed): never a second one.
        if (!isStoreError(err, 'conflict')) throw err;
      }
    }
    return this.settledRun(item.replay_run_id);
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
  private async judge(e: EvalRecord, item: EvalItem, original: RunRecord, replay: RunRecord): Promise<number | null> {
    if (e.scorer?.type !== 'judge') return null;
    const prompt =
      `Score from 0 to 1 how well the second answer does the task compared with the first. Answer with the number only.\n\n` +
      `Task: ${original.query}\n\nFirst answer:\n${original.response ?? ''}\n\nSecond answer:\n${replay.response ?? ''}`;
    const run_id = judgeRunId(e.eval_id, item.index);
    let judged: RunRecord;
    try {
      // The judge's run is the evaluation's tenant's (its agent: the tenant's own, else shared).
      const started = await this.deps.runs.start(prompt, null, {
        run_id,
        agent_id: e.scorer.agent_id,
        origin: { eval_id: e.eval_id },
        ...(original.tenant ? { tenant: original.tenant } : {}),
      });
      judged = await started.settled;
    } catch (err) {
      // Started by a previous owner of the item (a crash before its score was written): await that one.
      if (!isStoreError(err, 'conflict')) throw err;
      judged = await this.settledRun(run_id);
    }
    if (WAITING_RUN_STATUSES.has(judged.status)) judged = await this.settledRun(run_id, TERMINAL_RUN_STATUSES);
    return judgeScore(judged.response);
  }

  /**
   * Writes the item's outcome. First on the item as this driver claimed it (no read: nothing else
   * writes an item while its driver holds it); on a stale version, on a fresh read.
   */
  private async settleItem(id: string, claimed: { item: EvalItem; version: number }, patch: Partial<EvalItem>): Promise<void> {
    let cur: Pick<Versioned<EvalItem>, 'value' | 'version'> | null = { value: claimed.item, version: claimed.version };
    for (let i = 0; i < 10; i++) {
      if (!cur) return; // deleted with its evaluation
      const next = { ...cur.value, ...patch };
      try {
        await this.r.evalItems.update(id, next, cur.version, itemIndexes(next));
        return;
      } catch (err) {
        if (!isStoreError(err, 'stale_version')) throw err;
      }
      cur = await this.r.evalItems.get(id);
    }
  }

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
