// machines/policies/busy-session.ts: what a new run does when its session has a run in flight.
import { describe, expect, it } from 'vitest';
import { busySessionPlan } from '../../machines/policies/busy-session.js';

describe('busySessionPlan', () => {
  it('waits for a free session whatever the policy', () => {
    for (const p of ['enqueue', 'reject', 'interrupt', 'rollback'] as const)
      expect(busySessionPlan(p, null)).toEqual({ refuse: false, stop: null, history: 'as_stored' });
  });

  it('with a run in flight: enqueue waits, reject refuses, interrupt stops it and carries its turn over, rollback cancels it and rolls its turn back', () => {
    expect(busySessionPlan('enqueue', 'run_1')).toEqual({ refuse: false, stop: null, history: 'as_stored' });
    expect(busySessionPlan('reject', 'run_1')).toEqual({ refuse: true, stop: null, history: 'as_stored' });
    expect(busySessionPlan('interrupt', 'run_1')).toEqual({ refuse: false, stop: 'interrupt', history: 'carry_over' });
    expect(busySessionPlan('rollback', 'run_1')).toEqual({ refuse: false, stop: 'cancel', history: 'roll_back' });
  });
});
