// SettleWaiters (src/background/waiters.ts): a caller of POST /background/tasks/{id}/run with
// `wait` hears of the run's end. On a shared store another instance may claim and finish the run
// and nothing tells this one, so the waiter reads the row until it settles; on the embedded store
// only this process runs it, and its own write wakes the waiter. No wall-clock sleeps: the rows
// change when the test says so, and the waits are awaited.
import { describe, expect, it } from 'vitest';
import { SettleWaiters } from '../../src/background/waiters.js';
import type { BgRunRow } from '../../src/background/types.js';
import type { Versioned } from '../../src/store/store.js';

function rowWith(status: string): Versioned<BgRunRow> {
  return { id: 'bgrun_1', seq: 1, value: { run: { run_id: 'bgrun_1', status } } as unknown as BgRunRow, version: 1 };
}

describe('SettleWaiters', () => {
  it('on a shared store, hears of a run another instance finished by reading its row', async () => {
    let status = 'running';
    let reads = 0;
    const finishedElsewhere = new Promise<void>((resolve) => {
      const w = new SettleWaiters({
        getRow: async () => {
          reads++;
          if (reads === 3) {
            status = 'completed'; // the other instance's commit lands between two reads
            resolve();
          }
          return rowWith(status);
        },
        flushed: () => undefined,
        sharedPollMs: 5,
      });
      void w.waitSettled('bgrun_1', 60_000).then((run) => result.push(run?.status ?? null));
    });
    const result: (string | null)[] = [];
    await finishedElsewhere;
    await expect.poll(() => result, { timeout: 10_000, interval: 5 }).toEqual(['completed']);
  });

  it('on the embedded store, does not poll: its own write resolves the waiter', async () => {
    let reads = 0;
    const w = new SettleWaiters({
      getRow: async () => {
        reads++;
        return rowWith('running');
      },
      flushed: () => undefined,
    });
    const waiting = w.waitSettled('bgrun_1', 60_000);
    await expect.poll(() => reads).toBe(1);
    expect(w.has('bgrun_1')).toBe(true);
    w.resolve({ run_id: 'bgrun_1', status: 'completed' } as never);
    expect((await waiting)?.status).toBe('completed');
    expect(reads).toBe(1);
    expect(w.has('bgrun_1')).toBe(false);
  });
});
