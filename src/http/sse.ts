import type { FastifyReply } from 'fastify';

export interface SseFrame {
  event: string;
  data: unknown;
  id?: string;
}

/**
 * A FIFO of frames for one SSE response, written in order with backpressure. `close()` ends the
 * stream after what is queued. A comment ping every 15 s keeps proxies from closing idle streams
 * (decisions.md §3.2).
 */
export class SseChannel {
  private queue: SseFrame[] = [];
  private wake: (() => void) | null = null;
  private done = false;
  private closedByClient = false;
  private readonly ping: NodeJS.Timeout;
  private readonly closeHandlers: Array<() => void> = [];

  constructor(private readonly reply: FastifyReply, pingMs = 15_000) {
    this.ping = setInterval(() => {
      if (!this.closedByClient) reply.raw.write(': ping\n\n');
    }, pingMs);
    this.ping.unref();
    reply.raw.on('close', () => {
      if (!this.done) this.closedByClient = true;
      this.done = true;
      clearInterval(this.ping);
      this.wake?.();
      for (const h of this.closeHandlers) h();
    });
  }

  /** True when the client went away before we finished. */
  get clientClosed(): boolean {
    return this.closedByClient;
  }

  onClientClose(fn: () => void): void {
    this.closeHandlers.push(fn);
  }

  push(frame: SseFrame): void {
    if (this.done) return;
    this.queue.push(frame);
    this.wake?.();
  }

  close(): void {
    this.done = true;
    clearInterval(this.ping);
    this.wake?.();
  }

  /** Streams every frame through @fastify/sse until closed. */
  async run(): Promise<void> {
    const self = this;
    async function* frames() {
      for (;;) {
        if (self.queue.length > 0) {
          const batch = self.queue;
          self.queue = [];
          // Frames that arrived together leave in one socket write (a run's stored events come
          // in bursts: a whole store round at a time), not one syscall each.
          const raw = self.reply.raw;
          const cork = batch.length > 1 && !raw.writableEnded;
          if (cork) raw.cork();
          try {
            for (const f of batch) yield { event: f.event, id: f.id, data: f.data };
          } finally {
            if (cork) raw.uncork();
          }
          continue;
        }
        if (self.done) return;
        await new Promise<void>((r) => (self.wake = r));
        self.wake = null;
      }
    }
    await this.reply.sse.send(frames());
  }
}
