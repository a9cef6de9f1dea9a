// The CLI's pure parts: strict flags, positional counts, help, the optional value of --inspect,
// the schedule of `tasks create`, and how amounts of money print.
import { describe, expect, it } from 'vitest';
import { checkInspectUrl, commandHelp, DEFAULT_INSPECT_URL, normaliseInspectFlag, parseCommand, UsageError, type CommandSpec } from '../../src/cli/args.js';
import { COMMANDS } from '../../src/cli/commands.js';
import { usd } from '../../src/cli/remote.js';
import { scheduleOf } from '../../src/cli/tasks.js';

const spec = (path: string) => COMMANDS.find((c) => c.path.join(' ') === path)! as CommandSpec;

describe('parseCommand', () => {
  it('parses flags and positionals strictly', () => {
    expect(parseCommand(spec('runs ls'), ['--status', 'completed', '--json'])).toEqual({
      values: { status: 'completed', json: true },
      positionals: [],
      help: false,
      name: 'agentd runs ls',
    });
    expect(() => parseCommand(spec('runs ls'), ['--stauts', 'x'])).toThrow(UsageError);
    expect(() => parseCommand(spec('runs ls'), ['--status'])).toThrow(/--status/);
    expect(() => parseCommand(spec('runs show'), [])).toThrow('missing RUN');
    expect(() => parseCommand(spec('runs show'), ['a', 'b'])).toThrow("unexpected argument 'b'");
    // Local commands take no --url/--json.
    expect(() => parseCommand(spec('machines'), ['--json'])).toThrow(UsageError);
  });

  it('help wins over every other problem, but not after --', () => {
    expect(parseCommand(spec('serve'), ['--bogus', '-h']).help).toBe(true);
    expect(parseCommand(spec('run'), ['--', '--help']).positionals).toEqual(['--help']);
  });

  it('every command documents each of its flags', () => {
    for (const c of COMMANDS) {
      const help = commandHelp(c);
      expect(help).toContain(`Usage: agentd ${c.path.join(' ')}`);
      for (const name of Object.keys(c.options ?? {})) expect(help).toContain(`--${name}`);
      if (c.remote) for (const name of ['--url', '--key', '--json']) expect(help).toContain(name);
    }
  });
});

describe('--inspect [URL]', () => {
  it('takes an optional URL', () => {
    expect(normaliseInspectFlag(['--inspect'])).toEqual([`--inspect=${DEFAULT_INSPECT_URL}`]);
    expect(normaliseInspectFlag(['--inspect', '--port', '9'])).toEqual([`--inspect=${DEFAULT_INSPECT_URL}`, '--port', '9']);
    expect(normaliseInspectFlag(['--inspect', 'ws://h:1', '--port', '9'])).toEqual(['--inspect=ws://h:1', '--port', '9']);
    expect(normaliseInspectFlag(['--inspect=wss://h'])).toEqual(['--inspect=wss://h']);
  });

  it('accepts only ws: and wss: URLs', () => {
    expect(checkInspectUrl('ws://localhost:8080')).toBe('ws://localhost:8080');
    expect(checkInspectUrl('wss://inspect.example/x')).toBe('wss://inspect.example/x');
    expect(() => checkInspectUrl('http://localhost:8080')).toThrow(UsageError);
    expect(() => checkInspectUrl('localhost:8080x')).toThrow(UsageError);
  });
});

describe('tasks create schedule', () => {
  const h = 'agentd tasks create';
  it('is exactly one of --cron, --every, --at, --manual', () => {
    expect(scheduleOf({ cron: '0 * * * *', tz: 'Europe/Paris' }, h)).toEqual({ type: 'cron', expression: '0 * * * *', timezone: 'Europe/Paris' });
    expect(scheduleOf({ every: '90' }, h)).toEqual({ type: 'interval', seconds: 90 });
    expect(scheduleOf({ at: '2030-01-01T00:00:00Z' }, h)).toEqual({ type: 'once', run_at: '2030-01-01T00:00:00Z' });
    expect(scheduleOf({ manual: true }, h)).toEqual({ type: 'manual' });
    expect(() => scheduleOf({}, h)).toThrow('a schedule is required');
    expect(() => scheduleOf({ cron: '* * * * *', manual: true }, h)).toThrow('one schedule only');
    expect(() => scheduleOf({ every: '0' }, h)).toThrow('--every');
    expect(() => scheduleOf({ every: '60', tz: 'UTC' }, h)).toThrow('--tz goes with --cron');
  });
});

describe('usd: dollar amounts for people', () => {
  it('rounds a float sum instead of printing its tail', () => {
    expect(usd(0.0005574999999999999)).toBe('$0.000557');
    expect(usd(0.1 + 0.2)).toBe('$0.30');
    expect(usd(0.012345)).toBe('$0.0123');
    expect(usd(1.5)).toBe('$1.50');
    expect(usd(0.0000001234)).toBe('$0.000000123');
    expect(usd(0)).toBe('$0');
  });
});
