// The workspace mirror of background runs' lifecycles (run.json, events.jsonl; docs/background.md):
// one mirror step's file calls (mirrorRun), what a crash may have left behind (lastMirroredSequence,
// mirroredRunMatches), and MirrorQueue, the low-priority lane the steps of live runs go through.
// Split from workspace.ts (paths, listing, downloads, removal), which knows nothing of the mirror.
import { appendFile, mkdir, rename, writeFile } from 'node:fs';
import { readFile as readFileP } from 'node:fs/promises';
import { promisify } from 'node:util';
import path from 'node:path';
import { FolderWriter } from './folder-writer.js';

const mkdirP = promisify(mkdir);
const appendFileP = promisify(appendFile);
const writeFileP = promisify(writeFile);
const renameP = promisify(rename);

/**
 * One mirror step of a run: appends `lines` to events.jsonl, then (with `run`) rewrites run.json
 * atomically (write then rename, so a reader never sees half a file). `makeDir` false skips the
 * mkdir when the caller knows the folder exists. One file operation at a time, with the callback
 * API (about half the CPU of fs/promises' FileHandle path, measured): each is a trip through the
 * libuv pool that the store's reads and writes use too, so only the rare workspace repair writes
 * this way; the mirror's steps go to MirrorQueue's writer thread.
 */
export async function mirrorRun(dir: string, lines: object[], run: object | null, makeDir: boolean): Promise<void> {
  if (lines.length === 0 && !run) return;
  if (makeDir) await mkdirP(dir, { recursive: true });
  if (lines.length > 0) await appendFileP(path.join(dir, 'events.jsonl'), eventLines(lines));
  if (run) {
    const file = path.join(dir, 'run.json');
    const tmp = `${file}.tmp`;
    await writeFileP(tmp, runJson(run));
    await renameP(tmp, file);
  }
}

/** events.jsonl's text for `lines`: one JSON object per line. */
const eventLines = (lines: object[]): string => lines.map((l) => `${JSON.stringify(l)}\n`).join('');

/** run.json's text. */
const runJson = (run: object): string => `${JSON.stringify(run, null, 2)}\n`;

/**
 * The highest `sequence` in a run's events.jsonl (0 when the file is missing or empty). Each
 * mirror step appends its lines in one write, so a crash leaves whole lines; a line that does not
 * parse is skipped all the same.
 */
export async function lastMirroredSequence(dir: string): Promise<number> {
  let text: string;
  try {
    text = await readFileP(path.join(dir, 'events.jsonl'), 'utf8');
  } catch {
    return 0;
  }
  let last = 0;
  for (const line of text.split('\n')) {
    if (!line) continue;
    try {
      const seq = (JSON.parse(line) as { sequence?: unknown }).sequence;
      if (typeof seq === 'number' && seq > last) last = seq;
    } catch {
      // not a whole line: ignore
    }
  }
  return last;
}

/**
 * True when the folder's run.json shows `run`'s status, attempt and lease generation: what every
 * lifecycle step changes (false when it is missing or does not parse).
 */
export async function mirroredRunMatches(dir: string, run: { status: string; attempt: number; lease_generation: number }): Promise<boolean> {
  try {
    const mirrored = JSON.parse(await readFileP(path.join(dir, 'run.json'), 'utf8')) as Record<string, unknown>;
    return mirrored.status === run.status && mirrored.attempt === run.attempt && mirrored.lease_generation === run.lease_generation;
  } catch {
    return false;
  }
}

interface MirrorJob {
  lines: object[];
  run: object | null;
  makeDir: boolean;
  /** What write() answers for every step merged into this job (one promise per folder write, not per step). */
  done: Promise<boolean>;
  settle: (ok: boolean) => void;
  /** In the ready queue (urgent, or its delay is over). */
  ready: boolean;
  /** Counted in the backlog (a step of a run past its queueing: see `write`). */
  counted: boolean;
  /**
   * Asked just before an uncounted job is written: false drops it (another instance moved the run
   * on and writes its files; see `write`). Cleared when a counted step joins.
   */
  stillDue: (() => Promise<boolean>) | null;
}

/** A FIFO of folder paths without Array.shift's O(n). */
class DirQueue<T> {
  private items: T[] = [];
  private head = 0;

  get size(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    this.items.push(item);
  }

  peek(): T | undefined {
    return this.items[this.head];
  }

  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head++];
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }
}

/**
 * The workspace mirror as a low-priority lane. Creating a file is the expensive part (an inode:
 * on the benchmark VM's ext4, which has no journal and skips recently freed inodes, from ~20 µs
 * of kernel CPU to ~0.4 ms right after many files were removed nearby, against ~10 µs for an
 * append; docs/background.md), and every run.json rewrite creates one (write a temporary file,
 * then rename). So:
 * - at most `limit` folders are written at a time, by the writer's thread (FolderWriter: the file
 *   calls stay off the main thread and out of the libuv pool the store's reads and writes use);
 * - one write per folder at a time, so lines stay in order and an older run.json never lands
 *   after a newer one;
 * - steps of a folder that pile up are merged into one write (lines concatenated, the newest
 *   run.json), and a step that is not `urgent` waits `delayMs` first so the next steps of a fast
 *   run join it: a run claimed, started and finished within that time costs one rewrite, not
 *   three. Urgent steps (a run that ended or waits for a person) are written at once, with
 *   whatever is pending for the folder.
 */
export class MirrorQueue {
  private readonly pending = new Map<string, MirrorJob>();
  private readonly busy = new Set<string>();
  /** drop() callers waiting for the writes under way in the folders they dropped. */
  private writeWaiters: Array<() => void> = [];
  private readonly ready = new DirQueue<string>();
  private readonly delayed = new DirQueue<{ dir: string; at: number }>();
  /** Folders whose only steps are uncounted ones (a queued run's first lines): they wait `uncountedDelayMs`. */
  private readonly slow = new DirQueue<{ dir: string; at: number }>();
  private timer: NodeJS.Timeout | null = null;
  private timerAt = Infinity;
  /** hurry() was called: no step waits any more. */
  private hurried = false;
  private active = 0;
  /** Pending jobs with `counted` set. */
  private countedJobs = 0;
  /** The worker thread that does the file calls (started at the first write). */
  private readonly writer = new FolderWriter();
  /** close() waits for these: resolved once nothing is pending or being written. */
  private idleWaiters: Array<() => void> = [];
  /** Writes one folder's merged steps (a field, so a test can hold writes and pile up a backlog). */
  writeFolder: typeof mirrorRun = (dir, lines, run, makeDir) => {
    if (lines.length === 0 && !run) return Promise.resolve();
    return this.writer.write(dir, eventLines(lines), run ? runJson(run) : null, makeDir);
  };

  constructor(
    private readonly limit: number,
    private readonly delayMs: number,
    private readonly onError: (dir: string, err: unknown) => void,
    /** After each folder write, and after a drop: the backlog shrank. */
    private readonly onShrunk: () => void = () => undefined,
    /**
     * How long a folder with only uncounted steps waits: a queued run claimed within it gets its
     * folder and files made once, with its claim, instead of made when queued and run.json made
     * again (a new file renamed over the old one) when claimed.
     */
    private readonly uncountedDelayMs = delayMs,
    /**
     * run.json's object for a step's run, made when the folder is written: steps hand their run as
     * they have it, and of the steps merged into one write only the newest is shown.
     */
    private readonly showRun: (run: object) => object = (run) => run,
  ) {}

  /** Every waiting step goes now, and every later one at once (a shutdown must not wait out the delays). */
  hurry(): void {
    this.hurried = true;
    for (const [dir, job] of this.pending) this.makeReady(dir, job);
    this.pump();
  }

  /**
   * Engine close, after hurry(): waits until every step is written, then stops the writer's
   * thread. A step written after this fails (reported through onError; the run's workspace repair
   * catches up at its next load).
   */
  async close(): Promise<void> {
    this.hurry();
    if (this.active > 0 || this.pending.size > 0) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    await this.writer.close();
  }

  /** Folders being written, and folders waiting with a counted step (`write`). */
  get backlog(): number {
    return this.countedJobs + this.active;
  }

  /**
   * Forgets the steps still waiting for `dir` and every folder under it (their runs were deleted):
   * written later, they would make the folder again after its removal. Resolves once the writes
   * under way there are through: the caller removes the folder after that, so no write makes it
   * again (a write's mkdir after the removal did, and the folder outlived its DELETE).
   */
  async drop(dir: string): Promise<void> {
    const prefix = dir.endsWith(path.sep) ? dir : dir + path.sep;
    for (const [d, job] of this.pending) {
      if (d !== dir && !d.startsWith(prefix)) continue;
      this.pending.delete(d);
      if (job.counted) this.countedJobs--;
      job.settle(false);
    }
    this.onShrunk();
    const writing = () => [...this.busy].some((d) => d === dir || d.startsWith(prefix));
    while (writing()) await new Promise<void>((resolve) => this.writeWaiters.push(resolve));
  }

  /** The steps waiting for `dir` are written now (a waiter heard the run settled elsewhere). */
  hurryDir(dir: string): void {
    const job = this.pending.get(dir);
    if (!job) return;
    this.makeReady(dir, job);
    this.pump();
  }

  /** True when nothing is pending or being written for `dir`. */
  idle(dir: string): boolean {
    return !this.pending.has(dir) && !this.busy.has(dir);
  }

  /**
   * Resolves true once written (or dropped by `stillDue`), false when the write failed (reported
   * through onError). `counts` false: the folder counts in the backlog only once a counted step
   * joins it (a queued run's first lines: the claimer, which the backlog holds back, does not make
   * those). `stillDue` (uncounted steps only): asked before the folder is written, while no
   * counted step has joined; false drops the steps. A queued run's step waits `uncountedDelayMs`,
   * long enough on a shared store for another instance to claim the run, run it and write its
   * files: written then, the late step would move run.json back to `queued` and repeat a line.
   */
  write(
    dir: string,
    lines: object[],
    run: object | null,
    makeDir: boolean,
    urgent: boolean,
    counts = true,
    stillDue?: () => Promise<boolean>,
  ): Promise<boolean> {
    if (this.hurried) urgent = true;
    let job = this.pending.get(dir);
    if (!job) {
      let settle!: (ok: boolean) => void;
      const done = new Promise<boolean>((resolve) => (settle = resolve));
      job = { lines: [], run: null, makeDir: false, done, settle, ready: false, counted: false, stillDue: null };
      this.pending.set(dir, job);
      if (!urgent) {
        if (counts) this.delayed.push({ dir, at: Date.now() + this.delayMs });
        else this.slow.push({ dir, at: Date.now() + this.uncountedDelayMs });
        this.armTimer();
      }
    } else if (counts && !job.counted && !job.ready && !urgent) {
      // A counted step joins a folder waiting in the slow lane: it goes after the usual delay.
      this.delayed.push({ dir, at: Date.now() + this.delayMs });
      this.armTimer();
    }
    for (const l of lines) job.lines.push(l);
    if (run) job.run = run;
    if (makeDir) job.makeDir = true;
    if (counts && !job.counted) {
      job.counted = true;
      this.countedJobs++;
    }
    // A counted step is this process's own (it holds the run): the folder is written as is.
    job.stillDue = job.counted ? null : (stillDue ?? job.stillDue);
    if (urgent) this.makeReady(dir, job);
    this.pump();
    return job.done;
  }

  private makeReady(dir: string, job: MirrorJob): void {
    if (job.ready) return;
    job.ready = true;
    if (!this.busy.has(dir)) this.ready.push(dir);
  }

  /**
   * One timer for both lanes, at the earlier head. (An entry may outlive its job: the folder was
   * written meanwhile. Then it finds no job, or makes the folder's next job ready a little early.)
   */
  private armTimer(): void {
    const at = Math.min(this.delayed.peek()?.at ?? Infinity, this.slow.peek()?.at ?? Infinity);
    if (at === Infinity) return;
    if (this.timer) {
      if (this.timerAt <= at) return;
      clearTimeout(this.timer);
    }
    this.timerAt = at;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.timerAt = Infinity;
        const now = Date.now();
        for (const lane of [this.delayed, this.slow]) {
          for (let d = lane.peek(); d && d.at <= now; d = lane.peek()) {
            lane.shift();
            const job = this.pending.get(d.dir);
            if (job) this.makeReady(d.dir, job);
          }
        }
        this.pump();
        this.armTimer();
      },
      Math.max(0, at - Date.now()),
    );
    this.timer.unref();
  }

  private pump(): void {
    while (this.active < this.limit && this.ready.size > 0) {
      const dir = this.ready.shift()!;
      const job = this.pending.get(dir);
      if (!job || !job.ready || this.busy.has(dir)) continue;
      this.pending.delete(dir);
      if (job.counted) this.countedJobs--;
      this.busy.add(dir);
      this.active++;
      const check = job.stillDue;
      const go = () => this.writeFolder(dir, job.lines, job.run && this.showRun(job.run), job.makeDir);
      const write = check
        ? check().then(
            // A counted step that came meanwhile is this process's own (it claimed or cancelled
            // the run during the check): the steps before it are written too, or its lines would
            // leave a gap.
            (due) => (due || this.pending.get(dir)?.counted ? go() : undefined),
            // The check could not tell (a store read failed): written, as before the check existed.
            go,
          )
        : go();
      write
        .then(
          () => job.settle(true),
          (err: unknown) => {
            this.onError(dir, err);
            job.settle(false);
          },
        )
        .finally(() => {
          this.busy.delete(dir);
          this.active--;
          if (this.writeWaiters.length > 0) {
            const waiters = this.writeWaiters;
            this.writeWaiters = [];
            waiters.forEach((w) => w());
          }
          // Steps that arrived meanwhile: ready ones go now, a delayed one when its time comes.
          const next = this.pending.get(dir);
          if (next?.ready) this.ready.push(dir);
          else if (next?.counted) this.delayed.push({ dir, at: Date.now() + this.delayMs });
          else if (next) this.slow.push({ dir, at: Date.now() + this.uncountedDelayMs });
          this.armTimer();
          this.pump();
          this.onShrunk();
          if (this.active === 0 && this.pending.size === 0 && this.idleWaiters.length > 0) {
            const waiters = this.idleWaiters;
            this.idleWaiters = [];
            waiters.forEach((w) => w());
          }
        });
    }
  }
}
