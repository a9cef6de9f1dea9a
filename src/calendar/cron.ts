// Cron maths for agentd (docs/contract.md §7).
//
// cron-parser 5 is used for what it does well: parsing one field element (numbers, names, ranges,
// steps) into a set of values. Enumeration and time-zone handling are ours, because cron-parser
// 5.10 diverges from the contract (checked by experiment, see docs/scheduling.md):
//   - a local time in a spring-forward gap runs an hour late (02:30 New York on 2026-03-08 comes out
//     03:30 EDT = 07:30Z; the contract says the first instant after the gap, 03:00 = 07:00Z);
//   - in a fall-back hour, "0 * * * *" and "*/15 * * * *" run the repeated local times twice;
//   - a day-of-month or day-of-week field such as "*/2" counts as restricted (OR semantics), while
//     Vixie cron treats any field starting with "*" as unrestricted (AND semantics);
//   - overlapping list elements ("0,7" for Sunday, "*/15,30") are rejected as duplicates;
//   - 6-field (seconds) expressions, "@daily", "L", "W", "#", "?" and "H" are accepted.
// So each schedule is matched against local wall-clock fields (arithmetic on "wall milliseconds":
// the local date-time read as if it were UTC), and each matching wall time is mapped to an instant
// with Intl.DateTimeFormat: unique -> that instant, gap -> the first instant after the gap,
// repeated -> the first occurrence. That mapping never decreases as wall time increases, which is
// what makes "next strictly after" and "previous strictly before" simple searches.
import { CronExpressionParser } from 'cron-parser';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

export const CRON_FIELD_NAMES = ['minute', 'hour', 'day-of-month', 'month', 'day-of-week'] as const;

const MONTH_NAMES = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
const DAY_NAMES = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];

export class CronSyntaxError extends Error {
  override name = 'CronSyntaxError';
}

/** A 5-field expression reduced to value sets, with the Vixie "star" flags. */
export interface CompiledCron {
  readonly expression: string;
  /** Sorted ascending. */
  readonly minutes: readonly number[];
  /** Sorted ascending. */
  readonly hours: readonly number[];
  readonly daysOfMonth: ReadonlySet<number>;
  /** 1-12. */
  readonly months: ReadonlySet<number>;
  /** 0-6, Sunday 0 (7 is folded into 0). */
  readonly daysOfWeek: ReadonlySet<number>;
  /** Vixie cron: a day field whose text starts with "*" is unrestricted, even "*\/2". */
  readonly domStar: boolean;
  readonly dowStar: boolean;
}

const compiledCache = new Map<string, CompiledCron>();
const COMPILED_CACHE_LIMIT = 512;

function checkFieldText(index: number, text: string): void {
  const field = CRON_FIELD_NAMES[index];
  if (!/^[0-9A-Za-z*,/-]+$/.test(text)) {
    throw new CronSyntaxError(`${field} field "${text}": only digits, names, "*", ",", "-" and "/" are allowed`);
  }
  const names = index === 3 ? MONTH_NAMES : index === 4 ? DAY_NAMES : [];
  for (const word of text.match(/[A-Za-z]+/g) ?? []) {
    if (!names.includes(word.toLowerCase())) {
      throw new CronSyntaxError(
        names.length === 0
          ? `${field} field "${text}": names are not allowed here`
          : `${field} field "${text}": unknown name "${word}" (use ${names.join(', ')})`,
      );
    }
  }
  if (text.split(',').some((element) => element === '')) {
    throw new CronSyntaxError(`${field} field "${text}": empty list element`);
  }
}

/** Values of one list element, parsed by cron-parser in isolation so overlaps are allowed. */
function elementValues(index: number, element: string): number[] {
  const probe = ['0', '0', '*', '*', '*'];
  probe[index] = element;
  let fields;
  try {
    fields = CronExpressionParser.parse(probe.join(' '), { tz: 'UTC', strict: false }).fields;
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    throw new CronSyntaxError(`${CRON_FIELD_NAMES[index]} field element "${element}": ${message}`);
  }
  const field = [fields.minute, fields.hour, fields.dayOfMonth, fields.month, fields.dayOfWeek][index];
  return (field.values as readonly (number | string)[]).map((v) => {
    if (typeof v !== 'number') throw new CronSyntaxError(`${CRON_FIELD_NAMES[index]} field element "${element}" is not standard cron`);
    return v;
  });
}

function daysInMonth(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}

function dayMatches(c: CompiledCron, dom: number, dow: number): boolean {
  const domHit = c.daysOfMonth.has(dom);
  const dowHit = c.daysOfWeek.has(dow);
  return c.domStar || c.dowStar ? domHit && dowHit : domHit || dowHit;
}

/** Parses and validates a standard 5-field cron expression; throws CronSyntaxError. Cached. */
export function compileCron(expression: string): CompiledCron {
  const cached = compiledCache.get(expression);
  if (cached) return cached;
  const parts = expression
    .trim()
    .split(/\s+/)
    .filter((p) => p !== '');
  if (parts.length !== 5) {
    throw new CronSyntaxError(`expected 5 fields (minute hour day-of-month month day-of-week), got ${parts.length}`);
  }
  const sets = parts.map((text, index) => {
    checkFieldText(index, text);
    const values = new Set<number>();
    for (const element of text.split(',')) {
      for (const v of elementValues(index, element)) values.add(index === 4 && v === 7 ? 0 : v);
    }
    return values;
  });
  const compiled: CompiledCron = {
    expression,
    minutes: [...sets[0]].sort((a, b) => a - b),
    hours: [...sets[1]].sort((a, b) => a - b),
    daysOfMonth: sets[2],
    months: sets[3],
    daysOfWeek: sets[4],
    domStar: parts[2].startsWith('*'),
    dowStar: parts[4].startsWith('*'),
  };
  // Vixie cron accepts "0 0 30 2 *" and never runs it; an operator is better served by a 422.
  // 28 years from 2000 contain every (month, day, weekday) combination, Feb 29 included.
  let feasible = false;
  for (let d = Date.UTC(2000, 0, 1) / DAY, end = Date.UTC(2028, 0, 1) / DAY; d < end && !feasible; d++) {
    const date = new Date(d * DAY);
    feasible = compiled.months.has(date.getUTCMonth() + 1) && dayMatches(compiled, date.getUTCDate(), date.getUTCDay());
  }
  if (!feasible) throw new CronSyntaxError('the expression never matches a calendar day');
  if (compiledCache.size >= COMPILED_CACHE_LIMIT) compiledCache.clear();
  compiledCache.set(expression, compiled);
  return compiled;
}

/** Null when valid, else a message fit for a 422 body. */
export function validateCronExpression(expression: string): string | null {
  try {
    compileCron(expression);
    return null;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

// A whole Feb-29-on-a-Monday cycle can span 28 years (40 across 2100); past that, nothing matches.
const MAX_SCAN_DAYS = 366 * 45;

/** Smallest matching wall minute strictly after wallMs (wall clock read as UTC), or null. */
export function nextWallTime(c: CompiledCron, wallMs: number): number | null {
  const start = Math.floor(wallMs / MINUTE) * MINUTE + MINUTE;
  const firstDay = Math.floor(start / DAY);
  const firstMinute = (start - firstDay * DAY) / MINUTE;
  for (let d = firstDay; d < firstDay + MAX_SCAN_DAYS; d++) {
    const date = new Date(d * DAY);
    if (!c.months.has(date.getUTCMonth() + 1)) {
      // Jump to the first day of the next month; the loop's d++ lands on it.
      d += daysInMonth(date.getUTCFullYear(), date.getUTCMonth() + 1) - date.getUTCDate();
      continue;
    }
    if (!dayMatches(c, date.getUTCDate(), date.getUTCDay())) continue;
    const from = d === firstDay ? firstMinute : 0;
    for (const h of c.hours) {
      if (h * 60 + 59 < from) continue;
      for (const m of c.minutes) {
        if (h * 60 + m >= from) return d * DAY + (h * 60 + m) * MINUTE;
      }
    }
  }
  return null;
}

/** Largest matching wall minute strictly before wallMs, or null. */
export function prevWallTime(c: CompiledCron, wallMs: number): number | null {
  const last = Math.ceil(wallMs / MINUTE) * MINUTE - MINUTE;
  const lastDay = Math.floor(last / DAY);
  const lastMinute = (last - lastDay * DAY) / MINUTE;
  for (let d = lastDay; d > lastDay - MAX_SCAN_DAYS; d--) {
    const date = new Date(d * DAY);
    if (!c.months.has(date.getUTCMonth() + 1)) {
      d -= date.getUTCDate() - 1; // to the 1st; d-- lands on the previous month's last day
      continue;
    }
    if (!dayMatches(c, date.getUTCDate(), date.getUTCDay())) continue;
    const upTo = d === lastDay ? lastMinute : 24 * 60 - 1;
    for (let hi = c.hours.length - 1; hi >= 0; hi--) {
      const h = c.hours[hi];
      if (h * 60 > upTo) continue;
      for (let mi = c.minutes.length - 1; mi >= 0; mi--) {
        const m = c.minutes[mi];
        if (h * 60 + m <= upTo) return d * DAY + (h * 60 + m) * MINUTE;
      }
    }
  }
  return null;
}

// ---- time zones -------------------------------------------------------------------------------

const formatterCache = new Map<string, Intl.DateTimeFormat>();
const EN_US_DATE_TIME = /^(\d{1,2})\/(\d{1,2})\/(\d{4}), (\d{2}):(\d{2}):(\d{2})$/;

function formatter(timezone: string): Intl.DateTimeFormat {
  let f = formatterCache.get(timezone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: timezone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    formatterCache.set(timezone, f);
  }
  return f;
}

/** True for an IANA zone name (or alias) this runtime knows. Fixed offsets like "+05:00" are not zones. */
export function isValidTimeZone(timezone: string): boolean {
  if (typeof timezone !== 'string' || timezone === '') return false;
  try {
    formatter(timezone);
    return true;
  } catch {
    return false;
  }
}

/** The local wall-clock time of an instant in a zone, expressed as "wall milliseconds". */
export function wallClockMs(timezone: string, instantMs: number): number {
  const seconds = Math.floor(instantMs / 1000) * 1000;
  const f = formatter(timezone);
  // format() is about 4x faster than formatToParts() on Node 20 and this runs on every tick; en-US
  // with h23 prints "M/D/YYYY, HH:MM:SS". formatToParts stays as the fallback should ICU change.
  const m = EN_US_DATE_TIME.exec(f.format(seconds));
  if (m) {
    return Date.UTC(+m[3], +m[1] - 1, +m[2], +m[4], +m[5], +m[6]) + (instantMs - seconds);
  }
  const p: Record<string, number> = {};
  for (const part of f.formatToParts(seconds)) {
    if (part.type !== 'literal') p[part.type] = Number(part.value);
  }
  return Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second) + (instantMs - seconds);
}

/** UTC offset (local minus UTC) in milliseconds at an instant. */
export function zoneOffsetMs(timezone: string, instantMs: number): number {
  return wallClockMs(timezone, instantMs) - instantMs;
}

export type LocalTimeKind = 'exact' | 'gap' | 'repeated';

export interface ResolvedLocalTime {
  /** The instant the contract runs this local time at. */
  instant: number;
  kind: LocalTimeKind;
  /** For 'repeated': the second occurrence, which does not run. */
  laterInstant?: number;
}

/**
 * Maps a local wall time to the instant it runs at (docs/contract.md §7): a time in a DST gap runs at
 * the first instant after the gap; a time that occurs twice runs at its first occurrence.
 */
export function resolveLocalTime(timezone: string, wallMs: number): ResolvedLocalTime {
  // As Temporal does: the offsets a day either side bracket every candidate, assuming at most one
  // transition within 48 hours (true of every IANA zone in use).
  const before = zoneOffsetMs(timezone, wallMs - DAY);
  const after = zoneOffsetMs(timezone, wallMs + DAY);
  // No transition within a day either side: the one candidate needs no check.
  if (before === after) return { instant: wallMs - before, kind: 'exact' };
  const candidates: number[] = [];
  for (const offset of [before, after]) {
    const t = wallMs - offset;
    if (zoneOffsetMs(timezone, t) === offset) candidates.push(t);
  }
  candidates.sort((a, b) => a - b);
  if (candidates.length >= 2) return { instant: candidates[0], kind: 'repeated', laterInstant: candidates[1] };
  if (candidates.length === 1) return { instant: candidates[0], kind: 'exact' };
  if (after <= before) {
    // Unreachable for real zones: a gap needs the offset to grow. Keep the old offset.
    return { instant: wallMs - before, kind: 'gap' };
  }
  // Spring forward: at wallMs - after the old offset still holds, at wallMs - before the new one
  // does. Find the transition (whole seconds) between them.
  let lo = wallMs - after;
  let hi = wallMs - before;
  while (hi - lo > 1000) {
    const mid = lo + Math.floor((hi - lo) / 2000) * 1000;
    if (zoneOffsetMs(timezone, mid) === after) hi = mid;
    else lo = mid;
  }
  return { instant: hi, kind: 'gap' };
}

function pad(n: number, width = 2): string {
  return String(n).padStart(width, '0');
}

/** "2026-03-08T03:00:00-04:00": an instant as local time with its offset (milliseconds only if non-zero). */
export function formatLocalIso(timezone: string, instantMs: number): string {
  const wall = wallClockMs(timezone, instantMs);
  const offsetMinutes = Math.round((wall - instantMs) / MINUTE);
  const iso = new Date(wall).toISOString();
  const local = wall % 1000 === 0 ? iso.slice(0, 19) : iso.slice(0, 23);
  const sign = offsetMinutes < 0 ? '-' : '+';
  const abs = Math.abs(offsetMinutes);
  return `${local}${sign}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`;
}

function wallHm(wallMs: number): string {
  return new Date(wallMs).toISOString().slice(11, 16);
}

function wallDate(wallMs: number): string {
  return new Date(wallMs).toISOString().slice(0, 10);
}

// ---- cron occurrences -------------------------------------------------------------------------

export interface CronOccurrence {
  /** The instant it runs (UTC ms). */
  at: number;
  /** Scheduled local times ("HH:MM") this run stands for: several when a DST gap merges them. */
  localTimes: string[];
  /** Why DST changed this run, for people; null when it did not. */
  note: string | null;
}

// In the repeated hour the second pass of local times maps to instants already passed; at most a
// couple of hours of per-minute candidates are skipped. The cap only guards against a broken zone.
const MAX_SKIPS = 100_000;

/** The next cron occurrence strictly after afterMs, with DST notes. Throws on a bad expression or zone. */
export function nextCronOccurrence(expression: string, timezone: string, afterMs: number): CronOccurrence | null {
  const c = compileCron(expression);
  if (!isValidTimeZone(timezone)) throw new RangeError(`unknown time zone "${timezone}"`);
  // Every wall time up to wall(afterMs) maps to an instant <= afterMs, so the search starts there.
  let wall = nextWallTime(c, wallClockMs(timezone, afterMs));
  let resolved: ResolvedLocalTime | null = null;
  for (let skips = 0; wall !== null; skips++) {
    if (skips > MAX_SKIPS) return null;
    resolved = resolveLocalTime(timezone, wall);
    if (resolved.instant > afterMs) break;
    wall = nextWallTime(c, wall);
  }
  if (wall === null || resolved === null) return null;
  const at = resolved.instant;
  const members: Array<{ wall: number; kind: LocalTimeKind }> = [{ wall, kind: resolved.kind }];
  // Gap times collapse onto the instant after the gap, together with any time scheduled exactly
  // there: gather them so the run is reported (and dispatched) once.
  if (resolved.kind === 'gap') {
    for (let w = nextWallTime(c, wall); w !== null; w = nextWallTime(c, w)) {
      const r = resolveLocalTime(timezone, w);
      if (r.instant !== at) break;
      members.push({ wall: w, kind: r.kind });
    }
  }
  return { at, localTimes: members.map((m) => wallHm(m.wall)), note: dstNote(timezone, at, members) };
}

function dstNote(timezone: string, at: number, members: Array<{ wall: number; kind: LocalTimeKind }>): string | null {
  const gap = members.filter((m) => m.kind === 'gap');
  if (gap.length > 0) {
    const runsAt = wallHm(wallClockMs(timezone, at));
    const times = gap.map((m) => wallHm(m.wall));
    const date = wallDate(gap[0].wall);
    return times.length === 1
      ? `${times[0]} does not exist on ${date} in ${timezone} (DST gap); runs at ${runsAt}`
      : `${times.join(', ')} do not exist on ${date} in ${timezone} (DST gap); they run once, at ${runsAt}`;
  }
  const repeated = members.find((m) => m.kind === 'repeated');
  if (repeated) {
    return `${wallHm(repeated.wall)} occurs twice on ${wallDate(repeated.wall)}; runs once, at the first occurrence`;
  }
  return null;
}

/** Next run instant strictly after afterMs (UTC ms), or null if the expression never matches again. */
export function nextCronTime(expression: string, timezone: string, afterMs: number): number | null {
  return nextCronOccurrence(expression, timezone, afterMs)?.at ?? null;
}

// Wider than any DST shift ever used (2 h), so every wall time that maps before the bound is covered.
const PREV_SEARCH_SLACK = 3 * HOUR;

/** Latest run instant strictly before beforeMs (UTC ms), or null. Same DST rules as nextCronTime. */
export function prevCronTime(expression: string, timezone: string, beforeMs: number): number | null {
  const c = compileCron(expression);
  if (!isValidTimeZone(timezone)) throw new RangeError(`unknown time zone "${timezone}"`);
  // Instants never decrease as wall time increases, so walking wall times down from above the
  // bound, the first one that maps before it is the answer.
  // Away from a transition wall and instant move in lockstep and no slack is needed; walking three
  // hours of per-minute candidates on every tick would cost milliseconds.
  const steady = zoneOffsetMs(timezone, beforeMs - DAY) === zoneOffsetMs(timezone, beforeMs + DAY);
  let wall = prevWallTime(c, wallClockMs(timezone, beforeMs) + (steady ? 0 : PREV_SEARCH_SLACK));
  for (let steps = 0; wall !== null && steps <= MAX_SKIPS; steps++) {
    const r = resolveLocalTime(timezone, wall);
    if (r.instant < beforeMs) return r.instant;
    wall = prevWallTime(c, wall);
  }
  return null;
}
