import { describe, it, expect } from 'vitest';
import { decideMisfire, QUEUE_ALL_LIMIT } from '../../machines/policies/misfire.js';

describe('decideMisfire', () => {
  const missed = [100, 200, 300];

  it('skip_missed runs none', () => {
    expect(decideMisfire('skip_missed', missed)).toEqual({ run: [], truncated: false });
  });

  it('run_once (the default) runs the latest', () => {
    expect(decideMisfire('run_once', missed)).toEqual({ run: [300], truncated: false });
    expect(decideMisfire(undefined, missed)).toEqual({ run: [300], truncated: false });
  });

  it('queue_all runs each, oldest first, at most 1000', () => {
    expect(decideMisfire('queue_all', missed)).toEqual({ run: [100, 200, 300], truncated: false });
    const many = Array.from({ length: 1500 }, (_, i) => i);
    const d = decideMisfire('queue_all', many);
    expect(d.run).toHaveLength(QUEUE_ALL_LIMIT);
    expect([d.run[0], d.run[999], d.truncated]).toEqual([0, 999, true]);
  });

  it('nothing missed, nothing to run', () => {
    for (const p of ['skip_missed', 'run_once', 'queue_all'] as const) expect(decideMisfire(p, [])).toEqual({ run: [], truncated: false });
  });
});
