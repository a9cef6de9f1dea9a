// The `holders` write op (src/store/store.ts WriteOp): an atomic edit of a record that lists who
// holds one of a few slots (a concurrency key's record: src/flow/key-slots.ts), applied by every
// adapter inside the commit that carries it. Taking a slot (add) fails the whole commit with
// StoreError 'full' only when the record's holders would exceed the limit; the caller then treats
// the slot as not taken (src/runtime/run-flow.ts queues the run). The rule is the one of
// machines/policies/flow.ts takeKeySlot: the lowest limit among the newcomer's and the holders' wins.
// The PostgreSQL adapter applies the same rule in SQL (src/store/migrations/004_holders_op.sql).
import { StoreError, type HolderEntry, type HoldersOp, type WriteOp } from './store.js';

/**
 * The record's value after `op`: null when no holder is left (the record is deleted, or never
 * made), 'unchanged' when `op` changes nothing (nobody to remove, `add` holds already: no write).
 */
export function applyHolders(cur: unknown, op: HoldersOp): Record<string, unknown> | null | 'unchanged' {
  const base = cur && typeof cur === 'object' ? (cur as Record<string, unknown>) : {};
  const stored = Array.isArray(base.holders) ? (base.holders as HolderEntry[]) : [];
  const gone = new Set(op.remove ?? []);
  const holders = stored.filter((h) => !gone.has(h.run_id));
  const adding = op.add !== undefined && !holders.some((h) => h.run_id === op.add!.run_id);
  if (!adding && holders.length === stored.length) return 'unchanged';
  if (op.add && adding) {
    let lowest = op.add.limit;
    for (const h of holders) if (typeof h.limit === 'number' && h.limit < lowest) lowest = h.limit;
    if (holders.length >= lowest) throw new StoreError('full', `${op.kind} '${op.id}' holds ${holders.length} of at most ${lowest}`);
    holders.push({ run_id: op.add.run_id, since: op.add.since, limit: op.add.limit });
  }
  if (holders.length === 0) return null;
  const { holders: _old, ...rest } = base;
  return { ...rest, ...(op.fields ?? {}), holders };
}

/**
 * The plain op `op` amounts to on a record whose value is `cur` (`exists`: the record is there):
 * what the in-process adapters then check and write as usual. Null: nothing to write (no change). Throws StoreError 'full' as applyHolders does.
 */
export function holdersAsWrite(op: HoldersOp, cur: unknown, exists: boolean): WriteOp | null {
  const value = applyHolders(exists ? cur : null, op);
  if (value === 'unchanged') return null;
  if (value === null) return exists ? { op: 'delete', kind: op.kind, id: op.id } : null;
  return exists ? { op: 'update', kind: op.kind, id: op.id, value, expectedVersion: null } : { op: 'create', kind: op.kind, id: op.id, value };
}
