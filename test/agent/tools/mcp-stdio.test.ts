import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { McpToolError, McpUnavailableError, ToolRegistry } from '../../../src/agent/tools/index.js';
import { ctx, nextStatus, until } from './helpers.js';

const FIXTURE = path.resolve('test/fixtures/mcp-stdio-server.ts');
const fx = { name: 'fx', command: process.execPath, args: ['--import', 'tsx', FIXTURE] };

interface Stats {
  slow_started: number;
  slow_cancelled: number;
  slow_finished: number;
  calls: number;
  pid: number;
}

describe('MCP over stdio', () => {
  let reg: ToolRegistry;
  const stats = async (): Promise<Stats> => JSON.parse((await reg.get('fx__stats')!.execute({}, ctx())) as string) as Stats;

  beforeAll(async () => {
    reg = await ToolRegistry.create(
      { mcp: [fx], local: 'test/fixtures/tools-module.mjs', builtin: ['clock'] },
      { connectTimeoutMs: 15_000, reconnectBaseMs: 50 },
    );
  });
  afterAll(() => reg.close());

  it('connects and lists the server tools with prefixed names after built-in and local ones', () => {
    expect(reg.mcpStatus()).toEqual({ fx: { status: 'connected', last_error: null } });
    expect(reg.mcpConnected()).toBe(true);
    const names = reg.list().map((t) => t.name);
    expect(names.slice(0, 2)).toEqual(['clock', 'echo']);
    expect(names.filter((n) => n.startsWith('fx__'))).toEqual(['fx__echo', 'fx__add', 'fx__fail', 'fx__slow', 'fx__stats', 'fx__meta', 'fx__grow']);
    expect(names.indexOf('fx__echo')).toBeGreaterThan(names.indexOf('sleep'));
    const add = reg.get('fx__add')!;
    expect(add).toMatchObject({ source: 'mcp', mcp_server: 'fx', description: 'Add two numbers' });
    expect(add.input_schema).toEqual({ type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] });
  });

  it('takes idempotency from idempotentHint or readOnlyHint', () => {
    expect(reg.get('fx__add')!.idempotent).toBe(true); // idempotentHint
    expect(reg.get('fx__echo')!.idempotent).toBe(true); // readOnlyHint
    expect(reg.get('fx__fail')!.idempotent).toBe(false);
    expect(reg.get('fx__slow')!.idempotent).toBe(false);
  });

  it('validates arguments against the server schema', () => {
    const r = reg.validate('fx__add', { a: 1 });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.message).toContain("missing required property 'b'");
    expect(reg.validate('fx__add', { a: 1, b: 2 })).toEqual({ ok: true, args: { a: 1, b: 2 } });
  });

  it('returns text content, or structured content when present', async () => {
    expect(await reg.get('fx__echo')!.execute({ text: 'hello' }, ctx())).toBe('hello');
    expect(await reg.get('fx__add')!.execute({ a: 2, b: 3 }, ctx())).toEqual({ sum: 5 });
  });

  it('maps isError to a thrown error carrying the text', async () => {
    const err = await reg
      .get('fx__fail')!
      .execute({ reason: 'disk full' }, ctx())
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(McpToolError);
    expect((err as Error).message).toBe('fixture failure: disk full');
  });

  it('sends the run identity in _meta', async () => {
    const meta = JSON.parse((await reg.get('fx__meta')!.execute({}, ctx({ idempotency_key: 'k-123', attempt: 2 }))) as string) as Record<string, unknown>;
    expect(meta).toMatchObject({ 'agentd/run_id': 'run_test', 'agentd/attempt': 2, 'agentd/idempotency_key': 'k-123' });
  });

  it('cancels a running call on the server when the signal aborts', async () => {
    const before = await stats();
    const ac = new AbortController();
    const call = reg.get('fx__slow')!.execute({ ms: 60_000 }, ctx({ signal: ac.signal }));
    call.catch(() => undefined);
    await until(async () => (await stats()).slow_started === before.slow_started + 1, 'the slow call to start');
    ac.abort();
    await expect(call).rejects.toThrow();
    await until(async () => (await stats()).slow_cancelled === before.slow_cancelled + 1, 'the server to see the cancellation');
    expect((await stats()).slow_finished).toBe(before.slow_finished);
  });

  it('follows the server when its tool list changes', async () => {
    expect(reg.get('fx__extra')).toBeUndefined();
    const changed = new Promise<void>((resolve) => {
      const off = reg.onMcpStatus(() => {
        if (reg.get('fx__extra')) {
          off();
          resolve();
        }
      });
    });
    await reg.get('fx__grow')!.execute({}, ctx());
    await changed;
    expect(reg.list().at(-1)?.name).toBe('fx__extra');
    expect(await reg.get('fx__extra')!.execute({}, ctx())).toBe('extra');
  });

  it('marks a killed server disconnected, refuses its calls, then reconnects and refreshes tools', async () => {
    const oldPid = reg.mcpConnection('fx')!.pid!;
    expect(oldPid).toBeGreaterThan(0);
    let connectedWhileDown: boolean | null = null;
    let callWhileDown: unknown = null;
    const down = nextStatus(reg, 'fx', 'disconnected').then(async (s) => {
      connectedWhileDown = reg.mcpConnected();
      callWhileDown = await reg
        .get('fx__echo')!
        .execute({ text: 'x' }, ctx())
        .catch((e: unknown) => e);
      return s;
    });
    const up = nextStatus(reg, 'fx', 'connected');
    process.kill(oldPid, 'SIGKILL');
    const s = await down;
    expect(s.last_error).toContain('connection closed');
    expect(connectedWhileDown).toBe(false);
    expect(callWhileDown).toBeInstanceOf(McpUnavailableError);
    expect((callWhileDown as Error).message).toMatch(/MCP server 'fx' is disconnected.*'fx__echo' cannot be called now/);
    // tools stay declared while the server is away
    expect(reg.get('fx__echo')).toBeDefined();
    await up;
    expect(reg.mcpStatus().fx).toEqual({ status: 'connected', last_error: null });
    expect(reg.mcpConnected()).toBe(true);
    expect((await stats()).pid).not.toBe(oldPid);
    expect(await reg.get('fx__echo')!.execute({ text: 'back' }, ctx())).toBe('back');
    // the list was fetched again from the new process, which has not grown the extra tool
    expect(reg.list().filter((t) => t.source === 'mcp')).toHaveLength(7);
    expect(reg.get('fx__extra')).toBeUndefined();
  });
});

describe('MCP servers that fail', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'agentd-mcp-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('does not block start-up on a missing command: status failed with the error', async () => {
    const reg = await ToolRegistry.create(
      { mcp: [{ name: 'ghost', command: path.join(dir, 'no-such-binary') }], builtin: ['clock'] },
      { connectTimeoutMs: 5000, reconnectBaseMs: 60_000 },
    );
    try {
      const s = reg.mcpStatus().ghost;
      expect(s.status).toBe('failed');
      expect(s.last_error).toMatch(/ENOENT|no-such-binary/);
      expect(reg.mcpConnected()).toBe(false);
      expect(reg.list().map((t) => t.name)).toEqual(['clock']);
    } finally {
      await reg.close();
    }
  });

  it('gives up waiting after connectTimeoutMs on a server that never answers', async () => {
    const silent = ['-e', "process.stdin.resume(); process.stdin.on('end', () => process.exit(0));"];
    const reg = await ToolRegistry.create(
      { mcp: [{ name: 'mute', command: process.execPath, args: silent }] },
      { connectTimeoutMs: 300, reconnectBaseMs: 60_000 },
    );
    try {
      expect(reg.mcpStatus().mute).toEqual({ status: 'failed', last_error: 'no answer within 300 ms' });
      expect(reg.mcpConnected()).toBe(false);
    } finally {
      await reg.close();
    }
  });

  it('keeps retrying in the background and connects once the server can start', async () => {
    const flag = path.join(dir, 'ready.flag');
    const wrapper = path.join(dir, 'wrapper.mjs');
    await writeFile(
      wrapper,
      // tsx is loaded only once the flag exists, so the failing attempts start fast.
      `import fs from 'node:fs';\nimport { pathToFileURL } from 'node:url';\n` +
        `if (!fs.existsSync(${JSON.stringify(flag)})) { console.error('flag file missing'); process.exit(1); }\n` +
        `const { register } = await import(${JSON.stringify(path.resolve('node_modules/tsx/dist/esm/api/index.mjs'))});\nregister();\n` +
        `await import(pathToFileURL(${JSON.stringify(FIXTURE)}).href);\n`,
    );
    const reg = await ToolRegistry.create(
      { mcp: [{ name: 'late', command: process.execPath, args: [wrapper] }] },
      { connectTimeoutMs: 15_000, reconnectBaseMs: 100, reconnectMaxMs: 200 },
    );
    try {
      const s = reg.mcpStatus().late;
      expect(s.status).toBe('failed');
      expect(s.last_error).toContain('flag file missing');
      expect(reg.list()).toHaveLength(0);
      const up = nextStatus(reg, 'late', 'connected');
      await writeFile(flag, '');
      await up;
      expect(reg.mcpConnected()).toBe(true);
      expect(await reg.get('late__add')!.execute({ a: 1, b: 1 }, ctx())).toEqual({ sum: 2 });
    } finally {
      await reg.close();
    }
  });

  it('refuses bad server names and duplicates', async () => {
    await expect(ToolRegistry.create({ mcp: [{ name: 'bad.name', command: 'x' }] })).rejects.toThrow("MCP server name 'bad.name'");
    await expect(
      ToolRegistry.create({
        mcp: [
          { name: 'a', command: 'x' },
          { name: 'a', url: 'http://127.0.0.1:1/mcp' },
        ],
      }),
    ).rejects.toThrow('configured twice');
  });
});
