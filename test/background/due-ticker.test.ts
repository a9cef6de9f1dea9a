// The scheduler's parts that decide when a task is due: the
// pure due time of a schedule row and the ticker's heap, driven by a hand-moved clock (the
// ticker's own timer is never waited for; dispatchDue is called as the poll ticker calls it).
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import { DueTicker } from '../../src/background/due-ticker.js';
import { dueTimeOf } from '../../src/background/schedule-rows.js';
import type { ScheduleRow, TaskRow } from '../../src/background/types.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const iso = (ms: number) => new Date(ms).toISOString();
const task = (enabled = true) => ({ task_id: 't1', enabled }) as TaskRow;
const row = (over: Partial<ScheduleRow> = {}) => ({ next_due_at: iso(T0 + 60_000), last_due_at: null, paused: false, deleted: false, ...over }) as ScheduleRow;

describe('dueTimeOf', () => {
  it("is the row's next due time, or null when the task is not due at all", () => {
    expect(dueTimeOf(task(), row(), T0, 1000)).toBe(T0 + 60_000);
    expect(dueTimeOf(task(false), row(), T0, 1000)).toBeNull();
    expect(dueTimeOf(task(), null, T0, 1000)).toBeNull();
    expect(dueTimeOf(task(), row({ paused: true }), T0, 1000)).toBeNull();
    expect(dueTimeOf(task(), row({ deleted: true }), T0, 1000)).toBeNull();
    expect(dueTimeOf(task(), row({ next_due_at: null }), T0, 1000)).toBeNull();
  });

  it('looks again a poll interval later when the due time cannot advance (it must not spin)', () => {
    expect(dueTimeOf(task(), row({ next_due_at: iso(T0), last_due_at: iso(T0) }), T0 + 5, 1000)).toBe(T0 + 1005);
  });
});

describe('DueTicker', () => {
  const tickers: DueTicker[] = [];
  afterEach(() => {
    for (const t of tickers.splice(0)) t.stop();
  });
  const make = (clock: ManualClock) => {
    const fired: string[] = [];
    const t = new DueTicker(clock, (id) => fired.push(id));
    tickers.push(t);
    return { t, fired };
  };

  it('fires what is due, once, earliest first; nothing before start or after stop', () => {
    const clock = new ManualClock(T0);
    const { t, fired } = make(clock);
    t.set('b', T0 + 200);
    t.set('a', T0 + 100);
    t.set('c', T0 + 300);
    t.set('c', null); // removed
    clock.set(T0 + 1000);
    t.dispatchDue();
    expect(fired).toEqual([]);
    t.start();
    clock.set(T0 + 150);
    t.dispatchDue();
    expect(fired).toEqual(['a']);
    clock.set(T0 + 1000);
    t.dispatchDue();
    t.dispatchDue();
    expect(fired).toEqual(['a', 'b']);
    t.set('d', T0 + 1000);
    t.stop();
    t.dispatchDue();
    expect(fired).toEqual(['a', 'b']);
  });

  it('retry sets a popped task due again, unless it was set meanwhile', () => {
    const clock = new ManualClock(T0);
    const { t, fired } = make(clock);
    t.start();
    t.set('a', T0);
    t.set('b', T0);
    t.dispatchDue();
    expect(fired).toEqual(['a', 'b']);
    t.set('b', T0 + 50); // advanced by a task edit meanwhile
    t.retry('a', T0 + 100);
    t.retry('b', T0 + 100);
    clock.set(T0 + 60);
    t.dispatchDue();
    expect(fired).toEqual(['a', 'b', 'b']);
    clock.set(T0 + 100);
    t.dispatchDue();
    expect(fired).toEqual(['a', 'b', 'b', 'a']);
  });
});
