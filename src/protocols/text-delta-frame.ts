// A chat protocol's commonest frame is one text delta per model chunk (AG-UI TEXT_MESSAGE_CONTENT,
// the AI SDK's text-delta): its JSON is built around the text, the fixed part (type, message id)
// serialised once per message, instead of serialising a fresh object per chunk. What one frame
// costs the server is a row of the protocols benchmark (docs/benchmarks.md).
import type { SseFrame } from '../http/sse.js';

export class TextDeltaFrames {
  private id: string | null = null;
  private prefix = '';

  /** `fixed(id)`: the frame's other fields, in wire order (a non-empty object); `field`: the text's, last. */
  constructor(
    private readonly fixed: (id: string) => Record<string, string>,
    private readonly field: string,
  ) {}

  /** The frame of `text` in message `id`: the same JSON as `{...fixed(id), [field]: text}`. */
  frame(id: string, text: string): SseFrame {
    if (id !== this.id) {
      this.id = id;
      this.prefix = `${JSON.stringify(this.fixed(id)).slice(0, -1)},${JSON.stringify(this.field)}:`;
    }
    return { event: '', data: null, raw: `${this.prefix}${JSON.stringify(text)}}` };
  }
}
