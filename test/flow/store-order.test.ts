// The PostgreSQL store's part of a concurrency key's admission order (src/store/migrations/
// 006_flow_key_order.sql, docs/flow-control.md "Several instances"): the write that frees a slot
// gives it to the key's first queued run (priority desc, then creation), names it on the change
// feed, and a run that is not queued gets a slot only after every waiter. Store writes as the run
// service makes them (src/flow/key-slots.ts ops, src/runtime/run-record.ts indexes), no server.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyReleaseOp, keyTakeOp, KeySlots } from '../../src/flow/key-slots.js';
import { CHANGE_CHANNELS } from '../../src/store/change-feed.js';
import { PostgresStore } from '../../src/store/postgres.js';
import { repos } from '../../src/store/repos/index.js';
import { flowWaitIndex } from '../../src/runtime/run-record.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';
import { storeErrorCode } from '../store/store.contract.js';

let db: TestDatabase;
let store: PostgresStore;
const told: Array<{ k: string; a?: string[] }> = [];

beforeAll(async () => {
  db = await createTestDatabase('order33_store');
  store = new PostgresStore({ url: db.url, poolSize: 3 });
  await store.open();
  store.changes!.subscribe(CHANGE_CHANNELS.flow, (p) => told.push(JSON.parse(p) as { k: string; a?: string[] }));
});
afterAll(async () => {
  await store?.close();
  await db?.drop();
});

/** A run stored `queued` on `key`, as RunFlow.enqueue writes it. */
async function queued(runId: string, key: string, priority: number, limit = 1): Promise<void> {
  const q = { key, limit, priority, enqueued_at: 0 };
  await repos(store).runs.create(runId, { run_id: runId, status: 'queued', queue: q } as never, {
    status: 'queued',
    flow_key: key,
    flow_wait: flowWaitIndex(q),
  });
}

/** The run leaves the queue (it started): its indexes go, as its first write does. */
async function started(runId: string): Promise<void> {
  const cur = (await repos(store).runs.get(runId))!;
  await repos(store).runs.update(runId, { ...(cur.value as object), status: 'running' } as never, cur.version, {
    status: 'running',
    flow_key: null,
    flow_wait: null,
  });
}

const holders = async (key: string): Promise<string[]> => (await new KeySlots(store).holders(key)).map((h) => h.run_id);
const take = (key: string, runId: string, limit = 1) => store.commit([keyTakeOp(store, key, runId, limit, 0)]);
const release = (key: string, runId: string) => store.commit([keyReleaseOp(store, key, runId)]);

describe('a key whose runs wait', () => {
  it('a freed slot goes to the first waiter by priority, then creation, in the freeing commit, and the feed names it', async () => {
    const key = 'order:one';
    await take(key, 'h1');
    await queued('w-low-1', key, 0);
    await queued('w-high', key, 50);
    await queued('w-low-2', key, 0);
    // A run that is not queued does not pass them.
    expect(await storeErrorCode(take(key, 'newcomer'))).toBe('full');
    const order: string[] = [];
    let last = 'h1';
    for (let i = 0; i < 3; i++) {
      await release(key, last);
      const [next] = await holders(key);
      expect(next).toBeDefined();
      order.push(next!);
      await waitFor(() => told.some((t) => t.k === key && t.a?.includes(next!)), { what: `notice for ${next}` });
      await started(next!);
      last = next!;
    }
    expect(order).toEqual(['w-high', 'w-low-1', 'w-low-2']);
    // Nobody waits any more: the last release empties the key, and a new run takes it.
    await release(key, last);
    expect(await holders(key)).toEqual([]);
    await take(key, 'newcomer');
    expect(await holders(key)).toEqual(['newcomer']);
  });

  it('a take for a queued run that is not first fills the key with the first one instead', async () => {
    const key = 'order:two';
    await queued('first', key, 10);
    await queued('second', key, 0);
    // The key has room (nobody holds it): the second's own pump asks for a slot.
    await take(key, 'second');
    expect(await holders(key)).toEqual(['first']);
    expect(await storeErrorCode(take(key, 'second'))).toBe('full');
  });
});
