import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ToolRegistry } from '../../../src/agent/tools/index.js';
import { ctx } from './helpers.js';

const MODULE = 'test/fixtures/tools-module.mjs';

describe('local tools module', () => {
  let reg: ToolRegistry;
  let dir: string;
  beforeAll(async () => {
    reg = await ToolRegistry.create({ local: MODULE, builtin: ['clock'] });
    dir = await mkdtemp(path.join(os.tmpdir(), 'agentd-tools-'));
  });
  afterAll(async () => {
    await reg.close();
    await rm(dir, { recursive: true, force: true });
  });

  async function badModule(source: string): Promise<string> {
    const file = path.join(dir, `bad-${Math.random().toString(36).slice(2)}.mjs`);
    await writeFile(file, source);
    return file;
  }

  it('lists built-ins first, then local tools in module order, with their properties', () => {
    const names = reg.list().map((t) => t.name);
    expect(names).toEqual(['clock', 'echo', 'add', 'send_email', 'get_context', 'fail', 'sleep']);
    const add = reg.get('add');
    expect(add).toMatchObject({ source: 'local', idempotent: true, description: 'Add two numbers.' });
    expect(add?.mcp_server).toBeUndefined();
    // idempotent defaults to false
    expect(reg.get('send_email')?.idempotent).toBe(false);
    expect(reg.get('nope')).toBeUndefined();
  });

  it('accepts valid arguments and applies schema defaults without touching the input', () => {
    const input = { to: 'a@example.com', subject: 'hi' };
    const r = reg.validate('send_email', input);
    expect(r).toEqual({ ok: true, args: { to: 'a@example.com', subject: 'hi', body: '' } });
    expect(input).toEqual({ to: 'a@example.com', subject: 'hi' });
  });

  it('rejects a missing required argument with a message the model can act on', () => {
    const r = reg.validate('add', { a: 1 });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.message).toContain("invalid arguments for tool 'add'");
    expect(r.message).toContain("missing required property 'b'");
    expect(r.message).toContain('Expected input schema');
  });

  it('reports every problem at once, with paths and types', () => {
    const r = reg.validate('add', { a: 'one', c: 3 });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.message).toContain("'a' must be of type number");
    expect(r.message).toContain("missing required property 'b'");
    expect(r.message).toContain("unexpected property 'c'");
  });

  it('treats extra arguments as the schema says', () => {
    // echo does not forbid additional properties; add does
    expect(reg.validate('echo', { text: 'x', extra: 1 })).toEqual({ ok: true, args: { text: 'x', extra: 1 } });
    expect(reg.validate('add', { a: 1, b: 2, extra: 1 }).ok).toBe(false);
  });

  it('rejects non-object arguments and unknown tools', () => {
    const arr = reg.validate('echo', ['x']);
    expect(arr.ok).toBe(false);
    if (!arr.ok) expect(arr.message).toContain('must be a JSON object');
    const unknown = reg.validate('nope', {});
    expect(unknown.ok).toBe(false);
    if (!unknown.ok) expect(unknown.message).toMatch(/unknown tool 'nope'.*Available tools: clock, echo/);
    // no arguments at all means {}
    expect(reg.validate('get_context', undefined)).toEqual({ ok: true, args: {} });
  });

  it('executes with the context passed through', async () => {
    const c = ctx({ workspace_path: '/tmp/ws' });
    const out = await reg.get('get_context')!.execute({}, c);
    expect(out).toEqual({
      run_id: 'run_test',
      session_id: 'session_test',
      attempt: 1,
      lease_token: 'lease_1',
      idempotency_key: 'run_test:1:call_1',
      workspace_path: '/tmp/ws',
      has_signal: true,
    });
    expect(await reg.get('add')!.execute({ a: 2, b: 3 }, c)).toEqual({ sum: 5 });
    expect(await reg.get('echo')!.execute({ text: 'hi' }, c)).toBe('hi');
  });

  it('turns a synchronous throw into a rejection', async () => {
    await expect(reg.get('fail')!.execute({ message: 'boom' }, ctx())).rejects.toThrow('boom');
  });

  it('passes the abort signal to execute', async () => {
    const ac = new AbortController();
    const p = reg.get('sleep')!.execute({ ms: 60_000 }, ctx({ signal: ac.signal }));
    ac.abort(new Error('run cancelled'));
    await expect(p).rejects.toThrow('run cancelled');
  });

  it.each([
    ['export default { name: "x" };', 'default export must be an array'],
    ['export default [42];', 'tool #0: must be an object'],
    ['export default [{ name: "bad.name", description: "", input_schema: { type: "object" }, execute() {} }];', "tool #0 ('bad.name'): name must match"],
    ['export default [{ name: "x", input_schema: { type: "object" }, execute() {} }];', "tool #0 ('x'): description must be a string"],
    ['export default [{ name: "x", description: "", execute() {} }];', 'input_schema must be a JSON Schema object'],
    ['export default [{ name: "x", description: "", input_schema: { type: "string" }, execute() {} }];', "input_schema must have type 'object'"],
    [
      'export default [{ name: "x", description: "", input_schema: { type: "object", properties: { a: { type: "nope" } } }, execute() {} }];',
      'input_schema is not a valid JSON Schema',
    ],
    ['export default [{ name: "x", description: "", input_schema: { type: "object" }, idempotent: "yes", execute() {} }];', 'idempotent must be a boolean'],
    ['export default [{ name: "x", description: "", input_schema: { type: "object" } }];', 'execute must be a function'],
    [
      'const t = { name: "x", description: "", input_schema: { type: "object" }, execute() {} }; export default [t, { ...t }];',
      "tool #1 ('x'): duplicate tool name 'x'",
    ],
    ['throw new Error("import-time failure");', 'could not be loaded: import-time failure'],
  ])('refuses a bad module: %s', async (source, expected) => {
    const file = await badModule(source);
    const err = await ToolRegistry.create({ local: file }).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(err).toBeInstanceOf(Error);
    expect(err!.message).toContain(file);
    expect(err!.message).toContain(expected);
  });

  it('refuses a local tool named like a built-in', async () => {
    const file = await badModule('export default [{ name: "clock", description: "", input_schema: { type: "object" }, execute() {} }];');
    await expect(ToolRegistry.create({ local: file, builtin: ['clock'] })).rejects.toThrow("tool 'clock' has the name of a built-in tool");
  });

  it('resolves the module path against cwd and reports a missing file', async () => {
    await expect(ToolRegistry.create({ local: 'test/fixtures/does-not-exist.mjs' })).rejects.toThrow(path.resolve('test/fixtures/does-not-exist.mjs'));
  });

  it('has no MCP servers, so MCP counts as connected', () => {
    expect(reg.mcpStatus()).toEqual({});
    expect(reg.mcpConnected()).toBe(true);
  });
});
