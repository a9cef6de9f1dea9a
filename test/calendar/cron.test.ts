import { describe, it, expect } from 'vitest';
import {
  compileCron,
  formatLocalIso,
  isValidTimeZone,
  nextCronOccurrence,
  nextCronTime,
  prevCronTime,
  resolveLocalTime,
  validateCronExpression,
  wallClockMs,
} from '../../src/calendar/cron.js';

const ms = (s: string): number => Date.parse(s);
const isoOf = (t: number | null): string | null => (t === null ? null : new Date(t).toISOString());

/** The next n run instants strictly after `from`, as UTC ISO strings. */
function series(expr: string, tz: string, from: string, n: number): string[] {
  const out: string[] = [];
  let t = ms(from);
  for (let i = 0; i < n; i++) {
    const next = nextCronTime(expr, tz, t);
    if (next === null) break;
    out.push(new Date(next).toISOString());
    t = next;
  }
  return out;
}

describe('cron: DST spring-forward gap runs at the first instant after the gap', () => {
  it('02:30 daily in New York: 2026-03-08 runs at 03:00 EDT = 07:00Z', () => {
    expect(series('30 2 * * *', 'America/New_York', '2026-03-06T12:00:00Z', 4)).toEqual([
      '2026-03-07T07:30:00.000Z', // 02:30 EST
      '2026-03-08T07:00:00.000Z', // gap: 03:00 EDT (cron-parser 5.10 says 07:30Z)
      '2026-03-09T06:30:00.000Z', // 02:30 EDT
      '2026-03-10T06:30:00.000Z',
    ]);
  });

  it('01:30 daily in London: 2026-03-29 runs at 02:00 BST = 01:00Z', () => {
    expect(series('30 1 * * *', 'Europe/London', '2026-03-27T12:00:00Z', 4)).toEqual([
      '2026-03-28T01:30:00.000Z',
      '2026-03-29T01:00:00.000Z',
      '2026-03-30T00:30:00.000Z',
      '2026-03-31T00:30:00.000Z',
    ]);
  });

  it('hourly in New York across the gap: 01:00 EST, then 03:00 EDT, no 02:00', () => {
    expect(series('0 * * * *', 'America/New_York', '2026-03-08T05:30:00Z', 4)).toEqual([
      '2026-03-08T06:00:00.000Z',
      '2026-03-08T07:00:00.000Z',
      '2026-03-08T08:00:00.000Z',
      '2026-03-08T09:00:00.000Z',
    ]);
  });

  it('every 15 minutes across the gap: 02:00-02:45 merge into one run at 03:00', () => {
    expect(series('*/15 * * * *', 'America/New_York', '2026-03-08T06:20:00Z', 4)).toEqual([
      '2026-03-08T06:30:00.000Z',
      '2026-03-08T06:45:00.000Z',
      '2026-03-08T07:00:00.000Z',
      '2026-03-08T07:15:00.000Z',
    ]);
    const o = nextCronOccurrence('*/15 * * * *', 'America/New_York', ms('2026-03-08T06:45:00Z'));
    expect(o?.localTimes).toEqual(['02:00', '02:15', '02:30', '02:45', '03:00']);
  });

  it('hourly in London across the gap', () => {
    expect(series('0 * * * *', 'Europe/London', '2026-03-29T00:00:00Z', 3)).toEqual([
      '2026-03-29T01:00:00.000Z', // 01:00 GMT does not exist -> 02:00 BST, which is also scheduled: one run
      '2026-03-29T02:00:00.000Z',
      '2026-03-29T03:00:00.000Z',
    ]);
  });
});

describe('cron: DST fall-back repeated hour runs once, at the first occurrence', () => {
  it('01:30 daily in New York on 2026-11-01: only 05:30Z', () => {
    expect(series('30 1 * * *', 'America/New_York', '2026-10-31T12:00:00Z', 2)).toEqual(['2026-11-01T05:30:00.000Z', '2026-11-02T06:30:00.000Z']);
    // Asked from inside the second 01:00-02:00, the repeated 01:30 does not come back.
    expect(isoOf(nextCronTime('30 1 * * *', 'America/New_York', ms('2026-11-01T06:10:00Z')))).toBe('2026-11-02T06:30:00.000Z');
  });

  it('01:30 daily in London on 2026-10-25: only 00:30Z', () => {
    expect(series('30 1 * * *', 'Europe/London', '2026-10-24T12:00:00Z', 2)).toEqual(['2026-10-25T00:30:00.000Z', '2026-10-26T01:30:00.000Z']);
  });

  it('hourly in New York: local 01:00 once (cron-parser 5.10 runs it twice)', () => {
    expect(series('0 * * * *', 'America/New_York', '2026-11-01T03:30:00Z', 4)).toEqual([
      '2026-11-01T04:00:00.000Z', // 00:00 EDT
      '2026-11-01T05:00:00.000Z', // 01:00 EDT
      '2026-11-01T07:00:00.000Z', // 02:00 EST
      '2026-11-01T08:00:00.000Z',
    ]);
  });

  it('hourly in London: local 01:00 once', () => {
    expect(series('0 * * * *', 'Europe/London', '2026-10-24T23:30:00Z', 3)).toEqual([
      '2026-10-25T00:00:00.000Z', // 01:00 BST
      '2026-10-25T02:00:00.000Z', // 02:00 GMT
      '2026-10-25T03:00:00.000Z',
    ]);
  });

  it('every 15 minutes: each local time once, then nothing until 02:00 EST', () => {
    expect(series('*/15 * * * *', 'America/New_York', '2026-11-01T04:50:00Z', 7)).toEqual([
      '2026-11-01T05:00:00.000Z',
      '2026-11-01T05:15:00.000Z',
      '2026-11-01T05:30:00.000Z',
      '2026-11-01T05:45:00.000Z',
      '2026-11-01T07:00:00.000Z',
      '2026-11-01T07:15:00.000Z',
      '2026-11-01T07:30:00.000Z',
    ]);
  });
});

describe('cron: DST notes', () => {
  it('says when a gap moved a time', () => {
    expect(nextCronOccurrence('30 2 * * *', 'America/New_York', ms('2026-03-07T12:00:00Z'))?.note).toBe(
      '02:30 does not exist on 2026-03-08 in America/New_York (DST gap); runs at 03:00',
    );
  });
  it('says when a repeated time runs once', () => {
    expect(nextCronOccurrence('30 1 * * *', 'America/New_York', ms('2026-10-31T12:00:00Z'))?.note).toBe(
      '01:30 occurs twice on 2026-11-01; runs once, at the first occurrence',
    );
  });
  it('is null on ordinary days', () => {
    expect(nextCronOccurrence('30 1 * * *', 'America/New_York', ms('2026-06-01T00:00:00Z'))?.note).toBeNull();
  });
});

describe('cron: fields', () => {
  it('names, ranges and steps', () => {
    expect(series('0,30 9-17/4 * * mon-fri', 'UTC', '2026-01-02T12:00:00Z', 5)).toEqual([
      '2026-01-02T13:00:00.000Z', // Friday
      '2026-01-02T13:30:00.000Z',
      '2026-01-02T17:00:00.000Z',
      '2026-01-02T17:30:00.000Z',
      '2026-01-05T09:00:00.000Z', // Monday
    ]);
    expect(series('0 0 1 JAN-Mar,dec *', 'UTC', '2026-01-15T00:00:00Z', 4)).toEqual([
      '2026-02-01T00:00:00.000Z',
      '2026-03-01T00:00:00.000Z',
      '2026-12-01T00:00:00.000Z',
      '2027-01-01T00:00:00.000Z',
    ]);
  });

  it('Sunday is 0 or 7, and overlapping list elements are fine', () => {
    const sundays = series('0 0 * * 0', 'UTC', '2026-01-01T00:00:00Z', 3);
    expect(series('0 0 * * 7', 'UTC', '2026-01-01T00:00:00Z', 3)).toEqual(sundays);
    expect(series('0 0 * * sun,7', 'UTC', '2026-01-01T00:00:00Z', 3)).toEqual(sundays);
    expect(series('*/15,30 * * * *', 'UTC', '2026-01-01T00:00:00Z', 3)).toEqual([
      '2026-01-01T00:15:00.000Z',
      '2026-01-01T00:30:00.000Z',
      '2026-01-01T00:45:00.000Z',
    ]);
  });

  it('day-of-month OR day-of-week when both are restricted', () => {
    // 1st and 15th, plus every Monday (Jan 2026: Mondays 5, 12, 19, 26).
    expect(series('0 0 1,15 * mon', 'UTC', '2026-01-01T00:00:00Z', 6)).toEqual([
      '2026-01-05T00:00:00.000Z',
      '2026-01-12T00:00:00.000Z',
      '2026-01-15T00:00:00.000Z',
      '2026-01-19T00:00:00.000Z',
      '2026-01-26T00:00:00.000Z',
      '2026-02-01T00:00:00.000Z',
    ]);
  });

  it('a day field starting with "*" is unrestricted (Vixie): AND with the other', () => {
    // Odd days that are Mondays: Jan 5, Jan 19, Feb 9 (cron-parser 5.10 would give every odd day too).
    expect(series('0 0 */2 * 1', 'UTC', '2026-01-01T00:00:00Z', 3)).toEqual([
      '2026-01-05T00:00:00.000Z',
      '2026-01-19T00:00:00.000Z',
      '2026-02-09T00:00:00.000Z',
    ]);
    // The 1st of a month that falls on a Sunday, Tuesday, Thursday or Saturday.
    expect(series('0 0 1 * */2', 'UTC', '2025-12-31T00:00:00Z', 4)).toEqual([
      '2026-01-01T00:00:00.000Z', // Thursday
      '2026-02-01T00:00:00.000Z', // Sunday
      '2026-03-01T00:00:00.000Z', // Sunday
      '2026-08-01T00:00:00.000Z', // Saturday
    ]);
    // A restricted field that happens to cover everything is still restricted: OR.
    expect(series('0 0 1 * 0-6', 'UTC', '2026-01-01T00:00:00Z', 2)).toEqual(['2026-01-02T00:00:00.000Z', '2026-01-03T00:00:00.000Z']);
  });

  it('leap day', () => {
    expect(series('0 12 29 2 *', 'UTC', '2026-01-01T00:00:00Z', 2)).toEqual(['2028-02-29T12:00:00.000Z', '2032-02-29T12:00:00.000Z']);
  });

  it('is strictly after and prevCronTime strictly before', () => {
    expect(isoOf(nextCronTime('0 * * * *', 'UTC', ms('2026-01-01T05:00:00Z')))).toBe('2026-01-01T06:00:00.000Z');
    expect(isoOf(nextCronTime('0 * * * *', 'UTC', ms('2026-01-01T04:59:59.999Z')))).toBe('2026-01-01T05:00:00.000Z');
    expect(isoOf(prevCronTime('0 * * * *', 'UTC', ms('2026-01-01T05:00:00Z')))).toBe('2026-01-01T04:00:00.000Z');
    expect(isoOf(prevCronTime('0 * * * *', 'UTC', ms('2026-01-01T05:00:00.001Z')))).toBe('2026-01-01T05:00:00.000Z');
    expect(isoOf(prevCronTime('0 0 1 1 *', 'UTC', ms('2026-01-01T00:00:00Z')))).toBe('2025-01-01T00:00:00.000Z');
  });

  it('prevCronTime follows the same DST rules', () => {
    // Inside the second 01:xx pass the latest run is the first 01:45.
    expect(isoOf(prevCronTime('*/15 * * * *', 'America/New_York', ms('2026-11-01T06:40:00Z')))).toBe('2026-11-01T05:45:00.000Z');
    expect(isoOf(prevCronTime('30 2 * * *', 'America/New_York', ms('2026-03-08T08:00:00Z')))).toBe('2026-03-08T07:00:00.000Z');
  });
});

describe('cron: validation', () => {
  it.each([
    ['0 0 0 * * *', /5 fields/],
    ['@daily', /5 fields/],
    ['* * * *', /5 fields/],
    ['0 0 L * *', /names are not allowed/],
    ['0 0 * * 1#2', /only digits/],
    ['0 0 ? * 1', /only digits/],
    ['H * * * *', /names are not allowed/],
    ['0 0 * foo *', /unknown name "foo"/],
    ['0 0 * * mon-fox', /unknown name/],
    ['60 * * * *', /minute field element "60"/],
    ['0 24 * * *', /hour/],
    ['0 0 0 * *', /day-of-month/],
    ['*/0 * * * *', /minute/],
    ['1,,2 * * * *', /empty list element/],
    ['0 0 30 2 *', /never matches/],
    ['0 0 31 4,6 *', /never matches/],
  ])('rejects %s', (expr, message) => {
    expect(validateCronExpression(expr)).toMatch(message);
    expect(() => nextCronTime(expr, 'UTC', 0)).toThrow(message);
  });

  it('accepts standard forms', () => {
    for (const e of ['* * * * *', '  5  4 * * sun ', '0 0 31 1,4 *', '0 0 30 2 1', '1/5 * * * *', '0 0 1-31/10 * *']) {
      expect(validateCronExpression(e)).toBeNull();
    }
    expect(compileCron('0 0 31 1,4 *').daysOfMonth.has(31)).toBe(true);
  });

  it('checks time zones up front', () => {
    expect(isValidTimeZone('America/New_York')).toBe(true);
    expect(isValidTimeZone('UTC')).toBe(true);
    expect(isValidTimeZone('Not/AZone')).toBe(false);
    expect(isValidTimeZone('')).toBe(false);
    expect(() => nextCronTime('* * * * *', 'Not/AZone', 0)).toThrow(/unknown time zone/);
  });
});

describe('zone helpers', () => {
  it('resolveLocalTime classifies exact, gap and repeated', () => {
    expect(resolveLocalTime('America/New_York', ms('2026-06-01T12:00:00Z'))).toEqual({ instant: ms('2026-06-01T16:00:00Z'), kind: 'exact' });
    expect(resolveLocalTime('America/New_York', ms('2026-03-08T02:30:00Z'))).toEqual({ instant: ms('2026-03-08T07:00:00Z'), kind: 'gap' });
    expect(resolveLocalTime('America/New_York', ms('2026-11-01T01:30:00Z'))).toEqual({
      instant: ms('2026-11-01T05:30:00Z'),
      kind: 'repeated',
      laterInstant: ms('2026-11-01T06:30:00Z'),
    });
  });

  it('wallClockMs and formatLocalIso', () => {
    expect(new Date(wallClockMs('Europe/London', ms('2026-07-01T10:15:30.250Z'))).toISOString()).toBe('2026-07-01T11:15:30.250Z');
    expect(formatLocalIso('America/New_York', ms('2026-03-08T07:00:00Z'))).toBe('2026-03-08T03:00:00-04:00');
    expect(formatLocalIso('UTC', ms('2026-03-08T07:00:00Z'))).toBe('2026-03-08T07:00:00+00:00');
    expect(formatLocalIso('Asia/Kolkata', ms('2026-03-08T07:00:00.5Z'))).toBe('2026-03-08T12:30:00.500+05:30');
  });
});
