// The text-delta frames the chat adapters build around the text (src/protocols/text-delta-frame.ts)
// are byte for byte the JSON of the object they stand for, whatever the text holds.
import { describe, expect, it } from 'vitest';
import { formatFrame } from '../../src/http/sse.js';
import { TextDeltaFrames } from '../../src/protocols/text-delta-frame.js';

const TEXTS = ['hello', '', ' with "quotes" and \\ back\\slash ', 'line\nbreak\r\ttab', 'é ü 漢字 🙂', '\u2028\u2029\u0000\u001f', '}{"type":"x"}'];

describe('TextDeltaFrames', () => {
  it('writes the same frame as the object would, for AG-UI and AI SDK deltas, across message ids', () => {
    const agUi = new TextDeltaFrames((messageId) => ({ type: 'TEXT_MESSAGE_CONTENT', messageId }), 'delta');
    const aiSdk = new TextDeltaFrames((id) => ({ type: 'text-delta', id }), 'delta');
    for (const id of ['msg_1', 'msg_"2"', 'msg_1'])
      for (const text of TEXTS) {
        expect(formatFrame(agUi.frame(id, text))).toEqual(formatFrame({ event: '', data: { type: 'TEXT_MESSAGE_CONTENT', messageId: id, delta: text } }));
        expect(formatFrame(aiSdk.frame(id, text))).toEqual(formatFrame({ event: '', data: { type: 'text-delta', id, delta: text } }));
        expect(JSON.parse(aiSdk.frame(id, text).raw!)).toEqual({ type: 'text-delta', id, delta: text });
      }
  });
});
