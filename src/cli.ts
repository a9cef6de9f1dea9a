#!/usr/bin/env node
// The `agentd` command. Thin: finds the command in the table (src/cli/commands.ts), parses its
// flags strictly (src/cli/args.ts) and loads only that command's code. Exit codes: 0 ok, 1 error,
// 2 usage (unknown command or flag, missing argument), 3 a run waits for a person.
import { commandHelp, EXIT, normaliseInspectFlag, parseCommand, UsageError } from './cli/args.js';
import { COMMANDS, GROUPS, type Command } from './cli/commands.js';
import { reportError } from './cli/errors.js';
import { readVersion } from './version.js';

function topHelp(): string {
  const lines = COMMANDS.map((c) => {
    const args = (c.args ?? []).map((a) => (a.endsWith('?') ? `[${a.slice(0, -1)}]` : a)).join(' ');
    return `  ${`${c.path.join(' ')}${args ? ` ${args}` : ''}`.padEnd(34)} ${c.summary.split(/(?<=\.) /)[0]}`;
  });
  return `agentd: serve one configured LLM agent over HTTP, safely, and operate it.

Usage: agentd <command> [flags]     agentd <command> --help for its flags

Commands:
${lines.join('\n')}
  version                            Print the version (also -V, --version).

Commands that talk to a running agentd take --url URL (env AGENTD_URL, default
http://127.0.0.1:8000), --key KEY (env AGENTD_API_KEY) and --json (machine-readable output).
Exit codes: 0 ok, 1 error, 2 usage, 3 a run waits for an approval or budget.

Docs: README.md and docs/ (cli.md, configuration.md, http-api.md, operations.md).`;
}

function groupHelp(group: string): string {
  const cmds = COMMANDS.filter((c) => c.path[0] === group);
  return `Usage: agentd ${group} <${cmds.map((c) => c.path[1]).join('|')}> [flags]\n\n${GROUPS[group] ?? ''}\n\n${cmds
    .map((c) => `  ${c.path.join(' ').padEnd(20)} ${c.summary}`)
    .join('\n')}\n\nagentd ${group} <command> --help for its flags.`;
}

/** Flags that may come before the command (`agentd --url U runs ls`): moved after its words. */
const LEADING_FLAGS_WITH_VALUE = new Set(['--url', '--key']);
const LEADING_FLAGS = new Set(['--json']);

async function main(argv: string[]): Promise<number> {
  const leading: string[] = [];
  let i = 0;
  for (; i < argv.length; i++) {
    const a = argv[i];
    if (LEADING_FLAGS.has(a)) leading.push(a);
    else if (LEADING_FLAGS_WITH_VALUE.has(a) && i + 1 < argv.length) leading.push(a, argv[++i]);
    else if (/^--(url|key)=/.test(a)) leading.push(a);
    else break;
  }
  const rest = argv.slice(i);
  const [cmd, sub] = rest;
  if (cmd === undefined) {
    process.stderr.write(`${topHelp()}\n`);
    return EXIT.usage;
  }
  if (cmd === '-h' || cmd === '--help' || cmd === 'help') {
    process.stdout.write(`${topHelp()}\n`);
    return EXIT.ok;
  }
  if (cmd === '-V' || cmd === '--version' || cmd === 'version') {
    if (cmd === 'version' && sub !== undefined) {
      if (sub !== '-h' && sub !== '--help')
        throw new UsageError(sub.startsWith('-') ? `unknown flag '${sub}'` : `unexpected argument '${sub}'`, 'agentd version');
      process.stdout.write('Usage: agentd version\n\nPrints the version of agentd (also agentd -V, agentd --version).\n');
      return EXIT.ok;
    }
    process.stdout.write(`${readVersion()}\n`);
    return EXIT.ok;
  }
  let command: Command | undefined;
  let words = 1;
  if (GROUPS[cmd]) {
    if (sub === undefined || sub === '-h' || sub === '--help') {
      (sub ? process.stdout : process.stderr).write(`${groupHelp(cmd)}\n`);
      return sub ? EXIT.ok : EXIT.usage;
    }
    command = COMMANDS.find((c) => c.path[0] === cmd && c.path[1] === sub);
    words = 2;
    if (!command) throw new UsageError(`unknown command 'agentd ${cmd} ${sub}'`, `agentd ${cmd}`);
  } else {
    command = COMMANDS.find((c) => c.path.length === 1 && c.path[0] === cmd);
    if (!command) throw new UsageError(cmd.startsWith('-') ? `unknown flag '${cmd}'` : `unknown command '${cmd}'`);
  }
  const args = [...rest.slice(words), ...leading];
  const parsed = parseCommand(command, command.path[0] === 'serve' ? normaliseInspectFlag(args) : args);
  if (parsed.help) {
    process.stdout.write(`${commandHelp(command)}\n`);
    return EXIT.ok;
  }
  const handler = await command.load();
  return handler(parsed, command);
}

// A reader that closes early (`agentd runs show R | head -1`) is not an error: stop quietly.
// Node ignores SIGPIPE, so without this the next write failed with an EPIPE stack trace.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(process.exitCode ?? EXIT.ok);
  throw err;
});

const argv = process.argv.slice(2);
main(argv).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (err) => {
    // --json anywhere before `--`: scripts get the error as JSON too (on stderr, as the text).
    const end = argv.indexOf('--');
    process.exitCode = reportError(err, undefined, (end === -1 ? argv : argv.slice(0, end)).includes('--json'));
  },
);
