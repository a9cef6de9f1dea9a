// QueuedRunBound (background.max_queued_runs) as a unit: how often it counts, and what it adds.
import { describe, expect, it } from 'vitest';
import { QUEUED_COUNT_MAX_AGE_MS, QueuedRunBound } from '../../src/background/queue-bound.js';

describe('QueuedRunBound', () => {
  it('counts the queue at most every QUEUED_COUNT_MAX_AGE_MS, adds the runs admitted since, and refuses at the bound', async () => {
    let now = 0;
    let queued = 2;
    let reads = 0;
    const bound = new QueuedRunBound(
      () => 4,
      async () => (reads++, queued),
      () => now,
    );
    await bound.admit(); // 2 queued + 0 admitted
    await bound.admit(); // 2 + 1
    await expect(bound.admit()).rejects.toMatchObject({ status: 503 }); // 2 + 2 = 4: full
    expect(reads).toBe(1);
    // The workers drained the queue; the next read (after the age) sees it.
    queued = 0;
    now += QUEUED_COUNT_MAX_AGE_MS + 1;
    await bound.admit();
    expect(reads).toBe(2);
  });

  it('requests that arrive while the count is read share that one read', async () => {
    let reads = 0;
    let answer!: (n: number) => void;
    const bound = new QueuedRunBound(
      () => 10,
      () => (reads++, new Promise<number>((r) => (answer = r))),
      () => 0,
    );
    const admits = [bound.admit(), bound.admit(), bound.admit()];
    answer(1);
    await Promise.all(admits);
    expect(reads).toBe(1);
  });
});
