import { describe, expect, it } from 'vitest';
import { exposedToolName, TOOL_NAME_RE } from '../../../src/agent/tools/index.js';
import { compileInputSchema, lazyInputSchema } from '../../../src/agent/tools/schema.js';
import { clockTool, workspaceTools } from '../../../src/agent/tools/builtin.js';
import { systemClock } from '../../../src/clock.js';

describe('compileInputSchema', () => {
  it('every built-in tool schema compiles (the registry compiles them lazily, on first call)', () => {
    for (const tool of [clockTool(systemClock), ...workspaceTools()]) {
      expect(() => compileInputSchema(tool.input_schema), tool.name).not.toThrow();
    }
    const lazy = lazyInputSchema({ type: 'object', required: ['a'] });
    expect(lazy({})).toEqual({ ok: false, errors: ["missing required property 'a'"] });
    expect(lazy({ a: 1 }).ok).toBe(true);
  });

  it('follows the declared draft: 2020-12 prefixItems', () => {
    const v = compileInputSchema({
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      properties: { pair: { type: 'array', prefixItems: [{ type: 'string' }, { type: 'number' }], items: false } },
    });
    expect(v({ pair: ['a', 1] }).ok).toBe(true);
    const bad = v({ pair: [1, 'a'] });
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.errors).toContain("'pair[0]' must be of type string");
  });

  it('accepts draft-07 and unversioned schemas, tolerating unknown keywords and formats', () => {
    const v = compileInputSchema({
      $schema: 'http://json-schema.org/draft-07/schema#',
      type: 'object',
      'x-ui': 'wide',
      properties: { when: { type: 'string', format: 'date-time' } },
    });
    expect(v({ when: 'not a date' }).ok).toBe(true);
    expect(compileInputSchema({ type: 'object', properties: { n: { type: 'integer', minimum: 1 } } })({ n: 0 })).toEqual({
      ok: false,
      errors: ["'n' must be >= 1"],
    });
  });

  it('compiles schemas sharing an $id independently', () => {
    const a = compileInputSchema({ $id: 'https://example.com/same.json', type: 'object', required: ['a'] });
    const b = compileInputSchema({ $id: 'https://example.com/same.json', type: 'object', required: ['b'] });
    expect(a({ a: 1 }).ok).toBe(true);
    expect(b({ a: 1 }).ok).toBe(false);
  });

  it('describes nested problems with readable paths', () => {
    const v = compileInputSchema({
      type: 'object',
      properties: {
        items: { type: 'array', items: { type: 'object', properties: { qty: { type: 'integer' } }, required: ['sku'], additionalProperties: false } },
        mode: { enum: ['a', 'b'] },
      },
    });
    const r = v({ items: [{ qty: 1.5, x: 1 }], mode: 'c' });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.errors).toEqual(
      expect.arrayContaining([
        "'items[0]' is missing required property 'sku'",
        "'items[0]' has unexpected property 'x'",
        "'items[0].qty' must be of type integer",
        '\'mode\' must be one of ["a","b"]',
      ]),
    );
  });

  it('handles recursive schemas', () => {
    const v = compileInputSchema({
      $id: 'https://example.com/tree.json',
      type: 'object',
      properties: { name: { type: 'string' }, children: { type: 'array', items: { $ref: '#' } } },
      required: ['name'],
    });
    expect(v({ name: 'a', children: [{ name: 'b', children: [{ name: 'c' }] }] }).ok).toBe(true);
    const r = v({ name: 'a', children: [{ children: [] }] });
    expect(r).toEqual({ ok: false, errors: ["'children[0]' is missing required property 'name'"] });
  });

  it('throws on a schema that is not valid', () => {
    expect(() => compileInputSchema({ type: 'object', properties: { a: { type: 'nope' } } })).toThrow();
  });
});

describe('exposedToolName', () => {
  it('prefixes with the server and a double underscore', () => {
    expect(exposedToolName('fx', 'echo')).toBe('fx__echo');
  });

  it('replaces characters model APIs refuse and stays valid', () => {
    expect(exposedToolName('gh', 'repos.list/all')).toBe('gh__repos_list_all');
    const long = exposedToolName('server', 'a'.repeat(100));
    expect(long).toHaveLength(64);
    expect(long).toMatch(TOOL_NAME_RE);
    expect(exposedToolName('server', 'a'.repeat(100))).toBe(long); // stable
  });

  it('keeps names unique when sanitising collides', () => {
    const taken = new Set([exposedToolName('s', 'a.b')]);
    const other = exposedToolName('s', 'a_b', taken);
    expect(other).not.toBe('s__a_b');
    expect(other).toMatch(/^s__a_b_[0-9a-f]{8}$/);
  });
});
