// One contract for every Store adapter (architecture habit 7): same behaviour, same error codes.
// Run it from <adapter>.test.ts with a factory that returns an OPEN, empty store.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { holdersOpCases } from './holders-op.contract.js';
import { queueClaimCases } from './queue-claims.contract.js';
import { StoreError, type EventInput, type EventQuery, type Store, type StoreErrorCode, type StoredEvent } from '../../src/store/store.js';

export interface StoreFixture {
  store: Store;
  cleanup(): Promise<void>;
}

/** Resolves to the StoreError code the promise rejected with; fails the test otherwise. */
export async function storeErrorCode(p: Promise<unknown>): Promise<StoreErrorCode> {
  try {
    await p;
  } catch (e) {
    if (e instanceof StoreError) return e.code;
    throw e;
  }
  throw new Error('expected a StoreError, but the operation succeeded');
}

let n = 0;
const ev = (fields: Partial<EventInput> = {}): EventInput => ({
  event_id: `event_${++n}`,
  event_type: 'run.step',
  timestamp: '2026-01-01T00:00:00.000Z',
  ...fields,
});
const cursors = (events: StoredEvent[]) => events.map((e) => e.cursor);
const ids = (events: StoredEvent[]) => events.map((e) => e.event_id);

export function runStoreContract(name: string, makeStore: () => Promise<StoreFixture>): void {
  describe(`Store contract: ${name}`, () => {
    let fx: StoreFixture;
    let store: Store;
    beforeEach(async () => {
      fx = await makeStore();
      store = fx.store;
    });
    afterEach(async () => {
      await fx.cleanup();
    });

    describe('clock', () => {
      // Leases are written and judged on it (src/lease-clock.ts). The database runs on this
      // machine in the tests, so its clock and this process's agree to well within a minute
      // (faketime moves this process's clock only: the bound is then skipped).
      it('a shared store tells its server time (ms since the epoch); an embedded store has none', async () => {
        if (store.adapter !== 'postgres') {
          expect(store.serverTimeMs).toBeUndefined();
          return;
        }
        const ms = await store.serverTimeMs!();
        expect(Number.isInteger(ms)).toBe(true);
        if (!process.env.FAKETIME) expect(Math.abs(ms - Date.now())).toBeLessThan(60_000);
      });
    });

    describe('records', () => {
      it('creates and reads back a record with version 1 and a seq', async () => {
        const r = await store.createRecord('runs', 'run_1', { status: 'running', n: 1 }, { status: 'running' });
        expect(r).toMatchObject({ id: 'run_1', version: 1, value: { status: 'running', n: 1 } });
        expect(Number.isInteger(r.seq)).toBe(true);
        expect(await store.getRecord('runs', 'run_1')).toEqual(r);
        expect(await store.getRecord('runs', 'run_2')).toBeNull();
        expect(await store.getRecord('sessions', 'run_1')).toBeNull(); // kinds are separate
      });

      it('refuses to create an existing id with conflict and keeps the original', async () => {
        await store.createRecord('runs', 'a', { v: 1 });
        expect(await storeErrorCode(store.createRecord('runs', 'a', { v: 2 }))).toBe('conflict');
        expect((await store.getRecord('runs', 'a'))?.value).toEqual({ v: 1 });
        // same id in another kind is fine
        await store.createRecord('sessions', 'a', { v: 3 });
      });

      it('assigns seq in creation order', async () => {
        const a = await store.createRecord('runs', 'a', 1);
        const b = await store.createRecord('sessions', 'b', 2);
        const c = await store.createRecord('runs', 'c', 3);
        expect(a.seq).toBeLessThan(b.seq);
        expect(b.seq).toBeLessThan(c.seq);
      });

      it('stores a copy: mutating the caller object afterwards changes nothing', async () => {
        const v = { list: [1, 2] };
        await store.createRecord('runs', 'a', v);
        v.list.push(3);
        const got = await store.getRecord<{ list: number[] }>('runs', 'a');
        expect(got?.value).toEqual({ list: [1, 2] });
        got!.value.list.push(4);
        expect((await store.getRecord('runs', 'a'))?.value).toEqual({ list: [1, 2] });
      });

      it('getRecords answers in id order with null for missing ones', async () => {
        await store.createRecord('runs', 'a', 'A');
        await store.createRecord('runs', 'c', 'C');
        const got = await store.getRecords<string>('runs', ['c', 'b', 'a']);
        expect(got.map((r) => r?.value ?? null)).toEqual(['C', null, 'A']);
        expect(await store.getRecords('runs', [])).toEqual([]);
      });

      it('updates with compare-and-swap on version', async () => {
        const r1 = await store.createRecord('runs', 'a', { s: 1 });
        const r2 = await store.updateRecord('runs', 'a', { s: 2 }, 1);
        expect(r2).toEqual({ id: 'a', version: 2, seq: r1.seq, value: { s: 2 } });
        expect(await storeErrorCode(store.updateRecord('runs', 'a', { s: 3 }, 1))).toBe('stale_version');
        expect(await storeErrorCode(store.updateRecord('runs', 'a', { s: 3 }, 5))).toBe('stale_version');
        expect(await store.getRecord('runs', 'a')).toEqual(r2);
        expect(await storeErrorCode(store.updateRecord('runs', 'missing', { s: 1 }, 1))).toBe('not_found');
        const r3 = await store.updateRecord('runs', 'a', { s: 3 }, 2);
        expect(r3.version).toBe(3);
      });

      it('lets exactly one of many concurrent updates at the same version win', async () => {
        await store.createRecord('runs', 'a', { w: null });
        const results = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => store.updateRecord('runs', 'a', { w: i }, 1)));
        const won = results.filter((r) => r.status === 'fulfilled');
        expect(won).toHaveLength(1);
        for (const r of results) {
          if (r.status === 'rejected') expect((r.reason as StoreError).code).toBe('stale_version');
        }
        const winner = (won[0] as PromiseFulfilledResult<{ value: { w: number } }>).value.value.w;
        expect(await store.getRecord('runs', 'a')).toMatchObject({ version: 2, value: { w: winner } });
      });

      it('lets exactly one of many concurrent creates of one id win', async () => {
        const results = await Promise.allSettled(Array.from({ length: 10 }, (_, i) => store.createRecord('runs', 'x', i)));
        expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
        expect(results.filter((r) => r.status === 'rejected').map((r) => ((r as PromiseRejectedResult).reason as StoreError).code)).toEqual(
          Array(9).fill('conflict'),
        );
        expect(await store.countRecords('runs')).toBe(1);
      });

      it('sequential CAS increments from concurrent writers stay consistent', async () => {
        await store.createRecord('budget_ledger', 'k', { total: 0 });
        const addOne = async (): Promise<void> => {
          for (;;) {
            const cur = (await store.getRecord<{ total: number }>('budget_ledger', 'k'))!;
            try {
              await store.updateRecord('budget_ledger', 'k', { total: cur.value.total + 1 }, cur.version);
              return;
            } catch (e) {
              if (!(e instanceof StoreError && e.code === 'stale_version')) throw e;
            }
          }
        };
        await Promise.all(Array.from({ length: 25 }, addOne));
        expect(await store.getRecord('budget_ledger', 'k')).toMatchObject({ version: 26, value: { total: 25 } });
      });

      it('deletes with an optional version check', async () => {
        await store.createRecord('runs', 'a', 1);
        await store.createRecord('runs', 'b', 2);
        expect(await storeErrorCode(store.deleteRecord('runs', 'missing'))).toBe('not_found');
        expect(await storeErrorCode(store.deleteRecord('runs', 'a', 2))).toBe('stale_version');
        expect(await store.getRecord('runs', 'a')).not.toBeNull();
        await store.deleteRecord('runs', 'a', 1);
        await store.deleteRecord('runs', 'b');
        expect(await store.getRecord('runs', 'a')).toBeNull();
        expect(await store.getRecord('runs', 'b')).toBeNull();
        expect(await storeErrorCode(store.deleteRecord('runs', 'a'))).toBe('not_found');
        // a deleted id can be created again, as a new record
        const again = await store.createRecord('runs', 'a', 3);
        expect(again.version).toBe(1);
      });

      it('keeps index values on update without indexes and replaces them when given', async () => {
        await store.createRecord('runs', 'a', 1, { status: 'running', session_id: 's1' });
        await store.updateRecord('runs', 'a', 2, 1);
        expect(await store.countRecords('runs', { name: 'status', value: 'running' })).toBe(1);
        expect(await store.countRecords('runs', { name: 'session_id', value: 's1' })).toBe(1);

        await store.updateRecord('runs', 'a', 3, 2, { status: 'completed', session_id: 's1' });
        expect(await store.countRecords('runs', { name: 'status', value: 'running' })).toBe(0);
        expect(await store.countRecords('runs', { name: 'status', value: 'completed' })).toBe(1);
        expect((await store.listRecords('runs', { index: { name: 'status', value: 'running' } })).items).toEqual([]);
        expect((await store.listRecords('runs', { index: { name: 'status', value: 'completed' } })).items.map((r) => r.id)).toEqual(['a']);

        // null / undefined / omitted = not indexed
        await store.updateRecord('runs', 'a', 4, 3, { status: null, session_id: undefined });
        expect(await store.countRecords('runs', { name: 'status', value: 'completed' })).toBe(0);
        expect(await store.countRecords('runs', { name: 'session_id', value: 's1' })).toBe(0);
        await store.updateRecord('runs', 'a', 5, 4, { status: 'failed' });
        expect((await store.listRecords('runs', { index: { name: 'status', value: 'failed' } })).items.map((r) => r.value)).toEqual([5]);
        expect(await store.countRecords('runs')).toBe(1);
      });

      it('removes index entries on delete', async () => {
        await store.createRecord('bg_runs', 'a', 1, { task_id: 't' });
        await store.createRecord('bg_runs', 'b', 2, { task_id: 't' });
        await store.deleteRecord('bg_runs', 'a');
        expect((await store.listRecords('bg_runs', { index: { name: 'task_id', value: 't' } })).items.map((r) => r.id)).toEqual(['b']);
        expect(await store.countRecords('bg_runs', { name: 'task_id', value: 't' })).toBe(1);
        expect(await store.countRecords('bg_runs')).toBe(1);
      });

      it('keeps ids and index values with separator-like characters apart', async () => {
        const odd = ['a', 'a\u0000b', 'a\u0001', 'a\u0000', '\u0000', 'é✓', ''];
        for (const [i, id] of odd.entries()) await store.createRecord('runs', id, i, { tag: id });
        for (const [i, id] of odd.entries()) {
          expect((await store.getRecord('runs', id))?.value).toBe(i);
          expect(await store.countRecords('runs', { name: 'tag', value: id })).toBe(1);
          expect((await store.listRecords('runs', { index: { name: 'tag', value: id } })).items.map((r) => r.id)).toEqual([id]);
        }
        expect(await store.countRecords('runs')).toBe(odd.length);
      });

      it('lists in creation order, reversed, with limit and cursor pages', async () => {
        for (let i = 0; i < 7; i++) await store.createRecord('runs', `r${i}`, i);
        await store.createRecord('sessions', 'other', 0);

        const all = await store.listRecords<number>('runs');
        expect(all.items.map((r) => r.value)).toEqual([0, 1, 2, 3, 4, 5, 6]);
        expect(all.next_cursor).toBeNull();

        const p1 = await store.listRecords<number>('runs', { limit: 3 });
        expect(p1.items.map((r) => r.value)).toEqual([0, 1, 2]);
        expect(typeof p1.next_cursor).toBe('string');
        const p2 = await store.listRecords<number>('runs', { limit: 3, cursor: p1.next_cursor });
        expect(p2.items.map((r) => r.value)).toEqual([3, 4, 5]);
        const p3 = await store.listRecords<number>('runs', { limit: 3, cursor: p2.next_cursor });
        expect(p3.items.map((r) => r.value)).toEqual([6]);
        expect(p3.next_cursor).toBeNull();

        const r1 = await store.listRecords<number>('runs', { limit: 4, reverse: true });
        expect(r1.items.map((r) => r.value)).toEqual([6, 5, 4, 3]);
        const r2 = await store.listRecords<number>('runs', { limit: 4, reverse: true, cursor: r1.next_cursor });
        expect(r2.items.map((r) => r.value)).toEqual([2, 1, 0]);
        expect(r2.next_cursor).toBeNull();
      });

      it('answers next_cursor null when the last page is exactly full', async () => {
        for (let i = 0; i < 4; i++) await store.createRecord('runs', `r${i}`, i);
        const p1 = await store.listRecords('runs', { limit: 2 });
        const p2 = await store.listRecords('runs', { limit: 2, cursor: p1.next_cursor });
        expect(p2.items).toHaveLength(2);
        expect(p2.next_cursor).toBeNull();
        expect((await store.listRecords('runs', { limit: 4 })).next_cursor).toBeNull();
        expect(await store.listRecords('meta')).toEqual({ items: [], next_cursor: null });
      });

      it('lists by index with pages and reverse, skipping records whose index value changed', async () => {
        for (let i = 0; i < 10; i++) await store.createRecord('runs', `r${i}`, i, { session_id: i % 2 === 0 ? 'even' : 'odd' });
        const q = { index: { name: 'session_id', value: 'even' } };
        const seen: number[] = [];
        let cursor: string | null = null;
        do {
          const page: Awaited<ReturnType<typeof store.listRecords<number>>> = await store.listRecords<number>('runs', { ...q, limit: 2, cursor });
          seen.push(...page.items.map((r) => r.value));
          cursor = page.next_cursor;
        } while (cursor);
        expect(seen).toEqual([0, 2, 4, 6, 8]);
        expect((await store.listRecords<number>('runs', { ...q, reverse: true, limit: 3 })).items.map((r) => r.value)).toEqual([8, 6, 4]);

        await store.updateRecord('runs', 'r4', 4, 1, { session_id: 'odd' });
        expect((await store.listRecords<number>('runs', q)).items.map((r) => r.value)).toEqual([0, 2, 6, 8]);
        // an index value moves, the creation order does not
        expect((await store.listRecords<number>('runs', { index: { name: 'session_id', value: 'odd' } })).items.map((r) => r.value)).toEqual([
          1, 3, 4, 5, 7, 9,
        ]);
        expect(await store.countRecords('runs', { name: 'session_id', value: 'odd' })).toBe(6);
        expect(await store.countRecords('runs', { name: 'session_id', value: 'nope' })).toBe(0);
        expect(await store.countRecords('runs', { name: 'nope', value: 'even' })).toBe(0);
      });

      it('lists sorted by an index value, then creation order, with pages and reverse; records without the index are left out', async () => {
        // A rank per record (what the background queue_order index holds: 000 = priority 100).
        const ranks = ['100', '050', '100', '150', '050', '100'];
        for (let i = 0; i < ranks.length; i++) await store.createRecord('bg_runs', `q${i}`, i, { queue_order: ranks[i], status: 'queued' });
        await store.createRecord('bg_runs', 'none', 99, { status: 'running' });
        const walk = async (reverse: boolean) => {
          const seen: number[] = [];
          let cursor: string | null = null;
          do {
            const page: Awaited<ReturnType<typeof store.listRecords<number>>> = await store.listRecords<number>('bg_runs', {
              sortedBy: 'queue_order',
              limit: 2,
              cursor,
              reverse,
            });
            seen.push(...page.items.map((r) => r.value));
            cursor = page.next_cursor;
          } while (cursor);
          return seen;
        };
        expect(await walk(false)).toEqual([1, 4, 0, 2, 5, 3]);
        expect(await walk(true)).toEqual([3, 5, 2, 0, 4, 1]);
        // A value that moves puts the record at its new place (its creation order kept); one removed leaves it out.
        await store.updateRecord('bg_runs', 'q5', 5, 1, { queue_order: '000', status: 'queued' });
        await store.updateRecord('bg_runs', 'q1', 1, 1, { queue_order: null, status: 'running' });
        expect(await walk(false)).toEqual([5, 4, 0, 2, 3]);
        // A cursor taken before a record joined ahead of it: the walk goes on after the cursor's place.
        const first = await store.listRecords<number>('bg_runs', { sortedBy: 'queue_order', limit: 2 });
        expect(first.items.map((r) => r.value)).toEqual([5, 4]);
        await store.createRecord('bg_runs', 'q6', 6, { queue_order: '000', status: 'queued' });
        expect((await store.listRecords<number>('bg_runs', { sortedBy: 'queue_order', cursor: first.next_cursor })).items.map((r) => r.value)).toEqual([
          0, 2, 3,
        ]);
        expect((await store.listRecords<number>('bg_runs', { sortedBy: 'nope' })).items).toEqual([]);
      });

      it('defaults the page size to 100 and caps it at 1000', async () => {
        await store.commit(Array.from({ length: 1005 }, (_, i) => ({ op: 'create' as const, kind: 'traces' as const, id: `t${i}`, value: i })));
        const dflt = await store.listRecords('traces');
        expect(dflt.items).toHaveLength(100);
        expect(dflt.next_cursor).not.toBeNull();
        const big = await store.listRecords<number>('traces', { limit: 5000 });
        expect(big.items).toHaveLength(1000);
        const rest = await store.listRecords<number>('traces', { limit: 5000, cursor: big.next_cursor });
        expect(rest.items.map((r) => r.value)).toEqual([1000, 1001, 1002, 1003, 1004]);
        expect(await store.countRecords('traces')).toBe(1005);
      });

      it('counts a kind and an index value', async () => {
        expect(await store.countRecords('runs')).toBe(0);
        await store.createRecord('runs', 'a', 1, { status: 'running' });
        await store.createRecord('runs', 'b', 1, { status: 'running' });
        await store.createRecord('runs', 'c', 1, { status: 'failed' });
        await store.createRecord('sessions', 's', 1, { status: 'running' });
        expect(await store.countRecords('runs')).toBe(3);
        expect(await store.countRecords('runs', { name: 'status', value: 'running' })).toBe(2);
        expect(await store.countRecords('sessions', { name: 'status', value: 'running' })).toBe(1);
      });

      it('rejects a malformed list cursor', async () => {
        expect(await storeErrorCode(store.listRecords('runs', { cursor: 'not-a-cursor' }))).toBe('not_found');
      });
    });

    describe('commit', () => {
      it('writes every op and returns the records in op order (null for deletes)', async () => {
        await store.createRecord('budget_ledger', 'k1', { reserved: 0 }, { owner: 'x' });
        await store.createRecord('outcomes', 'gone', 1);
        const res = await store.commit([
          { op: 'update', kind: 'budget_ledger', id: 'k1', value: { reserved: 5 }, expectedVersion: 1 },
          { op: 'create', kind: 'budget_ledger', id: 'k2', value: { reserved: 7 }, indexes: { owner: 'x' } },
          { op: 'delete', kind: 'outcomes', id: 'gone', expectedVersion: 1 },
        ]);
        expect(res[0]).toMatchObject({ id: 'k1', version: 2, value: { reserved: 5 } });
        expect(res[1]).toMatchObject({ id: 'k2', version: 1, value: { reserved: 7 } });
        expect(res[2]).toBeNull();
        expect(await store.getRecord('outcomes', 'gone')).toBeNull();
        expect(await store.countRecords('budget_ledger', { name: 'owner', value: 'x' })).toBe(2);
        expect(await store.commit([])).toEqual([]);
      });

      it.each([
        ['stale_version', { op: 'update', kind: 'budget_ledger', id: 'k1', value: 'X', expectedVersion: 9 }],
        ['not_found', { op: 'update', kind: 'budget_ledger', id: 'nope', value: 'X', expectedVersion: 1 }],
        ['conflict', { op: 'create', kind: 'budget_ledger', id: 'k1', value: 'X' }],
        ['not_found', { op: 'delete', kind: 'budget_ledger', id: 'nope' }],
        ['stale_version', { op: 'delete', kind: 'budget_ledger', id: 'k1', expectedVersion: 3 }],
      ] as const)('writes nothing when an op in the middle fails with %s', async (code, failing) => {
        const k1 = await store.createRecord('budget_ledger', 'k1', 'one', { owner: 'a' });
        const seqBefore = (await store.createRecord('meta', 'probe', 0)).seq;
        expect(
          await storeErrorCode(
            store.commit([
              { op: 'create', kind: 'budget_ledger', id: 'new1', value: 'N', indexes: { owner: 'a' } },
              { op: 'update', kind: 'budget_ledger', id: 'k1', value: 'changed', expectedVersion: 1, indexes: { owner: 'b' } },
              failing,
              { op: 'create', kind: 'budget_ledger', id: 'new2', value: 'M' },
            ]),
          ),
        ).toBe(code);
        expect(await store.getRecord('budget_ledger', 'k1')).toEqual(k1);
        expect(await store.getRecord('budget_ledger', 'new1')).toBeNull();
        expect(await store.getRecord('budget_ledger', 'new2')).toBeNull();
        expect(await store.countRecords('budget_ledger')).toBe(1);
        expect(await store.countRecords('budget_ledger', { name: 'owner', value: 'a' })).toBe(1);
        expect(await store.countRecords('budget_ledger', { name: 'owner', value: 'b' })).toBe(0);
        expect((await store.listRecords('budget_ledger')).items.map((r) => r.id)).toEqual(['k1']);
        // later writes still work and their seq keeps increasing
        expect((await store.createRecord('meta', 'probe2', 0)).seq).toBeGreaterThan(seqBefore);
      });

      it('lets later ops see earlier ops of the same commit', async () => {
        const res = await store.commit([
          { op: 'create', kind: 'runs', id: 'a', value: 1, indexes: { status: 'running' } },
          { op: 'update', kind: 'runs', id: 'a', value: 2, expectedVersion: 1 },
          { op: 'update', kind: 'runs', id: 'a', value: 3, expectedVersion: 2, indexes: { status: 'done' } },
          { op: 'create', kind: 'runs', id: 'b', value: 1 },
          { op: 'delete', kind: 'runs', id: 'b', expectedVersion: 1 },
        ]);
        expect(res.map((r) => r?.version ?? null)).toEqual([1, 2, 3, 1, null]);
        expect(await store.getRecord('runs', 'a')).toMatchObject({ version: 3, value: 3 });
        expect(await store.getRecord('runs', 'b')).toBeNull();
        expect(await store.countRecords('runs')).toBe(1);
        expect(await store.countRecords('runs', { name: 'status', value: 'running' })).toBe(0);
        expect(await store.countRecords('runs', { name: 'status', value: 'done' })).toBe(1);
        expect(
          await storeErrorCode(
            store.commit([
              { op: 'create', kind: 'runs', id: 'c', value: 1 },
              { op: 'create', kind: 'runs', id: 'c', value: 2 },
            ]),
          ),
        ).toBe('conflict');
        expect(await store.getRecord('runs', 'c')).toBeNull();
      });

      it('expectedVersion null creates or replaces without a check', async () => {
        const [created] = await store.commit([{ op: 'update', kind: 'meta', id: 'cache', value: { a: 1 }, expectedVersion: null, indexes: { t: 'x' } }]);
        expect(created).toMatchObject({ id: 'cache', version: 1, value: { a: 1 } });
        const [replaced] = await store.commit([{ op: 'update', kind: 'meta', id: 'cache', value: { a: 2 }, expectedVersion: null }]);
        expect(replaced).toMatchObject({ version: 2, seq: created!.seq, value: { a: 2 } });
        expect(await store.countRecords('meta', { name: 't', value: 'x' })).toBe(1);
        expect(await store.countRecords('meta')).toBe(1);
      });

      it('fails only the write whose value JSON cannot encode', async () => {
        const results = await Promise.allSettled([
          store.createRecord('runs', 'ok1', 1),
          store.createRecord('runs', 'bad', { n: 10n }),
          store.appendEvents([ev({ big: 1n })]),
          store.appendEvents([ev({ event_id: 'fine' })]),
          store.createRecord('runs', 'ok2', 2),
        ]);
        expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'rejected', 'fulfilled', 'fulfilled']);
        expect(await store.getRecord('runs', 'bad')).toBeNull();
        expect(await store.countRecords('runs')).toBe(2);
        expect(ids((await store.readEvents()).events)).toEqual(['fine']);
      });

      it('keeps counts exact under many concurrent mixed writes', async () => {
        const jobs: Array<Promise<unknown>> = [];
        for (let i = 0; i < 60; i++) jobs.push(store.createRecord('bg_tasks', `t${i}`, i, { state: 'new' }));
        await Promise.all(jobs);
        const more: Array<Promise<unknown>> = [];
        for (let i = 0; i < 60; i++) {
          if (i % 3 === 0) more.push(store.deleteRecord('bg_tasks', `t${i}`, 1));
          else if (i % 3 === 1) more.push(store.updateRecord('bg_tasks', `t${i}`, i, 1, { state: 'done' }));
          else more.push(store.updateRecord('bg_tasks', `t${i}`, i, 1).then(() => store.updateRecord('bg_tasks', `t${i}`, i, 1).catch(() => 'stale')));
          more.push(store.appendEvents([ev({ task_id: `t${i}` })]));
        }
        await Promise.all(more);
        expect(await store.countRecords('bg_tasks')).toBe(40);
        expect(await store.countRecords('bg_tasks', { name: 'state', value: 'done' })).toBe(20);
        expect(await store.countRecords('bg_tasks', { name: 'state', value: 'new' })).toBe(20);
        expect((await store.listRecords('bg_tasks', { index: { name: 'state', value: 'new' } })).items).toHaveLength(20);
        expect((await store.listRecords('bg_tasks', { limit: 1000 })).items).toHaveLength(40);
      });
    });

    describe('commitWithEvents', () => {
      it('writes the records and appends the events, with cursors in order after earlier appends', async () => {
        const [before] = await store.appendEvents([ev({ event_id: 'before' })]);
        const r = await store.commitWithEvents(
          [{ op: 'create', kind: 'bg_runs', id: 'r1', value: { n: 1 }, indexes: { status: 'queued' } }],
          [ev({ event_id: 'c1', run_id: 'r1' }), ev({ event_id: 'c2', run_id: 'r1' })],
        );
        expect(r.records).toEqual([expect.objectContaining({ id: 'r1', version: 1, value: { n: 1 } })]);
        expect(ids(r.events)).toEqual(['c1', 'c2']);
        expect(Number(r.events[0].cursor)).toBeGreaterThan(Number(before.cursor));
        expect(Number(r.events[1].cursor)).toBe(Number(r.events[0].cursor) + 1);
        const [after] = await store.appendEvents([ev({ event_id: 'after' })]);
        expect(Number(after.cursor)).toBeGreaterThan(Number(r.events[1].cursor));
        expect(ids((await store.readEvents({ filters: { run_id: 'r1' } })).events)).toEqual(['c1', 'c2']);
        expect(ids((await store.readEvents()).events)).toEqual(['before', 'c1', 'c2', 'after']);
        expect(await store.countRecords('bg_runs', { name: 'status', value: 'queued' })).toBe(1);
      });

      it('appends nothing when the commit is refused (stale version, conflict) and takes a function form', async () => {
        await store.createRecord('bg_runs', 'r1', { n: 1 });
        const results = await Promise.allSettled([
          store.commitWithEvents([{ op: 'update', kind: 'bg_runs', id: 'r1', value: { n: 2 }, expectedVersion: 7 }], [ev({ event_id: 'stale' })]),
          store.commitWithEvents([{ op: 'create', kind: 'bg_runs', id: 'r1', value: { n: 3 } }], [ev({ event_id: 'conflict' })]),
          store.commitWithEvents(() => [{ op: 'update', kind: 'bg_runs', id: 'r1', value: { n: 4 }, expectedVersion: 1 }], [ev({ event_id: 'ok' })]),
        ]);
        expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected', 'fulfilled']);
        expect(await storeErrorCode(Promise.reject((results[0] as PromiseRejectedResult).reason))).toBe('stale_version');
        expect(await storeErrorCode(Promise.reject((results[1] as PromiseRejectedResult).reason))).toBe('conflict');
        expect(ids((await store.readEvents()).events)).toEqual(['ok']);
        expect((await store.getRecord('bg_runs', 'r1'))?.value).toEqual({ n: 4 });
      });

      it('gives cursors only to the events stored: refused commits, applied ones and plain appends in one round', async () => {
        await store.createRecord('bg_runs', 'r1', { n: 1 });
        // Issued in one turn: they share a group-commit round where the adapter has one.
        const [a, refused, b, c, d] = await Promise.allSettled([
          store.appendEvents([ev({ event_id: 'a1' }), ev({ event_id: 'a2' })]),
          store.commitWithEvents(
            [{ op: 'update', kind: 'bg_runs', id: 'r1', value: { n: 9 }, expectedVersion: 5 }],
            [ev({ event_id: 'x1' }), ev({ event_id: 'x2' })],
          ),
          store.commitWithEvents([{ op: 'update', kind: 'bg_runs', id: 'r1', value: { n: 2 }, expectedVersion: 1 }], () => [ev({ event_id: 'b1' })]),
          store.appendEvents([ev({ event_id: 'c1' })]),
          store.commitWithEvents([{ op: 'create', kind: 'bg_runs', id: 'r2', value: { n: 1 } }], [ev({ event_id: 'd1' }), ev({ event_id: 'd2' })]),
        ]);
        expect(refused.status).toBe('rejected');
        const got = [
          ...(a as PromiseFulfilledResult<StoredEvent[]>).value,
          ...(b as PromiseFulfilledResult<{ events: StoredEvent[] }>).value.events,
          ...(c as PromiseFulfilledResult<StoredEvent[]>).value,
          ...(d as PromiseFulfilledResult<{ events: StoredEvent[] }>).value.events,
        ];
        expect(ids(got)).toEqual(['a1', 'a2', 'b1', 'c1', 'd1', 'd2']);
        // What each call was told is what the log holds, cursor for cursor, in that order.
        const page = await store.readEvents();
        expect(page.events.map((e) => [e.event_id, e.cursor])).toEqual(got.map((e) => [e.event_id, e.cursor]));
        expect((await store.getRecord('bg_runs', 'r1'))?.value).toEqual({ n: 2 });
      });

      it('writes neither the records nor the events when an event JSON cannot encode', async () => {
        const r = store.commitWithEvents([{ op: 'create', kind: 'bg_runs', id: 'r1', value: 1 }], [ev({ event_id: 'fine' }), ev({ big: 1n })]);
        await expect(r).rejects.toThrow();
        expect(await store.getRecord('bg_runs', 'r1')).toBeNull();
        expect((await store.readEvents()).events).toEqual([]);
        expect(await store.countRecords('bg_runs')).toBe(0);
      });
    });

    describe('events', () => {
      it('assigns fixed-width cursors that increase across appends', async () => {
        expect(await store.lastEventCursor()).toBeNull();
        const a = await store.appendEvents([ev({ run_id: 'r1' }), ev({ run_id: 'r1' })]);
        const b = await store.appendEvents([ev()]);
        const all = [...a, ...b];
        for (const e of all) expect(e.cursor).toMatch(/^\d{16}$/);
        const cs = cursors(all);
        expect([...cs].sort()).toEqual(cs);
        expect(new Set(cs).size).toBe(3);
        expect(a[0]).toMatchObject({ event_type: 'run.step', run_id: 'r1' });
        expect(await store.lastEventCursor()).toBe(b[0].cursor);
        expect(await store.appendEvents([])).toEqual([]);
      });

      it('orders concurrent appends by call order, with unique cursors', async () => {
        const calls = Array.from({ length: 50 }, (_, i) => store.appendEvents(i % 5 === 0 ? [ev(), ev()] : [ev()]));
        const results = await Promise.all(calls);
        const cs = results.flat().map((e) => e.cursor);
        expect(new Set(cs).size).toBe(cs.length);
        expect([...cs].sort()).toEqual(cs);
        const page = await store.readEvents({ limit: 1000 });
        expect(cursors(page.events)).toEqual(cs);
      });

      it('reads the whole log in cursor order and returns the stored fields', async () => {
        const input = ev({ run_id: 'r', payload: { nested: [1, 'two'] }, trace_id: null });
        const [stored] = await store.appendEvents([input]);
        const page = await store.readEvents();
        expect(page.events).toHaveLength(1);
        expect(page.events[0]).toMatchObject({ ...input, cursor: stored.cursor });
        expect(page.next_cursor).toBeNull();
        expect(await store.getEvent(stored.cursor)).toEqual(page.events[0]);
      });

      it('filters by every indexed field', async () => {
        await store.appendEvents([
          ev({ event_id: 'e1', trace_id: 't1', run_id: 'r1', session_id: 's1', task_id: null, event_type: 'run.started' }),
          ev({ event_id: 'e2', trace_id: 't2', run_id: 'r2', session_id: 's1', task_id: 'k1', event_type: 'tool.called' }),
          ev({ event_id: 'e3', trace_id: 't1', run_id: 'r1', session_id: 's2', task_id: 'k1', event_type: 'tool.called' }),
          ev({ event_id: 'e4', event_type: 'system' }),
        ]);
        const q = async (filters: Record<string, string | string[]>) => ids((await store.readEvents({ filters })).events);
        expect(await q({ trace_id: 't1' })).toEqual(['e1', 'e3']);
        expect(await q({ run_id: 'r2' })).toEqual(['e2']);
        expect(await q({ session_id: 's1' })).toEqual(['e1', 'e2']);
        expect(await q({ task_id: 'k1' })).toEqual(['e2', 'e3']);
        expect(await q({ event_type: 'tool.called' })).toEqual(['e2', 'e3']);
        expect(await q({ event_type: 'system' })).toEqual(['e4']);
        expect(await q({ run_id: 'nope' })).toEqual([]);
        // array = OR of its values, merged in cursor order
        expect(await q({ run_id: ['r2', 'r1'] })).toEqual(['e1', 'e2', 'e3']);
        expect(await q({ event_type: ['system', 'run.started'] })).toEqual(['e1', 'e4']);
        expect(await q({ run_id: ['r1', 'nope'] })).toEqual(['e1', 'e3']);
        // combined filters = AND
        expect(await q({ session_id: 's1', event_type: 'tool.called' })).toEqual(['e2']);
        expect(await q({ run_id: 'r1', trace_id: 't1', session_id: 's2' })).toEqual(['e3']);
        expect(await q({ run_id: ['r1', 'r2'], task_id: 'k1' })).toEqual(['e2', 'e3']);
        expect(await q({ trace_id: 't1', session_id: ['s1', 's2'], event_type: ['run.started', 'x'] })).toEqual(['e1']);
        expect(await q({ run_id: 'r1', session_id: 'nope' })).toEqual([]);
        // an empty array constrains nothing
        expect(await q({ run_id: [] })).toEqual(['e1', 'e2', 'e3', 'e4']);
      });

      it('pages with after, limit and next_cursor', async () => {
        const stored = await store.appendEvents(Array.from({ length: 5 }, () => ev({ run_id: 'r' })));
        const p1 = await store.readEvents({ limit: 2 });
        expect(cursors(p1.events)).toEqual(cursors(stored.slice(0, 2)));
        expect(p1.next_cursor).toBe(stored[1].cursor);
        const p2 = await store.readEvents({ limit: 2, after: p1.next_cursor });
        expect(cursors(p2.events)).toEqual(cursors(stored.slice(2, 4)));
        const p3 = await store.readEvents({ limit: 2, after: p2.next_cursor });
        expect(cursors(p3.events)).toEqual([stored[4].cursor]);
        expect(p3.next_cursor).toBeNull();
        // full page = next_cursor set, even at the very end
        expect((await store.readEvents({ limit: 5 })).next_cursor).toBe(stored[4].cursor);
        expect(await store.readEvents({ after: stored[4].cursor })).toEqual({ events: [], next_cursor: null });
        // after is strict, also with a filter
        expect(cursors((await store.readEvents({ after: stored[2].cursor, filters: { run_id: 'r' } })).events)).toEqual(cursors(stored.slice(3)));
        // after may name a cursor that no longer exists or lies between events
        expect(cursors((await store.readEvents({ after: '0' })).events)).toEqual(cursors(stored));
      });

      it('pages through sparse matches of combined filters without losing or repeating events', async () => {
        const batch: EventInput[] = [];
        for (let i = 0; i < 1500; i++) {
          // skewed on purpose: 'ra' is dense early and 'rb' late, so the merged walk of both
          // must not jump over one index's entries while consuming the other's
          const run = i < 600 ? (i % 10 === 0 ? 'rb' : 'ra') : i % 50 === 0 ? 'ra' : 'rb';
          batch.push(ev({ run_id: run, event_type: i % 37 === 0 ? 'rare' : 'common', session_id: 's' }));
        }
        const stored = [];
        for (let i = 0; i < batch.length; i += 100) stored.push(...(await store.appendEvents(batch.slice(i, i + 100))));
        const want = stored.filter((e) => e.run_id === 'ra' && e.event_type === 'rare').map((e) => e.cursor);
        const wantBoth = stored.filter((e) => e.event_type === 'rare').map((e) => e.cursor);
        const cases: Array<[NonNullable<EventQuery['filters']>, string[]]> = [
          [{ run_id: 'ra', event_type: 'rare' }, want],
          [{ run_id: ['ra', 'rb'], event_type: 'rare', session_id: 's' }, wantBoth],
        ];
        for (const [filters, expected] of cases) {
          const got: string[] = [];
          let after: string | null = null;
          for (let pages = 0; pages < 100; pages++) {
            const page: Awaited<ReturnType<Store['readEvents']>> = await store.readEvents({ filters, limit: 7, after });
            got.push(...cursors(page.events));
            if (!page.next_cursor) break;
            after = page.next_cursor;
          }
          expect(got).toEqual(expected);
        }
      });

      it('defaults the event page to 200 and caps it at 1000', async () => {
        const all: StoredEvent[] = [];
        for (let i = 0; i < 11; i++) all.push(...(await store.appendEvents(Array.from({ length: 100 }, () => ev({ run_id: 'r' })))));
        const dflt = await store.readEvents({ filters: { run_id: 'r' } });
        expect(dflt.events).toHaveLength(200);
        expect(dflt.next_cursor).toBe(all[199].cursor);
        const big = await store.readEvents({ limit: 5000 });
        expect(big.events).toHaveLength(1000);
        expect((await store.readEvents({ limit: 5000, after: big.next_cursor })).events).toHaveLength(100);
      });

      it('gets one event by cursor', async () => {
        const [a] = await store.appendEvents([ev({ x: 1 })]);
        expect(await store.getEvent(a.cursor)).toMatchObject({ x: 1, cursor: a.cursor });
        expect(await store.getEvent('9999999999999999')).toBeNull();
        expect(await store.getEvent('garbage')).toBeNull();
      });

      it('rejects a malformed after cursor', async () => {
        expect(await storeErrorCode(store.readEvents({ after: 'nope' }))).toBe('not_found');
      });

      it('deletes old events with their index entries and never reuses cursors', async () => {
        const old = await store.appendEvents([
          ev({ timestamp: '2026-01-01T00:00:00.000Z', run_id: 'r', event_type: 'a' }),
          ev({ timestamp: '2026-01-02T00:00:00.000Z', run_id: 'r', event_type: 'b' }),
        ]);
        const fresh = await store.appendEvents([ev({ timestamp: '2026-01-05T00:00:00.000Z', run_id: 'r', event_type: 'a' })]);
        expect(await store.deleteEventsBefore('2026-01-03T00:00:00.000Z')).toBe(2);
        expect(cursors((await store.readEvents()).events)).toEqual([fresh[0].cursor]);
        expect(cursors((await store.readEvents({ filters: { run_id: 'r' } })).events)).toEqual([fresh[0].cursor]);
        expect(cursors((await store.readEvents({ filters: { event_type: ['a', 'b'] } })).events)).toEqual([fresh[0].cursor]);
        expect(await store.getEvent(old[0].cursor)).toBeNull();
        expect(await store.deleteEventsBefore('2026-01-03T00:00:00.000Z')).toBe(0);

        expect(await store.deleteEventsBefore('2027-01-01T00:00:00.000Z')).toBe(1);
        expect(await store.readEvents()).toEqual({ events: [], next_cursor: null });
        expect(await store.lastEventCursor()).toBeNull();
        const [next] = await store.appendEvents([ev()]);
        expect(next.cursor > fresh[0].cursor).toBe(true);
      });

      it('deletes across many events', async () => {
        for (let i = 0; i < 12; i++) {
          await store.appendEvents(
            Array.from({ length: 100 }, (_, j) => ev({ timestamp: new Date(Date.UTC(2026, 0, 1, 0, 0, i * 100 + j)).toISOString(), run_id: `r${j % 3}` })),
          );
        }
        const cut = new Date(Date.UTC(2026, 0, 1, 0, 0, 1100)).toISOString();
        expect(await store.deleteEventsBefore(cut)).toBe(1100);
        expect((await store.readEvents({ limit: 1000 })).events).toHaveLength(100);
        const byRun = await Promise.all(['r0', 'r1', 'r2'].map((r) => store.readEvents({ filters: { run_id: r } })));
        expect(byRun.reduce((s, p) => s + p.events.length, 0)).toBe(100);
      });

      it('pages and retains exactly inside one append of many events (one index posting per value)', async () => {
        const t0 = Date.UTC(2026, 0, 1);
        const stored = await store.appendEvents(
          Array.from({ length: 10 }, (_, i) =>
            ev({ timestamp: new Date(t0 + i * 1000).toISOString(), run_id: i % 2 ? 'b' : 'a', event_type: 'x', session_id: 's' }),
          ),
        );
        const runA = stored.filter((e) => e.run_id === 'a').map((e) => e.cursor);
        const got: string[] = [];
        let after: string | null = null;
        for (;;) {
          const page: Awaited<ReturnType<Store['readEvents']>> = await store.readEvents({ filters: { run_id: 'a' }, limit: 2, after });
          got.push(...cursors(page.events));
          if (!page.next_cursor) break;
          after = page.next_cursor;
        }
        expect(got).toEqual(runA);
        // `after` in the middle of the append, and on a cursor of the other run
        expect(cursors((await store.readEvents({ filters: { run_id: 'a' }, after: stored[3].cursor })).events)).toEqual(runA.slice(2));
        expect(cursors((await store.readEvents({ filters: { run_id: ['a', 'b'] }, after: stored[6].cursor, limit: 2 })).events)).toEqual(
          cursors(stored.slice(7, 9)),
        );
        expect((await store.readEventsJson({ filters: { session_id: 's' }, limit: 3 })).events.map((t) => JSON.parse(t) as StoredEvent)).toEqual(
          (await store.readEvents({ filters: { session_id: 's' }, limit: 3 })).events,
        );
        // Retention stops inside the append: the rest stays findable through every index.
        expect(await store.deleteEventsBefore(new Date(t0 + 5000).toISOString())).toBe(5);
        expect(cursors((await store.readEvents({ filters: { run_id: 'a' } })).events)).toEqual(runA.slice(3));
        expect(cursors((await store.readEvents({ filters: { event_type: 'x' } })).events)).toEqual(cursors(stored.slice(5)));
        expect(cursors((await store.readEvents({ filters: { session_id: 's', run_id: 'b' } })).events)).toEqual(
          cursors(stored.slice(5).filter((e) => e.run_id === 'b')),
        );
        expect(await store.deleteEventsBefore(new Date(t0 + 60_000).toISOString())).toBe(5);
        for (const filters of [{ run_id: 'a' }, { run_id: 'b' }, { event_type: 'x' }, { session_id: 's' }]) {
          expect((await store.readEvents({ filters })).events).toEqual([]);
        }
      });
    });

    describe('queue claims (BgRunRepo.claimPass)', () => queueClaimCases(() => store));
    describe("holders op (a key's slots in the commits that carry them)", () => holdersOpCases(() => store));

    describe('lifecycle', () => {
      it('waits for pending writes on close and refuses everything afterwards', async () => {
        const pending = [store.appendEvents([ev()]), store.createRecord('runs', 'a', 1), store.commit([{ op: 'create', kind: 'runs', id: 'b', value: 2 }])];
        await store.close();
        expect(store.isOpen()).toBe(false);
        await Promise.all(pending); // all acknowledged, none lost to the close
        const calls: Array<() => Promise<unknown>> = [
          () => store.getRecord('runs', 'a'),
          () => store.getRecords('runs', ['a']),
          () => store.createRecord('runs', 'c', 1),
          () => store.updateRecord('runs', 'a', 2, 1),
          () => store.deleteRecord('runs', 'a'),
          () => store.listRecords('runs'),
          () => store.countRecords('runs'),
          () => store.commit([{ op: 'create', kind: 'runs', id: 'd', value: 1 }]),
          () => store.appendEvents([ev()]),
          () => store.readEvents(),
          () => store.getEvent('0000000000000001'),
          () => store.lastEventCursor(),
          () => store.deleteEventsBefore('2030-01-01T00:00:00Z'),
        ];
        for (const call of calls) expect(await storeErrorCode(call())).toBe('closed');
        await store.close(); // idempotent
      });

      it('reports isOpen while open', async () => {
        expect(store.isOpen()).toBe(true);
        await store.open(); // idempotent
        expect(store.isOpen()).toBe(true);
      });
    });
  });
}
