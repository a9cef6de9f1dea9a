import { isStoreError, type RecordIndexes, type RecordKind, type Store, type Versioned, type WriteOp } from '../store/store.js';

/** Raised to the owner when a write names a version that is no longer current: someone else owns the record now. */
export class FencedError extends Error {
  constructor(readonly kind: RecordKind, readonly id: string) {
    super(`${kind}/${id} was written by another owner; this owner is fenced off`);
    this.name = 'FencedError';
  }
}

interface Pending<T> {
  mutate: (value: T) => T;
  extra: (value: T) => WriteOp[];
  resolve: (v: Versioned<T>) => void;
  reject: (e: unknown) => void;
}

/**
 * One serial writer per actor (xstate examples/mongodb-persisted-state TaskQueue, never
 * fire-and-forget). Every write is a compare-and-swap on the version this writer last wrote, so
 * once another process has taken the record over (orphan sweep), our next write is refused and
 * the writer goes `fenced`: the owner stops its actor instead of clobbering newer state.
 *
 * Writes queued while one is in flight are merged into one store commit: mutations apply in
 * order to the latest value, and only the newest snapshot op of each kind/id is kept. Each
 * caller's promise still resolves only when its mutation is durable.
 */
export class RecordWriter<T> {
  private queue: Pending<T>[] = [];
  private flushing = false;
  private fenced = false;

  constructor(
    private readonly store: Store,
    readonly kind: RecordKind,
    readonly id: string,
    private current: Versioned<T>,
    private readonly indexesOf: (value: T) => RecordIndexes,
    private readonly onFenced: (err: FencedError) => void = () => {},
  ) {}

  get value(): T {
    return this.current.value;
  }

  get version(): number {
    return this.current.version;
  }

  get isFenced(): boolean {
    return this.fenced;
  }

  /** Queues a mutation (and extra ops computed from the new value, e.g. the snapshot). */
  update(mutate: (value: T) => T, extra: (value: T) => WriteOp[] = () => []): Promise<Versioned<T>> {
    if (this.fenced) return Promise.reject(new FencedError(this.kind, this.id));
    return new Promise<Versioned<T>>((resolve, reject) => {
      this.queue.push({ mutate, extra, resolve, reject });
      if (!this.flushing) void this.flush();
    });
  }

  /** Resolves when everything queued so far is durable. */
  async drain(): Promise<void> {
    if (this.queue.length === 0 && !this.flushing) return;
    await this.update((v) => v).catch(() => {});
  }

  private async flush(): Promise<void> {
    this.flushing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue;
        this.queue = [];
        let value = this.current.value;
        const extraByKey = new Map<string, WriteOp>();
        try {
          for (const p of batch) {
            value = p.mutate(value);
            for (const op of p.extra(value)) extraByKey.set(`${op.kind}/${op.id}`, op);
          }
        } catch (err) {
          for (const p of batch) p.reject(err);
          continue;
        }
        const ops: WriteOp[] = [
          { op: 'update', kind: this.kind, id: this.id, value, expectedVersion: this.current.version, indexes: this.indexesOf(value) },
          ...extraByKey.values(),
        ];
        try {
          const [written] = await this.store.commit(ops);
          this.current = written as Versioned<T>;
          for (const p of batch) p.resolve(this.current);
        } catch (err) {
          if (isStoreError(err, 'stale_version')) {
            this.fenced = true;
            const fencedErr = new FencedError(this.kind, this.id);
            for (const p of [...batch, ...this.queue]) p.reject(fencedErr);
            this.queue = [];
            this.onFenced(fencedErr);
            return;
          }
          for (const p of batch) p.reject(err);
        }
      }
    } finally {
      this.flushing = false;
    }
  }
}
