// The pure flow-control decisions (machines/policies/flow.ts) that the HTTP tests of test/flow
// reach only through timing: which limit a key holds under, and a task's rendered key.
import { describe, expect, it } from 'vitest';
import { holdersHaveRoom, keyHasRoom, renderTaskKey, resolveConcurrency, takeKeySlot } from '../../machines/policies/flow.js';

describe('takeKeySlot', () => {
  it('between requests naming different limits for one key, the lowest wins', () => {
    const held = [{ run_id: 'a', since: 0, limit: 1 }];
    expect(takeKeySlot(held, 5, 'b', 1)).toEqual({ take: false });
    const wide = [{ run_id: 'a', since: 0, limit: 5 }];
    expect(takeKeySlot(wide, 1, 'b', 1)).toEqual({ take: false });
    expect(takeKeySlot(wide, 2, 'b', 1)).toEqual({ take: true, holders: [...wide, { run_id: 'b', since: 1, limit: 2 }] });
  });

  it('a holder already holding keeps its slot; records without limits count by the newcomer', () => {
    expect(takeKeySlot([{ run_id: 'a', since: 0, limit: 1 }], 1, 'a', 1).take).toBe(true);
    expect(takeKeySlot([{ run_id: 'a', since: 0 }], 2, 'b', 1).take).toBe(true);
  });
});

describe('keyHasRoom', () => {
  it('counts against the lowest of the newcomer limit and the lowest limit held', () => {
    expect(keyHasRoom(0, 1, null)).toBe(true);
    expect(keyHasRoom(1, 1, null)).toBe(false);
    expect(keyHasRoom(1, 5, 1)).toBe(false);
    expect(keyHasRoom(1, 2, 5)).toBe(true);
    expect(keyHasRoom(2, 2, 5)).toBe(false);
  });

  it('agrees with takeKeySlot on a stored holders list, a holder taking again included', () => {
    const held = [
      { run_id: 'a', since: 0, limit: 3 },
      { run_id: 'b', since: 0 },
    ];
    for (const limit of [1, 2, 3, 4]) for (const id of ['a', 'c']) expect(holdersHaveRoom(held, limit, id)).toBe(takeKeySlot(held, limit, id, 1).take);
  });
});

describe('resolveConcurrency', () => {
  it('answers the request itself when neither a rule nor a lower held limit changes it (no copy per run)', () => {
    const request = { key: 'customer:1', limit: 3 };
    expect(resolveConcurrency(request, [])).toBe(request);
    expect(resolveConcurrency(request, [{ key_prefix: 'other:', limit: 1 }], 5)).toBe(request);
    expect(resolveConcurrency(request, [{ key_prefix: 'customer:', limit: 1 }])).toEqual({ key: 'customer:1', limit: 1 });
    expect(resolveConcurrency(request, [], 2)).toEqual({ key: 'customer:1', limit: 2 });
  });
});

describe('renderTaskKey', () => {
  it('fills metadata fields; a missing or non-scalar field stays as written; cut at 256', () => {
    expect(renderTaskKey('customer:{metadata.customer_id}', { customer_id: 42 })).toBe('customer:42');
    expect(renderTaskKey('c:{metadata.a}/{metadata.b}', { a: 'x', b: true })).toBe('c:x/true');
    expect(renderTaskKey('c:{metadata.missing}', {})).toBe('c:{metadata.missing}');
    expect(renderTaskKey('c:{metadata.obj}', { obj: { x: 1 } })).toBe('c:{metadata.obj}');
    expect(renderTaskKey('{metadata.long}', { long: 'k'.repeat(300) })).toHaveLength(256);
  });
});
