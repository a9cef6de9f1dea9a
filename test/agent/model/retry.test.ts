import { describe, expect, it } from 'vitest';
import {
  ModelCallError,
  parseRetryAfterMs,
  retryDelayMs,
  toModelCallError,
  withRetries,
  type ModelCallRequest,
  type ModelCallResult,
  type ModelProvider,
} from '../../../src/agent/model/index.js';

const ok: ModelCallResult = { text: 'ok', tool_calls: [], usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2 }, finish_reason: 'stop', model: 'fake' };

/** A provider that plays a list of outcomes: an error to throw, or a result (streaming its text). */
function fake(outcomes: Array<ModelCallError | ModelCallResult | ((req: ModelCallRequest) => Promise<ModelCallResult>)>): ModelProvider & { calls: number } {
  const p = {
    provider: 'fake',
    model: 'fake',
    calls: 0,
    estimateInputTokens: () => 7,
    async call(req: ModelCallRequest): Promise<ModelCallResult> {
      const o = outcomes[p.calls++];
      if (o === undefined) throw new Error('no outcome scripted');
      if (typeof o === 'function') return o(req);
      if (o instanceof ModelCallError) throw o;
      req.onDelta?.(o.text);
      return o;
    },
  };
  return p;
}

describe('retryDelayMs', () => {
  const opts = { baseDelayMs: 500, maxDelayMs: 10_000 };
  const e = (retryAfterMs?: number) => new ModelCallError('server', 'x', retryAfterMs === undefined ? {} : { retryAfterMs });

  it('is full jitter over an exponential window, capped', () => {
    expect(retryDelayMs(1, e(), { ...opts, random: () => 0.999 })).toBe(499);
    expect(retryDelayMs(3, e(), { ...opts, random: () => 0.5 })).toBe(1000);
    expect(retryDelayMs(1, e(), { ...opts, random: () => 0 })).toBe(0);
    expect(retryDelayMs(20, e(), { ...opts, random: () => 0.999 })).toBe(9990);
  });

  it('uses Retry-After as a floor, still capped at maxDelayMs', () => {
    expect(retryDelayMs(1, e(3000), { ...opts, random: () => 0.1 })).toBe(3000);
    expect(retryDelayMs(5, e(100), { ...opts, random: () => 0.5 })).toBe(4000);
    expect(retryDelayMs(1, e(60_000), { ...opts, random: () => 0.1 })).toBe(10_000);
  });
});

describe('parseRetryAfterMs', () => {
  it('reads seconds, milliseconds and HTTP dates', () => {
    expect(parseRetryAfterMs({ 'Retry-After': '3' })).toBe(3000);
    expect(parseRetryAfterMs({ 'retry-after': '1.5' })).toBe(1500);
    expect(parseRetryAfterMs({ 'retry-after-ms': '250', 'retry-after': '9' })).toBe(250);
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(parseRetryAfterMs({ 'retry-after': 'Thu, 01 Jan 2026 00:00:05 GMT' }, now)).toBe(5000);
    expect(parseRetryAfterMs({ 'retry-after': 'soon' })).toBeUndefined();
    expect(parseRetryAfterMs(undefined)).toBeUndefined();
  });
});

describe('withRetries', () => {
  it('retries transient kinds and reports each failure once', async () => {
    const p = fake([new ModelCallError('connection', 'reset'), new ModelCallError('timeout', 'slow'), ok]);
    const seen: Array<[string, number, boolean, number]> = [];
    const r = await withRetries(p, {
      baseDelayMs: 10,
      random: () => 0.5,
      sleep: async () => {},
      onError: (err, a, w, d) => seen.push([err.kind, a, w, d]),
    }).call({ messages: [], tools: [] });
    expect(r).toEqual(ok);
    expect(seen).toEqual([
      ['connection', 1, true, 5],
      ['timeout', 2, true, 10],
    ]);
    expect(p.calls).toBe(3);
  });

  it('turns unknown throws into ModelCallError and does not retry them', async () => {
    const p = fake([
      async () => {
        throw new Error('boom');
      },
      ok,
    ]);
    const err = await withRetries(p, { sleep: async () => {} })
      .call({ messages: [], tools: [] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ModelCallError);
    expect((err as ModelCallError).kind).toBe('unknown');
    expect(p.calls).toBe(1);
  });

  it('a throwing onError does not change the outcome', async () => {
    const p = fake([new ModelCallError('server', '502', { status: 502 }), ok]);
    const r = await withRetries(p, {
      sleep: async () => {},
      onError: () => {
        throw new Error('telemetry down');
      },
    }).call({ messages: [], tools: [] });
    expect(r.text).toBe('ok');
  });

  it('stops waiting at once when aborted during the real backoff sleep', async () => {
    const p = fake([new ModelCallError('rate_limited', '429', { status: 429, retryAfterMs: 600_000 }), ok]);
    const ac = new AbortController();
    const pending = withRetries(p, { maxDelayMs: 600_000, onError: () => queueMicrotask(() => ac.abort()) }).call({
      messages: [],
      tools: [],
      signal: ac.signal,
    });
    const err = await pending.catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'aborted', retryable: false });
    expect(p.calls).toBe(1);
  });

  it('does not start when already aborted, and keeps the provider identity', async () => {
    const p = fake([ok]);
    const w = withRetries(p);
    expect([w.provider, w.model, w.estimateInputTokens([], [])]).toEqual(['fake', 'fake', 7]);
    const ac = new AbortController();
    ac.abort();
    await expect(w.call({ messages: [], tools: [], signal: ac.signal })).rejects.toMatchObject({ kind: 'aborted' });
    expect(p.calls).toBe(0);
  });
});

describe('toModelCallError', () => {
  it('tells a timeout signal from a caller abort', () => {
    const t = new AbortController();
    t.abort(new DOMException('timed out', 'TimeoutError'));
    expect(toModelCallError(new DOMException('x', 'AbortError'), t.signal)).toMatchObject({ kind: 'timeout', retryable: true });
    const a = new AbortController();
    a.abort();
    expect(toModelCallError(new DOMException('x', 'AbortError'), a.signal)).toMatchObject({ kind: 'aborted', retryable: false });
  });

  it('finds socket error codes in the cause chain', () => {
    const inner = Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' });
    const e = toModelCallError(new TypeError('terminated', { cause: inner }));
    expect(e).toMatchObject({ kind: 'connection', retryable: true });
    expect(JSON.parse(JSON.stringify(e))).toMatchObject({ type: 'ModelCallError', kind: 'connection', retryable: true });
  });
});
