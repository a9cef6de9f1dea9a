// What the commands that talk to a running agentd share: the typed client (agentd/client) built
// from --url/--key or their env twins, connection errors that name the URL, and the two output
// modes (a table or lines for people; the API's JSON as is with --json).
import { userInfo } from 'node:os';
import { createClient, type AgentdClient } from '../client/index.js';
import { UsageError, type Parsed } from './args.js';
import { connectErrorOf } from './errors.js';

export const DEFAULT_URL = 'http://127.0.0.1:8000';

export interface Remote {
  client: AgentdClient;
  url: string;
  json: boolean;
}

/**
 * The service's URL from --url or AGENTD_URL: an http(s) URL, or a usage error (exit 2). Without
 * this check `--url notaurl` failed as "cannot reach" (exit 1), as if the service were down.
 */
function serviceUrl(p: Parsed, env: NodeJS.ProcessEnv): string {
  const fromFlag = typeof p.values.url === 'string' && p.values.url;
  const url = fromFlag || env.AGENTD_URL || DEFAULT_URL;
  const source = fromFlag ? '--url' : env.AGENTD_URL ? 'AGENTD_URL' : '';
  let parsed: URL | null = null;
  try {
    parsed = new URL(url);
  } catch {
    // not a URL: refused below
  }
  if (!parsed || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') || !parsed.host) {
    throw new UsageError(`${source}: '${url}' is not an http:// or https:// URL (e.g. ${DEFAULT_URL})`, p.name ?? 'agentd');
  }
  return url;
}

export function remoteOf(p: Parsed, env: NodeJS.ProcessEnv = process.env): Remote {
  const url = serviceUrl(p, env);
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
 * Who decides an approval or a budget: --approver, else the API key's name (GET /whoami, as steer
 * messages are signed, and what auth.bind_approver requires), else, with auth off, the local user.
 */
export async function approverOf(p: Parsed, remote: Remote): Promise<string> {
  if (typeof p.values.approver === 'string' && p.values.approver) return p.values.approver;
  const me = await remote.client.whoami();
  if (me.name) return me.name;
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

/**
 * A dollar amount for people: four decimals from a cent up, three significant digits below
 * ($0.000557, not the float sum $0.0005574999999999999); --json keeps the exact value.
 */
export function usd(v: number): string {
  if (v === 0) return '$0';
  if (Math.abs(v) >= 0.01) return `$${v.toFixed(4).replace(/0{1,2}$/, '')}`;
  const decimals = Math.min(20, 2 - Math.floor(Math.log10(Math.abs(v))));
  return `$${Number(v.toPrecision(3))
    .toFixed(decimals)
    .replace(/\.?0+$/, '')}`;
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
