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
});
