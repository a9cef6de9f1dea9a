// Task schedules (decisions.md §7): one `task:<id>` actor per enabled task, schedule state rows
// (kind bg_schedule) that a ticker turns into due occurrences, and an in-memory min-heap of
// next_due_at so a tick looks at one entry, not at every task. Dispatch is idempotent across
// restarts and instances: each occurrence's record is created in the same commit as its run.
import { type AnyActorRef } from 'xstate';
import { taskMachine, type DispatchParams, type TaskOccurrence } from '../../machines/task.machine.js';
import { dueOccurrences, nextDueAt, prevDueAt, upcoming, type ScheduleSpec as SchedSpec } from '../scheduler/schedule.js';
import type { BackgroundRun } from '../schemas/background.js';
import type { BackgroundDeps, RunEngine } from './engine.js';
import { DueHeap } from './heap.js';
import { occurrenceRecordId, type ScheduleRow, type TaskRow } from './types.js';
import { isStoreError, type Versioned } from '../store/store.js';

const iso = (ms: number) => new Date(ms).toISOString();
/** Longest single wait of the due timer; the poll ticker covers anything beyond. */
const MAX_TIMER_MS = 60_000;

export class TaskScheduler {
  /** Every task (enabled or not): dispatch reads its spec from here, not from the store. */
  readonly tasks = new Map<string, TaskRow>();
  private readonly heap = new DueHeap();
  private readonly chains = new Map<string, Promise<void>>();
  private inbox: DispatchParams[] = [];
  private readonly logic;
  private dueTimer: NodeJS.Timeout | null = null;
  private dueTimerAt = Infinity;
  private ticking = false;

  constructor(private readonly deps: BackgroundDeps, private readonly engine: RunEngine) {
    this.logic = taskMachine.provide({
      actions: {
        // Sends to a task actor are synchronous: the caller reads the inbox right after send().
        dispatch: (_args, params) => {
          this.inbox.push(params);
        },
        drop: (_args, params) => {
          this.deps.log?.('info', 'background occurrence dropped', { task_id: params.task_id, occurrence_id: params.occurrence?.occurrence_id ?? null, reason: params.reason });
        },
      },
    });
  }

  // ---------------------------------------------------------------- start-up and ticking

  /** Loads every task and its schedule row: actors for the enabled ones, heap entries for the due ones. */
  async load(): Promise<void> {
    const { store } = this.deps;
    let cursor: string | null = null;
    do {
      const page: { items: Versioned<TaskRow>[]; next_cursor: string | null } = await store.listRecords<TaskRow>('bg_tasks', { cursor, limit: 1000 });
      const rows = await store.getRecords<ScheduleRow>('bg_schedule', page.items.map((t) => t.id));
      page.items.forEach((t, i) => {
        this.tasks.set(t.id, t.value);
        const sched = rows[i]?.value ?? null;
        if (t.value.enabled) this.spawnActor(t.value, sched);
        this.setDue(t.value, sched);
      });
      cursor = page.next_cursor;
    } while (cursor);
  }

  startTicking(): void {
    this.ticking = true;
    this.armDueTimer();
  }

  stop(): void {
    this.ticking = false;
    if (this.dueTimer) clearTimeout(this.dueTimer);
    this.dueTimer = null;
    this.dueTimerAt = Infinity;
  }

  async close(): Promise<void> {
    this.stop();
    await Promise.all([...this.chains.values()]);
    for (const id of this.tasks.keys()) this.deps.system.stop(`task:${id}`);
  }

  /** Pops every due task and fires it (in parallel across tasks, serially per task). */
  dispatchDue(): void {
    if (!this.ticking) return;
    const now = this.deps.clock.now();
    for (const { task_id } of this.heap.popDue(now)) {
      void this.taskJob(task_id, () => this.fire(task_id)).catch((err) =>
        this.deps.log?.('error', 'background dispatch failed', { task_id, err: String(err) }));
    }
    this.armDueTimer();
  }

  /** A precise timer to the earliest due time keeps dispatch lateness well under the poll interval. */
  private armDueTimer(): void {
    if (!this.ticking) return;
    const next = this.heap.peek();
    if (next === null) return;
    if (this.dueTimer && this.dueTimerAt <= next) return;
    if (this.dueTimer) clearTimeout(this.dueTimer);
    const delay = Math.min(MAX_TIMER_MS, Math.max(0, next - this.deps.clock.now()));
    this.dueTimerAt = next;
    this.dueTimer = setTimeout(() => {
      this.dueTimer = null;
      this.dueTimerAt = Infinity;
      this.dispatchDue();
    }, delay);
    this.dueTimer.unref();
  }

  /** Runs `fn` after every earlier job of the task: dispatch and task edits never interleave. */
  taskJob<T>(taskId: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.chains.get(taskId) ?? Promise.resolve();
    const p = prev.then(fn);
    const tail = p.then(() => undefined, () => undefined);
    this.chains.set(taskId, tail);
    void tail.then(() => {
      if (this.chains.get(taskId) === tail) this.chains.delete(taskId);
    });
    return p;
  }

  // ---------------------------------------------------------------- occurrences

  private async fire(taskId: string): Promise<void> {
    const task = this.tasks.get(taskId);
    if (!task || !task.enabled) return;
    const rec = await this.deps.store.getRecord<ScheduleRow>('bg_schedule', taskId);
    if (!rec || rec.value.deleted || rec.value.paused) return;
    const s = rec.value;
    const now = this.deps.clock.now();
    const res = dueOccurrences(task.schedule as SchedSpec, {
      lastDueMs: s.last_due_at ? Date.parse(s.last_due_at) : null,
      nowMs: now,
      anchorMs: Date.parse(s.anchor_at),
      scheduleRevision: s.schedule_revision,
      misfireCursor: s.misfire_cursor,
    });
    if (res.missed) {
      this.deps.log?.('info', 'background occurrences missed', { task_id: taskId, ...res.missed, policy: task.schedule.misfire_policy, truncated: res.truncated });
    }
    let dispatched = 0;
    for (const occ of res.dispatch) {
      const run = await this.dispatch(task, { occurrence: occ as TaskOccurrence });
      if (run) dispatched++;
    }
    const next: ScheduleRow = {
      ...s,
      last_due_at: res.last_due_at,
      next_due_at: res.next_due_at,
      misfire_cursor: res.misfire_cursor,
      last_dispatched_at: dispatched > 0 ? iso(now) : s.last_dispatched_at,
      updated_at: iso(this.deps.clock.now()),
    };
    try {
      await this.deps.store.updateRecord<ScheduleRow>('bg_schedule', taskId, next, rec.version);
      this.setDue(task, next);
    } catch (err) {
      if (!isStoreError(err, 'stale_version')) throw err;
      // Another writer (an edit, another instance) moved the schedule: follow the stored row.
      const fresh = await this.deps.store.getRecord<ScheduleRow>('bg_schedule', taskId);
      this.setDue(task, fresh?.value ?? null);
    }
  }

  /**
   * One trigger through the task actor: the machine decides the overlap action, the inbox carries
   * the decision out, and the run is created (or skipped) accordingly. Null when nothing was
   * created: the task is disabled, or the occurrence was already dispatched.
   */
  async dispatch(task: TaskRow, trigger: { occurrence: TaskOccurrence } | { manual: true; query: string | null }): Promise<BackgroundRun | null> {
    const actor = this.deps.system.get(`task:${task.task_id}`);
    if (!actor) return null;
    const occurrence = 'occurrence' in trigger ? trigger.occurrence : null;
    // A replayed occurrence must not cancel anything (cancel_previous) before finding out it already ran.
    if (occurrence && (await this.deps.store.getRecord('bg_occurrences', occurrenceRecordId(task.task_id, occurrence.occurrence_id)))) return null;
    const policy = task.overlap_policy;
    const inFlight = policy === 'allow_parallel'
      ? { activeRunIds: [], queuedRunIds: [] }
      : await this.engine.inFlight(task.task_id, policy === 'cancel_previous');
    this.inbox = [];
    actor.send(occurrence ? { type: 'DUE', occurrence, inFlight } : { type: 'MANUAL', query: 'manual' in trigger ? trigger.query : null, inFlight });
    const decisions = this.inbox.splice(0);
    let created: BackgroundRun | null = null;
    for (const p of decisions) created = await this.execute(task, p);
    return created;
  }

  private async execute(task: TaskRow, p: DispatchParams): Promise<BackgroundRun | null> {
    const base = { task, trigger_type: p.occurrence ? p.occurrence.trigger_type : 'manual' as const, occurrence: p.occurrence, query: p.query };
    switch (p.decision.action) {
      case 'skip':
        return this.engine.createRun({ ...base, skip: `skipped by the overlap policy ${task.overlap_policy}: the task has runs in flight` });
      case 'cancel_then_queue':
        for (const id of p.decision.cancel) {
          await this.engine.cancel(id, 'superseded by a newer run (overlap policy cancel_previous)').catch(() => undefined);
        }
        return this.engine.createRun({ ...base, skip: null });
      case 'start':
      case 'queue':
        return this.engine.createRun({ ...base, skip: null });
    }
  }

  // ---------------------------------------------------------------- task edits (called inside taskJob)

  /** Applies a stored task + schedule row to the actor and the heap. */
  applyTask(task: TaskRow, sched: ScheduleRow | null): void {
    this.tasks.set(task.task_id, task);
    const ref = this.deps.system.get(`task:${task.task_id}`);
    if (!task.enabled) {
      if (ref) this.deps.system.stop(`task:${task.task_id}`);
    } else if (!ref) {
      this.spawnActor(task, sched);
    } else {
      ref.send({ type: 'UPDATE', overlap_policy: task.overlap_policy });
      const paused = (ref.getSnapshot() as { context: { paused: boolean } }).context.paused;
      if (sched?.paused && !paused) ref.send({ type: 'PAUSE', reason: sched.paused_reason });
      if (!sched?.paused && paused) ref.send({ type: 'RESUME' });
    }
    this.setDue(task, sched);
  }

  removeTask(taskId: string): void {
    this.tasks.delete(taskId);
    this.heap.set(taskId, null);
    this.deps.system.stop(`task:${taskId}`);
  }

  private spawnActor(task: TaskRow, sched: ScheduleRow | null): AnyActorRef {
    return this.deps.system.spawn(`task:${task.task_id}`, this.logic, {
      input: { task_id: task.task_id, overlap_policy: task.overlap_policy, enabled: true, paused: sched?.paused ?? false, paused_reason: sched?.paused_reason ?? null },
    });
  }

  private setDue(task: TaskRow, sched: ScheduleRow | null): void {
    if (!task.enabled || !sched || sched.deleted || sched.paused || !sched.next_due_at) {
      this.heap.set(task.task_id, null);
      return;
    }
    const now = this.deps.clock.now();
    let at = Date.parse(sched.next_due_at);
    // A due time that cannot advance (a schedule whose occurrences were all consumed) must not spin.
    if (sched.last_due_at && at <= Date.parse(sched.last_due_at)) at = now + this.deps.config.background.poll_interval_ms;
    this.heap.set(task.task_id, at);
    this.armDueTimer();
  }

  // ---------------------------------------------------------------- schedule state maths

  /** A fresh schedule row for a new task or a new schedule revision. */
  newScheduleRow(task: TaskRow, revision: number, nowMs: number, prev: ScheduleRow | null): ScheduleRow {
    const spec = task.schedule as SchedSpec;
    return {
      task_id: task.task_id,
      paused: prev?.deleted ? false : prev?.paused ?? false,
      paused_reason: prev?.deleted ? null : prev?.paused_reason ?? null,
      schedule_revision: revision,
      last_due_at: null,
      last_dispatched_at: prev?.deleted ? null : prev?.last_dispatched_at ?? null,
      next_due_at: firstDue(spec, nowMs),
      misfire_cursor: null,
      updated_at: iso(nowMs),
      anchor_at: iso(nowMs),
    };
  }

  /**
   * Pausing skips, it does not defer: on resume (or re-enable) the cursor moves to now, so the
   * occurrences that fell in the pause are not treated as missed by the misfire policy.
   */
  resumedScheduleRow(task: TaskRow, s: ScheduleRow, nowMs: number): ScheduleRow {
    const spec = task.schedule as SchedSpec;
    const anchorMs = Date.parse(s.anchor_at);
    const consumed = spec.type === 'manual' ? null : prevDueAt(spec, nowMs + 1, { anchorMs });
    const lastDue = consumed !== null && (s.last_due_at === null || consumed > Date.parse(s.last_due_at)) ? iso(consumed) : s.last_due_at;
    const next = spec.type === 'manual' ? null : nextDueAt(spec, nowMs, { anchorMs });
    return { ...s, paused: false, paused_reason: null, last_due_at: lastDue, next_due_at: next === null ? null : iso(next), updated_at: iso(nowMs) };
  }

  preview(task: TaskRow, sched: ScheduleRow | null, count: number) {
    const spec = task.schedule as SchedSpec;
    const anchorMs = sched ? Date.parse(sched.anchor_at) : Date.parse(task.created_at);
    const now = this.deps.clock.now();
    return upcoming(spec, now, count, { anchorMs });
  }
}

/** The first due time of a new schedule revision anchored at nowMs (a past `once` is due at once). */
function firstDue(spec: SchedSpec, nowMs: number): string | null {
  switch (spec.type) {
    case 'manual':
      return null;
    case 'once':
      return spec.run_at ? iso(Math.max(Date.parse(spec.run_at), 0)) : null;
    default: {
      const at = nextDueAt(spec, nowMs, { anchorMs: nowMs });
      return at === null ? null : iso(at);
    }
  }
}
