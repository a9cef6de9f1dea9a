// A background task's schedule (docs/contract.md §12): its type, misfire policy and the checked
// spec (interval, one time, cron with its time zone). Tasks (background.ts) embed ScheduleSpec.
import { CronExpressionParser } from 'cron-parser';
import { z } from 'zod';
import { IsoDateTime } from './common.js';

export const ScheduleType = z.enum(['manual', 'once', 'interval', 'cron']).meta({ id: 'ScheduleType' });
export type ScheduleType = z.infer<typeof ScheduleType>;

export const MisfirePolicy = z.enum(['skip_missed', 'run_once', 'queue_all']).meta({ id: 'MisfirePolicy' });
export type MisfirePolicy = z.infer<typeof MisfirePolicy>;

// --- schedule ----------------------------------------------------------------------------------

/** Zones already accepted: building an Intl.DateTimeFormat per check cost ~10 µs a request. Only valid ids enter, so it stays small. */
const knownTimeZones = new Set<string>();

/** True when `tz` is an IANA zone this runtime knows (cron-parser would fail only at next()). */
export function isValidTimeZone(tz: string): boolean {
  if (tz.length === 0) return false;
  if (knownTimeZones.has(tz)) return true;
  try {
    new Intl.DateTimeFormat(undefined, { timeZone: tz });
    knownTimeZones.add(tz);
    return true;
  } catch {
    return false;
  }
}

/**
 * Why a cron expression is refused, or null when it is a valid 5-field expression. cron-parser 5
 * also takes 6 fields (seconds), 4 fields and @macros; the contract is standard 5-field cron.
 * `H` is refused too: its value is random per process, so instances would disagree on occurrences.
 */
export function cronExpressionProblem(expression: string, timezone = 'UTC'): string | null {
  const fields = expression
    .trim()
    .split(/\s+/)
    .filter((f) => f.length > 0);
  if (fields.length !== 5) {
    return `must have exactly 5 fields (minute hour day-of-month month day-of-week), got ${fields.length}`;
  }
  // A lone H (not a letter of a name such as THU) is the randomised value.
  if (fields.some((f) => /(^|[^A-Za-z])H([^A-Za-z]|$)/i.test(f))) {
    return 'the randomised "H" value is not supported';
  }
  try {
    CronExpressionParser.parse(fields.join(' '), { tz: isValidTimeZone(timezone) ? timezone : 'UTC' });
    return null;
  } catch (e) {
    return `is not a valid cron expression: ${(e as Error).message}`;
  }
}

const ScheduleFields = z.strictObject({
  type: ScheduleType,
  run_at: IsoDateTime.nullish().describe('once: when to run.'),
  seconds: z.number().int().nullish().describe('interval: period in seconds (> 0).'),
  expression: z.string().nullish().describe('cron: a 5-field expression.'),
  start_at: IsoDateTime.nullish().describe('No occurrence before this instant.'),
  end_at: IsoDateTime.nullish().describe('No occurrence after this instant; must be after start_at.'),
  jitter_seconds: z.number().int().min(0).default(0).describe('Deterministic delay per occurrence, 0..jitter_seconds.'),
  misfire_policy: MisfirePolicy.default('run_once'),
  timezone: z.string().default('UTC').describe('IANA time zone the cron expression is read in.'),
});

/**
 * Rules of docs/contract.md §7, each reported at the field it concerns so a 422 points at
 * `["body","schedule","seconds"]` rather than at the schedule as a whole.
 */
export const ScheduleSpec = ScheduleFields.superRefine((s, ctx) => {
  const required = (field: string, why: string) =>
    ctx.addIssue({ code: 'custom', path: [field], message: `Field required for a ${why} schedule`, params: { type: 'missing' } });
  const forbid = (field: 'seconds' | 'expression' | 'run_at') => {
    if (s[field] !== undefined && s[field] !== null) {
      ctx.addIssue({
        code: 'custom',
        path: [field],
        message: `${field} is not allowed on a manual schedule`,
        input: s[field],
        params: { type: 'extra_forbidden' },
      });
    }
  };
  const tzOk = isValidTimeZone(s.timezone);
  if (!tzOk) {
    ctx.addIssue({
      code: 'custom',
      path: ['timezone'],
      message: `'${s.timezone}' is not a known IANA time zone`,
      input: s.timezone,
      params: { type: 'value_error' },
    });
  }
  switch (s.type) {
    case 'manual':
      forbid('seconds');
      forbid('expression');
      forbid('run_at');
      break;
    case 'once':
      if (s.run_at == null) required('run_at', 'once');
      break;
    case 'interval':
      if (s.seconds == null) required('seconds', 'interval');
      else if (s.seconds <= 0) {
        ctx.addIssue({
          code: 'custom',
          path: ['seconds'],
          message: 'Input should be greater than 0',
          input: s.seconds,
          params: { type: 'greater_than', ctx: { gt: 0 } },
        });
      }
      break;
    case 'cron': {
      if (s.expression == null) {
        required('expression', 'cron');
        break;
      }
      const problem = cronExpressionProblem(s.expression, tzOk ? s.timezone : 'UTC');
      if (problem) {
        ctx.addIssue({
          code: 'custom',
          path: ['expression'],
          message: `Cron expression ${problem}`,
          input: s.expression,
          params: { type: 'value_error' },
        });
      }
      break;
    }
  }
  if (s.start_at != null && s.end_at != null && Date.parse(s.end_at) <= Date.parse(s.start_at)) {
    ctx.addIssue({
      code: 'custom',
      path: ['end_at'],
      message: 'end_at must be after start_at',
      input: s.end_at,
      params: { type: 'value_error' },
    });
  }
}).meta({ id: 'ScheduleSpec' });
export type ScheduleSpec = z.infer<typeof ScheduleSpec>;
export type ScheduleSpecInput = z.input<typeof ScheduleSpec>;
