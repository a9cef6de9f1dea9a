// Run workspaces (docs/contract.md §7): a folder per run under background.workspace_root, named by
// the task's namespace_template, holding run.json and events.jsonl plus whatever the agent wrote
// with the workspace tools. Every path that reaches the disk is resolved and checked to stay
// inside its root; ids are validated by schema too, but the check here does not rely on that.
import { createReadStream, type ReadStream } from 'node:fs';
import { mkdir, rename } from 'node:fs';
import { lstat, readdir, realpath, rm, stat } from 'node:fs/promises';
import { promisify } from 'node:util';
import path from 'node:path';
import { HttpDetailError } from '../errors.js';
import { namespaceTemplateProblem } from '../schemas/background.js';
import { bgTenantOf } from '../runtime/tenancy.js';

const mkdirP = promisify(mkdir);
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
  const key = `${root}\u0000${stored}`;
  const known = resolvedWorkspaces.get(key);
  if (known !== undefined) return known;
  const absRoot = path.resolve(root);
  const full = path.isAbsolute(stored) ? path.resolve(stored) : path.resolve(absRoot, stored);
  // eslint-disable-next-line no-restricted-syntax -- a path guard: only a hand-edited row reaches it, and no request names the path
  if (full === absRoot || !isInside(absRoot, full)) throw new Error('the run workspace is outside the workspace root');
  if (resolvedWorkspaces.size >= RESOLVED_MAX) resolvedWorkspaces.clear();
  resolvedWorkspaces.set(key, full);
  return full;
}

/**
 * Folders absoluteWorkspace resolved (and found inside their root), by root and stored path: a
 * background run asks for its folder at each lifecycle step its mirror writes, and resolving and
 * checking it costs two path.resolve calls and a path.relative each time. Emptied when full.
 */
const resolvedWorkspaces = new Map<string, string>();
const RESOLVED_MAX = 4096;

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
    // eslint-disable-next-line no-restricted-syntax -- a path guard on retention's own deletions (workspace folders it computed), never a request's
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
