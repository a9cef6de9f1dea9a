import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/clock.js';
import { ToolRegistry } from '../../../src/agent/tools/index.js';
import { ctx } from './helpers.js';

describe('built-in clock', () => {
  const clock = new ManualClock(Date.parse('2026-07-01T12:34:56.789Z'));
  let reg: ToolRegistry;
  beforeAll(async () => {
    reg = await ToolRegistry.create({ builtin: ['clock'] }, { clock });
  });
  afterAll(() => reg.close());

  it('is declared as the brief says', () => {
    expect(reg.list().map((t) => t.name)).toEqual(['clock']);
    expect(reg.get('clock')).toMatchObject({
      source: 'builtin',
      idempotent: true,
      input_schema: { type: 'object', properties: { timezone: { type: 'string' } } },
    });
  });

  it('answers UTC by default from the injected clock', async () => {
    expect(await reg.get('clock')!.execute({}, ctx())).toEqual({ now: '2026-07-01T12:34:56.789Z', timezone: 'UTC', local: '2026-07-01T12:34:56+00:00' });
  });

  it('gives the local time with its offset, following the clock and DST', async () => {
    expect(await reg.get('clock')!.execute({ timezone: 'Europe/Paris' }, ctx())).toEqual({
      now: '2026-07-01T12:34:56.789Z',
      timezone: 'Europe/Paris',
      local: '2026-07-01T14:34:56+02:00',
    });
    clock.set('2026-01-15T23:30:00Z');
    expect(await reg.get('clock')!.execute({ timezone: 'Europe/Paris' }, ctx())).toMatchObject({ local: '2026-01-16T00:30:00+01:00' });
    expect(await reg.get('clock')!.execute({ timezone: 'Asia/Kolkata' }, ctx())).toMatchObject({ local: '2026-01-16T05:00:00+05:30' });
  });

  it('throws a clear error for an unknown timezone', async () => {
    await expect(reg.get('clock')!.execute({ timezone: 'Mars/Olympus' }, ctx())).rejects.toThrow("unknown timezone 'Mars/Olympus'");
  });

  it('validates the timezone type', () => {
    expect(reg.validate('clock', { timezone: 5 }).ok).toBe(false);
  });
});

describe('built-in workspace tools', () => {
  let reg: ToolRegistry;
  let base: string;
  let ws: string;
  let outside: string;
  const run = async (name: string, args: Record<string, unknown>, workspace: string | null = ws): Promise<unknown> =>
    reg.get(name)!.execute(args, ctx({ workspace_path: workspace }));

  beforeAll(async () => {
    reg = await ToolRegistry.create({ builtin: ['workspace', 'clock'] });
    base = await mkdtemp(path.join(os.tmpdir(), 'agentd-ws-'));
    ws = path.join(base, 'ws');
    outside = path.join(base, 'outside');
    await mkdir(ws);
    await mkdir(outside);
    await writeFile(path.join(outside, 'secret.txt'), 'top secret');
    await symlink(outside, path.join(ws, 'escape-dir'));
    await symlink(path.join(outside, 'secret.txt'), path.join(ws, 'escape-file'));
    await symlink(path.join(outside, 'new.txt'), path.join(ws, 'dangling'));
  });
  afterAll(async () => {
    await reg.close();
    await rm(base, { recursive: true, force: true });
  });

  it('declares three idempotent tools before the clock', () => {
    expect(reg.list().map((t) => [t.name, t.idempotent, t.source])).toEqual([
      ['workspace_read', true, 'builtin'],
      ['workspace_write', true, 'builtin'],
      ['workspace_list', true, 'builtin'],
      ['clock', true, 'builtin'],
    ]);
  });

  it('writes (creating directories) then reads back', async () => {
    expect(await run('workspace_write', { path: 'notes/day1/a.txt', content: 'héllo\n' })).toEqual({ path: 'notes/day1/a.txt', bytes: 7 });
    expect(await run('workspace_read', { path: 'notes/day1/a.txt' })).toBe('héllo\n');
    expect(await readFile(path.join(ws, 'notes/day1/a.txt'), 'utf8')).toBe('héllo\n');
    // the same write again gives the same file (why it is declared idempotent)
    await run('workspace_write', { path: 'notes/day1/a.txt', content: 'héllo\n' });
    expect(await run('workspace_read', { path: './notes/../notes/day1/a.txt' })).toBe('héllo\n');
  });

  it('lists a directory, and recursively', async () => {
    await run('workspace_write', { path: 'b.txt', content: 'bb' });
    const top = (await run('workspace_list', {})) as {
      path: string;
      entries: Array<{ path: string; name: string; is_dir: boolean; size: number; modified_at: string }>;
    };
    expect(top.path).toBe('.');
    expect(top.entries.map((e) => [e.path, e.is_dir])).toEqual([
      ['b.txt', false],
      ['dangling', false],
      ['escape-dir', false],
      ['escape-file', false],
      ['notes', true],
    ]);
    expect(top.entries[0]).toMatchObject({ name: 'b.txt', size: 2 });
    expect(top.entries[0].modified_at).toMatch(/Z$/);
    const deep = (await run('workspace_list', { path: 'notes', recursive: true })) as { entries: Array<{ path: string }> };
    expect(deep.entries.map((e) => e.path)).toEqual(['notes/day1', 'notes/day1/a.txt']);
  });

  it.each([
    ['workspace_read', { path: '../outside/secret.txt' }, 'outside the workspace'],
    ['workspace_read', { path: 'notes/../../outside/secret.txt' }, 'outside the workspace'],
    ['workspace_read', { path: '/etc/passwd' }, 'absolute paths are not allowed'],
    ['workspace_read', { path: 'escape-file' }, 'leads outside the workspace'],
    ['workspace_read', { path: 'escape-dir/secret.txt' }, 'leads outside the workspace'],
    ['workspace_write', { path: '../evil.txt', content: 'x' }, 'outside the workspace'],
    ['workspace_write', { path: '/tmp/evil.txt', content: 'x' }, 'absolute paths are not allowed'],
    ['workspace_write', { path: 'escape-dir/evil.txt', content: 'x' }, 'leads outside the workspace'],
    ['workspace_write', { path: 'escape-dir/sub/evil.txt', content: 'x' }, 'leads outside the workspace'],
    ['workspace_write', { path: 'escape-file', content: 'x' }, 'leads outside the workspace'],
    ['workspace_write', { path: 'dangling', content: 'x' }, 'broken link'],
    ['workspace_list', { path: '..' }, 'outside the workspace'],
    ['workspace_list', { path: 'escape-dir' }, 'leads outside the workspace'],
  ])('%s refuses %j', async (tool, args, message) => {
    await expect(run(tool, args)).rejects.toThrow(message);
  });

  it('left everything outside untouched', async () => {
    expect(await readFile(path.join(outside, 'secret.txt'), 'utf8')).toBe('top secret');
    await expect(readFile(path.join(outside, 'evil.txt'))).rejects.toThrow();
    await expect(readFile(path.join(outside, 'new.txt'))).rejects.toThrow();
    await expect(readFile(path.join(base, 'evil.txt'))).rejects.toThrow();
  });

  it('allows a link that stays inside', async () => {
    await symlink(path.join(ws, 'notes'), path.join(ws, 'inner-link'));
    expect(await run('workspace_read', { path: 'inner-link/day1/a.txt' })).toBe('héllo\n');
  });

  it('explains missing files, directories and wrong kinds', async () => {
    await expect(run('workspace_read', { path: 'missing.txt' })).rejects.toThrow("no such file 'missing.txt'");
    await expect(run('workspace_read', { path: 'notes' })).rejects.toThrow("'notes' is a directory");
    await expect(run('workspace_list', { path: 'b.txt' })).rejects.toThrow("'b.txt' is a file");
    await expect(run('workspace_list', { path: 'nope' })).rejects.toThrow("no such directory 'nope'");
    await expect(run('workspace_write', { path: 'notes', content: 'x' })).rejects.toThrow("'notes' is a directory");
  });

  it('throws without a workspace', async () => {
    for (const [name, args] of [
      ['workspace_read', { path: 'a' }],
      ['workspace_write', { path: 'a', content: '' }],
      ['workspace_list', {}],
    ] as const) {
      await expect(run(name, args, null)).rejects.toThrow('no workspace for this run');
    }
  });

  it('creates the workspace on first write; lists an absent one as empty', async () => {
    const fresh = path.join(base, 'fresh', 'run_1');
    expect(await run('workspace_list', {}, fresh)).toEqual({ path: '.', entries: [], truncated: false });
    await run('workspace_write', { path: 'out.json', content: '{}' }, fresh);
    expect(await readFile(path.join(fresh, 'out.json'), 'utf8')).toBe('{}');
  });

  it('validates arguments', () => {
    expect(reg.validate('workspace_write', { path: 'a' }).ok).toBe(false);
    expect(reg.validate('workspace_read', { path: 'a', mode: 'x' }).ok).toBe(false);
    expect(reg.validate('workspace_list', {}).ok).toBe(true);
  });
});
