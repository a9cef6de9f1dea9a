// src/clock.ts isoAt / canonicalIso: the same text as `new Date(x).toISOString()`, with a date
// formatted once per millisecond instead of once per use (a run stamps its record, snapshot,
// checkpoints and each event with "now"), and an event stamped by its emitter taken as it is by
// createEventRecord instead of parsed and formatted again.
import { describe, expect, it } from 'vitest';
import { canonicalIso, isoAt, ManualClock } from '../../src/clock.js';
import { createEventRecord } from '../../src/telemetry/record.js';

/** Date.prototype.toISOString calls while `f` runs. */
function formats(f: () => void): number {
  const original = Date.prototype.toISOString;
  let n = 0;
  Date.prototype.toISOString = function (this: Date) {
    n++;
    return original.call(this);
  };
  try {
    f();
  } finally {
    Date.prototype.toISOString = original;
  }
  return n;
}

describe('isoAt', () => {
  it('says what new Date(ms).toISOString() says, and throws where it throws', () => {
    for (const ms of [0, 1, 1.7, -1, 1767225600000, 1767225600000, 1767225600001, 8.64e15, -8.64e15, 253402300800000]) {
      expect(isoAt(ms)).toBe(new Date(ms).toISOString());
    }
    for (const bad of [Number.NaN, 8.64e15 + 1, Number.POSITIVE_INFINITY]) expect(() => isoAt(bad)).toThrow(RangeError);
    expect(isoAt(5)).toBe(new Date(5).toISOString());
  });

  it('formats once per millisecond', () => {
    const ms = Date.parse('2026-03-01T10:00:00.123Z') + Math.floor(Math.random() * 1000);
    expect(
      formats(() => {
        for (let i = 0; i < 10; i++) isoAt(ms);
        isoAt(ms + 1);
      }),
    ).toBe(2);
  });
});

describe('canonicalIso', () => {
  it('says what new Date(s).toISOString() says of a date, null of anything else', () => {
    const last = isoAt(1767225600123);
    for (const s of [
      last,
      '2026-01-01',
      '2026-01-01T00:00:00+02:00',
      '2026-01-01T00:00:00.000Z',
      'Thu, 01 Jan 2026 00:00:00 GMT',
      '+275760-09-13T00:00:00.000Z',
    ]) {
      expect(canonicalIso(s)).toBe(new Date(s).toISOString());
    }
    for (const s of ['', 'yesterday', '2026-13-01T00:00:00Z', '+275760-09-13T00:00:00.001Z']) expect(canonicalIso(s)).toBeNull();
  });

  it("takes an event's stamp from isoAt as it is: stamping and recording ten events in one millisecond formats one date", () => {
    const clock = new ManualClock(Date.parse('2026-04-01T00:00:00.000Z') + Math.floor(Math.random() * 1000));
    const settings = { capture: 'full' as const };
    const n = formats(() => {
      for (let i = 0; i < 10; i++) {
        const record = createEventRecord(
          { event_type: 'model_call', trace_id: 't', span_id: 's', timestamp: isoAt(clock.now()), actor: { type: 'model', id: 'm' }, metadata: {} },
          settings,
          clock,
        );
        expect(record.timestamp).toBe(new Date(clock.now()).toISOString());
      }
    });
    // The expect's own new Date(...).toISOString() above makes ten more.
    expect(n).toBe(1 + 10);
  });
});
