import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock.js';
import { MAX_PAYLOAD_BYTES, REDACTED, capturePayload, isSecretKey, redact } from '../../src/telemetry/redact.js';
import { createEventRecord, type EventRecordInput } from '../../src/telemetry/record.js';

const clock = new ManualClock(Date.parse('2026-03-04T05:06:07.890Z'));

const base = (over: Partial<EventRecordInput> = {}): EventRecordInput => ({
  event_type: 'tool_call',
  trace_id: 'trace_1',
  span_id: 'span_1',
  actor: { type: 'tool', id: 'http_get' },
  metadata: { run_id: 'run_1', session_id: 'session_1', agent_id: 'agent_1', task_id: 'task_1' },
  ...over,
});

describe('createEventRecord', () => {
  it('builds the full §8.1 record with top-level index fields', () => {
    const r = createEventRecord(
      base({ input: { url: 'https://x' }, output: 'ok', token_usage: { input_tokens: 3, output_tokens: 4, total_tokens: 7 }, duration_ms: 12, sequence: 5 }),
      { capture: 'full' },
      clock,
    );
    expect(r.event_id).toMatch(/^event_[0-9A-Za-z]{21}$/);
    expect(r).toMatchObject({
      event_type: 'tool_call',
      trace_id: 'trace_1',
      span_id: 'span_1',
      parent_span_id: null,
      sequence: 5,
      timestamp: '2026-03-04T05:06:07.890Z',
      actor: { type: 'tool', id: 'http_get', name: null },
      input: { url: 'https://x' },
      output: 'ok',
      error: null,
      token_usage: { input_tokens: 3, output_tokens: 4, total_tokens: 7 },
      estimated_cost_usd: null,
      duration_ms: 12,
      run_id: 'run_1',
      session_id: 'session_1',
      task_id: 'task_1',
      metadata: { run_id: 'run_1', session_id: 'session_1', agent_id: 'agent_1', task_id: 'task_1' },
    });
  });

  it('gives null top-level ids when the context is unknown and keeps a given event_id', () => {
    const r = createEventRecord(base({ metadata: {}, event_id: 'event_fixed', input: undefined }), { capture: 'full' }, clock);
    expect(r.event_id).toBe('event_fixed');
    expect([r.run_id, r.session_id, r.task_id, r.input, r.output]).toEqual([null, null, null, null, null]);
  });

  it('redacts secrets at any depth in input, output and metadata', () => {
    const r = createEventRecord(
      base({
        input: {
          url: 'https://x',
          headers: { Authorization: 'Bearer sk-live', 'X-Api-Key': 'k1', 'Set-Cookie': 'a=b' },
          nested: [{ deeper: { password: 'p', PASSWD: 'q', Private_Key: '-----BEGIN', keep: 1 } }],
          access_token: 'tok',
          apiKey: 'camel',
        },
        output: { data: { secret: { anything: 'inside' }, cookie: 'c', token: 't', input_tokens: 10, max_tokens: 5 } },
        metadata: { run_id: 'run_1', credentials: { api_key: 'meta-secret', region: 'eu' } },
      }),
      { capture: 'full' },
      clock,
    );
    const input = r.input as Record<string, any>;
    expect(input.headers).toEqual({ Authorization: REDACTED, 'X-Api-Key': REDACTED, 'Set-Cookie': REDACTED });
    expect(input.nested[0].deeper).toEqual({ password: REDACTED, PASSWD: REDACTED, Private_Key: REDACTED, keep: 1 });
    expect(input.access_token).toBe(REDACTED);
    expect(input.apiKey).toBe(REDACTED);
    expect(input.url).toBe('https://x');
    // Usage counters named *_tokens are not credentials.
    expect(r.output).toEqual({ data: { secret: REDACTED, cookie: REDACTED, token: REDACTED, input_tokens: 10, max_tokens: 5 } });
    expect(r.metadata.credentials).toEqual({ api_key: REDACTED, region: 'eu' });
    expect(JSON.stringify(r)).not.toMatch(/sk-live|meta-secret|BEGIN|camel|"tok"/);
  });

  it('does not mutate or alias the caller payload', () => {
    const payload = { password: 'p', list: [1, 2] };
    const r = createEventRecord(base({ input: payload }), { capture: 'full' }, clock);
    expect(payload.password).toBe('p');
    payload.list.push(3);
    expect((r.input as { list: number[] }).list).toEqual([1, 2]);
  });

  it('metadata_only drops payloads but keeps type and size, and still redacts metadata', () => {
    const input = { query: 'héllo', n: 1 };
    const r = createEventRecord(
      base({ input, output: ['a', 'b'], metadata: { run_id: 'run_1', token: 'x' }, error: { type: 'ToolError', message: 'boom' } }),
      { capture: 'metadata_only' },
      clock,
    );
    expect(r.input).toEqual({ omitted: true, type: 'object', bytes: Buffer.byteLength(JSON.stringify(input)) });
    expect(r.output).toEqual({ omitted: true, type: 'array', bytes: 9 });
    expect(r.metadata).toEqual({ run_id: 'run_1', token: REDACTED });
    expect(r.error).toEqual({ type: 'ToolError', message: 'boom' });
    expect(JSON.stringify(r)).not.toContain('héllo');
  });

  it('truncates a payload over 64 KB with a marker and keeps small ones whole', () => {
    const big = { text: 'x'.repeat(MAX_PAYLOAD_BYTES) };
    const r = createEventRecord(base({ output: big, input: 'y'.repeat(1000) }), { capture: 'full' }, clock);
    const out = r.output as { truncated: boolean; original_bytes: number; preview: string };
    expect(out.truncated).toBe(true);
    expect(out.original_bytes).toBe(Buffer.byteLength(JSON.stringify(big)));
    expect(out.preview.startsWith('{"text":"xxx')).toBe(true);
    expect(Buffer.byteLength(JSON.stringify(out))).toBeLessThanOrEqual(MAX_PAYLOAD_BYTES);
    expect(r.input).toBe('y'.repeat(1000));
  });

  it('measures bytes exactly near the limit: multi-byte text over 64 KB is cut, escape-heavy text under it is kept', () => {
    // 30k three-byte characters: 90 KB of UTF-8 although only 30k UTF-16 units.
    const wide = '€'.repeat(30_000);
    expect((capturePayload(wide, 'full') as { truncated: boolean }).truncated).toBe(true);
    // 15k plain characters: over the cheap upper bound (6 bytes/char) but only ~15 KB of JSON.
    const plain = 'a'.repeat(15_000);
    expect(capturePayload(plain, 'full')).toBe(plain);
    // A secret removed by redaction does not count towards the size.
    const withSecret = { password: 'z'.repeat(MAX_PAYLOAD_BYTES * 2), ok: true };
    expect(capturePayload(withSecret, 'full')).toEqual({ password: REDACTED, ok: true });
  });

  it('does not cut a surrogate pair in the preview', () => {
    const emoji = '😀'.repeat(40_000);
    const out = capturePayload(emoji, 'full') as { preview: string };
    const last = out.preview.charCodeAt(out.preview.length - 1);
    expect(last >= 0xd800 && last <= 0xdbff).toBe(false);
  });

  it('never throws on cycles, BigInt, Errors, Dates or functions', () => {
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    const r = createEventRecord(
      base({ input: { cyclic, big: 10n, err: new Error('bad'), when: new Date(0), fn: () => 1, u: undefined } }),
      { capture: 'full' },
      clock,
    );
    expect(r.input).toEqual({
      cyclic: { a: 1, self: '[Circular]' },
      big: '10',
      err: { type: 'Error', message: 'bad' },
      when: '1970-01-01T00:00:00.000Z',
    });
    const m = createEventRecord(base({ input: { cyclic } }), { capture: 'metadata_only' }, clock);
    expect((m.input as { omitted: boolean }).omitted).toBe(true);
  });

  it('a repeated (non-cyclic) reference is kept, not marked circular', () => {
    const shared = { v: 1 };
    expect(redact({ a: shared, b: shared })).toEqual({ a: { v: 1 }, b: { v: 1 } });
  });
});

describe('isSecretKey', () => {
  it.each([
    'api_key',
    'APIKEY',
    'x-api-key',
    'OPENAI_API_KEY',
    'authorization',
    'Proxy-Authorization',
    'password',
    'db_password',
    'passwd',
    'token',
    'access_token',
    'refresh_token',
    'accessToken',
    'secret',
    'client_secret',
    'cookie',
    'set-cookie',
    'private_key',
    'privateKey',
  ])('%s is secret', (k) => expect(isSecretKey(k)).toBe(true));
  it.each(['input_tokens', 'output_tokens', 'total_tokens', 'max_tokens', 'token_usage', 'run_id', 'key', 'tokenizer'])('%s is not secret', (k) =>
    expect(isSecretKey(k)).toBe(false),
  );
});
