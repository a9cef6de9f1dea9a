// Batch operations of one group-commit round that a later operation of the same round makes moot
// (src/store/level-writer.ts, stage). A round often holds several writes of one record: a run's
// final commit creates its trace and rewrites it with the run's end, and a run created and
// claimed in one round moves its `status` index from `queued` to `running` (a put, then a del,
// of the `queued` entry). The batch is atomic, so only each key's last operation can ever be
// seen; the others are work for LevelDB (its log, its memtable, every compaction that carries
// them down) and for the caches, and nothing else.
import { SEP, type BatchOp } from './level-keys.js';

const ROW = `r${SEP}`;

/**
 * `batch` without the operations a later one on the same key supersedes, in order (the same
 * array, compacted). Only record
 * rows (`r`), index entries (`i`) and creation-order entries (`s`) are looked at: counters are
 * staged once per round already, event and posting keys are new every time.
 *
 * An index or creation-order entry whose first operation in the round is a put and whose last is
 * a del is dropped altogether: such a key is only ever put where it is absent (its key holds the
 * row's creation seq and the index value, and stageRecordOps puts it when the row did not carry
 * that value), so the round's net effect on it is nothing. A record row's del is kept as is (the
 * row may have existed before the round).
 *
 * `records`: the record operations of the round, `distinct` the record keys they touch: with no
 * record written twice no key can repeat, and the batch is returned as it is, without a look.
 */
export function coalesceRound(batch: BatchOp[], records: number, distinct: number): BatchOp[] {
  if (records <= distinct) return batch;
  // Per key: the index of its last operation, times two, plus 1 when its first one is a put (one
  // map, not two: this runs for most rounds of a busy queue).
  const last = new Map<string, number>();
  let repeats = false;
  for (let i = 0; i < batch.length; i++) {
    const k = batch[i].key;
    if (!tracked(k)) continue;
    const seen = last.get(k);
    if (seen !== undefined) repeats = true;
    last.set(k, i * 2 + (seen === undefined ? (batch[i].type === 'put' ? 1 : 0) : seen & 1));
  }
  if (!repeats) return batch;
  // Compacted in place (the round's own array): what is kept moves down over what is dropped.
  let n = 0;
  for (let i = 0; i < batch.length; i++) {
    const op = batch[i];
    const k = op.key;
    if (tracked(k)) {
      const e = last.get(k)!;
      if (e >> 1 !== i) continue;
      if (op.type === 'del' && (e & 1) === 1 && !k.startsWith(ROW)) continue;
    }
    batch[n++] = op;
  }
  batch.length = n;
  return batch;
}

const [R, I, S] = ['r', 'i', 's'].map((c) => c.charCodeAt(0));
/** A row, index or creation-order key (`r\0`, `i\0`, `s\0`: level-keys.ts), told by two characters. */
const tracked = (key: string): boolean => {
  if (key.charCodeAt(1) !== 0) return false;
  const c = key.charCodeAt(0);
  return c === R || c === I || c === S;
};
