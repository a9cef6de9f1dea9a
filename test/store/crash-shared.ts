// Deterministic content for the crash test, shared by the child writer and the parent checker.
import type { EventInput } from '../../src/store/store.js';

export const WRITES = 1000;
export const WINDOW = 64;

export const crashValue = (i: number) => ({ i, pad: 'x'.repeat(i % 50), nested: { even: i % 2 === 0, list: [i, i + 1] } });

export const crashEvents = (i: number): EventInput[] =>
  Array.from({ length: i % 4 === 2 ? 3 : 1 }, (_, j) => ({
    event_id: `ev_${i}_${j}`,
    event_type: j === 0 ? 'crash.a' : 'crash.b',
    timestamp: new Date(Date.UTC(2026, 0, 1) + i * 1000 + j).toISOString(),
    run_id: `run_${i % 13}`,
    session_id: 'sess',
    payload: { i, j },
  }));
