// The ingest path's staging (level-events.ts) builds its keys and cursors by hand to allocate
// little: what it writes must be exactly the layout of level-keys.ts and store.ts.
import { describe, expect, it } from 'vitest';
import { newRoundPostings, stageEvents, stagePostings } from '../../src/store/level-events.js';
import { EVENT_PREFIX, eventIndexPrefix, type BatchOp } from '../../src/store/level-keys.js';
import { encodeCursor } from '../../src/store/store.js';

describe('event staging', () => {
  it('encodes cursors as 16 zero-padded digits', () => {
    for (const n of [0, 1, 9, 10, 12345, 999_999_999_999_999, 1_000_000_000_000_000, 9_007_199_254_740_991]) {
      expect(encodeCursor(n)).toBe(n.toString().padStart(16, '0'));
    }
  });

  it('one posting per indexed value per round, keyed by its last cursor, listing them all when several', () => {
    const batch: BatchOp[] = [];
    const postings = newRoundPostings();
    const ev = (run: string, type: string) => ({
      event_id: `e-${run}-${type}`,
      event_type: type,
      run_id: run,
      session_id: 's\u0000x',
      task_id: null,
      timestamp: 't',
    });
    const a = stageEvents([ev('r1', 'a')], 7, batch, postings);
    const b = stageEvents([ev('r2', 'a'), ev('r1', 'b')], 8, batch, postings);
    expect([...a, ...b].map((s) => s.cursor)).toEqual([encodeCursor(7), encodeCursor(8), encodeCursor(9)]);
    expect(batch.map((op) => op.key)).toEqual([EVENT_PREFIX + encodeCursor(7), EVENT_PREFIX + encodeCursor(8), EVENT_PREFIX + encodeCursor(9)]);
    expect(batch.map((op) => (op.type === 'put' ? op.value : null))).toEqual([a[0], ...b].map((s) => JSON.stringify(s)));
    batch.length = 0;
    stagePostings(postings, batch);
    const c = (n: number) => encodeCursor(n);
    expect(eventIndexPrefix('session_id', 's\u0000x')).toBe('x\u0000session_id\u0000s\u0001\u0001x\u0000'); // the layout on disk
    expect(new Map(batch.map((op) => [op.key, op.type === 'put' ? op.value : null]))).toEqual(
      new Map([
        [eventIndexPrefix('run_id', 'r1') + c(9), c(7) + c(9)],
        [eventIndexPrefix('run_id', 'r2') + c(8), ''],
        [eventIndexPrefix('session_id', 's\u0000x') + c(9), c(7) + c(8) + c(9)],
        [eventIndexPrefix('event_type', 'a') + c(8), c(7) + c(8)],
        [eventIndexPrefix('event_type', 'b') + c(9), ''],
      ]),
    );
  });
});
