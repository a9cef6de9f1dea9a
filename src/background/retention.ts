// Deleting background runs: every run of a deleted task (live ones cancelled first), and ended
// runs by retention (background.run_retention), in batches with their attempts, occurrence
// records and own workspace folders.
import type { BackgroundRunContext } from '../../machines/background-run.machine.js';
import type { BackgroundRun } from '../schemas/background.js';
import { isStoreError, type Versioned, type WriteOp } from '../store/store.js';
import { TERMINAL, WAITING, attemptRecordId, occurrenceRecordId, taskStatusKey, type BgRunRow } from './types.js';
import { absoluteWorkspace, isInside, taskNamespace } from './workspace.js';
import type { BackgroundDeps, Handle } from './host-types.js';
import type { RunWorkspaces } from './run-workspace.js';
import { repos } from '../store/repos/index.js';
import { isRefusal, swallow } from '../telemetry/swallowed.js';

/** What deletion needs of the engine that hosts the runs. */
export interface RetentionHost {
  handles: ReadonlyMap<string, Handle>;
  release(h: Handle, dead: boolean): void;
  contextOf(h: Handle): BackgroundRunContext;
  /** The task's in-flight entry is read again on next use. */
  forgetTask(taskId: string): void;
  /** The run's retry timer and resume watch stop. */
  clearRunTimers(runId: string): void;
  /** The run's outbox state is forgotten (its row is gone). */
  forgetRun(runId: string): void;
  workspaces: RunWorkspaces;
}

export class RunRetention {
  /**
   * Tasks the next sweep's count pass reads: those with a run that ended since the last sweep, and
   * those a caller asked for (every task at start and once an hour: manager.ts). An idle task is
   * not read: with 10,000 cron tasks, reading every task's counters each minute was 50,000 counter
   * reads (~1.4 s of CPU) a sweep. Holds task ids only, at most one entry per task.
   */
  private readonly toCount = new Set<string>();

  constructor(
    private readonly deps: BackgroundDeps,
    private readonly host: RetentionHost,
  ) {}

  /** A run of `taskId` ended, or was created ended (skipped by the overlap policy): the next sweep counts the task's runs. */
  runEnded(taskId: string): void {
    this.toCount.add(taskId);
  }

  /** The next sweep counts these tasks' runs too (every task at start, and now and then in case an end was not seen). */
  countAtNextSweep(taskIds: Iterable<string>): void {
    for (const id of taskIds) this.toCount.add(id);
  }

  /**
   * Deletes a task's runs (DELETE /background/tasks/{id}?delete_runs=true), cancelling live ones
   * first, then its workspace folders: the task's namespace background/<agent_id>/<task_id> in one
   * `rm -r`, plus the run folders of runs a shared template put elsewhere. Runs go in batches (one
   * commit per page of rows, their attempts and occurrence records included), not a commit each.
   */
  async deleteRunsOfTask(taskId: string, agentId: string | null, first?: { ops: WriteOp[]; then: () => void }): Promise<number> {
    let deleted = 0;
    // The caller's ops (the task's own delete) go into the first commit; on their own when there are no runs.
    let pending = first ?? null;
    const firstDone = () => {
      pending?.then();
      pending = null;
    };
    let idle = 0;
    const dirs = new Set<string>();
    this.host.forgetTask(taskId);
    for (;;) {
      const page = await repos(this.deps.store).bgRuns.list<BgRunRow>({ index: { name: 'task_id', value: taskId }, limit: 500 });
      if (page.items.length === 0) {
        if (pending) {
          await this.deps.store.commit(pending.ops);
          firstDone();
        }
        break;
      }
      await Promise.all(
        page.items.map(async (item) => {
          const h = this.host.handles.get(item.id);
          if (h) {
            // The chain's own steps report their failures; this only waits for them.
            await h.chain.catch(() => undefined);
            this.host.release(h, true);
          }
          const { run, internal } = item.value;
          // The run row goes away with its events; its agent run must not go on working unseen.
          if ((run.status === 'running' || WAITING.has(run.status)) && internal.agent_run_id) {
            await this.deps.runs
              .cancel(internal.agent_run_id)
              .catch(swallow('background.retention_cancel', { run_id: item.id, agent_run_id: internal.agent_run_id }, isRefusal));
          }
          this.host.clearRunTimers(item.id);
        }),
      );
      // The task is gone (its schedule row a tombstone): its occurrence records can never be
      // replayed. No CAS: a heartbeat or a claim that wrote since the page was read must not
      // keep its run alive (the handles were released above; a later write finds no row).
      const removed = await this.deleteRows(page.items, () => true, { fenced: false, extra: pending?.ops ?? [] });
      firstDone();
      deleted += removed.length;
      for (const r of removed) {
        const own = this.host.workspaces.ownFolderOf(r);
        if (own) dirs.add(own);
        // Claimed between the page read and the delete: its row is gone, its agent run must stop too.
        const late = this.host.handles.get(r.run_id);
        if (late) {
          const agentRunId = this.host.contextOf(late).internal.agent_run_id;
          this.host.release(late, true);
          if (agentRunId)
            void this.deps.runs.cancel(agentRunId, { direct: true }).catch(swallow('background.retention_cancel', { agent_run_id: agentRunId }, isRefusal));
        }
      }
      this.host.forgetTask(taskId);
      // The caller holds the task's job (dispatch and manual runs go through it) and the task is
      // deleted with the first page: no run of it can appear behind this page.
      if (page.items.length < 500 && removed.length === page.items.length) break;
      if (removed.length === 0 && ++idle >= 5) {
        this.deps.logger.warn({ task_id: taskId }, 'could not delete every run of a deleted task');
        break;
      }
    }
    const root = this.deps.config.background.workspace_root;
    const ns = agentId ? absoluteWorkspace(root, taskNamespace({ agent_id: agentId, task_id: taskId })) : null;
    if (ns) await this.host.workspaces.removeFolder(ns);
    for (const d of dirs) if (!ns || !isInside(ns, d)) await this.host.workspaces.removeFolder(d);
    return deleted;
  }

  /**
   * Deletes runs in batches: rows (with `fenced`, a CAS on the version read), their attempts and, when
   * `occurrenceDone` says the schedule consumed it, their occurrence record. Returns the rows
   * deleted. A batch refused because one row changed or vanished meanwhile is retried row by row.
   */
  private async deleteRows(
    rows: Versioned<BgRunRow>[],
    occurrenceDone: (run: BackgroundRun) => boolean,
    opts: { fenced: boolean; extra?: WriteOp[] } = { fenced: true },
  ): Promise<BackgroundRun[]> {
    const { store } = this.deps;
    const { bgRuns, bgAttempts, bgOccurrences } = repos(store);
    const attemptIds: string[] = [];
    const occIds: string[] = [];
    for (const r of rows) {
      const { run } = r.value;
      for (let n = 1; n <= run.attempt; n++) attemptIds.push(attemptRecordId(run.run_id, n));
      if (run.occurrence_id && occurrenceDone(run)) occIds.push(occurrenceRecordId(run.task_id, run.occurrence_id));
    }
    const [attempts, occs] = await Promise.all([
      attemptIds.length ? bgAttempts.getMany(attemptIds) : Promise.resolve([]),
      occIds.length ? bgOccurrences.getMany(occIds) : Promise.resolve([]),
    ]);
    const existingAttempts = new Set(attemptIds.filter((_, i) => attempts[i]));
    const existingOccs = new Set(occIds.filter((_, i) => occs[i]));
    const opsOf = (r: Versioned<BgRunRow>): WriteOp[] => {
      const { run } = r.value;
      const ops: WriteOp[] = [bgRuns.deleteOp(r.id, opts.fenced ? r.version : undefined)];
      for (let n = 1; n <= run.attempt; n++) {
        const id = attemptRecordId(run.run_id, n);
        if (existingAttempts.has(id)) ops.push(bgAttempts.deleteOp(id));
      }
      const occ = run.occurrence_id ? occurrenceRecordId(run.task_id, run.occurrence_id) : null;
      if (occ && existingOccs.has(occ)) ops.push(bgOccurrences.deleteOp(occ));
      return ops;
    };
    const gone = (r: Versioned<BgRunRow>) => {
      this.host.forgetRun(r.id);
      this.host.workspaces.deleted(r.id);
    };
    const extra = opts.extra ?? [];
    try {
      await store.commit([...extra, ...rows.flatMap(opsOf)]);
      rows.forEach(gone);
      return rows.map((r) => r.value.run);
    } catch (err) {
      if (!isStoreError(err, 'not_found') && !isStoreError(err, 'stale_version')) throw err;
    }
    // `extra` must not be lost with a refused batch (nor mistaken for the reason): on its own first.
    if (extra.length > 0) await store.commit(extra);
    const out: BackgroundRun[] = [];
    for (const r of rows) {
      try {
        await store.commit(opsOf(r));
        gone(r);
        out.push(r.value.run);
      } catch (err) {
        if (!isStoreError(err, 'not_found') && !isStoreError(err, 'stale_version')) throw err;
      }
    }
    return out;
  }

  /**
   * background.run_retention: deletes ended runs finished before `maxAgeMs` ago, and the oldest
   * ended runs of each task beyond `maxPerTask`, with their attempts, occurrence records (once the
   * schedule consumed them) and own workspace folders. Cheap enough to run every minute: the age
   * pass walks each ended status oldest first and stops at the first run created after the
   * cutoff; the count pass reads the per-status counters (one get each) of the tasks with a run
   * ended since the last sweep (`toCount`) and lists runs only for a task over its limit. At most
   * `budget` runs per sweep; the next one goes on, with the tasks this one did not finish.
   */
  async sweepRetention(opts: {
    maxAgeMs: number;
    maxPerTask: number;
    /** Whether a task exists: only existing tasks' runs are kept to maxPerTask. */
    isTask: (taskId: string) => boolean;
    occurrenceDone: (run: BackgroundRun) => boolean;
    budget?: number;
  }): Promise<number> {
    const { store } = this.deps;
    let budget = opts.budget ?? 5000;
    let deleted = 0;
    const cutoff = this.deps.clock.now() - opts.maxAgeMs;
    const drop = async (rows: Versioned<BgRunRow>[]) => {
      if (rows.length === 0) return;
      const removed = await this.deleteRows(rows, opts.occurrenceDone);
      deleted += removed.length;
      budget -= rows.length;
      for (const r of removed) {
        const own = this.host.workspaces.ownFolderOf(r);
        if (own) await this.host.workspaces.removeFolder(own);
      }
    };
    const endedAt = (run: BackgroundRun) => Date.parse(run.finished_at ?? run.triggered_at);
    for (const status of TERMINAL) {
      let cursor: string | null = null;
      scan: do {
        const page: { items: Versioned<BgRunRow>[]; next_cursor: string | null } = await repos(store).bgRuns.list<BgRunRow>({
          index: { name: 'status', value: status },
          cursor,
          limit: 200,
        });
        const old: Versioned<BgRunRow>[] = [];
        let stop = false;
        for (const item of page.items) {
          const { run } = item.value;
          // Creation order: a run created after the cutoff ended after it, and so did every later one.
          if (Date.parse(run.triggered_at) >= cutoff) {
            stop = true;
            break;
          }
          if (endedAt(run) < cutoff) old.push(item);
          if (old.length >= budget) break;
        }
        await drop(old);
        if (stop || budget <= 0) break scan;
        cursor = page.next_cursor;
      } while (cursor);
      if (budget <= 0) return deleted;
    }
    // Taken now: runs ending during this sweep put their tasks in the fresh set, for the next one.
    const due = [...this.toCount];
    this.toCount.clear();
    let i = 0;
    try {
      for (; i < due.length; i++) {
        const taskId = due[i];
        if (budget <= 0) {
          this.countAtNextSweep(due.slice(i));
          break;
        }
        if (!opts.isTask(taskId)) continue;
        // All of the task's runs (one counter read) bound its ended ones: most tasks are under the
        // limit, and the first sweep after a start (and one an hour) counts every task, so
        // 10,000 tasks cost 10,000 reads there instead of 40,000 (one per ended status).
        if ((await repos(store).bgRuns.count({ name: 'task_id', value: taskId })) <= opts.maxPerTask) continue;
        const counts = await Promise.all([...TERMINAL].map((st) => repos(store).bgRuns.count({ name: 'task_status', value: taskStatusKey(taskId, st) })));
        let excess = counts.reduce((a, b) => a + b, 0) - opts.maxPerTask;
        let cursor: string | null = null;
        while (excess > 0 && budget > 0) {
          const page: { items: Versioned<BgRunRow>[]; next_cursor: string | null } = await repos(store).bgRuns.list<BgRunRow>({
            index: { name: 'task_id', value: taskId },
            cursor,
            limit: Math.min(500, Math.max(50, excess)),
          });
          const old = page.items.filter((item) => TERMINAL.has(item.value.run.status) && !this.host.handles.has(item.id)).slice(0, Math.min(excess, budget));
          await drop(old);
          excess -= old.length;
          if (!page.next_cursor) break;
          cursor = page.next_cursor;
        }
        // Out of budget (or runs in hand among the oldest): the next sweep looks at this task again.
        if (excess > 0) this.toCount.add(taskId);
      }
    } catch (err) {
      // A store error mid-pass: this task and those not reached yet wait for the next sweep.
      this.countAtNextSweep(due.slice(i));
      throw err;
    }
    return deleted;
  }
}
