// A minimal Server-Sent Events reader over a fetch body (the WHATWG event-stream format): frames
// are separated by a blank line; `event:`, `id:`, `data:` (repeatable), `retry:`; `:` comments
// (the server's pings) are skipped. Kept dependency-free so the client runs in Node >= 20 and in
// browsers alike.

export interface RawSseFrame {
  event: string;
  id?: string;
  data: string;
  /** A `retry:` hint (ms) given with this frame, if any. */
  retry?: number;
}

/** Upper bound on one frame's text: a server never sends more; a broken one must not grow memory. */
const MAX_FRAME_CHARS = 64 * 1024 * 1024;

export async function* readSseFrames(body: ReadableStream<Uint8Array>): AsyncGenerator<RawSseFrame> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
      if (buf.length > MAX_FRAME_CHARS) throw new Error('SSE frame too large');
      let idx: number;
      while ((idx = buf.indexOf('\n\n')) >= 0) {
        const frame = parseFrame(buf.slice(0, idx));
        buf = buf.slice(idx + 2);
        if (frame) yield frame;
      }
    }
  } finally {
    // Breaking out of the loop (or an error) releases the connection.
    await reader.cancel().catch(() => undefined);
  }
}

function parseFrame(raw: string): RawSseFrame | null {
  let event = 'message';
  let id: string | undefined;
  let retry: number | undefined;
  const data: string[] = [];
  for (const line of raw.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') event = value;
    else if (field === 'id') id = value;
    else if (field === 'data') data.push(value);
    else if (field === 'retry' && /^\d+$/.test(value)) retry = Number(value);
  }
  if (data.length === 0) return retry !== undefined ? { event: 'retry', data: '', retry } : null;
  return { event, id, data: data.join('\n'), ...(retry !== undefined ? { retry } : {}) };
}
