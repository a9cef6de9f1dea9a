// The overlap cache: in-flight runs per task, so an overlap decision needs no store read per
// occurrence. Kept by every bg_runs write of the engine (RunEngine reports each one to noteRun).
import type { TaskRunsInFlight } from '../../machines/policies/overlap.js';
import type { Clock } from '../clock.js';
import type { BackgroundRunStatus } from '../schemas/background.js';
import type { Store, Versioned } from '../store/store.js';
import { isSharedStore } from '../store/changes.js';
import { repos } from '../store/repos/index.js';
import { TERMINAL, type BgRunRow } from './types.js';

type Kind = 'queued' | 'active';

export class InFlightCache {
  /**
   * In-flight runs per task (run id -> queued or active), for overlap decisions without a store
   * read per occurrence. Seeded per task from the inflight_task index on first use, then kept by
   * every bg_runs write of this engine, which is the only writer of that kind (the embedded store's
   * data-dir lock allows one process). Any doubt (a fenced write, deletes) drops a task's entry,
   * and the next use reads the index again. On a shared store (several instances) an entry
   * expires after a poll interval.
   */
  private readonly inflight = new Map<string, Map<string, Kind>>();
  /** Tasks whose entry is being read: writes meanwhile are logged here and applied over the read. */
  private readonly seeding = new Map<string, Map<string, Kind | null>>();
  private readonly seeds = new Map<string, Promise<void>>();
  /** When each task's in-flight entry was read from the store (shared store: it expires). */
  private readonly seededAt = new Map<string, number>();

  constructor(private readonly deps: { store: Store; clock: Clock; pollIntervalMs: number }) {}

  /** In-flight runs of a task for the overlap decision, oldest first. */
  async inFlight(taskId: string): Promise<TaskRunsInFlight> {
    for (;;) {
      const now = this.inFlightNow(taskId);
      if (now) return now;
      await this.seed(taskId);
    }
  }

  /** The task's in-flight runs when its entry is loaded (no I/O), else null. */
  inFlightNow(taskId: string): TaskRunsInFlight | null {
    const m = this.inflight.get(taskId);
    if (!m) return null;
    // On a shared store other instances write runs of this task too: the view is read again once
    // it is older than a poll interval (the schedule row's CAS still decides who dispatches).
    if (isSharedStore(this.deps.store) && this.deps.clock.now() - (this.seededAt.get(taskId) ?? 0) > this.deps.pollIntervalMs) {
      this.inflight.delete(taskId);
      return null;
    }
    const activeRunIds: string[] = [];
    const queuedRunIds: string[] = [];
    for (const [id, k] of m) (k === 'queued' ? queuedRunIds : activeRunIds).push(id);
    return { activeRunIds, queuedRunIds };
  }

  private seed(taskId: string): Promise<void> {
    let p = this.seeds.get(taskId);
    if (p) return p;
    const log = new Map<string, Kind | null>();
    this.seeding.set(taskId, log);
    p = (async () => {
      const m = new Map<string, Kind>();
      let cursor: string | null = null;
      do {
        const page: { items: Versioned<BgRunRow>[]; next_cursor: string | null } = await repos(this.deps.store).bgRuns.list({
          index: { name: 'inflight_task', value: taskId },
          cursor,
          limit: 500,
        });
        for (const r of page.items) m.set(r.id, r.value.run.status === 'queued' ? 'queued' : 'active');
        cursor = page.next_cursor;
      } while (cursor);
      // Writes this engine made while the pages were read are at least as new as what was read.
      for (const [id, k] of log) {
        if (k) m.set(id, k);
        else m.delete(id);
      }
      if (this.seeding.get(taskId) === log) {
        this.inflight.set(taskId, m);
        this.seededAt.set(taskId, this.deps.clock.now());
        if (this.seededAt.size > 10_000) this.seededAt.clear(); // a bound: an entry without its time is simply read again
      }
    })().finally(() => {
      if (this.seeding.get(taskId) === log) this.seeding.delete(taskId);
      this.seeds.delete(taskId);
    });
    this.seeds.set(taskId, p);
    return p;
  }

  /** Every bg_runs write of the engine reports the run's status here (null: the row is gone or unwritten). */
  noteRun(taskId: string, runId: string, status: BackgroundRunStatus | null): void {
    const k = status === null || TERMINAL.has(status) ? null : status === 'queued' ? 'queued' : 'active';
    this.seeding.get(taskId)?.set(runId, k);
    const m = this.inflight.get(taskId);
    if (!m) return;
    if (k) m.set(runId, k);
    else m.delete(runId);
  }

  /** The engine no longer knows a run's true status (a refused write): the task's entry is read again on next use. */
  forgetTask(taskId: string): void {
    this.inflight.delete(taskId);
    this.seeding.delete(taskId);
  }
}
