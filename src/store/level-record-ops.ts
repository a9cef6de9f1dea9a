// One round's record writes staged against what the disk holds (src/store/level-writer.ts): each
// op checked (CAS on version), its row, index postings and counters as batch operations.
import { cleanIndexes, indexCountKey, indexPrefix, kindCountKey, seqPrefix, type BatchOp, type Row } from './level-keys.js';
import { holdersAsWrite } from './holders-op.js';
import { assertOpApplies, encodeCursor, type Versioned, type WriteOp } from './store.js';

/**
 * Validates `ops` against the round's view; returns the staged changes or throws StoreError.
 * `seq`: the last record seq handed out; the result's `seq` the last after these ops. `keys`, from
 * `from` on: the ops' record keys (recordKey), in order, as the round built them.
 */
export function stageRecordOps(
  ops: WriteOp[],
  keys: readonly string[],
  from: number,
  rows: Map<string, Row | null>,
  counters: Map<string, number>,
  lastSeq: number,
): { batch: BatchOp[]; rows: Map<string, Row | null>; counters: Map<string, number>; results: Array<Versioned<unknown> | null>; seq: number } {
  const sRows = new Map<string, Row | null>();
  const sCounters = new Map<string, number>();
  const batch: BatchOp[] = [];
  const results: Array<Versioned<unknown> | null> = [];
  let seq = lastSeq;
  const bump = (key: string, d: number) => {
    const base = sCounters.get(key) ?? counters.get(key);
    // round() preloads every counter a job can touch; a miss would silently reset a count.
    if (base === undefined) throw new Error(`internal: counter ${JSON.stringify(key)} was not preloaded`);
    sCounters.set(key, base + d);
  };

  for (let i = 0; i < ops.length; i++) {
    const given = ops[i];
    const key = keys[from + i];
    const cur = sRows.has(key) ? sRows.get(key)! : (rows.get(key) ?? null);
    // A holders op is the plain write it amounts to on the record as staged (src/store/holders-op.ts).
    const op = given.op === 'holders' ? holdersAsWrite(given, cur?.value ?? null, cur !== null) : given;
    if (op === null) {
      results.push(null);
      continue;
    }
    assertOpApplies(op, cur);
    let next: Row | null;
    if (op.op === 'create') {
      next = { value: op.value ?? null, version: 1, seq: ++seq, ix: cleanIndexes(op.indexes) };
    } else if (op.op === 'update') {
      next = cur
        ? { value: op.value ?? null, version: cur.version + 1, seq: cur.seq, ix: op.indexes ? cleanIndexes(op.indexes) : cur.ix }
        : { value: op.value ?? null, version: 1, seq: ++seq, ix: cleanIndexes(op.indexes) };
    } else {
      next = null;
    }

    // Index and counter maintenance: drop entries that go away, add the new ones.
    const oldIx = cur?.ix ?? {};
    const newIx = next?.ix ?? {};
    const s = encodeCursor((next ?? cur)!.seq);
    // (`in` loops: no arrays of pairs for each op of each round.)
    for (const name in oldIx) {
      const v = oldIx[name];
      if (newIx[name] === v) continue;
      batch.push({ type: 'del', key: indexPrefix(op.kind, name, v) + s });
      bump(indexCountKey(op.kind, name, v), -1);
    }
    for (const name in newIx) {
      const v = newIx[name];
      if (oldIx[name] === v) continue;
      batch.push({ type: 'put', key: indexPrefix(op.kind, name, v) + s, value: op.id });
      bump(indexCountKey(op.kind, name, v), +1);
    }
    if (next) {
      batch.push({ type: 'put', key, value: JSON.stringify(next), head: { version: next.version, seq: next.seq, ix: next.ix } });
      if (!cur) {
        batch.push({ type: 'put', key: seqPrefix(op.kind) + s, value: op.id });
        bump(kindCountKey(op.kind), +1);
      }
    } else {
      batch.push({ type: 'del', key }, { type: 'del', key: seqPrefix(op.kind) + s });
      bump(kindCountKey(op.kind), -1);
    }
    sRows.set(key, next);
    results.push(next && given.op !== 'holders' ? { id: op.id, version: next.version, seq: next.seq, value: next.value } : null);
  }
  return { batch, rows: sRows, counters: sCounters, results, seq };
}
