// Argument parsing of the `agentd` command: a table of commands (commands.ts), each parsed by
// node:util.parseArgs in strict mode, so an unknown flag or a missing value is an error (exit 2)
// instead of being ignored. Pure: no I/O here, which keeps it unit-testable.
import { parseArgs } from 'node:util';

/** Exit codes of every command (documented in docs/cli.md). */
export const EXIT = { ok: 0, error: 1, usage: 2, waiting: 3 } as const;

/** A mistake in the command line: printed with a pointer to the help, exit 2. */
export class UsageError extends Error {
  constructor(
    message: string,
    readonly helpOf: string = 'agentd',
  ) {
    super(message);
  }
}

export interface OptionSpec {
  type: 'string' | 'boolean';
  short?: string;
  /** Placeholder of the value in help, e.g. FILE. */
  value?: string;
  help: string;
}

export interface CommandSpec {
  /** Words naming the command, e.g. ['runs', 'ls']. */
  path: string[];
  /** Positional arguments by name; a trailing `?` marks an optional one. */
  args?: string[];
  summary: string;
  /** More lines of help after the flags. */
  details?: string;
  options?: Record<string, OptionSpec>;
  /** A command that talks to a running agentd over HTTP (takes --url, --key, --json). */
  remote?: boolean;
}

export const HELP_OPTION: Record<string, OptionSpec> = { help: { type: 'boolean', short: 'h', help: 'Show this help.' } };

export const REMOTE_OPTIONS: Record<string, OptionSpec> = {
  url: { type: 'string', value: 'URL', help: 'The agentd service (env AGENTD_URL; default http://127.0.0.1:8000).' },
  key: { type: 'string', value: 'KEY', help: 'API key, sent as a Bearer token (env AGENTD_API_KEY).' },
  json: { type: 'boolean', help: "Machine-readable output: the API's JSON as is (NDJSON for streams)." },
};

export function optionsOf(spec: CommandSpec): Record<string, OptionSpec> {
  return { ...(spec.options ?? {}), ...(spec.remote ? REMOTE_OPTIONS : {}), ...HELP_OPTION };
}

export interface Parsed {
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
  help: boolean;
  /** The command's name (`agentd runs ls`), for usage errors found after parsing. */
  name?: string;
}

/** True when the command line asks for help (before a `--`, which ends the flags). */
export function wantsHelp(argv: string[]): boolean {
  for (const a of argv) {
    if (a === '--') return false;
    if (a === '-h' || a === '--help') return true;
  }
  return false;
}

/**
 * Parses a command's own arguments (those after its words). Help wins over every other problem:
 * `agentd serve --bogus --help` prints the help and exits 0.
 */
export function parseCommand(spec: CommandSpec, argv: string[]): Parsed {
  const name = `agentd ${spec.path.join(' ')}`;
  if (wantsHelp(argv)) return { values: {}, positionals: [], help: true };
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = {};
  for (const [k, o] of Object.entries(optionsOf(spec))) options[k] = o.short ? { type: o.type, short: o.short } : { type: o.type };
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (err) {
    // parseArgs' messages name the flag ("Unknown option '--bogus'"); its advice about `--` is
    // for script authors, not for people at a terminal, so only the first sentence is kept.
    const msg = err instanceof Error ? err.message.split('. ')[0].replace(/\.$/, '') : String(err);
    throw new UsageError(msg, name);
  }
  const args = spec.args ?? [];
  const required = args.filter((a) => !a.endsWith('?')).length;
  if (parsed.positionals.length < required)
    throw new UsageError(
      `missing ${args
        .slice(parsed.positionals.length)
        .filter((a) => !a.endsWith('?'))
        .join(' ')}`,
      name,
    );
  if (parsed.positionals.length > args.length) throw new UsageError(`unexpected argument '${parsed.positionals[args.length]}'`, name);
  return { values: parsed.values as Parsed['values'], positionals: parsed.positionals, help: false, name };
}

/** The help text of one command: usage line, summary, its flags. */
export function commandHelp(spec: CommandSpec): string {
  const opts = optionsOf(spec);
  const flags = Object.entries(opts).map(([k, o]) => {
    const left = `${o.short ? `-${o.short}, ` : '    '}--${k}${o.value ? ` ${o.value}` : ''}`;
    return `  ${left.padEnd(24)} ${o.help}`;
  });
  const args = (spec.args ?? []).map((a) => (a.endsWith('?') ? `[${a.slice(0, -1)}]` : a)).join(' ');
  return [
    `Usage: agentd ${spec.path.join(' ')}${args ? ` ${args}` : ''} [flags]`,
    '',
    spec.summary,
    '',
    'Flags:',
    ...flags,
    ...(spec.details ? ['', spec.details] : []),
  ].join('\n');
}

/** A positive integer flag, or a usage error naming it. */
export function intFlag(value: string | boolean | undefined, name: string, helpOf: string): number | undefined {
  if (value === undefined || typeof value === 'boolean') return undefined;
  if (!/^\d+$/.test(value) || Number(value) <= 0) throw new UsageError(`--${name}: expected a positive integer, got '${value}'`, helpOf);
  return Number(value);
}

/** A finite number flag, or a usage error naming it. */
export function numberFlag(value: string | boolean | undefined, name: string, helpOf: string): number | undefined {
  if (value === undefined || typeof value === 'boolean') return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n)) throw new UsageError(`--${name}: expected a number, got '${value}'`, helpOf);
  return n;
}

/** A JSON object flag (e.g. edited tool arguments), or a usage error naming it. */
export function jsonObjectFlag(value: string | boolean | undefined, name: string, helpOf: string): Record<string, unknown> | undefined {
  if (value === undefined || typeof value === 'boolean') return undefined;
  let v: unknown;
  try {
    v = JSON.parse(value);
  } catch (err) {
    throw new UsageError(`--${name}: not valid JSON (${(err as Error).message})`, helpOf);
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new UsageError(`--${name}: expected a JSON object`, helpOf);
  return v as Record<string, unknown>;
}

/** The default WebSocket endpoint of `serve --inspect` (the one @statelyai/inspect's server listens on). */
export const DEFAULT_INSPECT_URL = 'ws://localhost:8080';

/**
 * `--inspect` takes an optional value, which parseArgs cannot express: `--inspect` alone (or
 * followed by another flag) becomes `--inspect=<default>`; `--inspect URL` keeps URL. `serve`
 * takes no positional argument, so a word after `--inspect` can only be its URL.
 */
export function normaliseInspectFlag(argv: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--') {
      out.push(...argv.slice(i));
      break;
    }
    if (a === '--inspect') {
      const next = argv[i + 1];
      if (next !== undefined && !next.startsWith('-')) {
        out.push(`--inspect=${next}`);
        i++;
      } else out.push(`--inspect=${DEFAULT_INSPECT_URL}`);
    } else out.push(a);
  }
  return out;
}

/** Checks an inspector endpoint: a ws: or wss: URL (the WebSocket client throws on anything else). */
export function checkInspectUrl(value: string): string {
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    throw new UsageError(`--inspect: '${value}' is not a URL (expected e.g. ${DEFAULT_INSPECT_URL})`, 'agentd serve');
  }
  if (u.protocol !== 'ws:' && u.protocol !== 'wss:') throw new UsageError(`--inspect: expected a ws:// or wss:// URL, got '${value}'`, 'agentd serve');
  return value;
}
