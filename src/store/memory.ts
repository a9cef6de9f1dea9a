// In-memory Store for unit tests. Same semantics as the LevelDB adapter, error codes included
// (test/store/store.contract.ts runs against both). Values are copied through JSON on the way in
// and out, exactly like a persistent adapter, so a test cannot pass by mutating an object it
// still holds a reference to.
import { holdersAsWrite } from './holders-op.js';
import {
  EVENT_INDEX_FIELDS,
  StoreError,
  assertOpApplies,
  decodeCursor,
  decodeSortedCursor,
  sortedCursor,
  encodeCursor,
  type CommitEvents,
  type CommitOps,
  type EventIndexField,
  type EventInput,
  type EventPage,
  type EventTextPage,
  type EventQuery,
  type ListQuery,
  type Page,
  type RecordIndexes,
  type RecordKind,
  type Store,
  type StoreCapabilities,
  type StoredEvent,
  type Versioned,
} from './store.js';
import type { StoreChanges } from './change-feed.js';
import { RecordWrites } from './record-writes.js';

interface Row {
  id: string;
  /** JSON text: a stored copy nobody can mutate. */
  json: string;
  version: number;
  seq: number;
  ix: Record<string, string>;
}

const jsonCopy = <T>(v: T): T => (v === undefined ? v : (JSON.parse(JSON.stringify(v)) as T));

const clampLimit = (limit: number | undefined, dflt: number): number =>
  limit === undefined || !Number.isFinite(limit) ? dflt : Math.min(1000, Math.max(1, Math.floor(limit)));

const cleanIndexes = (ix: RecordIndexes | undefined): Record<string, string> => {
  const out: Record<string, string> = {};
  if (ix) for (const [k, v] of Object.entries(ix)) if (typeof v === 'string') out[k] = v;
  return out;
};

/**
 * Normalised event filters: field -> accepted values. A string is one value; an array is an OR of
 * its values; an empty array (or undefined) puts no constraint on that field.
 */
const normaliseFilters = (q: EventQuery | undefined): Array<[EventIndexField, Set<string>]> => {
  const out: Array<[EventIndexField, Set<string>]> = [];
  const f = q?.filters ?? {};
  for (const field of EVENT_INDEX_FIELDS) {
    const v = f[field];
    const values = typeof v === 'string' ? [v] : Array.isArray(v) ? v.filter((x) => typeof x === 'string') : [];
    if (values.length > 0) out.push([field, new Set(values)]);
  }
  return out;
};

/** Events whose timestamp cannot be parsed count as expired, so they can never pin retention. */
const isBefore = (timestamp: unknown, cutoffMs: number): boolean => {
  const t = typeof timestamp === 'string' ? Date.parse(timestamp) : NaN;
  return Number.isNaN(t) || t < cutoffMs;
};

export class MemoryStore extends RecordWrites implements Store {
  readonly adapter = 'memory' as const;
  /** None by default; tests of the multi-instance logic attach an in-process feed (LocalChanges). */
  changes?: StoreChanges;
  /** Shared only when a test attached a change feed (several runtimes over this one store). */
  get capabilities(): StoreCapabilities {
    return { sharedByInstances: this.changes !== undefined, atomicCommitEvents: true };
  }
  private state: 'new' | 'open' | 'closed' = 'new';
  private readonly records = new Map<RecordKind, Map<string, Row>>();
  private readonly events: StoredEvent[] = []; // ascending cursor
  private lastSeq = 0;
  private lastCursor = 0;

  async open(): Promise<void> {
    this.state = 'open';
  }

  async close(): Promise<void> {
    this.state = 'closed';
  }

  isOpen(): boolean {
    return this.state === 'open';
  }

  private check(): void {
    if (this.state !== 'open') throw new StoreError('closed', 'store is not open');
  }

  private kindMap(kind: RecordKind): Map<string, Row> {
    let m = this.records.get(kind);
    if (!m) this.records.set(kind, (m = new Map()));
    return m;
  }

  private view<T>(r: Row): Versioned<T> {
    return { id: r.id, version: r.version, seq: r.seq, value: JSON.parse(r.json) as T };
  }

  async getRecord<T>(kind: RecordKind, id: string): Promise<Versioned<T> | null> {
    this.check();
    const r = this.records.get(kind)?.get(id);
    return r ? this.view<T>(r) : null;
  }

  async getRecords<T>(kind: RecordKind, ids: string[]): Promise<Array<Versioned<T> | null>> {
    this.check();
    const m = this.records.get(kind);
    return ids.map((id) => {
      const r = m?.get(id);
      return r ? this.view<T>(r) : null;
    });
  }

  async commit(input: CommitOps): Promise<Array<Versioned<unknown> | null>> {
    return this.commitNow(input, []).records;
  }

  async commitWithEvents(input: CommitOps, events: CommitEvents): Promise<{ records: Array<Versioned<unknown> | null>; events: StoredEvent[] }> {
    return this.commitNow(input, events);
  }

  /** Checks every op, then writes the records and appends the events, or throws having written nothing. */
  private commitNow(input: CommitOps, events: CommitEvents): { records: Array<Versioned<unknown> | null>; events: StoredEvent[] } {
    this.check();
    const ops = typeof input === 'function' ? input() : input;
    // Copied first: an event JSON cannot encode fails the commit before anything is written.
    const copies = (typeof events === 'function' ? events() : events).map((e) => jsonCopy(e));
    // Stage every op against an overlay first; the real maps change only when all checks passed.
    const staged = new Map<string, { kind: RecordKind; id: string; row: Row | null }>();
    const lookup = (kind: RecordKind, id: string): Row | null => {
      const s = staged.get(`${kind}\u0000${id}`);
      return s ? s.row : (this.records.get(kind)?.get(id) ?? null);
    };
    let seq = this.lastSeq;
    const results: Array<Versioned<unknown> | null> = [];
    for (const given of ops) {
      const cur = lookup(given.kind, given.id);
      // A holders op is the plain write it amounts to on the record as staged (src/store/holders-op.ts).
      const op = given.op === 'holders' ? holdersAsWrite(given, cur ? JSON.parse(cur.json) : null, cur !== null) : given;
      if (op === null) {
        results.push(null);
        continue;
      }
      assertOpApplies(op, cur);
      let next: Row | null;
      if (op.op === 'create') {
        next = { id: op.id, json: JSON.stringify(op.value ?? null), version: 1, seq: ++seq, ix: cleanIndexes(op.indexes) };
      } else if (op.op === 'update') {
        next = cur
          ? { ...cur, json: JSON.stringify(op.value ?? null), version: cur.version + 1, ix: op.indexes ? cleanIndexes(op.indexes) : cur.ix }
          : { id: op.id, json: JSON.stringify(op.value ?? null), version: 1, seq: ++seq, ix: cleanIndexes(op.indexes) };
      } else {
        next = null;
      }
      staged.set(`${op.kind}\u0000${op.id}`, { kind: op.kind, id: op.id, row: next });
      results.push(next && given.op !== 'holders' ? this.view(next) : null);
    }
    for (const { kind, id, row } of staged.values()) {
      if (row) this.kindMap(kind).set(id, row);
      else this.records.get(kind)?.delete(id);
    }
    this.lastSeq = seq;
    const stored = copies.map((e) => ({ ...e, cursor: encodeCursor(++this.lastCursor) }) as StoredEvent);
    this.events.push(...stored);
    return { records: results, events: stored.map(jsonCopy) };
  }

  private matching(kind: RecordKind, index: ListQuery['index']): Row[] {
    const rows = [...(this.records.get(kind)?.values() ?? [])].filter((r) => !index || r.ix[index.name] === index.value);
    return rows.sort((a, b) => a.seq - b.seq);
  }

  async listRecords<T>(kind: RecordKind, query: ListQuery = {}): Promise<Page<T>> {
    this.check();
    const limit = clampLimit(query.limit, 100);
    if (query.sortedBy !== undefined) return this.listSorted<T>(kind, query.sortedBy, query, limit);
    const after = query.cursor ? decodeCursor(query.cursor) : null;
    let rows = this.matching(kind, query.index);
    if (query.reverse) rows.reverse();
    if (after !== null) rows = rows.filter((r) => (query.reverse ? r.seq < after : r.seq > after));
    const page = rows.slice(0, limit);
    return {
      items: page.map((r) => this.view<T>(r)),
      next_cursor: rows.length > limit ? encodeCursor(page[page.length - 1].seq) : null,
    };
  }

  /** ListQuery.sortedBy: by the index value, then seq. */
  private listSorted<T>(kind: RecordKind, name: string, query: ListQuery, limit: number): Page<T> {
    const key = (r: Row): [string, number] => [r.ix[name], r.seq];
    const before = (a: [string, number], b: [string, number]) => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);
    let rows = [...(this.records.get(kind)?.values() ?? [])].filter((r) => r.ix[name] !== undefined);
    rows.sort((a, b) => (before(key(a), key(b)) ? -1 : 1));
    if (query.reverse) rows.reverse();
    if (query.cursor) {
      const c = decodeSortedCursor(query.cursor);
      rows = rows.filter((r) => (query.reverse ? before(key(r), [c.value, c.seq]) : before([c.value, c.seq], key(r))));
    }
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    return { items: page.map((r) => this.view<T>(r)), next_cursor: rows.length > limit ? sortedCursor(last.ix[name], last.seq) : null };
  }

  async countRecords(kind: RecordKind, index?: { name: string; value: string }): Promise<number> {
    this.check();
    return this.matching(kind, index).length;
  }

  async appendEvents(events: EventInput[]): Promise<StoredEvent[]> {
    this.check();
    const stored = events.map((e) => ({ ...jsonCopy(e), cursor: encodeCursor(++this.lastCursor) }) as StoredEvent);
    this.events.push(...stored);
    return stored.map(jsonCopy);
  }

  /** Index of the first event with a cursor greater than `cursor`. */
  private firstAfter(cursor: string): number {
    let lo = 0;
    let hi = this.events.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.events[mid].cursor <= cursor) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  async readEvents(query: EventQuery = {}): Promise<EventPage> {
    this.check();
    const limit = clampLimit(query.limit, 200);
    const filters = normaliseFilters(query);
    const start = query.after ? this.firstAfter(encodeCursor(decodeCursor(query.after))) : 0;
    const out: StoredEvent[] = [];
    for (let i = start; i < this.events.length && out.length < limit; i++) {
      const e = this.events[i];
      if (filters.every(([field, values]) => typeof e[field] === 'string' && values.has(e[field] as string))) out.push(jsonCopy(e));
    }
    return { events: out, next_cursor: out.length === limit ? out[out.length - 1].cursor : null };
  }

  async readEventsJson(query: EventQuery = {}): Promise<EventTextPage> {
    const page = await this.readEvents(query);
    return { events: page.events.map((e) => JSON.stringify(e)), next_cursor: page.next_cursor };
  }

  async getEvent(cursor: string): Promise<StoredEvent | null> {
    this.check();
    let c: string;
    try {
      c = encodeCursor(decodeCursor(cursor));
    } catch {
      return null;
    }
    const i = this.firstAfter(c) - 1;
    return i >= 0 && this.events[i].cursor === c ? jsonCopy(this.events[i]) : null;
  }

  async lastEventCursor(): Promise<string | null> {
    this.check();
    return this.events.length ? this.events[this.events.length - 1].cursor : null;
  }

  /** Walks from the oldest event and stops at the first one that is not expired (see LevelStore). */
  async deleteEventsBefore(isoTime: string): Promise<number> {
    this.check();
    const cutoff = Date.parse(isoTime);
    if (Number.isNaN(cutoff)) throw new TypeError(`deleteEventsBefore: bad time '${isoTime}'`);
    let n = 0;
    while (n < this.events.length && isBefore(this.events[n].timestamp, cutoff)) n++;
    this.events.splice(0, n);
    return n;
  }
}
