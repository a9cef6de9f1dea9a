// Run workspaces (decisions.md §7): a folder per run under background.workspace_root, named by
// the task's namespace_template, holding run.json and events.jsonl plus whatever the agent wrote
// with the workspace tools. Every path that reaches the disk is resolved and checked to stay
// inside its root; ids are validated by schema too, but the check here does not rely on that.
import { createReadStream, type ReadStream } from 'node:fs';
import { appendFile, lstat, mkdir, readdir, realpath, rename, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { HttpDetailError } from '../errors.js';

export interface WorkspaceIds {
  agent_id: string;
  task_id: string;
  run_id: string;
}

export function isInside(root: string, target: string): boolean {
  const rel = path.relative(root, target);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/**
 * The absolute workspace of a run: the template's placeholders filled in, resolved under root.
 * Throws when the result is the root itself or escapes it (a template or id that tries `..`).
 */
export function resolveWorkspacePath(root: string, template: string, ids: WorkspaceIds): string {
  const rendered = template
    .replaceAll('{agent_id}', ids.agent_id)
    .replaceAll('{task_id}', ids.task_id)
    .replaceAll('{run_id}', ids.run_id);
  if (rendered.includes('\0') || path.isAbsolute(rendered)) throw new Error(`workspace template resolves to an invalid path: '${rendered}'`);
  const absRoot = path.resolve(root);
  const full = path.resolve(absRoot, rendered);
  if (full === absRoot || !isInside(absRoot, full)) throw new Error(`workspace '${rendered}' is outside the workspace root`);
  return full;
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
    throw new HttpDetailError(400, `path '${rel}' is outside the run workspace`);
  }
  const target = path.resolve(dir, rel);
  if (!isInside(dir, target) || target === dir) throw new HttpDetailError(400, `path '${rel}' is outside the run workspace`);
  let real: string;
  let rootReal: string;
  try {
    rootReal = await realpath(dir);
    real = await realpath(target);
  } catch {
    throw new HttpDetailError(404, `file '${rel}' does not exist in the run workspace`);
  }
  if (!isInside(rootReal, real)) throw new HttpDetailError(400, `path '${rel}' leads outside the run workspace`);
  const st = await stat(real);
  if (!st.isFile()) throw new HttpDetailError(404, `'${rel}' is not a file of the run workspace`);
  return { stream: createReadStream(real), size: st.size, name: path.basename(real) };
}

/** Appends lines to events.jsonl, creating the folder on first use. */
export async function appendEventLines(dir: string, lines: object[]): Promise<void> {
  if (lines.length === 0) return;
  await mkdir(dir, { recursive: true });
  await appendFile(path.join(dir, 'events.jsonl'), lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
}

/** Rewrites run.json atomically (write then rename), so a reader never sees half a file. */
export async function writeRunJson(dir: string, run: object): Promise<void> {
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, 'run.json');
  const tmp = `${file}.tmp`;
  await writeFile(tmp, `${JSON.stringify(run, null, 2)}\n`);
  await rename(tmp, file);
}
