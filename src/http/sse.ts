import type { FastifyReply } from 'fastify';
import type { AppDeps } from './deps.js';
import type { StoredEvent } from '../store/store.js';
import { storedEventText } from '../store/event-text.js';
import { reportSwallowed } from '../telemetry/swallowed.js';

export interface SseFrame {
  /** The `event:` line; '' sends none (a stream whose readers take every frame as `message`, as the AI SDK's and AG-UI's do). */
  event: string;
  data: unknown;
  id?: string;
  /** The `data:` line as is instead of `data` as JSON (one line: the AI SDK's closing `[DONE]`). */
  raw?: string;
}

/** How far one stream may fall behind before it is dropped (config `server.stream_max_queued_*`). */
export interface SseLimits {
  /** Frames waiting for the socket; one more drops the stream. */
  maxQueuedEvents: number;
  /** Serialized bytes waiting for the socket (UTF-8); going past it drops the stream. */
  maxQueuedBytes: number;
}

export const DEFAULT_SSE_LIMITS: SseLimits = { maxQueuedEvents: 1000, maxQueuedBytes: 8 * 1024 * 1024 };

/** Where open streams report what they hold (src/telemetry/metrics.ts exports it). */
export interface SseMetrics {
  readonly sseStreams: Set<{ readonly bufferedBytes: number }>;
  sseDropped(): void;
}

export interface SseChannelOptions extends Partial<SseLimits> {
  /** Comment ping interval (docs/contract.md §3.2). Default 15 s. */
  pingMs?: number;
  /** A dropped stream's socket is destroyed if its last bytes are not read within this (config `server.stream_drop_grace_seconds`). Default 5 s. */
  dropGraceMs?: number;
  /** The cursor the client already had (its `Last-Event-ID`): the resume point if nothing was sent. */
  resumeFrom?: string | null;
  /** Bytes the producer holds for this stream outside the channel (a follow buffer), for metrics. */
  heldElsewhere?: () => number;
  /** Extra fields of the StreamOverflow error frame (e.g. run_id, session_id). */
  overflowContext?: Record<string, unknown>;
  metrics?: SseMetrics;
}

/**
 * The reconnection delay a client should use (`retry:`, sent first on every stream): long enough
 * that a restarting service is not hammered, short enough that a reader resumes quickly.
 */
export const SSE_RETRY_MS = 2000;

// One batch is at most this much: frames that arrived together (a run's stored events come a
// whole store round at a time) are written in the same tick, which Node sends as one writev.
const MAX_BATCH_BYTES = 64 * 1024;

/**
 * The wire text of a frame. JSON has no raw line breaks, so `data:` is always one line; ids and
 * event names are ASCII (store cursors and event types).
 */
export function formatFrame(frame: SseFrame): { text: string; bytes: number } {
  const json = frame.raw ?? JSON.stringify(frame.data) ?? 'null';
  const text = `${frame.id ? `id: ${frame.id}\n` : ''}${frame.event ? `event: ${frame.event}\n` : ''}data: ${json}\n\n`;
  return { text, bytes: Buffer.byteLength(text) };
}

// A stored event fans out to every stream that follows its session: its frame is encoded once,
// into a Buffer that all their sockets write from (no per-socket copy of the text, which at a
// few hundred readers was most of the garbage the process made).
const encodedEvents = new WeakMap<object, { id: string; event: string; chunk: Buffer }>();

/** A frame as written: a stored event's (it has an id) from the shared cache, others as text. */
export function encodeFrame(frame: SseFrame): { chunk: Buffer | string; bytes: number } {
  const data = frame.data;
  if (frame.id !== undefined && typeof data === 'object' && data !== null) {
    const hit = encodedEvents.get(data);
    if (hit && hit.id === frame.id && hit.event === frame.event) return { chunk: hit.chunk, bytes: hit.chunk.length };
    // The store's own text of the event when it has it (serialised once, in the store round).
    const json = storedEventText.get(data);
    const chunk = Buffer.from(json !== undefined ? `id: ${frame.id}\nevent: ${frame.event}\ndata: ${json}\n\n` : formatFrame(frame).text);
    encodedEvents.set(data, { id: frame.id, event: frame.event, chunk });
    return { chunk, bytes: chunk.length };
  }
  const { text, bytes } = formatFrame(frame);
  return { chunk: text, bytes };
}

/** Size of a stored event's frame (encoded once: the stream that sends it reuses the bytes). */
export function serializedSize(event: StoredEvent): number {
  return encodeFrame({ event: event.event_type, id: event.cursor, data: event }).bytes;
}

interface Queued {
  chunk: Buffer | string;
  bytes: number;
  id: string | undefined;
}

/**
 * A FIFO of frames for one SSE response, written to the socket in batches with backpressure:
 * a batch leaves in one syscall, and when the socket says it is full the next waits for `drain`
 * (or for the socket to close, or for the stream to be dropped: the wait cannot outlive them).
 *
 * The queue is bounded (events and bytes). A producer that cannot wait (a bus subscriber) uses
 * `push()`: past the bound the stream is dropped. A producer that can wait (a replay reading the
 * store) uses `send()` and awaits the promise it returns while the stream is half full. A dropped
 * stream gets one `error` frame `StreamOverflow` with `last_cursor`, the id of the last frame
 * handed to the socket (every frame before the error frame), ends, and its socket is destroyed if
 * the client does not read that far within `dropGraceMs`. `close()` ends the stream after what
 * is queued. A comment ping every 15 s keeps proxies from closing idle streams (§3.2).
 */
export class SseChannel {
  private queue: Queued[] = [];
  private head = 0;
  private queuedBytes = 0;
  /** No frame is accepted any more (closed, dropped, or the client left). */
  private done = false;
  private closedByClient = false;
  private socketClosed = false;
  private dropped = false;
  private waitingDrain = false;
  private wakeScheduled = false;
  private retrySent = false;
  private lastCursor: string | null;
  private wake: (() => void) | null = null;
  private roomWaiters: Array<() => void> = [];
  private dropTimer: NodeJS.Timeout | null = null;
  private readonly ping: NodeJS.Timeout;
  private readonly clientCloseHandlers: Array<() => void> = [];
  private readonly dropHandlers: Array<() => void> = [];
  private readonly limits: SseLimits;

  constructor(
    private readonly reply: FastifyReply,
    private readonly opts: SseChannelOptions = {},
  ) {
    this.limits = {
      maxQueuedEvents: opts.maxQueuedEvents ?? DEFAULT_SSE_LIMITS.maxQueuedEvents,
      maxQueuedBytes: opts.maxQueuedBytes ?? DEFAULT_SSE_LIMITS.maxQueuedBytes,
    };
    this.lastCursor = opts.resumeFrom ?? null;
    const raw = reply.raw;
    this.ping = setInterval(() => {
      // A ping is for an idle connection: none while bytes wait, none into a full socket.
      if (!this.socketClosed && raw.headersSent && !this.waitingDrain && raw.writableLength === 0 && !raw.writableEnded) raw.write(': ping\n\n');
    }, opts.pingMs ?? 15_000);
    this.ping.unref();
    raw.on('drain', () => {
      this.waitingDrain = false;
      this.wakeNow();
    });
    raw.on('close', () => this.onSocketClose());
    opts.metrics?.sseStreams.add(this);
  }

  /** True when the client went away before we finished. */
  get clientClosed(): boolean {
    return this.closedByClient;
  }

  /** True when the stream was dropped for falling too far behind. */
  get overflowed(): boolean {
    return this.dropped;
  }

  /** Bytes this stream holds: frames not yet handed to the socket, what the socket has not sent, and the producer's backlog. */
  get bufferedBytes(): number {
    if (this.socketClosed) return 0;
    return this.queuedBytes + this.reply.raw.writableLength + (this.opts.heldElsewhere?.() ?? 0);
  }

  /** The client closed the connection before the stream ended. */
  onClientClose(fn: () => void): void {
    this.clientCloseHandlers.push(fn);
  }

  /** The server dropped the stream (the reader fell too far behind): stop producing for it. */
  onDropped(fn: () => void): void {
    this.dropHandlers.push(fn);
  }

  /** Queues a frame; past the bound the stream is dropped instead. False when not queued. */
  push(frame: SseFrame): boolean {
    if (this.done) return false;
    const { chunk, bytes } = encodeFrame(frame);
    const pending = this.queue.length - this.head;
    // Only a reader whose socket is full is behind: a burst queued in one tick (a fast model's
    // deltas, a store round's events) goes out at once to a socket that takes it. One frame alone
    // is always accepted, however large: a stream must be able to carry any event.
    const over = pending >= this.limits.maxQueuedEvents || (pending > 0 && this.queuedBytes + bytes > this.limits.maxQueuedBytes);
    if (over && this.waitingDrain) {
      this.drop();
      return false;
    }
    this.enqueue(chunk, bytes, frame.id);
    return true;
  }

  /**
   * Queues a frame for a producer that can wait: returns a promise to await before the next
   * frame while the stream is half full (it resolves once there is room, or the stream ended).
   */
  send(frame: SseFrame): Promise<void> | undefined {
    if (this.done) return undefined;
    const { chunk, bytes } = encodeFrame(frame);
    this.enqueue(chunk, bytes, frame.id);
    if (this.hasRoom()) return undefined;
    return new Promise<void>((resolve) => this.roomWaiters.push(resolve));
  }

  /** Ends the stream after what is queued. */
  close(): void {
    this.done = true;
    clearInterval(this.ping);
    this.wakeNow();
    this.releaseRoomWaiters();
  }

  /**
   * Drops the stream: what is queued is discarded, an `error` frame `StreamOverflow` follows what
   * the socket already has, and the stream ends. The run or session it followed is not touched.
   */
  drop(message?: string): void {
    if (this.dropped || this.socketClosed) return;
    this.dropped = true;
    this.done = true;
    clearInterval(this.ping);
    this.queue = [];
    this.head = 0;
    this.queuedBytes = 0;
    const { maxQueuedEvents, maxQueuedBytes } = this.limits;
    const error = {
      error: 'StreamOverflow',
      message: message ?? `the reader fell more than ${maxQueuedEvents} events or ${maxQueuedBytes} bytes behind; reconnect with Last-Event-ID: last_cursor`,
      last_cursor: this.lastCursor,
      ...this.opts.overflowContext,
    };
    const { text, bytes } = formatFrame({ event: 'error', data: error });
    this.queue.push({ chunk: text, bytes, id: undefined });
    this.queuedBytes = bytes;
    this.opts.metrics?.sseDropped();
    const raw = this.reply.raw;
    // After the error frame the connection closes; a reader that does not get that far within
    // the grace period loses the connection at once (it resumes from the last id it did get).
    raw.once('finish', () => raw.socket?.end());
    this.dropTimer = setTimeout(() => raw.destroy(), this.opts.dropGraceMs ?? 5_000);
    this.dropTimer.unref();
    this.wakeNow();
    this.releaseRoomWaiters();
    for (const h of this.dropHandlers) safely(h);
  }

  /** Writes every frame until the stream is closed, dropped, or the client leaves. */
  async run(): Promise<void> {
    const raw = this.reply.raw;
    for (;;) {
      if (this.socketClosed || raw.destroyed) return;
      const hasFrames = this.head < this.queue.length;
      // A dropped stream writes its error frame even into a full socket: it is one small frame.
      if (hasFrames && (!this.waitingDrain || this.dropped)) {
        this.writeBatch();
        continue;
      }
      if (!hasFrames && this.done) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = null;
    }
  }

  private enqueue(chunk: Buffer | string, bytes: number, id: string | undefined): void {
    this.queue.push({ chunk, bytes, id });
    this.queuedBytes += bytes;
    // Wake the writer once per turn of the event loop, so that frames queued together (a store
    // round's events, a page of a replay) leave in one write.
    if (!this.wakeScheduled && !this.waitingDrain) {
      this.wakeScheduled = true;
      setImmediate(() => {
        this.wakeScheduled = false;
        this.wakeNow();
      });
    }
  }

  private writeBatch(): void {
    const q = this.queue;
    const start = this.head;
    let i = start;
    let bytes = 0;
    let last = this.lastCursor;
    do {
      bytes += q[i].bytes;
      if (q[i].id !== undefined) last = q[i].id!;
      i++;
    } while (i < q.length && bytes + q[i].bytes <= MAX_BATCH_BYTES);
    (this.reply as FastifyReply & { sse: { sendHeaders(): void } }).sse.sendHeaders();
    // Written in one tick: Node corks the socket for a response write and uncorks on the next
    // tick, so these leave in one writev. Never cork here: a socket corked across an await never
    // emits 'drain' (the freeze this replaced).
    const raw = this.reply.raw;
    let ok = true;
    // Frames encoded as text go out joined into one string, one response write instead of one
    // per frame: a streamed answer is mostly small delta frames, and each write is its own pass
    // through Node's HTTP write path (and, on a chunked response, its own chunk header). A tool
    // run through POST /run at c=32 cost ~7 % less main-thread CPU so (docs/benchmarks.md, protocols).
    // A stored event's shared Buffer is written as is, between them.
    let text = '';
    if (!this.retrySent) {
      // The stream's first bytes: how long a client (EventSource, agentd/client) waits to reconnect.
      this.retrySent = true;
      text = `retry: ${SSE_RETRY_MS}\n\n`;
    }
    for (let k = start; k < i; k++) {
      const chunk = q[k].chunk;
      if (typeof chunk === 'string') text += chunk;
      else {
        if (text) ok = raw.write(text);
        text = '';
        ok = raw.write(chunk);
      }
    }
    if (text) ok = raw.write(text);
    if (i === q.length) {
      this.queue = [];
      this.head = 0;
    } else {
      this.head = i;
      if (i > 1024 && i * 2 > q.length) {
        this.queue = q.slice(i);
        this.head = 0;
      }
    }
    this.queuedBytes -= bytes;
    this.lastCursor = last;
    if (!ok) this.waitingDrain = true;
    if (this.roomWaiters.length > 0 && this.hasRoom()) this.releaseRoomWaiters();
  }

  private hasRoom(): boolean {
    if (this.done) return true;
    const pending = this.queue.length - this.head;
    return !this.waitingDrain && pending * 2 < this.limits.maxQueuedEvents && this.queuedBytes * 2 < this.limits.maxQueuedBytes;
  }

  private wakeNow(): void {
    if (this.roomWaiters.length > 0 && this.hasRoom()) this.releaseRoomWaiters();
    this.wake?.();
  }

  private releaseRoomWaiters(): void {
    const waiters = this.roomWaiters;
    this.roomWaiters = [];
    for (const w of waiters) w();
  }

  private onSocketClose(): void {
    this.socketClosed = true;
    const byClient = !this.done;
    this.closedByClient = byClient;
    this.done = true;
    this.queue = [];
    this.head = 0;
    this.queuedBytes = 0;
    clearInterval(this.ping);
    if (this.dropTimer) clearTimeout(this.dropTimer);
    this.opts.metrics?.sseStreams.delete(this);
    this.wake?.();
    this.releaseRoomWaiters();
    if (byClient) for (const h of this.clientCloseHandlers) safely(h);
  }
}

function safely(fn: () => void): void {
  try {
    fn();
  } catch (err) {
    // A faulty handler must not break the stream's own bookkeeping.
    reportSwallowed('sse.handler', err);
  }
}

/** Channel options from the config (`server.stream_max_queued_*`, `server.stream_drop_grace_seconds`) and the process's metrics. */
export function streamOptions(deps: AppDeps, extra: SseChannelOptions = {}): SseChannelOptions & SseLimits {
  return {
    maxQueuedEvents: deps.config.server.stream_max_queued_events,
    maxQueuedBytes: deps.config.server.stream_max_queued_bytes,
    dropGraceMs: deps.config.server.stream_drop_grace_seconds * 1000,
    metrics: deps.runtime.metrics,
    ...extra,
  };
}
