// Redactor.text remembers what it made of each text it scanned (a run records the same strings in
// several events). What a repeat returns must be exactly what a fresh scan returns, whatever the
// memo holds: hits, evictions, texts too long to be remembered, unicode, keys.
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import { REDACTED, Redactor, redact } from '../../src/telemetry/redact.js';
import { createEventRecord } from '../../src/telemetry/record.js';

const OPENAI = 'sk-' + 'proj-Abc123def456ghi789jkl012mno345';
const CONFIGURED = 'cfg-model-key-Q7x2vK9pLm4Rt8Zw';

/** What a Redactor with an empty memo makes of a text. */
const fresh = (text: string): string => new Redactor([CONFIGURED]).text(text);

describe('Redactor.text memo', () => {
  it('a repeated text is redacted again, not returned as it came in', () => {
    const r = new Redactor([CONFIGURED]);
    const text = `tool said: key ${CONFIGURED} and password=hunter2-horse`;
    const first = r.text(text);
    expect(first).toBe(`tool said: key ${REDACTED} and password=${REDACTED}`);
    for (let i = 0; i < 3; i++) expect(r.text(text)).toBe(first);
    // An equal string built separately (another object, same characters) also gets the redacted text.
    expect(r.text(['tool said: key ', CONFIGURED, ' and password=hunter2-horse'].join(''))).toBe(first);
  });

  it('stays right after the memo is emptied by many distinct texts', () => {
    const r = new Redactor([CONFIGURED]);
    const secretText = `Authorization: Bearer ${OPENAI}`;
    expect(r.text(secretText)).toBe(`Authorization: ${REDACTED}`);
    for (let i = 0; i < 25_000; i++) r.text(`ordinary text number ${i}`);
    expect(r.text(secretText)).toBe(`Authorization: ${REDACTED}`);
    expect(r.text('ordinary text number 7')).toBe('ordinary text number 7');
  });

  it('texts on both sides of the longest remembered length (16,383) are redacted on every call, with the secret at the very end', () => {
    const r = new Redactor([CONFIGURED]);
    for (const length of [16_382, 16_383, 16_384, 40_000]) {
      const text = 'x'.repeat(length - CONFIGURED.length - 1) + ' ' + CONFIGURED;
      expect(text.length).toBe(length);
      const expected = fresh(text);
      expect(expected.endsWith(` ${REDACTED}`)).toBe(true);
      expect(r.text(text)).toBe(expected);
      expect(r.text(text)).toBe(expected);
    }
  });

  it('a secret right at the start, at the end and across a surrogate pair boundary in unicode text', () => {
    const r = new Redactor([CONFIGURED]);
    const texts = [`${CONFIGURED} 🔑 clé`, `日本語のテキスト😀${CONFIGURED}`, `😀😀 api_key="sécret-ünïcode-😀-value" 😀`, `emoji before token=${OPENAI}😀`];
    for (const text of texts) {
      const out = r.text(text);
      expect(out).not.toContain(CONFIGURED);
      expect(out).not.toContain('sécret');
      expect(out).not.toContain(OPENAI);
      expect(out).toContain(REDACTED);
      expect(r.text(text)).toBe(out);
      expect(out).toBe(fresh(text));
    }
  });

  it('a secret inside a nested object key and value, in two events in a row', () => {
    const r = new Redactor([CONFIGURED]);
    const payload = { sessions: { [OPENAI]: { note: `uses ${CONFIGURED}`, list: [`token=${OPENAI}`] } }, [`key ${CONFIGURED}`]: 1 };
    const expected = {
      sessions: { [REDACTED]: { note: `uses ${REDACTED}`, list: [`token=${REDACTED}`] } },
      [`key ${REDACTED}`]: 1,
    };
    expect(redact(payload, r)).toEqual(expected);
    const clock = new ManualClock();
    for (let i = 0; i < 2; i++) {
      const event = createEventRecord(
        { event_type: 'tool_result', trace_id: 't', span_id: 's', actor: { type: 'tool', id: 'x' }, output: payload, metadata: { [OPENAI]: 'v' } },
        { capture: 'full', redactor: r },
        clock,
      );
      expect(event.output).toEqual(expected);
      expect(JSON.stringify(event)).not.toContain(OPENAI);
      expect(JSON.stringify(event)).not.toContain(CONFIGURED);
    }
  });
});
