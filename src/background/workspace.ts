// Run workspaces (docs/contract.md §7): a folder per run under background.workspace_root, named by
// the task's namespace_template, holding run.json and events.jsonl plus whatever the agent wrote
// with the workspace tools. Every path that reaches the disk is resolved and checked to stay
// inside its root; ids are validated by schema too, but the check here does not rely on that.
import { createReadStream, type ReadStream } from 'node:fs';
import { appendFile, mkdir, rename, writeFile } from 'node:fs';
import { rm } from 'node:fs/promises';
import { FolderWriter } from './folder-writer.js';
import { lstat, readFile as readFileP, readdir, realpath, stat } from 'node:fs/promises';
import { promisify } from 'node:util';
import path from 'node:path';
import { HttpDetailError } from '../errors.js';
import { namespaceTemplateProblem } from '../schemas/background.js';
import { bgTenantOf } from '../runtime/tenancy.js';

const mkdirP = promisify(mkdir);
const appendFileP = promisify(appendFile);
const writeFileP = promisify(writeFile);
const renameP = promisify(rename);

export interface WorkspaceIds {
  agent_id: string;
  task_id: string;
  run_id: string;
}

export function isInside(root: string, target: string): boolean {
  const rel = path.relative(root, target);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/** The folder a task's workspaces live in (relative to the workspace root) unless shared namespaces are allowed. */
export function taskNamespace(ids: { agent_id: string; task_id: string }): string {
  return `background/${ids.agent_id}/${ids.task_id}`;
}

function render(template: string, ids: WorkspaceIds): string {
  return template.replaceAll('{agent_id}', ids.agent_id).replaceAll('{task_id}', ids.task_id).replaceAll('{run_id}', ids.run_id);
}

/**
 * Where a run's workspace goes, relative to the workspace root ("/"-separated), or why it cannot.
 * The rendered path is checked again (an id such as ".." must not move it), then resolved and
 * checked to stay strictly inside the root and, unless `allowShared`, inside the task's own
 * namespace `background/<agent_id>/<task_id>` (its own folder included): a task must not read or
 * overwrite another task's or a session's files (sessions live in `sessions/<id>`).
 */
export function workspaceOf(template: string, ids: WorkspaceIds, allowShared: boolean): { rel: string } | { problem: string } {
  const rendered = render(template, ids);
  const formProblem = namespaceTemplateProblem(rendered) ?? namespaceTemplateProblem(taskNamespace(ids));
  if (formProblem) return { problem: `resolves to '${rendered}', which ${formProblem}` };
  if (rendered.split('/')[0] === TRASH_DIR) return { problem: `resolves to '${rendered}', under '${TRASH_DIR}/', which is reserved for removed folders` };
  // Lexical resolution against a fixed fake root: what the path means, whatever the real root is.
  const root = path.posix.resolve('/root');
  const full = path.posix.resolve(root, rendered);
  if (full === root || !full.startsWith(`${root}/`)) return { problem: `resolves to '${rendered}', which is not a folder inside the workspace root` };
  const ns = path.posix.resolve(root, taskNamespace(ids));
  if (!allowShared && full !== ns && !full.startsWith(`${ns}/`)) {
    return {
      problem: `resolves to '${rendered}', outside the task's own namespace '${taskNamespace(ids)}/' (set background.workspace.allow_shared_namespaces to allow it)`,
    };
  }
  const rel = path.posix.relative(root, full);
  // Shared namespaces are for trusted task authors, and a tenant's are not the operator's: its
  // task (its key names the tenant, src/background/tenancy.ts) stays among its own tasks' folders,
  // so it can never reach another tenant's workspaces, a session's folder (sessions/ holds every
  // tenant's), or the root's other files, whatever the config allows.
  const tenant = bgTenantOf(ids.task_id);
  if (allowShared && tenant !== null && !insideTenantFolders(rel, tenant)) {
    return {
      problem: `resolves to '${rendered}', outside tenant '${tenant}''s folders 'background/<agent_id>/${tenant}~<task_id>/' (a tenant's task never shares another's namespace)`,
    };
  }
  return { rel };
}

/**
 * Whether `rel` (resolved, relative to the workspace root) lies in a folder of one of `tenant`'s
 * tasks: `background/<agent>/<tenant>~<task>/...`, where the agent is a shared one or the tenant's
 * own (task and agent keys: src/runtime/tenancy.ts bgKey).
 */
function insideTenantFolders(rel: string, tenant: string): boolean {
  const [top, agent, task] = rel.split('/');
  const own = `${tenant}~`;
  return (
    top === 'background' &&
    agent !== undefined &&
    (!agent.includes('~') || agent.startsWith(own)) &&
    task !== undefined &&
    task.startsWith(own) &&
    task.length > own.length
  );
}

/** A template's problem for a task (checked at creation with a placeholder run id), or null. */
export function checkNamespaceTemplate(template: string, ids: { agent_id: string; task_id: string }, allowShared: boolean): string | null {
  const r = workspaceOf(template, { ...ids, run_id: 'bgrun_check' }, allowShared);
  return 'problem' in r ? r.problem : null;
}

/**
 * The absolute folder of a workspace path as runs store it (relative to the root). Rows written
 * before paths were stored relative hold an absolute path: accepted when it is inside the root.
 * Throws when the result would leave the root (a hand-edited row).
 */
export function absoluteWorkspace(root: string, stored: string): string {
  const absRoot = path.resolve(root);
  const full = path.isAbsolute(stored) ? path.resolve(stored) : path.resolve(absRoot, stored);
  if (full === absRoot || !isInside(absRoot, full)) throw new Error('the run workspace is outside the workspace root');
  return full;
}

/** A workspace path as answers show it: relative to the workspace root, "/"-separated. */
export function relativeWorkspace(root: string, stored: string): string {
  if (!path.isAbsolute(stored)) return stored;
  return path.relative(path.resolve(root), stored).split(path.sep).join('/');
}

export interface WorkspaceEntry {
  path: string;
  name: string;
  size: number;
  modified_at: string;
  is_dir: boolean;
}

const MAX_ENTRIES = 5000;

/** Every file and folder of the workspace, depth first, sorted by name; links are listed, never followed. */
export async function listWorkspace(dir: string): Promise<WorkspaceEntry[]> {
  const out: WorkspaceEntry[] = [];
  try {
    await stat(dir);
  } catch {
    return out;
  }
  const walk = async (current: string): Promise<void> => {
    const names = (await readdir(current)).sort();
    for (const name of names) {
      if (out.length >= MAX_ENTRIES) return;
      const full = path.join(current, name);
      const st = await lstat(full);
      out.push({
        path: path.relative(dir, full).split(path.sep).join('/'),
        name,
        size: st.isDirectory() ? 0 : st.size,
        modified_at: st.mtime.toISOString(),
        is_dir: st.isDirectory(),
      });
      if (st.isDirectory()) await walk(full);
    }
  };
  await walk(dir);
  return out;
}

/**
 * Opens a workspace file for download. 400 `{detail}` for a path outside the workspace (`..`,
 * absolute, or a symbolic link that leads out), 404 when it does not exist or is a folder.
 */
export async function openWorkspaceFile(dir: string, rel: string): Promise<{ stream: ReadStream; size: number; name: string }> {
  if (rel.includes('\0') || path.isAbsolute(rel) || /^[a-zA-Z]:[\\/]/.test(rel) || rel.split(/[\\/]/).includes('..')) {
    throw new HttpDetailError(400, `path '${rel}' is outside the run workspace`, 'AGT_ERR_WORKSPACE_PATH_OUTSIDE');
  }
  const target = path.resolve(dir, rel);
  if (!isInside(dir, target) || target === dir) throw new HttpDetailError(400, `path '${rel}' is outside the run workspace`, 'AGT_ERR_WORKSPACE_PATH_OUTSIDE');
  let real: string;
  let rootReal: string;
  try {
    rootReal = await realpath(dir);
    real = await realpath(target);
  } catch {
    throw new HttpDetailError(404, `file '${rel}' does not exist in the run workspace`, 'AGT_ERR_WORKSPACE_FILE_NOT_FOUND');
  }
  if (!isInside(rootReal, real)) throw new HttpDetailError(400, `path '${rel}' leads outside the run workspace`, 'AGT_ERR_WORKSPACE_PATH_OUTSIDE');
  const st = await stat(real);
  if (!st.isFile()) throw new HttpDetailError(404, `'${rel}' is not a file of the run workspace`, 'AGT_ERR_WORKSPACE_FILE_NOT_FOUND');
  return { stream: createReadStream(real), size: st.size, name: path.basename(real) };
}

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
  done: Array<(ok: boolean) => void>;
  /** In the ready queue (urgent, or its delay is over). */
  ready: boolean;
  /** Counted in the backlog (a step of a run past its queueing: see `write`). */
  counted: boolean;
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
 * The workspace mirror as a low-priority lane. Creating a file is the expensive part (about
 * 0.7 ms of kernel CPU per file on the benchmark VM's ext4, against ~10 µs for an append), and
 * every run.json rewrite creates one (write a temporary file, then rename). So:
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
      job.done.forEach((done) => done(false));
    }
    this.onShrunk();
    const writing = () => [...this.busy].some((d) => d === dir || d.startsWith(prefix));
    while (writing()) await new Promise<void>((resolve) => this.writeWaiters.push(resolve));
  }

  /** True when nothing is pending or being written for `dir`. */
  idle(dir: string): boolean {
    return !this.pending.has(dir) && !this.busy.has(dir);
  }

  /**
   * Resolves true once written, false when the write failed (reported through onError). `counts`
   * false: the folder counts in the backlog only once a counted step joins it (a queued run's
   * first lines: the claimer, which the backlog holds back, does not make those).
   */
  write(dir: string, lines: object[], run: object | null, makeDir: boolean, urgent: boolean, counts = true): Promise<boolean> {
    if (this.hurried) urgent = true;
    let job = this.pending.get(dir);
    if (!job) {
      job = { lines: [], run: null, makeDir: false, done: [], ready: false, counted: false };
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
    const done = new Promise<boolean>((resolve) => job.done.push(resolve));
    if (urgent) this.makeReady(dir, job);
    this.pump();
    return done;
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
      this.writeFolder(dir, job.lines, job.run, job.makeDir)
        .then(
          () => job.done.forEach((d) => d(true)),
          (err: unknown) => {
            this.onError(dir, err);
            job.done.forEach((d) => d(false));
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

/** Folder under the workspace root where removed trees wait for their `rm -r` (reserved: no template may name it). */
export const TRASH_DIR = '.trash';

/**
 * Removes workspace folder trees without holding up the caller: the tree is renamed into
 * `<root>/.trash/` (one file operation, so it is gone from its place at once), then removed with
 * one `rm -r` per tree in the background, one at a time. An `rm -r` is many file operations, each
 * a trip through the libuv pool that the store's reads and writes share; under load it took
 * ~0.5 s per task folder, inline in DELETE /background/tasks. What a crash leaves in the trash is
 * removed at the next start (sweepTrash).
 */
export class FolderRemover {
  private queue: string[] = [];
  private running: Promise<void> | null = null;
  private seq = 0;

  constructor(
    private readonly root: string,
    private readonly onError: (err: unknown) => void,
  ) {}

  private get trash(): string {
    return path.join(path.resolve(this.root), TRASH_DIR);
  }

  /** Moves `target` (strictly inside the root, never the root) out of the way; missing is fine. */
  async remove(target: string): Promise<void> {
    const absRoot = path.resolve(this.root);
    const full = path.resolve(target);
    if (full === absRoot || !isInside(absRoot, full) || isInside(this.trash, full)) throw new Error('refusing to remove a folder outside the workspace root');
    const dest = path.join(this.trash, `${process.pid}-${Date.now()}-${++this.seq}`);
    try {
      await renameP(full, dest);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') {
        // Either nothing to remove, or the trash folder does not exist yet.
        try {
          await stat(full);
        } catch {
          return;
        }
        await mkdirP(this.trash, { recursive: true });
        try {
          await renameP(full, dest);
        } catch {
          await rm(full, { recursive: true, force: true, maxRetries: 2 });
          return;
        }
      } else {
        // Another file system or a busy folder: remove it in place.
        await rm(full, { recursive: true, force: true, maxRetries: 2 });
        return;
      }
    }
    this.queue.push(dest);
    this.pump();
  }

  /** Removes whatever an earlier process left in the trash. */
  sweepTrash(): void {
    void readdir(this.trash).then(
      (names) => {
        for (const n of names) this.queue.push(path.join(this.trash, n));
        this.pump();
      },
      () => undefined,
    );
  }

  /** Resolves once every queued tree is removed. */
  async drain(): Promise<void> {
    while (this.running) await this.running;
  }

  private pump(): void {
    if (this.running) return;
    this.running = (async () => {
      for (let dir = this.queue.shift(); dir; dir = this.queue.shift()) {
        await rm(dir, { recursive: true, force: true, maxRetries: 2 }).catch(this.onError);
      }
    })().finally(() => {
      this.running = null;
    });
  }
}
