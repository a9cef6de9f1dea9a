import { describe, expect, it } from 'vitest';
import { newId, newRequestId } from '../src/ids.js';

describe('ids', () => {
  it('request ids have the shape of every other id and never repeat in a process', () => {
    const ids = Array.from({ length: 1000 }, () => newRequestId());
    for (const id of ids) expect(id).toMatch(/^req_[0-9A-Za-z]{21}$/);
    expect(new Set(ids).size).toBe(ids.length);
    expect(newId('run')).toMatch(/^run_[0-9A-Za-z]{21}$/);
  });
});
