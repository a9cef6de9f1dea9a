/* eslint-disable no-restricted-syntax -- a built-in tool's failure is the tool result the model reads (run-tools.ts), never an HTTP answer */
import { constants as fsConstants } from 'node:fs';
import { lstat, mkdir, open, readdir, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Clock } from '../../clock.js';
import type { RegisteredTool, ToolContext } from './types.js';

// ---------------------------------------------------------------------------------------------
// clock

function localTime(ms: number, timeZone: string): string {
  let fmt: Intl.DateTimeFormat;
  try {
    fmt = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
      timeZoneName: 'longOffset',
    });
  } catch {
    throw new Error(`unknown timezone '${timeZone}': use an IANA name such as 'Europe/Paris' or 'UTC'`);
  }
  const parts: Record<string, string> = {};
  for (const p of fmt.formatToParts(new Date(ms))) parts[p.type] = p.value;
  // longOffset reads "GMT+09:00", or plain "GMT" at offset zero.
  const offset = (parts.timeZoneName ?? 'GMT').replace(/^GMT/, '') || '+00:00';
  return `${parts.year}-${parts.month}-${parts.day}T${parts.hour}:${parts.minute}:${parts.second}${offset}`;
}

export function clockTool(clock: Clock): RegisteredTool {
  return {
    name: 'clock',
    description: 'Current date and time. Give an IANA `timezone` (for example "Europe/Paris") for the local time there; the default is UTC.',
    input_schema: { type: 'object', properties: { timezone: { type: 'string', description: 'IANA time zone name, default "UTC"' } } },
    idempotent: true,
    source: 'builtin',
    async execute(args) {
      const timezone = typeof args.timezone === 'string' && args.timezone !== '' ? args.timezone : 'UTC';
      const ms = clock.now();
      return { now: new Date(ms).toISOString(), timezone, local: localTime(ms, timezone) };
    },
  };
}

// ---------------------------------------------------------------------------------------------
// workspace

/** Reads past this size return the first MAX_READ_BYTES only: the observation is bounded anyway. */
const MAX_READ_BYTES = 1024 * 1024;
const MAX_LIST_ENTRIES = 1000;

function isInside(root: string, target: string): boolean {
  const rel = path.relative(root, target);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

function requireWorkspace(ctx: ToolContext): string {
  if (ctx.workspace_path === null) throw new Error('no workspace for this run');
  return ctx.workspace_path;
}

async function exists(p: string): Promise<boolean> {
  try {
    await lstat(p);
    return true;
  } catch {
    return false;
  }
}

/**
 * Resolves a model-given path inside the workspace, refusing absolute paths, `..` escapes and
 * symlinks that lead outside. The deepest existing ancestor (or the target itself when it exists)
 * is resolved with realpath, so a link anywhere on the way is followed before the check.
 */
async function confine(root: string, rel: unknown, what: string): Promise<{ rootReal: string; target: string; shown: string }> {
  if (typeof rel !== 'string') throw new Error(`${what} must be a string`);
  if (rel.includes('\0')) throw new Error(`invalid path '${rel}'`);
  if (path.isAbsolute(rel) || /^[a-zA-Z]:[\\/]/.test(rel)) {
    throw new Error(`absolute paths are not allowed ('${rel}'); give a path relative to the workspace`);
  }
  const rootReal = await realpath(root);
  const target = path.resolve(rootReal, rel);
  if (!isInside(rootReal, target)) throw new Error(`path '${rel}' is outside the workspace`);
  let probe = target;
  while (!(await exists(probe))) probe = path.dirname(probe);
  let real: string;
  try {
    real = await realpath(probe);
  } catch {
    // A dangling symlink: realpath fails, so judge its parent and the link text together.
    throw new Error(`path '${rel}' is a broken link`);
  }
  if (!isInside(rootReal, real)) throw new Error(`path '${rel}' leads outside the workspace (symbolic link)`);
  const shown = path.relative(rootReal, target).split(path.sep).join('/') || '.';
  return { rootReal, target: real === probe ? target : path.join(real, path.relative(probe, target)), shown };
}

async function ensureRoot(root: string): Promise<void> {
  await mkdir(root, { recursive: true });
}

interface FileEntry {
  path: string;
  name: string;
  size: number;
  modified_at: string;
  is_dir: boolean;
}

async function listDir(rootReal: string, dir: string, recursive: boolean, out: FileEntry[]): Promise<boolean> {
  const names = (await readdir(dir)).sort();
  for (const name of names) {
    if (out.length >= MAX_LIST_ENTRIES) return true;
    const full = path.join(dir, name);
    // lstat: a link is listed as itself and never followed, so listing cannot leak what lies outside.
    const st = await lstat(full);
    const rel = path.relative(rootReal, full).split(path.sep).join('/');
    out.push({ path: rel, name, size: st.isDirectory() ? 0 : st.size, modified_at: st.mtime.toISOString(), is_dir: st.isDirectory() });
    if (recursive && st.isDirectory() && (await listDir(rootReal, full, true, out))) return true;
  }
  return false;
}

export function workspaceTools(): RegisteredTool[] {
  const read: RegisteredTool = {
    name: 'workspace_read',
    description: 'Read a text file from the run workspace. `path` is relative to the workspace root.',
    input_schema: {
      type: 'object',
      properties: { path: { type: 'string', description: 'file path relative to the workspace' } },
      required: ['path'],
      additionalProperties: false,
    },
    idempotent: true,
    source: 'builtin',
    async execute(args, ctx) {
      const root = requireWorkspace(ctx);
      if (!(await exists(root))) throw new Error(`no such file '${String(args.path)}' in the workspace`);
      const { target, shown } = await confine(root, args.path, 'path');
      let st;
      try {
        st = await stat(target);
      } catch {
        throw new Error(`no such file '${shown}' in the workspace`);
      }
      if (st.isDirectory()) throw new Error(`'${shown}' is a directory; use workspace_list`);
      const fh = await open(target, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
      try {
        const size = Math.min(st.size, MAX_READ_BYTES);
        const buf = Buffer.alloc(size);
        const { bytesRead } = await fh.read(buf, 0, size, 0);
        const text = buf.subarray(0, bytesRead).toString('utf8');
        return st.size > MAX_READ_BYTES ? `${text}\n[... file is ${st.size} bytes; only the first ${MAX_READ_BYTES} were read]` : text;
      } finally {
        await fh.close();
      }
    },
  };
  const write: RegisteredTool = {
    name: 'workspace_write',
    description:
      'Write a text file in the run workspace, replacing it if it exists; directories are created as needed. `path` is relative to the workspace root.',
    input_schema: {
      type: 'object',
      properties: {
        path: { type: 'string', description: 'file path relative to the workspace' },
        content: { type: 'string', description: 'the whole new content of the file' },
      },
      required: ['path', 'content'],
      additionalProperties: false,
    },
    // Writing the same content again leaves the same file, so a repeat after a crash is harmless.
    idempotent: true,
    source: 'builtin',
    async execute(args, ctx) {
      const root = requireWorkspace(ctx);
      await ensureRoot(root);
      const { rootReal, target, shown } = await confine(root, args.path, 'path');
      if (target === rootReal) throw new Error('path must name a file, not the workspace root');
      await mkdir(path.dirname(target), { recursive: true });
      if ((await exists(target)) && (await stat(target)).isDirectory()) throw new Error(`'${shown}' is a directory`);
      const content = typeof args.content === 'string' ? args.content : String(args.content);
      // O_NOFOLLOW: a link planted between the check and the write still cannot redirect it.
      const fh = await open(target, fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_TRUNC | fsConstants.O_NOFOLLOW, 0o644);
      try {
        await fh.writeFile(content, 'utf8');
      } finally {
        await fh.close();
      }
      return { path: shown, bytes: Buffer.byteLength(content, 'utf8') };
    },
  };
  const list: RegisteredTool = {
    name: 'workspace_list',
    description: 'List files in the run workspace. `path` (default the root) is a directory relative to the workspace; `recursive` lists subdirectories too.',
    input_schema: {
      type: 'object',
      properties: {
        path: { type: 'string', description: 'directory relative to the workspace, default "."' },
        recursive: { type: 'boolean', description: 'include subdirectories, default false' },
      },
      additionalProperties: false,
    },
    idempotent: true,
    source: 'builtin',
    async execute(args, ctx) {
      const root = requireWorkspace(ctx);
      const rel = typeof args.path === 'string' && args.path !== '' ? args.path : '.';
      if (!(await exists(root))) return { path: rel, entries: [], truncated: false };
      const { rootReal, target, shown } = await confine(root, rel, 'path');
      let st;
      try {
        st = await stat(target);
      } catch {
        throw new Error(`no such directory '${shown}' in the workspace`);
      }
      if (!st.isDirectory()) throw new Error(`'${shown}' is a file; use workspace_read`);
      const entries: FileEntry[] = [];
      const truncated = await listDir(rootReal, target, args.recursive === true, entries);
      return { path: shown, entries, truncated };
    },
  };
  return [read, write, list];
}
