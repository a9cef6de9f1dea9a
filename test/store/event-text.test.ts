// A stored event is serialised once: the SSE frame of an event the store returned carries the
// exact text the store wrote (what a replay gives), not a second JSON.stringify of the object.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LevelStore } from '../../src/store/level.js';
import { encodeFrame, formatFrame } from '../../src/http/sse.js';
import type { EventInput } from '../../src/store/store.js';

describe('stored event text', () => {
  it('the frame of a stored event is the store text, equal to serialising the event', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'agentd-event-text-'));
    const store = new LevelStore({ path: dir });
    await store.open();
    try {
      const input = {
        event_id: 'ev_1',
        event_type: 'model_call',
        timestamp: '2026-11-24T00:00:00.000Z',
        trace_id: 't',
        span_id: 's',
        parent_span_id: null,
        run_id: 'run_1',
        session_id: 'sess_1',
        sequence: 1,
        actor: { type: 'model', id: 'm' },
        input: { text: 'héllo "quoted"\n' },
        output: null,
        error: null,
        duration_ms: null,
        metadata: {},
      } as unknown as EventInput;
      const [stored] = await store.appendEvents([input]);
      const frame = { event: stored.event_type, id: stored.cursor, data: stored };
      const expected = formatFrame(frame).text;
      const [replayed] = (await store.readEventsJson({ filters: { run_id: 'run_1' } })).events;
      // A fresh object (not the one the store returned) must be encoded as usual.
      expect(encodeFrame({ ...frame, data: { ...stored } }).chunk.toString()).toBe(expected);
      // The store's object: its text, byte for byte the same.
      expect(encodeFrame(frame).chunk.toString()).toBe(expected);
      // A replay from the store serves the same text.
      expect(expected).toBe(`id: ${stored.cursor}\nevent: model_call\ndata: ${replayed}\n\n`);
      // Once stored, the text is the store's: a later change to the object does not reach the stream.
      (stored as unknown as { metadata: Record<string, unknown> }).metadata = { changed: true };
      const again = encodeFrame({ event: 'model_call', id: stored.cursor, data: stored });
      expect(again.chunk.toString()).toBe(expected);
    } finally {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('stores {...event, cursor} exactly: an own cursor is replaced in place, an own __proto__ key stays a key', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'agentd-event-text-'));
    const store = new LevelStore({ path: dir });
    await store.open();
    try {
      const base = '"event_type":"x","timestamp":"2026-11-24T00:00:00.000Z","run_id":"run_odd"';
      // JSON.parse makes own "__proto__" data properties (an object literal or Object.assign would not).
      const inputs = [
        JSON.parse(`{"event_id":"ev_proto",${base},"__proto__":{"polluted":true},"after":1}`),
        JSON.parse(`{"event_id":"ev_cursor","cursor":"not-ours",${base},"after":2}`),
        { event_id: 'ev_json', event_type: 'x', timestamp: '2026-11-24T00:00:00.000Z', run_id: 'run_odd', when: new Date(0) },
      ] as EventInput[];
      const stored = await store.appendEvents(inputs);
      const replayed = (await store.readEventsJson({ filters: { run_id: 'run_odd' } })).events;
      stored.forEach((s, i) => {
        const expected = JSON.stringify({ ...inputs[i], cursor: s.cursor });
        expect(replayed[i]).toBe(expected);
        expect(JSON.stringify(s)).toBe(expected);
        expect(Object.getPrototypeOf(s)).toBe(Object.prototype);
        expect(encodeFrame({ event: 'x', id: s.cursor, data: s }).chunk.toString()).toBe(`id: ${s.cursor}\nevent: x\ndata: ${expected}\n\n`);
      });
      expect(Object.keys(stored[0])).toEqual(['event_id', 'event_type', 'timestamp', 'run_id', '__proto__', 'after', 'cursor']);
      expect((stored[0] as unknown as { polluted?: boolean }).polluted).toBeUndefined();
      expect(Object.keys(stored[1])).toEqual(['event_id', 'cursor', 'event_type', 'timestamp', 'run_id', 'after']);
      expect(stored[1].cursor).not.toBe('not-ours');
      expect(JSON.parse(replayed[2])).toMatchObject({ when: '1970-01-01T00:00:00.000Z' });
    } finally {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
