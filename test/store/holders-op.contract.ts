// The `holders` write op (src/store/holders-op.ts), part of the store contract: an atomic edit of
// a record listing a key's slot holders, inside the commit that carries it. Every adapter creates
// the record with its first holder, deletes it with its last, refuses an add past the lowest limit
// with 'full' (and then writes nothing of that commit), and never counts a holder twice.
import { expect, it } from 'vitest';
import type { Store } from '../../src/store/store.js';

type Holders = { key: string; holders: Array<{ run_id: string; since: number; limit?: number }> };
const add = (run_id: string, limit: number, since = 1) => ({
  op: 'holders' as const,
  kind: 'meta' as const,
  id: 'flow_key:k',
  add: { run_id, since, limit },
  fields: { key: 'k' },
});
const remove = (...ids: string[]) => ({ op: 'holders' as const, kind: 'meta' as const, id: 'flow_key:k', remove: ids });
/** The StoreError code a commit failed with ('ok' when it went through). */
const outcome = (p: Promise<unknown>): Promise<string> =>
  p.then(
    () => 'ok',
    (e: { code?: string }) => e.code ?? String(e),
  );
const holdersOf = async (store: Store) => ((await store.getRecord<Holders>('meta', 'flow_key:k'))?.value.holders ?? []).map((h) => h.run_id);

export function holdersOpCases(get: () => Store): void {
  it('adds holders up to the limit in the commits that carry them, then fails a commit with full and writes nothing of it', async () => {
    const store = get();
    const r = await store.commit([{ op: 'create', kind: 'outcomes', id: 'run_a', value: 'a' }, add('run_a', 2)]);
    expect(r[1]).toBeNull(); // a holders op answers no record
    await store.commit([add('run_b', 2), { op: 'create', kind: 'outcomes', id: 'run_b', value: 'b' }]);
    expect(await holdersOf(store)).toEqual(['run_a', 'run_b']);
    expect((await store.getRecord<Holders>('meta', 'flow_key:k'))?.value).toMatchObject({
      key: 'k',
      holders: [{ run_id: 'run_a', since: 1, limit: 2 }, { run_id: 'run_b' }],
    });
    expect(await outcome(store.commit([{ op: 'create', kind: 'outcomes', id: 'run_c', value: 'c' }, add('run_c', 2)]))).toBe('full');
    expect(await store.getRecord('outcomes', 'run_c')).toBeNull();
    // A holder already in is not added again, whatever the count.
    await store.commit([add('run_a', 2)]);
    expect(await holdersOf(store)).toEqual(['run_a', 'run_b']);
  });

  it('the lowest limit among the newcomer and the holders wins', async () => {
    const store = get();
    await store.commit([add('run_a', 1)]);
    expect(await outcome(store.commit([add('run_b', 5)]))).toBe('full');
    await store.commit([remove('run_a')]);
    await store.commit([add('run_b', 5)]);
    expect(await outcome(store.commit([add('run_c', 1)]))).toBe('full');
    await store.commit([add('run_c', 2)]);
    expect(await holdersOf(store)).toEqual(['run_b', 'run_c']);
  });

  it('a remove and an add in one op hand a slot over; the last remove deletes the record; removing nobody writes nothing', async () => {
    const store = get();
    await store.commit([add('run_a', 1)]);
    const v1 = (await store.getRecord('meta', 'flow_key:k'))!.version;
    await store.commit([remove('run_x'), add('run_a', 1)]); // changes nothing: no write
    expect((await store.getRecord('meta', 'flow_key:k'))!.version).toBe(v1);
    await store.commit([{ op: 'holders', kind: 'meta', id: 'flow_key:k', remove: ['run_a'], add: { run_id: 'run_b', since: 2, limit: 1 } }]);
    expect(await holdersOf(store)).toEqual(['run_b']);
    await store.commit([{ op: 'update', kind: 'outcomes', id: 'run_b', value: 'ended', expectedVersion: null }, remove('run_b')]);
    expect(await store.getRecord('meta', 'flow_key:k')).toBeNull();
    expect(await store.commit([remove('run_x')])).toEqual([null]);
    expect(await store.getRecord('meta', 'flow_key:k')).toBeNull();
  });

  it('concurrent adds never exceed the limit', async () => {
    const store = get();
    const tries = await Promise.all(Array.from({ length: 12 }, (_, i) => outcome(store.commit([add(`run_${i}`, 3)]))));
    expect(tries.filter((t) => t === 'ok')).toHaveLength(3);
    expect(tries.filter((t) => t !== 'ok').every((t) => t === 'full')).toBe(true);
    expect(await holdersOf(store)).toHaveLength(3);
  });
}
