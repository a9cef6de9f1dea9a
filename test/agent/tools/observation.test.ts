import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatObservation } from '../../../src/agent/tools/index.js';

describe('formatObservation', () => {
  it('passes plain strings through', () => {
    expect(formatObservation('hello\n\tworld')).toEqual({ content: 'hello\n\tworld', truncated: false, original_chars: 12 });
  });

  it('parses strings that hold JSON and formats them like values', () => {
    expect(formatObservation('  {"a":1,"b":[1,2]}  ').content).toBe('{"a":1,"b":[1,2]}');
    expect(formatObservation('[1, 2]').content).toBe('[1,2]');
    // looks like JSON but is not: kept as-is
    expect(formatObservation('{not json}').content).toBe('{not json}');
  });

  it('formats values as pretty but compact JSON', () => {
    expect(formatObservation({ sum: 5 }).content).toBe('{"sum":5}');
    const big = { items: Array.from({ length: 3 }, (_, i) => ({ id: i, name: `item number ${i} with a fairly long name` })), total: 3 };
    expect(formatObservation(big).content).toBe(
      [
        '{',
        '  "items": [',
        '    {"id":0,"name":"item number 0 with a fairly long name"},',
        '    {"id":1,"name":"item number 1 with a fairly long name"},',
        '    {"id":2,"name":"item number 2 with a fairly long name"}',
        '  ],',
        '  "total": 3',
        '}',
      ].join('\n'),
    );
    expect(JSON.parse(formatObservation(big).content)).toEqual(big);
  });

  it('formats scalars, null and nothing', () => {
    expect(formatObservation(42).content).toBe('42');
    expect(formatObservation(true).content).toBe('true');
    expect(formatObservation(null).content).toBe('null');
    expect(formatObservation(undefined).content).toBe('(no output)');
    expect(formatObservation(10n).content).toBe('10');
    expect(formatObservation({ big: 10n }).content).toBe('{"big":"10"}');
  });

  it('survives values that are not JSON', () => {
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    expect(formatObservation(cyclic).content).toBe('{"a":1,"self":"[Circular]"}');
    expect(formatObservation({ f: () => 1, d: new Date('2026-01-01T00:00:00Z'), n: NaN }).content).toBe('{"d":"2026-01-01T00:00:00.000Z","n":"NaN"}');
  });

  it('strips ANSI escapes and control characters but keeps newlines and tabs', () => {
    const raw = '\u001b[31mred\u001b[0m and \u001b]0;title\u0007bold\u001b[1m!\u0000\u0007\r\nnext\tcol\u007f';
    expect(formatObservation(raw).content).toBe('red and bold!\nnext\tcol');
  });

  it('cleans strings inside values too', () => {
    expect(formatObservation({ log: '\u001b[32mok\u001b[0m\u0008' }).content).toBe('{"log":"ok"}');
    expect(formatObservation('{"log":"\\u001b[32mok"}').content).toBe('{"log":"ok"}');
  });

  it('truncates with a visible marker, keeping head and tail, within maxChars', () => {
    const text = `HEAD${'x'.repeat(10_000)}TAIL`;
    const r = formatObservation(text, { maxChars: 1000 });
    expect(r.truncated).toBe(true);
    expect(r.original_chars).toBe(10_008);
    expect(r.content.length).toBeLessThanOrEqual(1000);
    expect(r.content.startsWith('HEAD')).toBe(true);
    expect(r.content.endsWith('TAIL')).toBe(true);
    const m = /\[\.\.\. truncated (\d+) chars\]/.exec(r.content);
    expect(m).not.toBeNull();
    // what is kept plus what the marker says was dropped is the whole
    expect(r.content.length - m![0].length - 2 + Number(m![1])).toBe(10_008);
  });

  it('defaults to 16000 chars', () => {
    expect(formatObservation('y'.repeat(16_000)).truncated).toBe(false);
    const r = formatObservation('y'.repeat(16_001));
    expect(r.truncated).toBe(true);
    expect(r.content.length).toBeLessThanOrEqual(16_000);
  });

  it('never exceeds maxChars and accounts for every dropped char (property)', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 3000 }), fc.integer({ min: 40, max: 2000 }), (s, max) => {
        const r = formatObservation(s, { maxChars: max });
        expect(r.content.length).toBeLessThanOrEqual(max);
        expect(r.truncated).toBe(r.original_chars > max);
        if (r.truncated) {
          const m = /\n\[\.\.\. truncated (\d+) chars\]\n/.exec(r.content)!;
          expect(r.content.length - m[0].length + Number(m[1])).toBe(r.original_chars);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('does not split a surrogate pair', () => {
    const r = formatObservation('😀'.repeat(500), { maxChars: 101 });
    expect(r.content).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])/);
    expect(r.content).not.toMatch(/(?<![\ud800-\udbff])[\udc00-\udfff]/);
  });
});
