// A Server-Sent Events parser over decoded text, for model streams read as a Node stream (no web
// streams: the AI SDK's TextDecoderStream → EventSourceParserStream chain cost ~49 KB of heap per
// live model stream, docs/benchmarks.md "streams"). It follows the WHATWG rules the SDK's parser
// (eventsource-parser) follows: lines end in CRLF, LF or CR; `:` starts a comment; `data:` lines
// (one optional space after the colon) join with "\n"; a blank line dispatches the event; an event
// without its closing blank line when the stream ends is dropped. Only `data` matters to a model
// stream: `event`, `id` and `retry` are read and ignored, as the SDK's providers ignore them.

const LF = 10;
const CR = 13;
const SPACE = 32;
/**
 * Most characters one event (its unfinished line plus its data so far) may hold: a server that never
 * ends a line must not grow this process without bound. Far above any real completion chunk.
 */
export const MAX_SSE_EVENT_CHARS = 16 * 1024 * 1024;

export class SseParser {
  /** An unfinished line carried over to the next chunk. */
  private partial = '';
  /** The previous chunk ended in CR: an LF starting the next one belongs to it. */
  private skipLf = false;
  private data = '';
  private dataLines = 0;
  private first = true;

  constructor(private readonly onData: (data: string) => void) {}

  /** Feeds decoded text, split anywhere (also inside a line or between CR and LF). */
  feed(chunk: string): void {
    if (this.first && chunk.length > 0) {
      this.first = false;
      if (chunk.charCodeAt(0) === 0xfeff) chunk = chunk.slice(1);
    }
    let start = 0;
    if (this.skipLf) {
      this.skipLf = false;
      if (chunk.charCodeAt(0) === LF) start = 1;
    }
    const n = chunk.length;
    for (let i = start; i < n; i++) {
      const c = chunk.charCodeAt(i);
      if (c !== LF && c !== CR) continue;
      let line: string;
      if (this.partial.length > 0) {
        line = this.partial + chunk.slice(start, i);
        this.partial = '';
      } else line = chunk.slice(start, i);
      if (c === CR) {
        if (i + 1 < n) {
          if (chunk.charCodeAt(i + 1) === LF) i++;
        } else this.skipLf = true;
      }
      start = i + 1;
      this.line(line);
    }
    if (start < n) this.partial += chunk.slice(start);
    // eslint-disable-next-line no-restricted-syntax -- the model call fails (model/errors.ts makes it a ModelCallError); the run records it, no request waits on it
    if (this.partial.length + this.data.length > MAX_SSE_EVENT_CHARS) throw new Error(`model stream event exceeds ${MAX_SSE_EVENT_CHARS} characters`);
  }

  private line(line: string): void {
    if (line.length === 0) {
      if (this.dataLines > 0) {
        const data = this.data;
        this.data = '';
        this.dataLines = 0;
        this.onData(data);
      }
      return;
    }
    if (line.charCodeAt(0) === 58 /* : */) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    if (field !== 'data') return;
    const value = colon === -1 ? '' : line.slice(line.charCodeAt(colon + 1) === SPACE ? colon + 2 : colon + 1);
    this.data = this.dataLines === 0 ? value : `${this.data}\n${value}`;
    // eslint-disable-next-line no-restricted-syntax -- the model call fails (model/errors.ts makes it a ModelCallError); the run records it, no request waits on it
    if (this.data.length > MAX_SSE_EVENT_CHARS) throw new Error(`model stream event exceeds ${MAX_SSE_EVENT_CHARS} characters`);
    this.dataLines++;
  }
}
