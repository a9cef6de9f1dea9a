import { describe, it, expect } from 'vitest';
import { canClaim, decideOverlap } from '../../machines/policies/overlap.js';

const idle = { activeRunIds: [], queuedRunIds: [] };
const busy = { activeRunIds: ['r1', 'r2'], queuedRunIds: ['r3'] };

describe('decideOverlap', () => {
  it('starts when nothing of the task is in flight, whatever the policy', () => {
    for (const p of ['skip_if_running', 'queue_next', 'cancel_previous', 'allow_parallel', undefined, null] as const) {
      expect(decideOverlap(p, idle)).toEqual({ action: 'start', cancel: [] });
    }
  });

  it('skip_if_running (the default) skips when a run is active or queued', () => {
    expect(decideOverlap('skip_if_running', busy)).toEqual({ action: 'skip', cancel: [] });
    expect(decideOverlap(undefined, { activeRunIds: ['r1'], queuedRunIds: [] })).toEqual({ action: 'skip', cancel: [] });
    expect(decideOverlap(null, { activeRunIds: [], queuedRunIds: ['r3'] })).toEqual({ action: 'skip', cancel: [] });
  });

  it('queue_next queues behind the others', () => {
    expect(decideOverlap('queue_next', busy)).toEqual({ action: 'queue', cancel: [] });
  });

  it('cancel_previous cancels active then queued runs, oldest first, then queues', () => {
    expect(decideOverlap('cancel_previous', busy)).toEqual({ action: 'cancel_then_queue', cancel: ['r1', 'r2', 'r3'] });
  });

  it('allow_parallel always starts', () => {
    expect(decideOverlap('allow_parallel', busy)).toEqual({ action: 'start', cancel: [] });
  });
});

describe('canClaim', () => {
  it('queue_next: strict FIFO, one at a time', () => {
    expect(canClaim('queue_next', 0, true)).toBe(true);
    expect(canClaim('queue_next', 0, false)).toBe(false);
    expect(canClaim('queue_next', 1, true)).toBe(false);
  });

  it('cancel_previous: once the cancelled runs have stopped', () => {
    expect(canClaim('cancel_previous', 1, true)).toBe(false);
    expect(canClaim('cancel_previous', 0, false)).toBe(true);
  });

  it('others: always', () => {
    expect(canClaim('skip_if_running', 3, false)).toBe(true);
    expect(canClaim('allow_parallel', 3, false)).toBe(true);
    expect(canClaim(undefined, 3, false)).toBe(true);
  });
});
