// SseChannel writes the frames queued in one turn of the event loop as few socket writes: text
// frames joined into one chunk, a stored event's shared Buffer on its own (src/http/sse.ts
// writeBatch). A streamed answer is mostly small delta frames, and every chunk handed to the
// socket costs its own share of Node's write path (the protocols benchmark's per-frame rows,
// docs/benchmarks.md). A fake reply records what the channel writes.
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { FastifyReply } from 'fastify';
import { SseChannel, encodeFrame, formatFrame, type SseFrame } from '../../src/http/sse.js';

function fakeReply(): { reply: FastifyReply; writes: Array<string | Buffer> } {
  const writes: Array<string | Buffer> = [];
  const raw = Object.assign(new EventEmitter(), {
    headersSent: true,
    writableLength: 0,
    writableEnded: false,
    destroyed: false,
    write(chunk: string | Buffer) {
      writes.push(chunk);
      return true;
    },
  });
  const reply = { raw, sse: { sendHeaders() {} } } as unknown as FastifyReply;
  return { reply, writes };
}

const text = (writes: Array<string | Buffer>) => writes.map((w) => w.toString()).join('');

describe('SseChannel batches', () => {
  it('frames queued together leave in one write, a shared stored-event Buffer between text chunks', async () => {
    const { reply, writes } = fakeReply();
    const ch = new SseChannel(reply, { pingMs: 60_000 });
    const deltas: SseFrame[] = Array.from({ length: 50 }, (_, i) => ({ event: '', data: { type: 'text-delta', id: 't', delta: `w${i} ` } }));
    const stored: SseFrame = { event: 'tool_result', id: 'c-1', data: { event_type: 'tool_result', output: { sum: 5 } } };
    for (const f of deltas.slice(0, 25)) ch.push(f);
    ch.push(stored);
    for (const f of deltas.slice(25)) ch.push(f);
    ch.close();
    await ch.run();
    // retry + 25 deltas, the stored event's Buffer, 25 deltas: three writes for 51 frames.
    expect(writes).toHaveLength(3);
    expect(Buffer.isBuffer(writes[1])).toBe(true);
    expect(writes[1]).toBe(encodeFrame(stored).chunk);
    const expected = [
      'retry: 2000\n\n',
      ...deltas.slice(0, 25).map((f) => formatFrame(f).text),
      formatFrame(stored).text,
      ...deltas.slice(25).map((f) => formatFrame(f).text),
    ];
    expect(text(writes)).toBe(expected.join(''));
  });
});
