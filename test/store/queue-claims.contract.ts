// The claim of queued background runs (BgRunRepo.claimPass), part of the store contract: every
// adapter hands out due queued rows by priority, then oldest first, skips those not due, reports the earliest
// not-due time, and a released pass leaves the rows it did not claim in the queue. A store that
// declares `capabilities.queueClaims` (PostgreSQL) also never hands one row to two passes at once
// (test/store/postgres.test.ts checks that with two processes' stores on one database).
import { expect, it } from 'vitest';
import { repos } from '../../src/store/repos/index.js';
import { QUEUE_ORDER_INDEX, queueRank } from '../../src/store/repos/bg-runs.js';
import type { Store } from '../../src/store/store.js';

const T0 = Date.parse('2030-01-01T00:00:00.000Z');
const iso = (ms: number) => new Date(ms).toISOString();

/** A queued row as the claimer reads it: run id/status/priority, internal.not_before; indexed as src/background/types.ts runRowIndexes does. */
export async function queueRun(store: Store, id: string, notBefore: number | null = null, priority?: number): Promise<void> {
  const value = { run: { run_id: id, task_id: 'task_1', status: 'queued', priority }, internal: { not_before: notBefore === null ? null : iso(notBefore) } };
  await store.createRecord('bg_runs', id, value, { status: 'queued', [QUEUE_ORDER_INDEX]: queueRank(priority) });
}

/** Every row the pass hands out, page by page, until it is done. */
async function drain(store: Store, now: number, limit: number): Promise<{ ids: string[]; nextDueAt: number | null; pages: number }> {
  const pass = repos(store).bgRuns.claimPass(now, 10_000);
  const ids: string[] = [];
  let pages = 0;
  while (!pass.done) {
    const items = await pass.claimQueued(limit);
    expect(items.length).toBeLessThanOrEqual(limit);
    ids.push(...items.map((i) => i.id));
    pages++;
  }
  await pass.release();
  return { ids, nextDueAt: pass.nextDueAt, pages };
}

export function queueClaimCases(getStore: () => Store): void {
  it('hands out due queued runs oldest first, skips those not due and says when the next is due', async () => {
    const store = getStore();
    await queueRun(store, 'r1');
    await queueRun(store, 'r2', T0 + 60_000);
    await queueRun(store, 'r3', T0 - 1);
    await queueRun(store, 'r4', T0 + 5_000);
    await queueRun(store, 'r5');
    await store.createRecord('bg_runs', 'other', { run: { run_id: 'other', status: 'running' }, internal: {} }, { status: 'running' });
    const { ids, nextDueAt } = await drain(store, T0, 2);
    expect(ids).toEqual(['r1', 'r3', 'r5']);
    expect(nextDueAt).toBe(T0 + 5_000);
    // Later, the rows not due before are due, and nothing is left waiting.
    const later = await drain(store, T0 + 60_000, 10);
    expect(later.ids).toEqual(['r1', 'r2', 'r3', 'r4', 'r5']);
    expect(later.nextDueAt).toBeNull();
  });

  it('does not hand out a run that left the queue; a released pass leaves the rest queued for the next', async () => {
    const store = getStore();
    for (const id of ['a', 'b', 'c']) await queueRun(store, id);
    const pass = repos(store).bgRuns.claimPass(T0, 10_000);
    const [first] = await pass.claimQueued(1);
    expect(first!.id).toBe('a');
    // The claim: a CAS on the version the pass handed out moves the row out of the queue.
    await store.updateRecord('bg_runs', 'a', { ...(first!.value as object), run: { run_id: 'a', status: 'claimed' } }, first!.version, { status: 'claimed' });
    await pass.release();
    expect((await drain(store, T0, 10)).ids).toEqual(['b', 'c']);
  });

  it('hands out higher priorities first and equal priorities oldest first, across pages', async () => {
    const store = getStore();
    const queued: Array<[string, number | undefined]> = [
      ['low1', -5],
      ['none1', undefined], // stored without a priority: 0
      ['high1', 50],
      ['zero1', 0],
      ['top', 100],
      ['high2', 50],
      ['low2', -5],
      ['bottom', -100],
    ];
    for (const [id, p] of queued) await queueRun(store, id, null, p);
    await queueRun(store, 'later', T0 + 1_000, 100); // not due: not handed out, whatever its priority
    const { ids, nextDueAt } = await drain(store, T0, 3);
    expect(ids).toEqual(['top', 'high1', 'high2', 'none1', 'zero1', 'low1', 'low2', 'bottom']);
    expect(nextDueAt).toBe(T0 + 1_000);
    // A run that left the queue and came back (a retry) keeps its place among its priority.
    const row = await store.getRecord('bg_runs', 'high1');
    await store.updateRecord('bg_runs', 'high1', row!.value, row!.version, { status: 'retrying' });
    expect((await drain(store, T0, 10)).ids.slice(0, 2)).toEqual(['top', 'high2']);
    await store.updateRecord('bg_runs', 'high1', row!.value, row!.version + 1, { status: 'queued', [QUEUE_ORDER_INDEX]: queueRank(50) });
    expect((await drain(store, T0, 10)).ids.slice(0, 3)).toEqual(['top', 'high1', 'high2']);
  });

  it('hands out a row once per pass, and the pass ends when the queue does', async () => {
    const store = getStore();
    for (let i = 0; i < 7; i++) await queueRun(store, `q${i}`);
    const { ids, pages } = await drain(store, T0, 3);
    expect(ids).toEqual(['q0', 'q1', 'q2', 'q3', 'q4', 'q5', 'q6']);
    expect(pages).toBeLessThanOrEqual(3);
  });
}
