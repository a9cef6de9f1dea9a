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

describe('newId', () => {
  it('is the prefix, `_` and 21 characters of the alphabet, every character about as likely, never repeating', () => {
    const prefixes = ['run', 'budgetreq', 'interrupt', 'event', 'msg'] as const;
    const seen = new Set<string>();
    const counts = new Map<string, number>();
    const n = 20_000;
    for (let i = 0; i < n; i++) {
      const prefix = prefixes[i % prefixes.length];
      const id = newId(prefix);
      expect(id).toMatch(new RegExp(`^${prefix}_[0-9A-Za-z]{21}$`));
      seen.add(id);
      for (const c of id.slice(prefix.length + 1)) counts.set(c, (counts.get(c) ?? 0) + 1);
    }
    expect(seen.size).toBe(n);
    // 420,000 draws over 62 characters: about 6,774 each; a skewed draw (bytes 248-255 kept, or
    // a modulo over 256) would put some characters far outside these bounds.
    expect(counts.size).toBe(62);
    for (const k of counts.values()) {
      expect(k).toBeGreaterThan(6_300);
      expect(k).toBeLessThan(7_250);
    }
  });

  it('a short prefix after a long one leaves nothing of the long one', () => {
    newId('budgetreq');
    expect(newId('run')).toMatch(/^run_[0-9A-Za-z]{21}$/);
  });
});
