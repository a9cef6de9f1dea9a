// Schedule-row maths (docs/contract.md §7), pure: the row of a new schedule revision, the row after a
// pause ends, the row after a step dispatched or skipped occurrences, and the skip record. The
// scheduler (scheduler.ts) and the manager's task edits (manager.ts) write what these return.
import { dueOccurrences, nextDueAt, prevDueAt, type ScheduleSpec as SchedSpec } from '../calendar/schedule.js';
import type { TaskOccurrence } from '../../machines/task.machine.js';
import type { ScheduleRow, SkippedOccurrence, TaskRow } from './types.js';

const iso = (ms: number) => new Date(ms).toISOString();

/** A fresh schedule row for a new task or a new schedule revision. */
export function newScheduleRow(task: TaskRow, revision: number, nowMs: number, prev: ScheduleRow | null): ScheduleRow {
  const spec = task.schedule as SchedSpec;
  return {
    task_id: task.task_id,
    paused: prev?.deleted ? false : (prev?.paused ?? false),
    paused_reason: prev?.deleted ? null : (prev?.paused_reason ?? null),
    schedule_revision: revision,
    last_due_at: null,
    last_dispatched_at: prev?.deleted ? null : (prev?.last_dispatched_at ?? null),
    next_due_at: firstDue(spec, nowMs),
    misfire_cursor: null,
    updated_at: iso(nowMs),
    anchor_at: iso(nowMs),
    skipped_occurrences: prev?.deleted ? 0 : (prev?.skipped_occurrences ?? 0),
    last_skipped: prev?.deleted ? null : (prev?.last_skipped ?? null),
  };
}

/**
 * Pausing skips, it does not defer: on resume (or re-enable) the cursor moves to now, so the
 * occurrences that fell in the pause are not treated as missed by the misfire policy.
 */
export function resumedScheduleRow(task: TaskRow, s: ScheduleRow, nowMs: number): ScheduleRow {
  const spec = task.schedule as SchedSpec;
  const anchorMs = Date.parse(s.anchor_at);
  const consumed = spec.type === 'manual' ? null : prevDueAt(spec, nowMs + 1, { anchorMs });
  const lastDue = consumed !== null && (s.last_due_at === null || consumed > Date.parse(s.last_due_at)) ? iso(consumed) : s.last_due_at;
  const next = spec.type === 'manual' ? null : nextDueAt(spec, nowMs, { anchorMs });
  return { ...s, paused: false, paused_reason: null, last_due_at: lastDue, next_due_at: next === null ? null : iso(next), updated_at: iso(nowMs) };
}

/** The schedule row after a step dispatched (or skipped) the occurrences in `res`. */
export function advancedScheduleRow(
  s: ScheduleRow,
  res: ReturnType<typeof dueOccurrences>,
  dispatched: number,
  now: number,
  skips: SkippedOccurrence[],
): ScheduleRow {
  return {
    ...s,
    ...(skips.length > 0 ? { skipped_occurrences: (s.skipped_occurrences ?? 0) + skips.length, last_skipped: skips[skips.length - 1] } : {}),
    last_due_at: res.last_due_at,
    next_due_at: res.next_due_at,
    misfire_cursor: res.misfire_cursor,
    last_dispatched_at: dispatched > 0 ? iso(now) : s.last_dispatched_at,
    updated_at: iso(now),
  };
}

export function skipReason(task: TaskRow): string {
  return `skipped by the overlap policy ${task.overlap_policy}: the task has runs in flight`;
}

/**
 * A scheduled occurrence the overlap policy skipped: no run row, trace, events, occurrence record
 * or workspace, only this on the schedule row (its counter and latest skip). Its schedule step is
 * durable in the same write, which is what keeps it from being dispatched again.
 */
export function skipOf(task: TaskRow, occ: TaskOccurrence, now: number): SkippedOccurrence {
  return { occurrence_id: occ.occurrence_id, due_at: occ.due_at, skipped_at: iso(now), reason: skipReason(task) };
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

/**
 * When the task is next due for the ticker (due-ticker.ts): null when it is not (disabled, paused,
 * deleted, no row, nothing left). A due time that cannot advance (a schedule whose occurrences
 * were all consumed) must not spin: it is looked at again a poll interval from now.
 */
export function dueTimeOf(task: TaskRow, sched: ScheduleRow | null, nowMs: number, pollIntervalMs: number): number | null {
  if (!task.enabled || !sched || sched.deleted || sched.paused || !sched.next_due_at) return null;
  const at = Date.parse(sched.next_due_at);
  return sched.last_due_at && at <= Date.parse(sched.last_due_at) ? nowMs + pollIntervalMs : at;
}
