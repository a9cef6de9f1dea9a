// Schedule maths for background tasks (docs/contract.md §7): when occurrences are due, their ids, what
// to dispatch after an outage, and the upcoming list shown to operators. Pure: "now" is an argument.
import { decideMisfire, DEFAULT_MISFIRE_POLICY, QUEUE_ALL_LIMIT, type MisfirePolicy } from '../../machines/policies/misfire.js';
import { jitterSeconds } from '../../machines/policies/jitter.js';
import { formatLocalIso, isValidTimeZone, nextCronOccurrence, prevCronTime, validateCronExpression } from './cron.js';

export type ScheduleType = 'manual' | 'once' | 'interval' | 'cron';

/** The stored ScheduleSpec; optional fields may be null. Dates are ISO strings. */
export interface ScheduleSpec {
  type: ScheduleType;
  run_at?: string | null;
  seconds?: number | null;
  expression?: string | null;
  start_at?: string | null;
  end_at?: string | null;
  jitter_seconds?: number | null;
  misfire_policy?: MisfirePolicy | null;
  /** IANA zone; default UTC. Cron fields are read in it; upcoming() shows local times in it. */
  timezone?: string | null;
}

export interface ScheduleOptions {
  /** Phase of an interval schedule without start_at (the task's created_at). */
  anchorMs?: number;
}

export const DEFAULT_TIMEZONE = 'UTC';
/** How late an occurrence may be seen and still count as on time, not missed. */
export const DEFAULT_TOLERANCE_MS = 1000;
const MAX_UPCOMING = 1000;

function parseInstant(field: string, value: string): number {
  const ms = Date.parse(value);
  if (Number.isNaN(ms)) throw new RangeError(`schedule ${field} is not a date-time: "${value}"`);
  return ms;
}

function optionalInstant(field: string, value: string | null | undefined): number | null {
  return value == null ? null : parseInstant(field, value);
}

export function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** Everything wrong with a spec (empty when valid): the §7 rules, for a 422 body. */
export function scheduleProblems(spec: ScheduleSpec): string[] {
  const problems: string[] = [];
  const has = (v: unknown): boolean => v !== undefined && v !== null;
  const dateOk = (field: string, v: string | null | undefined): void => {
    if (has(v) && Number.isNaN(Date.parse(v as string))) problems.push(`${field} must be a date-time`);
  };
  dateOk('run_at', spec.run_at);
  dateOk('start_at', spec.start_at);
  dateOk('end_at', spec.end_at);
  switch (spec.type) {
    case 'manual':
      for (const field of ['seconds', 'expression', 'run_at'] as const) {
        if (has(spec[field])) problems.push(`a manual schedule does not take ${field}`);
      }
      break;
    case 'once':
      if (!has(spec.run_at)) problems.push('a once schedule needs run_at');
      break;
    case 'interval':
      if (!has(spec.seconds)) problems.push('an interval schedule needs seconds');
      else if (!Number.isInteger(spec.seconds) || (spec.seconds as number) <= 0) problems.push('seconds must be an integer > 0');
      break;
    case 'cron': {
      if (!has(spec.expression)) problems.push('a cron schedule needs expression');
      else {
        const error = validateCronExpression(spec.expression as string);
        if (error) problems.push(`expression: ${error}`);
      }
      break;
    }
    default:
      problems.push(`unknown schedule type "${String((spec as { type: unknown }).type)}"`);
  }
  if (has(spec.timezone) && !isValidTimeZone(spec.timezone as string)) problems.push(`unknown time zone "${spec.timezone}"`);
  if (has(spec.start_at) && has(spec.end_at)) {
    const start = Date.parse(spec.start_at as string);
    const end = Date.parse(spec.end_at as string);
    if (!Number.isNaN(start) && !Number.isNaN(end) && end <= start) problems.push('end_at must be after start_at');
  }
  if (has(spec.jitter_seconds) && (!Number.isInteger(spec.jitter_seconds) || (spec.jitter_seconds as number) < 0)) {
    problems.push('jitter_seconds must be an integer >= 0');
  }
  return problems;
}

interface Due {
  at: number;
  note: string | null;
}

interface Window {
  start: number | null;
  end: number | null;
}

function windowOf(spec: ScheduleSpec): Window {
  return { start: optionalInstant('start_at', spec.start_at), end: optionalInstant('end_at', spec.end_at) };
}

function timezoneOf(spec: ScheduleSpec): string {
  return spec.timezone ?? DEFAULT_TIMEZONE;
}

function intervalPhase(spec: ScheduleSpec, w: Window, opts: ScheduleOptions | undefined): { anchor: number; period: number } {
  const seconds = spec.seconds ?? 0;
  if (!(seconds > 0)) throw new RangeError('an interval schedule needs seconds > 0');
  const anchor = w.start ?? opts?.anchorMs;
  if (anchor === undefined) throw new RangeError('an interval schedule without start_at needs opts.anchorMs');
  return { anchor, period: seconds * 1000 };
}

function nextDue(spec: ScheduleSpec, afterMs: number, opts?: ScheduleOptions): Due | null {
  const w = windowOf(spec);
  const inWindow = (t: number): boolean => (w.start === null || t >= w.start) && (w.end === null || t <= w.end);
  switch (spec.type) {
    case 'manual':
      return null;
    case 'once': {
      const at = parseInstant('run_at', spec.run_at ?? '');
      return at > afterMs && inWindow(at) ? { at, note: null } : null;
    }
    case 'interval': {
      const { anchor, period } = intervalPhase(spec, w, opts);
      const k = afterMs < anchor ? 0 : Math.floor((afterMs - anchor) / period) + 1;
      const at = anchor + k * period;
      return inWindow(at) ? { at, note: null } : null;
    }
    case 'cron': {
      // Cron times are whole minutes, so "after start - 1 ms" means "at or after start".
      const from = w.start === null ? afterMs : Math.max(afterMs, w.start - 1);
      const o = nextCronOccurrence(spec.expression ?? '', timezoneOf(spec), from);
      return o && inWindow(o.at) ? { at: o.at, note: o.note } : null;
    }
  }
}

/** Next nominal due time strictly after afterMs, within [start_at, end_at]; null when none. */
export function nextDueAt(spec: ScheduleSpec, afterMs: number, opts?: ScheduleOptions): number | null {
  return nextDue(spec, afterMs, opts)?.at ?? null;
}

/** Latest nominal due time strictly before beforeMs, within [start_at, end_at]; null when none. */
export function prevDueAt(spec: ScheduleSpec, beforeMs: number, opts?: ScheduleOptions): number | null {
  const w = windowOf(spec);
  const bound = w.end === null ? beforeMs : Math.min(beforeMs, w.end + 1);
  const startOk = (t: number | null): number | null => (t !== null && (w.start === null || t >= w.start) ? t : null);
  switch (spec.type) {
    case 'manual':
      return null;
    case 'once': {
      const at = parseInstant('run_at', spec.run_at ?? '');
      return at < bound ? startOk(at) : null;
    }
    case 'interval': {
      const { anchor, period } = intervalPhase(spec, w, opts);
      const k = Math.ceil((bound - anchor) / period) - 1;
      return k < 0 ? null : startOk(anchor + k * period);
    }
    case 'cron':
      return startOk(prevCronTime(spec.expression ?? '', timezoneOf(spec), bound));
  }
}

/** `<type>:<schedule_revision>:<due UTC ISO>`, e.g. `cron:1:2026-03-08T07:00:00.000Z`. */
export function occurrenceId(type: ScheduleType, scheduleRevision: number, dueMs: number): string {
  return `${type}:${scheduleRevision}:${iso(dueMs)}`;
}

export function parseOccurrenceId(id: string): { type: ScheduleType; scheduleRevision: number; dueMs: number } | null {
  const m = /^(manual|once|interval|cron):(\d+):(.+)$/.exec(id);
  if (!m) return null;
  const dueMs = Date.parse(m[3]);
  return Number.isNaN(dueMs) ? null : { type: m[1] as ScheduleType, scheduleRevision: Number(m[2]), dueMs };
}

export interface DueOccurrencesInput {
  /** Nominal due time of the last occurrence consumed (dispatched or skipped); null if none yet. */
  lastDueMs: number | null;
  nowMs: number;
  /** The task's created_at: interval phase without start_at, and where a new task starts counting. */
  anchorMs?: number;
  scheduleRevision: number;
  /** An occurrence due at or after now - toleranceMs is on time, not missed. Default 1000. */
  toleranceMs?: number;
  /** The stored misfire_cursor, returned unchanged when nothing was missed. */
  misfireCursor?: string | null;
}

export interface DispatchOccurrence {
  occurrence_id: string;
  trigger_type: Exclude<ScheduleType, 'manual'>;
  /** Nominal due time (UTC ISO). */
  due_at: string;
  /** due_at plus deterministic jitter: the run is not claimable before this. */
  run_at: string;
  /** Dispatched by the misfire policy rather than on time. */
  missed: boolean;
}

export interface DueOccurrencesResult {
  /** Oldest first. */
  dispatch: DispatchOccurrence[];
  /** The new last_due_at: the latest occurrence consumed, dispatched or not. */
  last_due_at: string | null;
  /** Next nominal due time after everything consumed; null when the schedule has ended. */
  next_due_at: string | null;
  /** Latest missed due time (UTC ISO) once any was missed; else the input cursor. */
  misfire_cursor: string | null;
  /** The missed occurrences handled by this call, or null when none was missed. */
  missed: { first_due_at: string; last_due_at: string } | null;
  /** queue_all dropped missed occurrences beyond QUEUE_ALL_LIMIT. */
  truncated: boolean;
}

/**
 * What to dispatch now. Occurrences in (cursor, now] are due; those earlier than now - tolerance
 * were missed and go through the misfire policy, the rest are on time and always dispatched. The
 * cursor is lastDueMs, or for a task never run: the anchor (created_at) for interval and cron, so
 * nothing from before the task existed runs, and no bound at all for once, so a run_at already
 * past when the task is seen is a missed occurrence (run_once and queue_all run it now,
 * skip_missed never does).
 */
export function dueOccurrences(spec: ScheduleSpec, input: DueOccurrencesInput): DueOccurrencesResult {
  const tolerance = input.toleranceMs ?? DEFAULT_TOLERANCE_MS;
  const now = input.nowMs;
  const opts: ScheduleOptions = { anchorMs: input.anchorMs };
  const unchanged = (): DueOccurrencesResult => ({
    dispatch: [],
    last_due_at: input.lastDueMs === null ? null : iso(input.lastDueMs),
    next_due_at: null,
    misfire_cursor: input.misfireCursor ?? null,
    missed: null,
    truncated: false,
  });
  if (spec.type === 'manual') return unchanged();

  const w = windowOf(spec);
  const cursor = input.lastDueMs ?? (spec.type === 'once' ? -Infinity : (input.anchorMs ?? (w.start !== null ? w.start - 1 : now - tolerance - 1)));
  const cutoff = now - tolerance;

  let latestMissed = prevDueAt(spec, cutoff, opts);
  if (latestMissed !== null && latestMissed <= cursor) latestMissed = null;
  let missedList: number[] = [];
  if (latestMissed !== null) {
    const policy = spec.misfire_policy ?? DEFAULT_MISFIRE_POLICY;
    if (policy === 'queue_all') {
      // Only queue_all needs the list; the oldest LIMIT + 1 tell it what to queue and whether it
      // dropped some, and the latest keeps the cursor exact.
      for (let t = nextDueAt(spec, cursor, opts); t !== null && t <= latestMissed && missedList.length <= QUEUE_ALL_LIMIT; t = nextDueAt(spec, t, opts)) {
        missedList.push(t);
      }
      if (missedList[missedList.length - 1] !== latestMissed) missedList.push(latestMissed);
    } else {
      const first = nextDueAt(spec, cursor, opts) ?? latestMissed;
      missedList = first === latestMissed ? [latestMissed] : [first, latestMissed];
    }
  }
  const decision = decideMisfire(spec.misfire_policy, missedList);

  const onTime: number[] = [];
  for (let t = nextDueAt(spec, latestMissed ?? cursor, opts); t !== null && t <= now && onTime.length < QUEUE_ALL_LIMIT; t = nextDueAt(spec, t, opts)) {
    onTime.push(t);
  }

  const trigger = spec.type;
  const toDispatch = (due: number, missed: boolean): DispatchOccurrence => {
    const id = occurrenceId(trigger, input.scheduleRevision, due);
    return {
      occurrence_id: id,
      trigger_type: trigger,
      due_at: iso(due),
      run_at: iso(due + jitterSeconds(id, spec.jitter_seconds) * 1000),
      missed,
    };
  };
  const dispatch = [...decision.run.map((t) => toDispatch(t, true)), ...onTime.map((t) => toDispatch(t, false))];

  const consumed = onTime.length > 0 ? onTime[onTime.length - 1] : latestMissed;
  const newLast = consumed ?? input.lastDueMs;
  const next = nextDueAt(spec, consumed ?? cursor, opts);
  return {
    dispatch,
    last_due_at: newLast === null ? null : iso(newLast),
    next_due_at: next === null ? null : iso(next),
    misfire_cursor: latestMissed !== null ? iso(latestMissed) : (input.misfireCursor ?? null),
    missed: latestMissed !== null ? { first_due_at: iso(missedList[0]), last_due_at: iso(latestMissed) } : null,
    truncated: decision.truncated,
  };
}

export interface UpcomingOccurrence {
  /** UTC ISO. */
  due_at: string;
  /** The same instant as local time with offset in the schedule's zone, e.g. 2026-03-08T03:00:00-04:00. */
  local_time: string;
  /** Set when DST moved or merged this run; null otherwise. */
  note: string | null;
}

/** The next `count` nominal due times strictly after fromMs (for GET /background/tasks/{id}/schedule). */
export function upcoming(spec: ScheduleSpec, fromMs: number, count: number, opts?: ScheduleOptions): UpcomingOccurrence[] {
  const tz = timezoneOf(spec);
  const out: UpcomingOccurrence[] = [];
  let after = fromMs;
  const n = Math.min(Math.max(0, Math.floor(count)), MAX_UPCOMING);
  while (out.length < n) {
    const due = nextDue(spec, after, opts);
    if (!due) break;
    out.push({ due_at: iso(due.at), local_time: formatLocalIso(tz, due.at), note: due.note });
    after = due.at;
  }
  return out;
}
