// One evaluation's drive (src/runtime/evals/eval-service.ts starts one for each evaluation this
// instance holds): its items replayed `concurrency` at a time until none is left, then completed.
//
// Kept busy, since a replay with a fast model is bound by store round trips, not by CPU: a slot
// is held only while an item's replay (and its judge) runs, and the item's outcome is written
// after the slot is freed; the next items are claimed a round ahead in the background (one
// commit for several), and their originals read then (one read of the records and one of the
// snapshots for all of them), so a freed slot starts the next replay with everything in hand.
import { notFound } from '../../errors.js';
import { repos } from '../../store/repos/index.js';
import { isStoreError, type Store, type Versioned } from '../../store/store.js';
import type { Clock } from '../../clock.js';
import { swallow } from '../../telemetry/swallowed.js';
import { TERMINAL_RUN_STATUSES, WAITING_RUN_STATUSES, type RunRecord } from '../run-record.js';
import type { StartedRun, StartOptions } from '../run-types.js';
import type { ReplayRequest, StoredRun } from '../debug/runs-debug.js';
import { itemId, itemIndexes, judgeRunId, judgeScore, scoreOf, type EvalItem, type EvalRecord } from './eval-types.js';

/** What a drive needs of the evaluation service. */
export interface DriveHost {
  store: Store;
  clock: Clock;
  workerId: string;
  leaseMs: number;
  stopped(): boolean;
  leaseEnd(): string;
  startRun(query: string, sessionId: string | null, opts: StartOptions): Promise<StartedRun>;
  /** The original's replay, from the original as read ahead. */
  replay(runId: string, body: ReplayRequest, original: StoredRun): Promise<StartedRun>;
  readRuns(runIds: string[]): Promise<Array<StoredRun | null>>;
  /** Resolves once the run has one of `statuses` (default: ended or waiting for a person), wherever it runs. */
  settledRun(runId: string, statuses?: ReadonlySet<string>): Promise<RunRecord>;
  finish(evalId: string, status: 'completed'): Promise<unknown>;
}

/**
 * An item this drive holds, with its version as written, whether its replay cannot exist yet,
 * and its original as read ahead (undefined: that read failed, read it again; null: no such run).
 */
interface ClaimedItem {
  item: EvalItem;
  version: number;
  fresh: boolean;
  original: Promise<StoredRun | null | undefined>;
}

type Outcome = Partial<EvalItem>;

export class EvalDrive {
  /** Items holding a slot (their replay runs). */
  private readonly running = new Set<Promise<void>>();
  /** Items not yet written (running ones included): at most twice `concurrency`. */
  private readonly writing = new Set<Promise<void>>();
  /** Items claimed ahead, not started; given back if the drive stops first. */
  private readonly ahead: ClaimedItem[] = [];
  /** Ids of the items this drive holds (claimed, not yet written). */
  private readonly claimed = new Set<string>();
  private refill: Promise<void> | null = null;
  /** A claim found nothing left to claim. */
  private exhausted = false;
  private woken = false;
  private wake: () => void = () => {
    this.woken = true;
  };
  private lastBeat: number;

  constructor(
    private readonly host: DriveHost,
    private readonly evalId: string,
  ) {
    this.lastBeat = host.clock.now();
  }

  private get r() {
    return repos(this.host.store);
  }

  async run(): Promise<void> {
    try {
      await this.loop();
    } finally {
      await this.refill;
      await this.giveBack();
    }
    await Promise.all([...this.writing]);
  }

  private async loop(): Promise<void> {
    for (;;) {
      if (this.host.stopped()) return;
      const rec = await this.r.evals.get(this.evalId);
      if (!rec || rec.value.status !== 'running' || rec.value.owner !== this.host.workerId) return; // cancelled, deleted or taken over
      const e = rec.value;
      if (this.host.clock.now() - this.lastBeat > this.host.leaseMs / 3) {
        this.lastBeat = this.host.clock.now();
        await this.r.evals.update(this.evalId, { ...e, lease_expires_at: this.host.leaseEnd() }, rec.version).catch(() => undefined);
      }
      // Fewer than a round claimed ahead: claim the next ones in the background.
      if (this.ahead.length < e.concurrency && !this.refill && !this.exhausted) this.claimAhead(e);
      let room = Math.min(e.concurrency - this.running.size, 2 * e.concurrency - this.writing.size);
      // A free slot and nothing claimed: nothing to start until the claim lands.
      if (room > 0 && this.ahead.length === 0 && this.refill) {
        await this.refill;
        room = Math.min(e.concurrency - this.running.size, 2 * e.concurrency - this.writing.size);
      }
      for (const claimed of this.ahead.splice(0, Math.max(0, room))) this.start(e, claimed);
      if (this.exhausted && !this.refill && this.ahead.length === 0 && this.writing.size === 0) {
        await this.host.finish(this.evalId, 'completed');
        return;
      }
      await this.idle();
    }
  }

  /** Until an item frees its slot or is written, a claim lands, or a lease beat is due. */
  private idle(): Promise<void> {
    if (this.woken) {
      this.woken = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => this.wake(), this.host.leaseMs / 3);
      timer.unref();
      this.wake = () => {
        clearTimeout(timer);
        this.wake = () => {
          this.woken = true;
        };
        resolve();
      };
    });
  }

  private claimAhead(e: EvalRecord): void {
    // With nothing held, items a previous owner left running first (their replay may exist).
    const orphansToo = this.writing.size === 0 && this.ahead.length === 0;
    this.refill = this.nextItems(2 * e.concurrency - this.ahead.length, orphansToo)
      .then(
        (items) => {
          // Nothing pending and no orphan: done once the items held are written. (A claim of
          // pending ones only may come back empty while a previous owner's items still wait.)
          if (items.length === 0 && orphansToo) this.exhausted = true;
          this.ahead.push(...items);
        },
        swallow('evals.claim', { eval_id: this.evalId }),
      )
      .finally(() => {
        this.refill = null;
        this.wake();
      });
  }

  /** The item's replay in a slot; its outcome is written once the slot is free again. */
  private start(e: EvalRecord, claimed: ClaimedItem): void {
    const id = itemId(e.eval_id, claimed.item.index);
    const outcome = this.replayItem(e, claimed).catch((err: unknown): Outcome => ({
      status: 'failed',
      error: err instanceof Error ? err.message : String(err),
    }));
    const slot: Promise<void> = outcome.then(() => {
      this.running.delete(slot);
      this.wake();
    });
    this.running.add(slot);
    const written: Promise<void> = outcome
      .then((o) => this.settleItem(id, claimed, o))
      .catch(swallow('evals.item_write', { eval_id: e.eval_id }))
      .finally(() => {
        this.claimed.delete(id);
        this.writing.delete(written);
        // What waits on a write: the end, the bound on items not yet written, a claim of orphans (none held).
        if (this.exhausted || this.writing.size + 1 >= 2 * e.concurrency || this.running.size === 0) this.wake();
      });
    this.writing.add(written);
  }

  /** Items claimed ahead but not started go back to pending (best effort: a later driver takes a running one as an orphan anyway). */
  private async giveBack(): Promise<void> {
    for (const { item, version } of this.ahead.splice(0)) {
      const id = itemId(item.eval_id, item.index);
      const pending = { ...item, status: 'pending' as const };
      await this.r.evalItems.update(id, pending, version, itemIndexes(pending)).catch(swallow('evals.give_back', { eval_id: item.eval_id }));
      this.claimed.delete(id);
    }
  }

  /**
   * Up to `room` items this drive now holds: with `orphansToo`, those a previous owner left
   * running (their replay may exist), then pending ones, claimed (`fresh`: no replay of it can
   * exist yet, since a replay starts only after its item's claim). Their originals are read now.
   */
  private async nextItems(room: number, orphansToo: boolean): Promise<ClaimedItem[]> {
    const out: Array<Omit<ClaimedItem, 'original'>> = [];
    const statuses = orphansToo ? (['running', 'pending'] as const) : (['pending'] as const);
    for (const status of statuses) {
      if (out.length >= room) break;
      const page = await this.r.evalItems.list({ index: { name: 'eval_status', value: `${this.evalId}:${status}` }, limit: room + this.claimed.size });
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
      const all = await this.host.store
        .commit(running.map(({ it, next }) => this.r.evalItems.updateOp(it.id, next, it.version, itemIndexes(next))))
        .catch(() => null);
      for (const [k, { it, next }] of running.entries()) {
        const written = all ? all[k] : await this.r.evalItems.update(it.id, next, it.version, itemIndexes(next)).catch(() => null);
        if (!written) continue;
        out.push({ item: next, version: written.version, fresh: true });
        this.claimed.add(it.id);
      }
    }
    if (out.length === 0) return [];
    const originals = this.host.readRuns(out.map((c) => c.item.run_id)).catch(() => null);
    return out.map((c, k) => ({ ...c, original: originals.then((all) => (all ? all[k] : undefined)) }));
  }

  private async replayItem(e: EvalRecord, { item, original: ahead, fresh }: ClaimedItem): Promise<Outcome> {
    const read = await ahead;
    const original = read === undefined ? (await this.host.readRuns([item.run_id]))[0] : read;
    if (!original) throw notFound('run', item.run_id);
    let replay = await this.replayOnce(e, item, fresh, original);
    // A replay that waits for a person (its eval budget ran out: budgets.eval; a live call asks
    // for approval) stays the item's until it ends: the person decides, the run resumes on any
    // instance, then the item is scored.
    if (WAITING_RUN_STATUSES.has(replay.status)) replay = await this.host.settledRun(replay.run_id, TERMINAL_RUN_STATUSES);
    const o = original.record;
    let score = scoreOf(e.scorer, o.response, replay.response);
    if (e.scorer?.type === 'judge' && replay.response !== null) score = await this.judge(e, item, o, replay);
    return {
      status: 'done',
      changed: (replay.response ?? '') !== (o.response ?? ''),
      score,
      token_delta: replay.usage.total_tokens - o.usage.total_tokens,
      cost_delta_usd: replay.usage.estimated_cost_usd - o.usage.estimated_cost_usd,
      replay_status: replay.status,
      error: null,
    };
  }

  /** The item's one replay run, as it settles: started here if it does not exist yet, else awaited. */
  private async replayOnce(e: EvalRecord, item: EvalItem, fresh: boolean, original: StoredRun): Promise<RunRecord> {
    const existing = fresh ? null : await this.r.runs.get(item.replay_run_id);
    if (!existing) {
      try {
        const started = await this.host.replay(item.run_id, { variant: e.variant, tools: e.tools, eval_id: e.eval_id, run_id: item.replay_run_id }, original);
        return await started.settled;
      } catch (err) {
        // Created meanwhile (by a previous owner's start that landed): never a second one.
        if (!isStoreError(err, 'conflict')) throw err;
      }
    }
    return this.host.settledRun(item.replay_run_id);
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
      const started = await this.host.startRun(prompt, null, {
        run_id,
        agent_id: e.scorer.agent_id,
        origin: { eval_id: e.eval_id },
        ...(original.tenant ? { tenant: original.tenant } : {}),
      });
      judged = await started.settled;
    } catch (err) {
      // Started by a previous owner of the item (a crash before its score was written): await that one.
      if (!isStoreError(err, 'conflict')) throw err;
      judged = await this.host.settledRun(run_id);
    }
    if (WAITING_RUN_STATUSES.has(judged.status)) judged = await this.host.settledRun(run_id, TERMINAL_RUN_STATUSES);
    return judgeScore(judged.response);
  }

  /**
   * Writes the item's outcome. First on the item as this drive claimed it (no read: nothing else
   * writes an item while its drive holds it); on a stale version, on a fresh read.
   */
  private async settleItem(id: string, claimed: { item: EvalItem; version: number }, patch: Outcome): Promise<void> {
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
}
