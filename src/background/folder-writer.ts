// The workspace mirror's file writes, done on a worker thread.
//
// A folder write is mkdir, an append to events.jsonl and a run.json written then renamed: eight
// trips through the libuv pool with the callback API, each one a wake-up of a pool thread that the
// main thread pays for (a CPU profile of the background drain put ~11 % of the main thread's time
// in those calls: `open`, `mkdir`, `rename`). The worker does the same calls synchronously, off
// the main thread; the main thread only serialises the lines and posts one message per folder.
import { Worker } from 'node:worker_threads';

/**
 * The worker's source (CommonJS, evaluated: no file to find next to a build or a test runner).
 * Writes one folder per message, in the order received; replies `{ id }` or `{ id, error, code }`.
 */
const WORKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
const fs = require('node:fs');
const path = require('node:path');
parentPort.on('message', (m) => {
  try {
    if (m.makeDir) fs.mkdirSync(m.dir, { recursive: true });
    if (m.events) fs.appendFileSync(path.join(m.dir, 'events.jsonl'), m.events);
    if (m.run !== null) {
      const file = path.join(m.dir, 'run.json');
      fs.writeFileSync(file + '.tmp', m.run);
      fs.renameSync(file + '.tmp', file);
    }
    parentPort.postMessage({ id: m.id });
  } catch (err) {
    parentPort.postMessage({ id: m.id, error: String((err && err.message) || err), code: err && err.code });
  }
});
`;

interface Reply {
  id: number;
  error?: string;
  code?: string;
}

/**
 * Writes run folders on one worker thread, started at the first write. While writes are under way
 * the worker keeps the process alive; idle, it does not. A worker that dies fails the writes it
 * held (the mirror reports them, as any write error), and the next write starts a new one.
 */
export class FolderWriter {
  private worker: Worker | null = null;
  private readonly waiting = new Map<number, { resolve: () => void; reject: (err: Error) => void }>();
  private nextId = 0;
  private closed = false;
  /** close() waiting for the writes under way. */
  private idle: Array<() => void> = [];

  /**
   * Appends `events` (JSON lines, '' for none) to `dir`/events.jsonl, then, unless `run` is null,
   * replaces `dir`/run.json with it atomically (write a temporary file, rename it over).
   */
  write(dir: string, events: string, run: string | null, makeDir: boolean): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the workspace writer is closed'));
    const worker = this.worker ?? this.start();
    const id = ++this.nextId;
    return new Promise<void>((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      if (this.waiting.size === 1) worker.ref();
      worker.postMessage({ id, dir, events, run, makeDir });
    });
  }

  /** Stops the worker once the writes under way are through; later writes are refused. */
  async close(): Promise<void> {
    this.closed = true;
    const worker = this.worker;
    if (!worker) return;
    if (this.waiting.size > 0) await new Promise<void>((resolve) => this.idle.push(resolve));
    this.worker = null;
    await worker.terminate();
  }

  /** No write is under way: close() may go on. */
  private settled(): void {
    const idle = this.idle;
    this.idle = [];
    for (const resolve of idle) resolve();
  }

  private start(): Worker {
    const worker = new Worker(WORKER_SOURCE, { eval: true });
    worker.unref();
    worker.on('message', (m: Reply) => {
      const w = this.waiting.get(m.id);
      if (!w) return;
      this.waiting.delete(m.id);
      if (m.error === undefined) w.resolve();
      else w.reject(Object.assign(new Error(m.error), { code: m.code }));
      if (this.waiting.size === 0) {
        worker.unref();
        this.settled();
      }
    });
    const fail = (err: Error) => {
      if (this.worker !== worker) return;
      this.worker = null;
      const held = [...this.waiting.values()];
      this.waiting.clear();
      for (const w of held) w.reject(err);
      this.settled();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`the workspace writer stopped (exit code ${code})`)));
    this.worker = worker;
    return worker;
  }
}
