// A typed repository of one record kind: the Store's record operations with the kind bound and the
// value typed (values.ts). Thin by design: no cache, no retries, every call is one Store call, so
// the CAS and error semantics are the Store's own (StoreError 'stale_version', 'conflict', ...).
// The string kinds live here and in the adapters only (test/arch/layout.test.ts checks it).
import type { HoldersOp, ListQuery, Page, RecordIndexes, RecordKind, Store, Versioned, WriteOp } from '../store.js';
import type { ValueOf } from './values.js';

type IndexQuery = { name: string; value: string };

export class KindRepo<K extends RecordKind> {
  constructor(
    protected readonly store: Store,
    readonly kind: K,
  ) {}

  get<T = ValueOf<K>>(id: string): Promise<Versioned<T> | null> {
    return this.store.getRecord<T>(this.kind, id);
  }

  getMany<T = ValueOf<K>>(ids: string[]): Promise<Array<Versioned<T> | null>> {
    return this.store.getRecords<T>(this.kind, ids);
  }

  /** StoreError 'conflict' when the id exists. */
  create<T = ValueOf<K>>(id: string, value: T, indexes?: RecordIndexes): Promise<Versioned<T>> {
    return this.store.createRecord<T>(this.kind, id, value, indexes);
  }

  /** Compare-and-swap on `expectedVersion` (Store.updateRecord). */
  update<T = ValueOf<K>>(id: string, value: T, expectedVersion: number, indexes?: RecordIndexes): Promise<Versioned<T>> {
    return this.store.updateRecord<T>(this.kind, id, value, expectedVersion, indexes);
  }

  delete(id: string, expectedVersion?: number): Promise<void> {
    return this.store.deleteRecord(this.kind, id, expectedVersion);
  }

  list<T = ValueOf<K>>(query?: ListQuery): Promise<Page<T>> {
    return this.store.listRecords<T>(this.kind, query);
  }

  count(index?: IndexQuery): Promise<number> {
    return this.store.countRecords(this.kind, index);
  }

  // Ops for an atomic Store.commit that spans kinds (repos(store).commit or store.commit).

  createOp(id: string, value: ValueOf<K>, indexes?: RecordIndexes): WriteOp {
    return indexes ? { op: 'create', kind: this.kind, id, value, indexes } : { op: 'create', kind: this.kind, id, value };
  }

  /** expectedVersion null = create-or-replace without a check (caches only, never fenced state). */
  updateOp(id: string, value: ValueOf<K>, expectedVersion: number | null, indexes?: RecordIndexes): WriteOp {
    return indexes ? { op: 'update', kind: this.kind, id, value, expectedVersion, indexes } : { op: 'update', kind: this.kind, id, value, expectedVersion };
  }

  /** The create when `current` is null, else the CAS update of its version. */
  putOp(id: string, value: ValueOf<K>, current: { version: number } | null, indexes?: RecordIndexes): WriteOp {
    return current ? this.updateOp(id, value, current.version, indexes) : this.createOp(id, value, indexes);
  }

  /** Adds and/or removes holders of a limited record (HoldersOp in src/store/store.ts); the commit fails 'full' at the limit. */
  holdersOp(id: string, change: Omit<HoldersOp, 'op' | 'kind' | 'id'>): WriteOp {
    return { op: 'holders', kind: this.kind, id, ...change };
  }

  deleteOp(id: string, expectedVersion?: number): WriteOp {
    return expectedVersion === undefined ? { op: 'delete', kind: this.kind, id } : { op: 'delete', kind: this.kind, id, expectedVersion };
  }
}
