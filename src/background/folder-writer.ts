// The workspace mirror's file writes, done on a worker thread.
//
// A folder write is mkdir, an append to events.jsonl and a run.json written then renamed: eight
// trips through the libuv pool with the callback API, each one a wake-up of a pool thread that the
// main thread pays for (a CPU profile of the background drain put ~11 % of the main thread's time
// in those calls: `open`, `mkdir`, `rename`). The worker does the same calls synchronously, off
// the main thread; the main thread only serialises the lines and posts one message per folder.
import { Worker } from 'node:worker_threads';

/**
 * The writer thread's name in /proc/<pid>/task/<tid>/comm (at most 15 bytes): its CPU can then be
 * told apart from libuv's pool, V8's helper threads and LevelDB's compaction thread, which Node
 * leaves all named `node`.
 */
export const FOLDER_WRITER_THREAD = 'agentd-mirror';

/**
 * The worker's source (CommonJS, evaluated: no file to find next to a build or a test runner).
 * Each message is a batch of folder writes, done in order; the reply lists `{ id }` or
 * `{ id, error, code }` for each.
 */
const WORKER_SOURCE = `
const THREAD_NAME = ${JSON.stringify(FOLDER_WRITER_THREAD)};
const { parentPort } = require('node:worker_threads');
const fs = require('node:fs');
const path = require('node:path');
// The thread's name (ps -L, top -H, the drain benchmark's CPU by thread): Linux only, best effort.
try { fs.writeFileSync('/proc/thread-self/comm', THREAD_NAME); } catch {}
function writeFolder(m) {
  if (m.makeDir) fs.mkdirSync(m.dir, { recursive: true });
  if (m.events) fs.appendFileSync(path.join(m.dir, 'events.jsonl'), m.events);
  if (m.run !== null) {
    const file = path.join(m.dir, 'run.json');
    fs.writeFileSync(file + '.tmp', m.run);
    fs.renameSync(file + '.tmp', file);
  }
}
parentPort.on('message', (batch) => {
  const replies = [];
  for (const m of batch) {
    try {
      writeFolder(m);
      replies.push({ id: m.id });
    } catch (err) {
      replies.push({ id: m.id, error: String((err && err.message) || err), code: err && err.code });
    }
  }
  parentPort.postMessage(replies);
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
  /** Writes asked for since the last post: they go in one message (one wake-up of the worker). */
  private outgoing: Array<{ id: number; dir: string; events: string; run: string | null; makeDir: boolean }> = [];

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
      this.outgoing.push({ id, dir, events, run, makeDir });
      // Writes asked for in the same turn of the event loop (runs that ended in one store round) share a message.
      if (this.outgoing.length === 1) setImmediate(() => this.post(worker));
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

  private post(worker: Worker): void {
    // A worker that died meanwhile failed these writes (see start); writes after it wait for the
    // next worker's own post.
    if (this.worker !== worker) return;
    const batch = this.outgoing;
    this.outgoing = [];
    worker.postMessage(batch);
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
    worker.on('message', (replies: Reply[]) => {
      for (const m of replies) {
        const w = this.waiting.get(m.id);
        if (!w) continue;
        this.waiting.delete(m.id);
        if (m.error === undefined) w.resolve();
        else w.reject(Object.assign(new Error(m.error), { code: m.code }));
      }
      if (this.waiting.size === 0) {
        worker.unref();
        this.settled();
      }
    });
    const fail = (err: Error) => {
      if (this.worker !== worker) return;
      this.worker = null;
      this.outgoing = [];
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
