// Debounced manual triggers (POST /background/tasks/{id}/run with `debounce_seconds`,
// docs/flow-control.md "Debounce"): triggers of one task within a window collapse into one run
// that starts at the window's end. The run is an ordinary queued background run whose
// `internal.not_before` is the window's end (the claimer takes no row before it: repos/bg-runs.ts,
// store/pg-claim.ts), so the debounce is as durable as the run itself, on every store.
//
// Which run a trigger joins is a small pointer record per task (kind meta, `bg_debounce:<task>`):
// it is written in the same commit as the run it names (a new window), so a pointer never names a
// run that was not stored, and two instances opening a window at once cannot both win (the
// pointer's compare-and-set). A trigger joins the named run while that run is still queued and
// its window has not ended: it moves `not_before` later (never past 10 windows after the first
// trigger) and replaces the query, by compare-and-set of the run's row, so a claim that got there
// first wins and the trigger opens a new window instead.
import { domainError } from '../errors.js';
import { bgIdOf } from '../runtime/tenancy.js';
import { newId } from '../ids.js';
import type { Clock } from '../clock.js';
import type { BackgroundRun } from '../schemas/background.js';
import { repos } from '../store/repos/index.js';
import { isStoreError, type Store, type Versioned } from '../store/store.js';
import type { TaskScheduler } from './scheduler.js';
import { runRowIndexes, type BgRunRow, type TaskRow } from './types.js';

/** A window lasts at most this many times its length, however many triggers extend it. */
export const DEBOUNCE_MAX_WINDOWS = 10;

/** The pointer record: the run the task's open window collapses into. */
export interface DebounceWindow {
  task_id: string;
  run_id: string;
  /** When the window opened and how long it was asked to be (ms): the cap is first_at + 10 × window_ms. */
  first_at: number;
  window_ms: number;
  triggers: number;
}

/** What a debounced run shows of its window, in its `trigger_metadata.debounce`. */
export interface DebounceInfo {
  window_seconds: number;
  triggers: number;
  first_triggered_at: string;
  /** When the run starts (the window's end as it stands). */
  starts_at: string;
  /** The latest the window can end (10 windows after the first trigger). */
  latest_start_at: string;
}

const iso = (ms: number) => new Date(ms).toISOString();
const pointerId = (taskId: string) => `bg_debounce:${taskId}`;
/** Tries before giving up on a task whose pointer or run keeps changing under us (several instances). */
const ATTEMPTS = 20;

export class TriggerDebouncer {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly scheduler: TaskScheduler,
    /** background.max_queued_runs, checked before a new window queues a new run. */
    private readonly admit: () => Promise<void>,
  ) {}

  /**
   * One trigger of `task` with a window of `windowMs`: the run of the task's open window (its
   * query replaced, its start moved to the new window end), or a new queued run starting at
   * now + windowMs. `runId`: the id a new window's run takes (an Idempotency-Key reserved it).
   * Null when the task is gone or disabled meanwhile. Call inside the task's job (taskJob).
   */
  async trigger(task: TaskRow, query: string | null, windowMs: number, runId: string | undefined): Promise<BackgroundRun | null> {
    const r = repos(this.store);
    for (let attempt = 0; ; attempt++) {
      const now = this.clock.now();
      const ptr = await r.meta.get<DebounceWindow>(pointerId(task.task_id));
      if (ptr) {
        const row = await r.bgRuns.get<BgRunRow>(ptr.value.run_id);
        if (row && windowOpen(row.value, now)) {
          const joined = await this.join(row, ptr, task, query, windowMs, now);
          if (joined) return joined;
          if (attempt < ATTEMPTS) continue; // the run or the pointer changed meanwhile: read again
        }
      }
      await this.admit();
      const made = await this.open(task, query, windowMs, now, ptr, attempt === 0 ? runId : undefined);
      if (made !== 'retry') return made;
      // Writers kept racing for this task's window (several instances at once): a 409 the client may retry, not a 500.
      if (attempt >= ATTEMPTS) throw domainError('AGT_ERR_CONFLICT', [`the debounce window of task ${bgIdOf(task.task_id)} kept changing; retry`]);
    }
  }

  /** Opens a new window: a queued run not before now + windowMs, with the pointer in its commit. */
  private async open(
    task: TaskRow,
    query: string | null,
    windowMs: number,
    now: number,
    ptr: Versioned<DebounceWindow> | null,
    runId: string | undefined,
  ): Promise<BackgroundRun | null | 'retry'> {
    const meta = repos(this.store).meta;
    const run_id = runId ?? newId('bgrun');
    const window: DebounceWindow = { task_id: task.task_id, run_id, first_at: now, window_ms: windowMs, triggers: 1 };
    const op = ptr ? meta.updateOp(pointerId(task.task_id), window, ptr.version) : meta.createOp(pointerId(task.task_id), window);
    try {
      const dispatched = await this.scheduler.dispatchManual(task, query, run_id, {
        not_before: iso(now + windowMs),
        extra_ops: [op],
        trigger_extra: { debounce: debounceInfo(window, now + windowMs) },
      });
      const run = await dispatched.done;
      // Null: the task stopped, or the commit met a record made meanwhile (another instance's pointer).
      if (!run) return this.scheduler.tasks.get(task.task_id)?.enabled ? 'retry' : null;
      return run;
    } catch (err) {
      if (isStoreError(err, 'stale_version') || isStoreError(err, 'not_found') || isStoreError(err, 'conflict')) return 'retry';
      throw err;
    }
  }

  /** Joins the open window of `row`: later start, this trigger's query. Null when a write got there first. */
  private async join(
    row: Versioned<BgRunRow>,
    ptr: Versioned<DebounceWindow>,
    task: TaskRow,
    query: string | null,
    windowMs: number,
    now: number,
  ): Promise<BackgroundRun | null> {
    const r = repos(this.store);
    const w = ptr.value;
    const latest = w.first_at + DEBOUNCE_MAX_WINDOWS * w.window_ms;
    const current = Date.parse(row.value.internal.not_before!);
    const startsAt = Math.max(current, Math.min(now + windowMs, latest));
    const window: DebounceWindow = { ...w, triggers: w.triggers + 1 };
    const run: BackgroundRun = {
      ...row.value.run,
      query_snapshot: query ?? task.query,
      trigger_metadata: { ...row.value.run.trigger_metadata, query_override: query !== null, debounce: debounceInfo(window, startsAt) },
    };
    const value: BgRunRow = { ...row.value, run, internal: { ...row.value.internal, not_before: iso(startsAt) } };
    try {
      await this.store.commit([
        r.bgRuns.updateOp(run.run_id, value, row.version, runRowIndexes(value)),
        r.meta.updateOp(pointerId(w.task_id), window, ptr.version),
      ]);
    } catch (err) {
      if (isStoreError(err, 'stale_version') || isStoreError(err, 'not_found')) return null;
      throw err;
    }
    return value.run;
  }
}

/** The run is queued and its window has not ended (at its end the claimer may take it any moment). */
function windowOpen(row: BgRunRow, now: number): boolean {
  const nb = row.internal.not_before;
  return row.run.status === 'queued' && row.run.claimed_at === null && nb !== null && Date.parse(nb) > now;
}

function debounceInfo(w: DebounceWindow, startsAt: number): DebounceInfo {
  return {
    window_seconds: w.window_ms / 1000,
    triggers: w.triggers,
    first_triggered_at: iso(w.first_at),
    starts_at: iso(startsAt),
    latest_start_at: iso(w.first_at + DEBOUNCE_MAX_WINDOWS * w.window_ms),
  };
}
