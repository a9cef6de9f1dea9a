// The single-record writes of the Store interface (createRecord, updateRecord, deleteRecord),
// each one `commit` of one op: written once here for the three adapters, which extend this class
// and implement `commit` (its semantics, CAS and errors included, are the adapter's).
import type { CommitOps, RecordIndexes, RecordKind, Versioned } from './store.js';

export abstract class RecordWrites {
  abstract commit(ops: CommitOps): Promise<Array<Versioned<unknown> | null>>;

  async createRecord<T>(kind: RecordKind, id: string, value: T, indexes?: RecordIndexes): Promise<Versioned<T>> {
    const [r] = await this.commit([{ op: 'create', kind, id, value, indexes }]);
    return r as Versioned<T>;
  }

  async updateRecord<T>(kind: RecordKind, id: string, value: T, expectedVersion: number, indexes?: RecordIndexes): Promise<Versioned<T>> {
    const [r] = await this.commit([{ op: 'update', kind, id, value, expectedVersion, indexes }]);
    return r as Versioned<T>;
  }

  async deleteRecord(kind: RecordKind, id: string, expectedVersion?: number): Promise<void> {
    await this.commit([{ op: 'delete', kind, id, expectedVersion }]);
  }
}
