// What the commands that talk to a running agentd share: the typed client (agentd/client) built
// from --url/--key or their env twins, connection errors that name the URL, and the two output
// modes (a table or lines for people; the API's JSON as is with --json).
import { userInfo } from 'node:os';
import { createClient, type AgentdClient } from '../client/index.js';
import type { Parsed } from './args.js';
import { connectErrorOf } from './errors.js';

export const DEFAULT_URL = 'http://127.0.0.1:8000';

export interface Remote {
  client: AgentdClient;
  url: string;
  json: boolean;
}

export function remoteOf(p: Parsed, env: NodeJS.ProcessEnv = process.env): Remote {
  const url = (typeof p.values.url === 'string' && p.values.url) || env.AGENTD_URL || DEFAULT_URL;
  const apiKey = (typeof p.values.key === 'string' && p.values.key) || env.AGENTD_API_KEY || undefined;
  // A failed connection is turned into a sentence naming the URL at the one place every request
  // goes through.
  const fetchNamingUrl: typeof fetch = async (input, init) => {
    try {
      return await fetch(input, init);
    } catch (err) {
      throw connectErrorOf(err, url);
    }
  };
  return { client: createClient({ url, apiKey, fetch: fetchNamingUrl }), url, json: p.values.json === true };
}

/**
 * Who decides an approval or a budget. The CLI cannot know the API key's name (the service does
 * not tell), so the default is the local user; with auth.bind_approver the service requires the
 * key's name: pass it with --approver.
 */
export function approverOf(p: Parsed): string {
  if (typeof p.values.approver === 'string' && p.values.approver) return p.values.approver;
  try {
    const name = process.env.USER || userInfo().username;
    if (name) return name;
  } catch {
    // no passwd entry (some containers)
  }
  return 'cli';
}

export function out(s = ''): void {
  process.stdout.write(`${s}\n`);
}

export function status(s: string): void {
  process.stderr.write(`${s}\n`);
}

/** One JSON value on one line (--json). */
export function printJson(v: unknown): void {
  process.stdout.write(`${JSON.stringify(v)}\n`);
}

/** Columns padded to their widest cell; the last column is never padded. */
export function table(header: string[], rows: (string | number | null | undefined)[][]): string {
  const cells = [header, ...rows.map((r) => r.map((c) => (c === null || c === undefined ? '-' : String(c))))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells
    .map((r) =>
      r
        .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i])))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** A value shortened to one line of at most `max` characters. */
export function brief(v: unknown, max = 60): string {
  const s = (typeof v === 'string' ? v : (JSON.stringify(v) ?? '')).replace(/\s+/g, ' ');
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

/** A shell-safe rendering of an argument in a suggested command. */
export function shellArg(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}
