import { describe, it, expect } from 'vitest';
import fc from 'fast-check';
import { compileCron, nextCronTime, prevCronTime, wallClockMs, type CompiledCron } from '../../src/calendar/cron.js';
import { nextDueAt, type ScheduleSpec } from '../../src/calendar/schedule.js';

const MIN = 60_000;
const ms = (s: string): number => Date.parse(s);

const zones = ['UTC', 'America/New_York', 'Europe/London', 'Australia/Sydney', 'Australia/Lord_Howe', 'Asia/Kolkata'];
// (zone, UTC day) pairs around each 2026 DST transition of those zones (Lord Howe moves by 30
// minutes), plus zones without DST on the same days.
const transitionDays: Array<[string, string]> = [
  ['America/New_York', '2026-03-08'],
  ['America/New_York', '2026-11-01'],
  ['Europe/London', '2026-03-29'],
  ['Europe/London', '2026-10-25'],
  ['Australia/Sydney', '2026-04-04'],
  ['Australia/Sydney', '2026-10-03'],
  ['Australia/Lord_Howe', '2026-04-04'],
  ['Australia/Lord_Howe', '2026-10-03'],
  ['UTC', '2026-03-08'],
  ['Asia/Kolkata', '2026-10-25'],
];

const expression = fc
  .tuple(
    fc.constantFrom('*', '*/15', '0', '30', '0,30', '5-10', '*/7', '45'),
    fc.constantFrom('*', '1', '2', '1-3', '*/2', '0,2', '3'),
    fc.constantFrom('*', '*', '1', '*/2', '4-8,25', '31'),
    fc.constantFrom('*', '*', '3,4,10,11', 'mar-apr'),
    fc.constantFrom('*', '*', '0', 'mon-fri', '*/3', '6,7'),
  )
  .map((f) => f.join(' '));

const instant = fc.integer({ min: ms('2026-01-01T00:00:00Z'), max: ms('2027-12-31T00:00:00Z') });

/** Vixie matching, written independently of cron.ts (only the field sets come from compileCron). */
function matchesWall(c: CompiledCron, text: string, wall: number): boolean {
  const d = new Date(wall);
  const [, , domText, , dowText] = text.split(' ');
  const dom = c.daysOfMonth.has(d.getUTCDate());
  const dow = c.daysOfWeek.has(d.getUTCDay());
  const day = domText.startsWith('*') || dowText.startsWith('*') ? dom && dow : dom || dow;
  return c.minutes.includes(d.getUTCMinutes()) && c.hours.includes(d.getUTCHours()) && c.months.has(d.getUTCMonth() + 1) && day;
}

/**
 * Oracle: walk UTC minute by minute. Run at t when the local time at t matches and has not been
 * seen before (repeated hour: first occurrence only), or when the local clock jumped over a
 * matching time since the previous minute (gap: first instant after it).
 */
function bruteForce(text: string, tz: string, from: number, to: number): number[] {
  const c = compileCron(text);
  const out: number[] = [];
  let prevWall = wallClockMs(tz, from);
  let maxWall = prevWall;
  for (let t = from + MIN; t <= to; t += MIN) {
    const wall = wallClockMs(tz, t);
    let run = wall > maxWall && matchesWall(c, text, wall);
    for (let skipped = prevWall + MIN; !run && skipped < wall && wall - prevWall > MIN; skipped += MIN) {
      run = skipped > maxWall && matchesWall(c, text, skipped);
    }
    if (run) out.push(t);
    prevWall = wall;
    maxWall = Math.max(maxWall, wall);
  }
  return out;
}

function enumerate(text: string, tz: string, from: number, to: number): number[] {
  const out: number[] = [];
  for (let t = nextCronTime(text, tz, from); t !== null && t <= to; t = nextCronTime(text, tz, t)) out.push(t);
  return out;
}

describe('cron properties', () => {
  it('agrees with a minute-by-minute oracle across DST transitions', () => {
    fc.assert(
      fc.property(expression, fc.constantFrom(...transitionDays), (text, [tz, day]) => {
        const from = ms(`${day}T00:00:00Z`);
        const to = from + 24 * 60 * MIN;
        expect(enumerate(text, tz, from, to).map((t) => new Date(t).toISOString())).toEqual(
          bruteForce(text, tz, from, to).map((t) => new Date(t).toISOString()),
        );
      }),
      { numRuns: 30 },
    );
  });

  it('next is strictly increasing, prev/next are consistent, and each local time runs at most once', () => {
    fc.assert(
      fc.property(expression, fc.constantFrom(...zones), instant, (text, tz, after) => {
        let t = after;
        let lastWall = -Infinity;
        for (let i = 0; i < 5; i++) {
          const next = nextCronTime(text, tz, t);
          if (next === null) return;
          expect(next).toBeGreaterThan(t);
          const prev = prevCronTime(text, tz, next);
          if (prev !== null) {
            expect(prev).toBeLessThan(next);
            expect(nextCronTime(text, tz, prev)).toBe(next);
          }
          const wall = wallClockMs(tz, next);
          expect(wall).toBeGreaterThan(lastWall);
          lastWall = wall;
          t = next;
        }
      }),
      { numRuns: 80 },
    );
  });
});

describe('schedule properties', () => {
  it('interval due times are on the phase, strictly after, and increasing', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 86_400 * 3 }), instant, instant, (seconds, anchor, after) => {
        const spec: ScheduleSpec = { type: 'interval', seconds };
        let t = after;
        for (let i = 0; i < 3; i++) {
          const next = nextDueAt(spec, t, { anchorMs: anchor })!;
          expect(next).toBeGreaterThan(t);
          expect(next).toBeGreaterThanOrEqual(anchor);
          expect((next - anchor) % (seconds * 1000)).toBe(0);
          expect(next - t).toBeLessThanOrEqual(Math.max(seconds * 1000, anchor - t));
          t = next;
        }
      }),
    );
  });

  it('cron due times stay inside [start_at, end_at]', () => {
    fc.assert(
      fc.property(expression, fc.constantFrom(...zones), instant, fc.integer({ min: 1, max: 30 * 24 * 60 }), (text, tz, start, minutes) => {
        const spec: ScheduleSpec = {
          type: 'cron',
          expression: text,
          timezone: tz,
          start_at: new Date(start).toISOString(),
          end_at: new Date(start + minutes * MIN).toISOString(),
        };
        for (let t = nextDueAt(spec, start - 10 * 24 * 60 * MIN), i = 0; t !== null && i < 20; t = nextDueAt(spec, t), i++) {
          expect(t).toBeGreaterThanOrEqual(start);
          expect(t).toBeLessThanOrEqual(start + minutes * MIN);
        }
      }),
      { numRuns: 40 },
    );
  });
});
