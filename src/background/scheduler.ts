// Task schedules (docs/contract.md §7): what is due and what it dispatches. The scheduler keeps every
// task and its schedule state row (kind bg_schedule) as last read or written, runs each task's
// work (dispatch, edits) serially in the task's job, and carries out what the task's machine
// decides for each due occurrence or manual trigger. Dispatch is idempotent across restarts and
// instances: each occurrence's record is created in the same commit as its run.
//
// Its parts: task-actors.ts (one task-machine actor per enabled task: the decisions),
// due-ticker.ts (the heap of next due times and the timer that fires them), schedule-rows.ts (the
// pure row maths: the advanced row, skips, the next due time).
import type { DispatchParams, TaskOccurrence } from '../../machines/task.machine.js';
import type { TaskRunsInFlight } from '../../machines/policies/overlap.js';
import { dueOccurrences, type ScheduleSpec as SchedSpec } from '../calendar/schedule.js';
import type { BackgroundRun } from '../schemas/background.js';
import type { RunEngine } from './engine.js';
import type { BackgroundDeps, CreateRunInput, PreparedRun } from './host-types.js';
import { DueTicker } from './due-ticker.js';
import { TaskActors } from './task-actors.js';
import { advancedScheduleRow, dueTimeOf, skipOf, skipReason } from './schedule-rows.js';
import { occurrenceRecordId, type ScheduleRow, type SkippedOccurrence, type TaskRow } from './types.js';
import { isStoreError, type Versioned, type WriteOp } from '../store/store.js';
import { repos } from '../store/repos/index.js';
import { swallow, isRefusal } from '../telemetry/swallowed.js';

const NOTHING_IN_FLIGHT: TaskRunsInFlight = { activeRunIds: [], queuedRunIds: [] };

/** A manual dispatch: decided and issued inside the task's job; `done` resolves once it is written. */
export interface Dispatched {
  done: Promise<BackgroundRun | null>;
}

export class TaskScheduler {
  /** Every task (enabled or not): dispatch reads its spec from here, not from the store. */
  readonly tasks = new Map<string, TaskRow>();
  /** Each task's schedule row and version as last read or written here: a fire needs no read. */
  private readonly schedules = new Map<string, Versioned<ScheduleRow>>();
  /** The task machines: one actor per enabled task (task-actors.ts). */
  private readonly machines: TaskActors;
  /** Next due times and the timer that fires them (due-ticker.ts): the manager's ticker calls `due.start()`, `due.dispatchDue()`. */
  readonly due: DueTicker;
  private readonly chains = new Map<string, Promise<void>>();

  constructor(
    private readonly deps: BackgroundDeps,
    private readonly engine: RunEngine,
  ) {
    this.machines = new TaskActors(deps.system, deps.logger);
    this.due = new DueTicker(deps.clock, (taskId) => this.fireInJob(taskId));
  }

  // ---------------------------------------------------------------- start-up and ticking

  /** Loads every task and its schedule row: machine states for the enabled ones, heap entries for the due ones. */
  async load(): Promise<void> {
    const { store } = this.deps;
    let cursor: string | null = null;
    do {
      const page: { items: Versioned<TaskRow>[]; next_cursor: string | null } = await repos(store).bgTasks.list<TaskRow>({ cursor, limit: 1000 });
      const rows = await repos(store).bgSchedule.getMany<ScheduleRow>(page.items.map((t) => t.id));
      page.items.forEach((t, i) => {
        this.tasks.set(t.id, t.value);
        const sched = rows[i] ?? null;
        if (sched) this.schedules.set(t.id, sched);
        if (t.value.enabled) this.machines.start(t.value, sched?.value ?? null);
        this.setDue(t.value, sched?.value ?? null);
      });
      cursor = page.next_cursor;
    } while (cursor);
  }

  stop(): void {
    this.due.stop();
  }

  async close(): Promise<void> {
    this.stop();
    await Promise.all([...this.chains.values()]);
    for (const id of this.tasks.keys()) this.machines.stop(id);
  }

  private fireInJob(taskId: string): void {
    void this.taskJob(taskId, () => this.fire(taskId)).catch((err) => {
      this.deps.logger.error({ task_id: taskId, err: String(err) }, 'background dispatch failed');
      // Popped but not advanced: try again after a poll interval instead of never.
      if (this.tasks.get(taskId)?.enabled) this.due.retry(taskId, this.deps.clock.now() + this.deps.config.background.poll_interval_ms);
    });
  }

  /** Runs `fn` after every earlier job of the task: dispatch and task edits never interleave. */
  taskJob<T>(taskId: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.chains.get(taskId);
    // No earlier job: start now, not a microtask later (a tick fires many tasks in one go).
    const p = prev ? prev.then(fn) : new Promise<T>((resolve) => resolve(fn()));
    const tail = p.then(
      () => undefined,
      () => undefined,
    );
    this.chains.set(taskId, tail);
    void tail.then(() => {
      if (this.chains.get(taskId) === tail) this.chains.delete(taskId);
    });
    return p;
  }

  private async schedule(taskId: string): Promise<Versioned<ScheduleRow> | null> {
    const cached = this.schedules.get(taskId);
    if (cached) return cached;
    const rec = await repos(this.deps.store).bgSchedule.get<ScheduleRow>(taskId);
    if (rec) this.schedules.set(taskId, rec);
    return rec;
  }

  // ---------------------------------------------------------------- occurrences

  /**
   * Dispatches what is due for one task. Every occurrence's records (occurrence, run, trace) and
   * the advanced schedule row go into ONE commit, the schedule row's CAS included; the commits of
   * all tasks due in the same tick are issued together and land in one store round. Overlap
   * decisions read the engine's in-memory in-flight view, so the common path reads nothing.
   */
  private async fire(taskId: string): Promise<void> {
    const task = this.tasks.get(taskId);
    if (!task || !task.enabled || !this.machines.has(taskId)) return;
    const rec = await this.schedule(taskId);
    if (!rec || rec.value.deleted || rec.value.paused) return;
    // cancel_previous must cancel before it queues: the occurrence-at-a-time path.
    if (task.overlap_policy === 'cancel_previous') return this.fireOneByOne(task, rec);
    const tracked = task.overlap_policy !== 'allow_parallel';
    if (tracked && !this.engine.inflight.inFlightNow(taskId)) await this.engine.inflight.inFlight(taskId);
    const s = rec.value;
    const now = this.deps.clock.now();
    const res = this.occurrences(task, s, now);
    const prepared: PreparedRun[] = [];
    const skips: SkippedOccurrence[] = [];
    for (const occ of res.dispatch) {
      const inFlight = tracked ? (this.engine.inflight.inFlightNow(taskId) ?? NOTHING_IN_FLIGHT) : NOTHING_IN_FLIGHT;
      for (const d of this.machines.decide(taskId, { type: 'DUE', occurrence: occ as TaskOccurrence, inFlight })) {
        if (d.decision.action === 'skip') {
          skips.push(skipOf(task, occ as TaskOccurrence, now));
          continue;
        }
        const p = this.engine.creation.prepareRun({ task, trigger_type: occ.trigger_type, occurrence: occ as TaskOccurrence, query: null, skip: null }, now);
        this.engine.creation.track(p); // the next occurrence's decision sees this run
        prepared.push(p);
      }
    }
    const next = advancedScheduleRow(s, res, prepared.length, now, skips);
    const ops: WriteOp[] = [];
    for (const p of prepared) for (const op of p.ops) ops.push(op);
    ops.push(repos(this.deps.store).bgSchedule.updateOp(taskId, next, rec.version));
    let written: Array<Versioned<unknown> | null>;
    try {
      // The new runs' creation events ride in the same commit (stored only with it).
      written = await this.engine.creation.commitCreating(ops, prepared);
    } catch (err) {
      for (const p of prepared) this.engine.creation.untrack(p);
      if (!isStoreError(err, 'conflict') && !isStoreError(err, 'stale_version')) throw err;
      // An occurrence was already dispatched, or another writer moved the schedule: start over from the stored row.
      this.schedules.delete(taskId);
      const fresh = await this.schedule(taskId);
      if (isStoreError(err, 'conflict') && fresh && !fresh.value.deleted && !fresh.value.paused) return this.fireOneByOne(task, fresh);
      this.setDue(task, fresh?.value ?? null);
      return;
    }
    this.schedules.set(taskId, written[written.length - 1] as Versioned<ScheduleRow>);
    for (const p of prepared) this.engine.creation.created(p, this.engine.creation.eventsInCommits);
    if (skips.length > 0) this.deps.metrics.backgroundRuns.inc({ status: 'skipped' }, skips.length);
    this.setDue(task, next);
  }

  private occurrences(task: TaskRow, s: ScheduleRow, now: number) {
    const res = dueOccurrences(task.schedule as SchedSpec, {
      lastDueMs: s.last_due_at ? Date.parse(s.last_due_at) : null,
      nowMs: now,
      anchorMs: Date.parse(s.anchor_at),
      scheduleRevision: s.schedule_revision,
      misfireCursor: s.misfire_cursor,
    });
    if (res.missed) {
      this.deps.logger.info(
        {
          task_id: task.task_id,
          ...res.missed,
          policy: task.schedule.misfire_policy,
          truncated: res.truncated,
        },
        'background occurrences missed',
      );
    }
    return res;
  }

  /** One occurrence at a time, each its own commit, checked for a replay before anything is cancelled. */
  private async fireOneByOne(task: TaskRow, rec: Versioned<ScheduleRow>): Promise<void> {
    const taskId = task.task_id;
    const s = rec.value;
    const now = this.deps.clock.now();
    const res = this.occurrences(task, s, now);
    let dispatched = 0;
    const skips: SkippedOccurrence[] = [];
    for (const occ of res.dispatch) {
      const out = await this.dispatchOccurrence(task, occ as TaskOccurrence, now);
      if (out === null) continue;
      if ('run_id' in out) dispatched++;
      else skips.push(out);
    }
    const next = advancedScheduleRow(s, res, dispatched, now, skips);
    if (skips.length > 0) this.deps.metrics.backgroundRuns.inc({ status: 'skipped' }, skips.length);
    try {
      this.schedules.set(taskId, await repos(this.deps.store).bgSchedule.update<ScheduleRow>(taskId, next, rec.version));
      this.setDue(task, next);
    } catch (err) {
      if (!isStoreError(err, 'stale_version')) throw err;
      // Another writer (an edit, another instance) moved the schedule: follow the stored row.
      this.schedules.delete(taskId);
      const fresh = await this.schedule(taskId);
      this.setDue(task, fresh?.value ?? null);
    }
  }

  /** The run created for the occurrence, the skip (counted on the schedule row), or null (a replay, or dropped). */
  private async dispatchOccurrence(task: TaskRow, occurrence: TaskOccurrence, now: number): Promise<BackgroundRun | SkippedOccurrence | null> {
    if (!this.machines.has(task.task_id)) return null;
    // A replayed occurrence must not cancel anything (cancel_previous) before finding out it already ran.
    if (await repos(this.deps.store).bgOccurrences.get(occurrenceRecordId(task.task_id, occurrence.occurrence_id))) return null;
    const inFlight = task.overlap_policy === 'allow_parallel' ? NOTHING_IN_FLIGHT : await this.engine.inflight.inFlight(task.task_id);
    let out: BackgroundRun | SkippedOccurrence | null = null;
    for (const p of this.machines.decide(task.task_id, { type: 'DUE', occurrence, inFlight })) {
      out = p.decision.action === 'skip' ? skipOf(task, occurrence, now) : await (await this.execute(task, p)).done;
    }
    return out;
  }

  /**
   * A manual trigger through the task machine (so the overlap policy applies). Called inside the
   * task's job: the decision and the issue of the write happen there, in order with the task's
   * other dispatches; the caller awaits `done` outside it, so many manual runs of one task share
   * store rounds instead of taking one each. Null `done` value: the task is disabled.
   */
  async dispatchManual(
    task: TaskRow,
    query: string | null,
    runId?: string,
    extra?: Pick<CreateRunInput, 'not_before' | 'extra_ops' | 'trigger_extra'>,
  ): Promise<Dispatched> {
    if (!this.machines.has(task.task_id)) return { done: Promise.resolve(null) };
    const inFlight = task.overlap_policy === 'allow_parallel' ? NOTHING_IN_FLIGHT : await this.engine.inflight.inFlight(task.task_id);
    let out: Dispatched = { done: Promise.resolve(null) };
    for (const p of this.machines.decide(task.task_id, { type: 'MANUAL', query, inFlight })) out = await this.execute(task, p, runId, extra);
    return out;
  }

  /** Carries out one decision; the returned `done` is the run's write. */
  private async execute(
    task: TaskRow,
    p: DispatchParams,
    runId?: string,
    extra?: Pick<CreateRunInput, 'not_before' | 'extra_ops' | 'trigger_extra'>,
  ): Promise<Dispatched> {
    const base = {
      task,
      trigger_type: p.occurrence ? p.occurrence.trigger_type : ('manual' as const),
      occurrence: p.occurrence,
      query: p.query,
      run_id: runId,
      ...extra,
    };
    switch (p.decision.action) {
      case 'skip':
        return { done: this.engine.creation.createRun({ ...base, skip: skipReason(task) }) };
      case 'cancel_then_queue':
        for (const id of p.decision.cancel) {
          await this.engine.operator
            .cancel(id, 'superseded by a newer run (overlap policy cancel_previous)')
            .catch(swallow('scheduler.cancel_previous', { run_id: id, task_id: task.task_id }, isRefusal));
        }
        return { done: this.engine.creation.createRun({ ...base, skip: null }) };
      case 'start':
      case 'queue':
        return { done: this.engine.creation.createRun({ ...base, skip: null }) };
    }
  }

  // ---------------------------------------------------------------- task edits (called inside taskJob)

  /** Applies a stored task + schedule row (with the version just written or read) to the machine state and the heap. */
  applyTask(task: TaskRow, sched: Versioned<ScheduleRow> | null): void {
    const id = task.task_id;
    this.tasks.set(id, task);
    if (sched) this.schedules.set(id, sched);
    else this.schedules.delete(id);
    const s = sched?.value ?? null;
    if (!task.enabled) this.machines.stop(id);
    else if (!this.machines.has(id)) this.machines.start(task, s);
    else this.machines.update(task, s);
    this.setDue(task, s);
  }

  /** Scheduled occurrences skipped by the overlap policy, summed over the tasks that exist (from the cached schedule rows). */
  /** Occurrences skipped by the overlap policy, of every task or of those `only` picks. */
  skippedOccurrences(only?: (taskId: string) => boolean): number {
    let n = 0;
    for (const id of this.tasks.keys()) if (!only || only(id)) n += this.schedules.get(id)?.value.skipped_occurrences ?? 0;
    return n;
  }

  /** The last due time this task's schedule consumed (cached row), or null. */
  consumedUpTo(taskId: string): number | null {
    const at = this.schedules.get(taskId)?.value.last_due_at;
    return at ? Date.parse(at) : null;
  }

  /**
   * Another instance of a shared store edited (or deleted) this task: apply the stored task and
   * schedule row, in order with this task's other jobs. The schedule row's CAS already keeps two
   * instances from dispatching one occurrence; this keeps a disabled, edited or new task from
   * being served from a stale copy.
   */
  resync(taskId: string): Promise<void> {
    return this.taskJob(taskId, async () => {
      const { store } = this.deps;
      const [t, s] = await Promise.all([repos(store).bgTasks.get<TaskRow>(taskId), repos(store).bgSchedule.get<ScheduleRow>(taskId)]);
      if (!t) {
        if (this.tasks.has(taskId)) this.removeTask(taskId);
        return;
      }
      const known = this.tasks.get(taskId);
      const cached = this.schedules.get(taskId);
      if (known && known.updated_at === t.value.updated_at && cached && s && cached.version === s.version) return;
      this.applyTask(t.value, s);
    });
  }

  /** Every task against the store (a change-feed reconnect, and now and then): new, edited and deleted ones. */
  async resyncAll(): Promise<void> {
    const seen = new Set<string>();
    let cursor: string | null = null;
    do {
      const page: { items: Versioned<TaskRow>[]; next_cursor: string | null } = await repos(this.deps.store).bgTasks.list<TaskRow>({ cursor, limit: 1000 });
      const rows = await repos(this.deps.store).bgSchedule.getMany<ScheduleRow>(page.items.map((t) => t.id));
      page.items.forEach((t, i) => {
        seen.add(t.id);
        const known = this.tasks.get(t.id);
        const cached = this.schedules.get(t.id);
        const s = rows[i];
        if (known && known.updated_at === t.value.updated_at && (cached?.version ?? 0) === (s?.version ?? 0)) return;
        void this.taskJob(t.id, async () => this.applyTask(t.value, s)).catch(swallow('scheduler.apply_task', { task_id: t.id }));
      });
      cursor = page.next_cursor;
    } while (cursor);
    for (const id of [...this.tasks.keys()]) if (!seen.has(id)) void this.resync(id).catch(swallow('scheduler.resync', { task_id: id }));
  }

  removeTask(taskId: string): void {
    this.tasks.delete(taskId);
    this.schedules.delete(taskId);
    this.due.set(taskId, null);
    this.machines.stop(taskId);
  }

  private setDue(task: TaskRow, sched: ScheduleRow | null): void {
    this.due.set(task.task_id, dueTimeOf(task, sched, this.deps.clock.now(), this.deps.config.background.poll_interval_ms));
  }
}
