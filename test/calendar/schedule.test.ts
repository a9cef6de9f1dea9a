import { describe, it, expect } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import {
  dueOccurrences,
  nextDueAt,
  occurrenceId,
  parseOccurrenceId,
  prevDueAt,
  scheduleProblems,
  upcoming,
  type DueOccurrencesResult,
  type ScheduleSpec,
} from '../../src/calendar/schedule.js';
import { jitterSeconds } from '../../machines/policies/jitter.js';

const ms = (s: string): number => Date.parse(s);
const iso = (t: number): string => new Date(t).toISOString();
const MIN = 60_000;
const dues = (r: DueOccurrencesResult): string[] => r.dispatch.map((d) => d.due_at);

describe('nextDueAt', () => {
  it('manual is never due', () => {
    expect(nextDueAt({ type: 'manual' }, 0)).toBeNull();
  });

  it('once: due at run_at if still ahead, once only', () => {
    const spec: ScheduleSpec = { type: 'once', run_at: '2026-05-01T10:00:00Z' };
    expect(nextDueAt(spec, ms('2026-04-30T00:00:00Z'))).toBe(ms('2026-05-01T10:00:00Z'));
    expect(nextDueAt(spec, ms('2026-05-01T10:00:00Z'))).toBeNull();
    expect(nextDueAt(spec, ms('2026-06-01T00:00:00Z'))).toBeNull();
    expect(nextDueAt({ ...spec, end_at: '2026-05-01T09:00:00Z' }, 0)).toBeNull();
    expect(nextDueAt({ ...spec, start_at: '2026-05-01T11:00:00Z' }, 0)).toBeNull();
  });

  it('interval: phase anchored at the anchor (created_at)', () => {
    const spec: ScheduleSpec = { type: 'interval', seconds: 900 };
    const anchor = ms('2026-01-01T00:07:13Z');
    expect(iso(nextDueAt(spec, anchor, { anchorMs: anchor })!)).toBe('2026-01-01T00:22:13.000Z');
    expect(iso(nextDueAt(spec, ms('2026-01-01T05:00:00Z'), { anchorMs: anchor })!)).toBe('2026-01-01T05:07:13.000Z');
    expect(iso(nextDueAt(spec, ms('2026-01-01T05:07:13Z'), { anchorMs: anchor })!)).toBe('2026-01-01T05:22:13.000Z');
    expect(() => nextDueAt(spec, 0)).toThrow(/anchorMs/);
  });

  it('interval: start_at is the phase and the first due time', () => {
    const spec: ScheduleSpec = { type: 'interval', seconds: 3600, start_at: '2026-02-01T00:30:00Z' };
    const created = ms('2026-01-15T12:00:00Z');
    expect(iso(nextDueAt(spec, created, { anchorMs: created })!)).toBe('2026-02-01T00:30:00.000Z');
    expect(iso(nextDueAt(spec, ms('2026-02-01T03:00:00Z'), { anchorMs: created })!)).toBe('2026-02-01T03:30:00.000Z');
  });

  it('cron: nothing before start_at, nothing after end_at (inclusive)', () => {
    const spec: ScheduleSpec = {
      type: 'cron',
      expression: '0 * * * *',
      start_at: '2026-01-01T05:00:00Z',
      end_at: '2026-01-01T07:00:00Z',
    };
    expect(iso(nextDueAt(spec, ms('2026-01-01T00:00:00Z'))!)).toBe('2026-01-01T05:00:00.000Z');
    expect(iso(nextDueAt(spec, ms('2026-01-01T06:00:00Z'))!)).toBe('2026-01-01T07:00:00.000Z');
    expect(nextDueAt(spec, ms('2026-01-01T07:00:00Z'))).toBeNull();
  });

  it('interval: end_at stops it', () => {
    const spec: ScheduleSpec = { type: 'interval', seconds: 600, start_at: '2026-01-01T00:00:00Z', end_at: '2026-01-01T00:25:00Z' };
    expect(iso(nextDueAt(spec, ms('2026-01-01T00:10:00Z'))!)).toBe('2026-01-01T00:20:00.000Z');
    expect(nextDueAt(spec, ms('2026-01-01T00:20:00Z'))).toBeNull();
  });

  it('cron honours the time zone', () => {
    const spec: ScheduleSpec = { type: 'cron', expression: '0 9 * * *', timezone: 'Asia/Tokyo' };
    expect(iso(nextDueAt(spec, ms('2026-01-01T00:00:00Z'))!)).toBe('2026-01-02T00:00:00.000Z');
    expect(iso(nextDueAt({ ...spec, timezone: null }, ms('2026-01-01T00:00:00Z'))!)).toBe('2026-01-01T09:00:00.000Z');
  });

  it('prevDueAt mirrors nextDueAt', () => {
    const spec: ScheduleSpec = { type: 'interval', seconds: 900, start_at: '2026-01-01T00:00:00Z', end_at: '2026-01-01T02:00:00Z' };
    expect(iso(prevDueAt(spec, ms('2026-01-01T01:00:00Z'))!)).toBe('2026-01-01T00:45:00.000Z');
    expect(iso(prevDueAt(spec, ms('2026-01-01T01:00:00.001Z'))!)).toBe('2026-01-01T01:00:00.000Z');
    expect(iso(prevDueAt(spec, ms('2026-01-02T00:00:00Z'))!)).toBe('2026-01-01T02:00:00.000Z');
    expect(prevDueAt(spec, ms('2026-01-01T00:00:00Z'))).toBeNull();
  });
});

describe('occurrenceId', () => {
  it('is <type>:<schedule_revision>:<due UTC ISO>', () => {
    expect(occurrenceId('cron', 3, ms('2026-03-08T07:00:00Z'))).toBe('cron:3:2026-03-08T07:00:00.000Z');
    expect(parseOccurrenceId('interval:12:2026-01-01T00:15:00.000Z')).toEqual({
      type: 'interval',
      scheduleRevision: 12,
      dueMs: ms('2026-01-01T00:15:00Z'),
    });
    expect(parseOccurrenceId('nonsense')).toBeNull();
  });
});

describe('dueOccurrences: a 3-hour outage', () => {
  // The scheduler last handled 09:00 and comes back at 12:00:00.5 (12:00 is on time, within the 1 s tolerance).
  const interval = (misfire_policy: ScheduleSpec['misfire_policy']): ScheduleSpec => ({
    type: 'interval',
    seconds: 900,
    start_at: '2026-01-01T00:00:00Z',
    misfire_policy,
  });
  const input = { lastDueMs: ms('2026-01-01T09:00:00Z'), nowMs: ms('2026-01-01T12:00:00.500Z'), scheduleRevision: 2 };
  const quarterHours = (from: string, n: number): string[] => Array.from({ length: n }, (_, i) => iso(ms(from) + i * 15 * MIN));

  it('interval 15 min, skip_missed: only the on-time 12:00 runs', () => {
    const r = dueOccurrences(interval('skip_missed'), input);
    expect(r.dispatch).toEqual([
      {
        occurrence_id: 'interval:2:2026-01-01T12:00:00.000Z',
        trigger_type: 'interval',
        due_at: '2026-01-01T12:00:00.000Z',
        run_at: '2026-01-01T12:00:00.000Z',
        missed: false,
      },
    ]);
    expect(r.last_due_at).toBe('2026-01-01T12:00:00.000Z');
    expect(r.next_due_at).toBe('2026-01-01T12:15:00.000Z');
    expect(r.misfire_cursor).toBe('2026-01-01T11:45:00.000Z');
    expect(r.missed).toEqual({ first_due_at: '2026-01-01T09:15:00.000Z', last_due_at: '2026-01-01T11:45:00.000Z' });
  });

  it('interval 15 min, run_once: one run for the 11 missed (latest id), plus the on-time one', () => {
    const r = dueOccurrences(interval('run_once'), input);
    expect(r.dispatch.map((d) => [d.occurrence_id, d.missed])).toEqual([
      ['interval:2:2026-01-01T11:45:00.000Z', true],
      ['interval:2:2026-01-01T12:00:00.000Z', false],
    ]);
    expect(r.next_due_at).toBe('2026-01-01T12:15:00.000Z');
  });

  it('run_once is the default', () => {
    expect(dues(dueOccurrences(interval(undefined), input))).toEqual(dues(dueOccurrences(interval('run_once'), input)));
  });

  it('interval 15 min, queue_all: every missed one, oldest first', () => {
    const r = dueOccurrences(interval('queue_all'), input);
    expect(dues(r)).toEqual(quarterHours('2026-01-01T09:15:00Z', 12));
    expect(r.dispatch.filter((d) => d.missed)).toHaveLength(11);
    expect(r.truncated).toBe(false);
  });

  it('coming back between occurrences: nothing on time', () => {
    const later = { ...input, nowMs: ms('2026-01-01T12:05:00Z') };
    expect(dues(dueOccurrences(interval('skip_missed'), later))).toEqual([]);
    expect(dues(dueOccurrences(interval('run_once'), later))).toEqual(['2026-01-01T12:00:00.000Z']);
    expect(dues(dueOccurrences(interval('queue_all'), later))).toEqual(quarterHours('2026-01-01T09:15:00Z', 12));
    for (const p of ['skip_missed', 'run_once', 'queue_all'] as const) {
      const r = dueOccurrences(interval(p), later);
      expect(r.last_due_at).toBe('2026-01-01T12:00:00.000Z');
      expect(r.next_due_at).toBe('2026-01-01T12:15:00.000Z');
    }
  });

  const hourly = (misfire_policy: ScheduleSpec['misfire_policy']): ScheduleSpec => ({
    type: 'cron',
    expression: '0 * * * *',
    timezone: 'America/New_York',
    misfire_policy,
  });
  const cronInput = { lastDueMs: ms('2026-01-01T09:00:00Z'), nowMs: ms('2026-01-01T12:30:00Z'), scheduleRevision: 1 };

  it('hourly cron, each policy', () => {
    expect(dues(dueOccurrences(hourly('skip_missed'), cronInput))).toEqual([]);
    expect(dueOccurrences(hourly('run_once'), cronInput).dispatch.map((d) => d.occurrence_id)).toEqual(['cron:1:2026-01-01T12:00:00.000Z']);
    expect(dues(dueOccurrences(hourly('queue_all'), cronInput))).toEqual(['2026-01-01T10:00:00.000Z', '2026-01-01T11:00:00.000Z', '2026-01-01T12:00:00.000Z']);
    for (const p of ['skip_missed', 'run_once', 'queue_all'] as const) {
      const r = dueOccurrences(hourly(p), cronInput);
      expect([r.last_due_at, r.next_due_at, r.misfire_cursor]).toEqual(['2026-01-01T12:00:00.000Z', '2026-01-01T13:00:00.000Z', '2026-01-01T12:00:00.000Z']);
    }
  });

  it('hourly cron across the fall-back hour: the repeated 01:00 is not queued twice', () => {
    const r = dueOccurrences(hourly('queue_all'), {
      lastDueMs: ms('2026-11-01T03:00:00Z'), // 23:00 EDT
      nowMs: ms('2026-11-01T08:30:00Z'), // 03:30 EST
      scheduleRevision: 1,
    });
    expect(dues(r)).toEqual(['2026-11-01T04:00:00.000Z', '2026-11-01T05:00:00.000Z', '2026-11-01T07:00:00.000Z', '2026-11-01T08:00:00.000Z']);
  });

  it('an occurrence seen within the tolerance is on time, even under skip_missed', () => {
    const spec = hourly('skip_missed');
    const base = { lastDueMs: ms('2026-01-01T11:00:00Z'), scheduleRevision: 1 };
    expect(dues(dueOccurrences(spec, { ...base, nowMs: ms('2026-01-01T12:00:01Z') }))).toEqual(['2026-01-01T12:00:00.000Z']);
    expect(dues(dueOccurrences(spec, { ...base, nowMs: ms('2026-01-01T12:00:01.001Z') }))).toEqual([]);
    expect(dues(dueOccurrences(spec, { ...base, nowMs: ms('2026-01-01T12:00:20Z'), toleranceMs: 30_000 }))).toEqual(['2026-01-01T12:00:00.000Z']);
  });

  it('keeps the stored misfire_cursor when nothing was missed', () => {
    const r = dueOccurrences(hourly('run_once'), {
      lastDueMs: ms('2026-01-01T11:00:00Z'),
      nowMs: ms('2026-01-01T12:00:00Z'),
      scheduleRevision: 1,
      misfireCursor: 'earlier',
    });
    expect(r.misfire_cursor).toBe('earlier');
    expect(r.missed).toBeNull();
  });
});

describe('dueOccurrences: queue_all cap', () => {
  const spec: ScheduleSpec = { type: 'interval', seconds: 60, start_at: '2026-01-01T00:00:00Z', misfire_policy: 'queue_all' };
  const lastDueMs = ms('2026-01-01T00:00:00Z');

  it('queues the oldest 1000 and drops the rest', () => {
    const r = dueOccurrences(spec, { lastDueMs, nowMs: lastDueMs + 2000 * MIN + 30_000, scheduleRevision: 1 });
    expect(r.dispatch).toHaveLength(1000);
    expect(r.dispatch[0].due_at).toBe(iso(lastDueMs + MIN));
    expect(r.dispatch[999].due_at).toBe(iso(lastDueMs + 1000 * MIN));
    expect(r.truncated).toBe(true);
    expect(r.last_due_at).toBe(iso(lastDueMs + 2000 * MIN));
    expect(r.misfire_cursor).toBe(iso(lastDueMs + 2000 * MIN));
    expect(r.next_due_at).toBe(iso(lastDueMs + 2001 * MIN));
  });

  it('1000 exactly fit; 1001 do not', () => {
    const exact = dueOccurrences(spec, { lastDueMs, nowMs: lastDueMs + 1000 * MIN + 30_000, scheduleRevision: 1 });
    expect([exact.dispatch.length, exact.truncated]).toEqual([1000, false]);
    const over = dueOccurrences(spec, { lastDueMs, nowMs: lastDueMs + 1001 * MIN + 30_000, scheduleRevision: 1 });
    expect([over.dispatch.length, over.truncated]).toEqual([1000, true]);
  });

  it('cron too (every minute in New York)', () => {
    const cron: ScheduleSpec = { type: 'cron', expression: '* * * * *', timezone: 'America/New_York', misfire_policy: 'queue_all' };
    const r = dueOccurrences(cron, { lastDueMs, nowMs: lastDueMs + 1500 * MIN + 30_000, scheduleRevision: 1 });
    expect(r.dispatch).toHaveLength(1000);
    expect(r.truncated).toBe(true);
    expect(r.last_due_at).toBe(iso(lastDueMs + 1500 * MIN));
  });
});

describe('dueOccurrences: once', () => {
  const spec: ScheduleSpec = { type: 'once', run_at: '2026-05-01T10:00:00Z' };

  it('future: nothing until it is due, then once, then never again', () => {
    const before = dueOccurrences(spec, { lastDueMs: null, nowMs: ms('2026-05-01T09:00:00Z'), scheduleRevision: 1, anchorMs: ms('2026-05-01T09:00:00Z') });
    expect(before.dispatch).toEqual([]);
    expect(before.next_due_at).toBe('2026-05-01T10:00:00.000Z');
    const at = dueOccurrences(spec, { lastDueMs: null, nowMs: ms('2026-05-01T10:00:00.200Z'), scheduleRevision: 1 });
    expect(at.dispatch.map((d) => [d.occurrence_id, d.missed])).toEqual([['once:1:2026-05-01T10:00:00.000Z', false]]);
    expect(at.next_due_at).toBeNull();
    const after = dueOccurrences(spec, { lastDueMs: ms(at.last_due_at!), nowMs: ms('2026-05-02T00:00:00Z'), scheduleRevision: 1 });
    expect(after.dispatch).toEqual([]);
    expect(after.next_due_at).toBeNull();
  });

  it('past when first seen: a missed occurrence, so the misfire policy decides', () => {
    const seen = { lastDueMs: null, nowMs: ms('2026-05-01T12:00:00Z'), scheduleRevision: 1, anchorMs: ms('2026-05-01T11:00:00Z') };
    expect(dueOccurrences(spec, seen).dispatch.map((d) => [d.due_at, d.missed])).toEqual([['2026-05-01T10:00:00.000Z', true]]);
    expect(dues(dueOccurrences({ ...spec, misfire_policy: 'queue_all' }, seen))).toEqual(['2026-05-01T10:00:00.000Z']);
    const skipped = dueOccurrences({ ...spec, misfire_policy: 'skip_missed' }, seen);
    expect(skipped.dispatch).toEqual([]);
    expect(skipped.last_due_at).toBe('2026-05-01T10:00:00.000Z');
    expect(skipped.next_due_at).toBeNull();
  });
});

describe('dueOccurrences: start, end, new tasks, manual', () => {
  it('a new task does not run what was due before it existed', () => {
    const spec: ScheduleSpec = { type: 'cron', expression: '*/5 * * * *' };
    const created = ms('2026-01-01T10:02:00Z');
    const r = dueOccurrences(spec, { lastDueMs: null, nowMs: created, anchorMs: created, scheduleRevision: 1 });
    expect(r.dispatch).toEqual([]);
    expect(r.next_due_at).toBe('2026-01-01T10:05:00.000Z');
  });

  it('end_at: the last occurrence runs, then next_due_at is null', () => {
    const spec: ScheduleSpec = { type: 'interval', seconds: 600, start_at: '2026-01-01T00:00:00Z', end_at: '2026-01-01T01:00:00Z' };
    const r = dueOccurrences(spec, { lastDueMs: ms('2026-01-01T00:50:00Z'), nowMs: ms('2026-01-01T05:00:00Z'), scheduleRevision: 1 });
    expect(dues(r)).toEqual(['2026-01-01T01:00:00.000Z']);
    expect(r.next_due_at).toBeNull();
  });

  it('start_at in the future: nothing before it', () => {
    const spec: ScheduleSpec = { type: 'cron', expression: '0 * * * *', start_at: '2026-01-02T00:00:00Z', misfire_policy: 'queue_all' };
    const r = dueOccurrences(spec, { lastDueMs: null, nowMs: ms('2026-01-01T12:00:00Z'), anchorMs: ms('2026-01-01T00:00:00Z'), scheduleRevision: 1 });
    expect(r.dispatch).toEqual([]);
    expect(r.next_due_at).toBe('2026-01-02T00:00:00.000Z');
  });

  it('manual: never dispatches', () => {
    const r = dueOccurrences({ type: 'manual' }, { lastDueMs: null, nowMs: 0, scheduleRevision: 1 });
    expect([r.dispatch, r.next_due_at]).toEqual([[], null]);
  });
});

describe('dueOccurrences: jitter', () => {
  const spec: ScheduleSpec = { type: 'interval', seconds: 900, start_at: '2026-01-01T00:00:00Z', jitter_seconds: 120, misfire_policy: 'queue_all' };
  const input = { lastDueMs: ms('2026-01-01T00:00:00Z'), nowMs: ms('2026-01-01T06:00:00Z'), scheduleRevision: 4 };

  it('run_at = due + hash(occurrence) mod (jitter + 1) seconds, the same on every call', () => {
    const a = dueOccurrences(spec, input);
    const b = dueOccurrences(structuredClone(spec), { ...input });
    expect(a.dispatch).toEqual(b.dispatch);
    expect(a.dispatch).toHaveLength(24);
    for (const d of a.dispatch) {
      const offset = (ms(d.run_at) - ms(d.due_at)) / 1000;
      expect(offset).toBe(jitterSeconds(d.occurrence_id, 120));
      expect(offset).toBeGreaterThanOrEqual(0);
      expect(offset).toBeLessThanOrEqual(120);
    }
    // Not one constant offset: the jitter actually spreads runs.
    expect(new Set(a.dispatch.map((d) => ms(d.run_at) - ms(d.due_at))).size).toBeGreaterThan(5);
  });
});

describe('dueOccurrences driven by a simulated clock', () => {
  // A minimal ticker: poll every 30 s, handle what is due, remember last_due_at/next_due_at.
  function simulate(spec: ScheduleSpec, from: string, to: string, opts: { outage?: [string, string]; toleranceMs?: number } = {}) {
    const clock = new ManualClock(ms(from));
    const anchorMs = clock.now();
    let state = dueOccurrences(spec, { lastDueMs: null, nowMs: clock.now(), anchorMs, scheduleRevision: 1, toleranceMs: opts.toleranceMs });
    const dispatched: string[] = [...state.dispatch.map((d) => d.occurrence_id)];
    while (clock.now() < ms(to)) {
      clock.advance(30_000);
      if (opts.outage && clock.now() > ms(opts.outage[0]) && clock.now() < ms(opts.outage[1])) continue;
      if (state.next_due_at === null || clock.now() < ms(state.next_due_at)) continue;
      state = dueOccurrences(spec, {
        lastDueMs: state.last_due_at === null ? null : ms(state.last_due_at),
        nowMs: clock.now(),
        anchorMs,
        scheduleRevision: 1,
        toleranceMs: opts.toleranceMs,
        misfireCursor: state.misfire_cursor,
      });
      dispatched.push(...state.dispatch.map((d) => d.occurrence_id));
    }
    return dispatched;
  }

  it('every 15 minutes through the New York fall-back day: 96 local times, each once', () => {
    const spec: ScheduleSpec = { type: 'cron', expression: '*/15 * * * *', timezone: 'America/New_York' };
    const ids = simulate(spec, '2026-11-01T03:59:00Z', '2026-11-02T04:59:00Z', { toleranceMs: 60_000 });
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toHaveLength(96); // 25 elapsed hours, but 01:00-01:45 run only the first time
    expect(ids).not.toContain('cron:1:2026-11-01T06:00:00.000Z');
    expect(ids).toContain('cron:1:2026-11-01T07:00:00.000Z');
  });

  it('every 15 minutes through the New York spring-forward day: 92 runs (02:xx merge into 03:00)', () => {
    const spec: ScheduleSpec = { type: 'cron', expression: '*/15 * * * *', timezone: 'America/New_York' };
    const ids = simulate(spec, '2026-03-08T04:59:00Z', '2026-03-09T03:59:00Z', { toleranceMs: 60_000 });
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toHaveLength(92);
  });

  it('an outage in the middle, per policy', () => {
    const base: ScheduleSpec = { type: 'interval', seconds: 900 };
    const run = (misfire_policy: ScheduleSpec['misfire_policy']) =>
      simulate({ ...base, misfire_policy }, '2026-01-01T00:00:00Z', '2026-01-01T08:00:00Z', {
        outage: ['2026-01-01T02:01:00Z', '2026-01-01T05:07:00Z'],
        toleranceMs: 60_000,
      });
    // 32 occurrences in 8 h; the outage swallows 02:15 .. 05:00 (12 of them).
    expect(run('queue_all')).toHaveLength(32);
    expect(run('skip_missed')).toHaveLength(20);
    expect(run('run_once')).toHaveLength(21);
    expect(run('run_once')).toContain('interval:1:2026-01-01T05:00:00.000Z');
  });
});

describe('upcoming', () => {
  it('lists local times with DST notes', () => {
    const spec: ScheduleSpec = { type: 'cron', expression: '30 2 * * *', timezone: 'America/New_York' };
    expect(upcoming(spec, ms('2026-03-06T12:00:00Z'), 3)).toEqual([
      { due_at: '2026-03-07T07:30:00.000Z', local_time: '2026-03-07T02:30:00-05:00', note: null },
      {
        due_at: '2026-03-08T07:00:00.000Z',
        local_time: '2026-03-08T03:00:00-04:00',
        note: '02:30 does not exist on 2026-03-08 in America/New_York (DST gap); runs at 03:00',
      },
      { due_at: '2026-03-09T06:30:00.000Z', local_time: '2026-03-09T02:30:00-04:00', note: null },
    ]);
    const fall = upcoming({ ...spec, expression: '30 1 * * *' }, ms('2026-10-31T12:00:00Z'), 2);
    expect(fall[0]).toEqual({
      due_at: '2026-11-01T05:30:00.000Z',
      local_time: '2026-11-01T01:30:00-04:00',
      note: '01:30 occurs twice on 2026-11-01; runs once, at the first occurrence',
    });
    expect(fall[1].local_time).toBe('2026-11-02T01:30:00-05:00');
  });

  it('stops at end_at and works for interval and once', () => {
    expect(
      upcoming({ type: 'interval', seconds: 3600, start_at: '2026-01-01T00:00:00Z', end_at: '2026-01-01T02:00:00Z', timezone: 'Europe/London' }, 0, 10).map(
        (u) => u.local_time,
      ),
    ).toEqual(['2026-01-01T00:00:00+00:00', '2026-01-01T01:00:00+00:00', '2026-01-01T02:00:00+00:00']);
    expect(upcoming({ type: 'once', run_at: '2026-07-01T12:00:00Z', timezone: 'Europe/London' }, 0, 5)).toEqual([
      { due_at: '2026-07-01T12:00:00.000Z', local_time: '2026-07-01T13:00:00+01:00', note: null },
    ]);
    expect(upcoming({ type: 'manual' }, 0, 5)).toEqual([]);
  });
});

describe('scheduleProblems', () => {
  it('enforces the §7 rules', () => {
    expect(scheduleProblems({ type: 'manual' })).toEqual([]);
    expect(scheduleProblems({ type: 'manual', seconds: 5 })).toEqual(['a manual schedule does not take seconds']);
    expect(scheduleProblems({ type: 'once' })).toEqual(['a once schedule needs run_at']);
    expect(scheduleProblems({ type: 'interval', seconds: 0 })).toEqual(['seconds must be an integer > 0']);
    expect(scheduleProblems({ type: 'cron', expression: '0 0 0 * * *' })[0]).toMatch(/^expression: expected 5 fields/);
    expect(scheduleProblems({ type: 'cron', expression: '* * * * *', timezone: 'Mars/Olympus' })).toEqual(['unknown time zone "Mars/Olympus"']);
    expect(scheduleProblems({ type: 'interval', seconds: 5, start_at: '2026-01-02T00:00:00Z', end_at: '2026-01-01T00:00:00Z' })).toEqual([
      'end_at must be after start_at',
    ]);
    expect(scheduleProblems({ type: 'interval', seconds: 5, jitter_seconds: -1 })).toEqual(['jitter_seconds must be an integer >= 0']);
  });
});
