import { describe, it, expect } from 'vitest';
import fc from 'fast-check';
import { fnv1a32, jitterSeconds, utf8Bytes } from '../../machines/policies/jitter.js';

// Any code point, plus lone surrogates (fast-check's 'binary' unit costs ~3 s to set up).
const anyCodeUnitOrPoint = fc.oneof(
  fc.integer({ min: 0, max: 0x10ffff }).map((c) => String.fromCodePoint(c)),
  fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)),
);

describe('fnv1a32', () => {
  it('matches the published FNV-1a 32-bit test vectors', () => {
    expect(fnv1a32('')).toBe(0x811c9dc5);
    expect(fnv1a32('a')).toBe(0xe40c292c);
    expect(fnv1a32('foobar')).toBe(0xbf9cf968);
  });

  it('hashes UTF-8, as TextEncoder encodes it', () => {
    fc.assert(
      fc.property(fc.string({ unit: anyCodeUnitOrPoint }), (s) => {
        const ours = utf8Bytes(s);
        const theirs = new TextEncoder().encode(s);
        return ours.length === theirs.length && ours.every((b, i) => b === theirs[i]);
      }),
    );
    // Lone surrogates become U+FFFD, as in TextEncoder.
    expect(utf8Bytes('\ud800x')).toEqual([0xef, 0xbf, 0xbd, 0x78]);
  });
});

describe('jitterSeconds', () => {
  it('is hash(occurrence) mod (jitter + 1)', () => {
    const id = 'cron:1:2026-03-08T07:00:00.000Z';
    expect(jitterSeconds(id, 59)).toBe(fnv1a32(id) % 60);
  });

  it('is the same on every call and every instance (a pinned value)', () => {
    // Pinned, so a change of hash (which would move every deployed task's runs) fails here.
    expect(fnv1a32('interval:2:2026-01-01T12:00:00.000Z')).toBe(1409526809);
    expect(jitterSeconds('interval:2:2026-01-01T12:00:00.000Z', 300)).toBe(96);
    // A second, independent implementation (BigInt over TextEncoder bytes) agrees.
    fc.assert(fc.property(fc.string(), (id) => fnv1a32(id) === fnvReference(id)));
  });

  it('no jitter means zero', () => {
    expect(jitterSeconds('x', 0)).toBe(0);
    expect(jitterSeconds('x', null)).toBe(0);
    expect(jitterSeconds('x', undefined)).toBe(0);
  });

  it('stays within [0, jitter] (property)', () => {
    fc.assert(
      fc.property(fc.string(), fc.integer({ min: 0, max: 86_400 }), (id, j) => {
        const s = jitterSeconds(id, j);
        return Number.isInteger(s) && s >= 0 && s <= j && s === jitterSeconds(id, j);
      }),
    );
  });
});

/** An independent FNV-1a over TextEncoder bytes with BigInt arithmetic: a second "instance". */
function fnvReference(text: string): number {
  let h = 0x811c9dc5n;
  for (const b of new TextEncoder().encode(text)) {
    h ^= BigInt(b);
    h = (h * 0x01000193n) & 0xffffffffn;
  }
  return Number(h);
}
