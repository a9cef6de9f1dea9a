// The frame order of POST /run (src/runtime/run-stream.ts), without HTTP: events as stored, deltas
// held behind the events the run emitted before them, frames before the stream opened.
import { describe, expect, it } from 'vitest';
import { RunStream, type RunFrame } from '../../src/runtime/run-stream.js';
import type { StoredEvent } from '../../src/store/store.js';

const ev = (sequence: number, type = 'tool_result'): StoredEvent => ({ event_type: type, cursor: `c${sequence}`, sequence }) as unknown as StoredEvent;
const names = (frames: RunFrame[]) => frames.map((f) => (f.event === 'delta' ? `delta:${(f.data as { text: string }).text}` : f.event));

describe('RunStream', () => {
  it('a delta waits for the events emitted before it; frames before open follow the first frame', () => {
    const out: RunFrame[] = [];
    const s = new RunStream();
    s.forRun('run_1');
    s.event(ev(1, 'user_message'));
    s.open((f) => out.push(f), { event: 'session', data: {} });
    // The model's delta came after event 3 (tool_result), which is not published yet.
    s.delta('a', 1, 3);
    s.event(ev(2, 'tool_call'));
    expect(names(out)).toEqual(['session', 'user_message', 'tool_call']);
    s.event(ev(3, 'tool_result'));
    s.delta('b', 2, 3);
    expect(names(out)).toEqual(['session', 'user_message', 'tool_call', 'tool_result', 'delta:a', 'delta:b']);
    expect(out[4].data).toEqual({ run_id: 'run_1', text: 'a', sequence: 1 });
  });

  it('a later delta does not overtake one still held', () => {
    const out: RunFrame[] = [];
    const s = new RunStream();
    s.open((f) => out.push(f));
    s.delta('a', 1, 2);
    s.delta('b', 2, 0);
    expect(out).toEqual([]);
    s.event(ev(2));
    expect(names(out)).toEqual(['tool_result', 'delta:a', 'delta:b']);
  });

  it('releaseAll lets held deltas out when the run settles; a dropped stream keeps none', () => {
    const out: RunFrame[] = [];
    const s = new RunStream();
    s.open((f) => out.push(f));
    s.delta('a', 1, 5);
    s.releaseAll();
    expect(names(out)).toEqual(['delta:a']);
    s.delta('b', 2, 9);
    s.drop();
    s.delta('c', 3, 0);
    s.releaseAll();
    expect(names(out)).toEqual(['delta:a']);
  });
});
