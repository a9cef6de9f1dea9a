// Our SSE parser and Chat Completions chunk decoder (src/agent/model/sse-parser.ts,
// chat-completions-decoder.ts), fed bytes the way a socket hands them over: split anywhere.
import { StringDecoder } from 'node:string_decoder';
import { describe, expect, it } from 'vitest';
import { MAX_SSE_EVENT_CHARS, SseParser } from '../../../src/agent/model/sse-parser.js';
import { ChatCompletionsDecoder, ChatStreamDataError, type ChatCompletionsResult } from '../../../src/agent/model/chat-completions-decoder.js';

/** Feeds `bytes` in pieces of `size` bytes (1 = byte by byte) through a UTF-8 decoder into the parser. */
function sseEvents(wire: string | Buffer, size: number): string[] {
  const out: string[] = [];
  const parser = new SseParser((d) => out.push(d));
  const utf8 = new StringDecoder('utf8');
  const bytes = typeof wire === 'string' ? Buffer.from(wire) : wire;
  for (let i = 0; i < bytes.length; i += size) parser.feed(utf8.write(bytes.subarray(i, i + size)));
  parser.feed(utf8.end());
  return out;
}

const toArguments = (input: unknown): Record<string, unknown> => {
  try {
    return JSON.parse(String(input)) as Record<string, unknown>;
  } catch {
    return {};
  }
};

/** Decodes a whole SSE wire text split into `size`-byte pieces. */
function decode(wire: string, size = 1): { deltas: string[]; result: ChatCompletionsResult } {
  const deltas: string[] = [];
  const decoder = new ChatCompletionsDecoder((t) => deltas.push(t), toArguments);
  for (const data of sseEvents(wire, size)) decoder.push(data);
  return { deltas, result: decoder.finish() };
}

const base = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm-1' };
const chunk = (delta: unknown, finish_reason: string | null = null, extra: Record<string, unknown> = {}) => ({
  ...base,
  choices: [{ index: 0, delta, finish_reason }],
  ...extra,
});
const wireOf = (chunks: unknown[], eol = '\n'): string => chunks.map((c) => `data: ${typeof c === 'string' ? c : JSON.stringify(c)}${eol}${eol}`).join('');

describe('SseParser', () => {
  const wire = ': keep-alive\n\nevent: message\nid: 7\nretry: 100\ndata: {"a":1}\n\ndata:two\ndata:  lines\n\n:comment\ndata: [DONE]\n\n';

  it('reads data events, joins multi-line data, skips comments and other fields, split at every byte', () => {
    for (const size of [1, 2, 3, 7, 1000]) expect(sseEvents(wire, size)).toEqual(['{"a":1}', 'two\n lines', '[DONE]']);
  });

  it('refuses an event that grows past the bound, in one endless line or in many data lines', () => {
    const endless = new SseParser(() => undefined);
    const piece = 'x'.repeat(1 << 20);
    expect(() => {
      for (let i = 0; i <= MAX_SSE_EVENT_CHARS / piece.length; i++) endless.feed(i === 0 ? `data: ${piece}` : piece);
    }).toThrow(/exceeds/);
    const many = new SseParser(() => undefined);
    expect(() => {
      for (let i = 0; i <= MAX_SSE_EVENT_CHARS / piece.length; i++) many.feed(`data: ${piece}\n`);
    }).toThrow(/exceeds/);
    // Below the bound, a large event still arrives whole.
    const out: string[] = [];
    new SseParser((d) => out.push(d)).feed(`data: ${piece}\n\n`);
    expect(out[0].length).toBe(piece.length);
  });

  it('takes CRLF and lone CR line ends, also with CR and LF in different chunks', () => {
    for (const eol of ['\r\n', '\r']) {
      const w = wire.replaceAll('\n', eol);
      for (const size of [1, 2, 5, 1000]) expect(sseEvents(w, size)).toEqual(['{"a":1}', 'two\n lines', '[DONE]']);
    }
  });

  it('keeps a multi-byte character split across chunks whole, drops a BOM and an event the stream cut before its blank line', () => {
    const w = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('data: héllo → 世界 🎉\n\ndata: cut')]);
    expect(sseEvents(w, 1)).toEqual(['héllo → 世界 🎉']);
  });

  it('a data line without a colon is an empty data field', () => {
    expect(sseEvents('data\n\ndata:\n\n', 1)).toEqual(['', '']);
  });
});

describe('ChatCompletionsDecoder', () => {
  it('streams text deltas, takes the finish reason, the usage-only final chunk (cached and reasoning tokens) and the first chunk model/id', () => {
    const wire = wireOf([
      chunk({ role: 'assistant', content: '' }),
      chunk({ content: 'Hel' }),
      chunk({ content: 'lo ✓' }),
      chunk({}, 'stop'),
      {
        ...base,
        model: 'ignored-later',
        choices: [],
        usage: { prompt_tokens: 12, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 4 }, completion_tokens_details: { reasoning_tokens: 2 } },
      },
      '[DONE]',
    ]);
    for (const size of [1, 3, 4096]) {
      const { deltas, result } = decode(wire, size);
      expect(deltas).toEqual(['Hel', 'lo ✓']);
      expect(result).toEqual({
        text: 'Hello ✓',
        tool_calls: [],
        inputTokens: 12,
        outputTokens: 5,
        cachedInputTokens: 4,
        reasoningTokens: 2,
        finishReason: 'stop',
        modelId: 'm-1',
        responseId: 'chatcmpl-1',
      });
    }
  });

  it('assembles interleaved tool calls by index and returns them in index order, text before them kept', () => {
    const wire = wireOf(
      [
        chunk({ content: 'Checking.' }),
        chunk({ tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'clock', arguments: '' } }] }),
        chunk({ tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'add', arguments: '{"a"' } }] }),
        chunk({ tool_calls: [{ index: 1, function: { arguments: '{"tz":' } }] }),
        chunk({ tool_calls: [{ index: 0, function: { arguments: ':1,"b":2}' } }] }),
        chunk({ tool_calls: [{ index: 1, function: { arguments: '"UTC"}' } }] }),
        chunk({}, 'tool_calls'),
      ],
      '\r\n',
    );
    const { deltas, result } = decode(wire, 1);
    expect(deltas).toEqual(['Checking.']);
    expect(result.tool_calls).toEqual([
      { id: 'call_a', name: 'add', arguments: { a: 1, b: 2 } },
      { id: 'call_b', name: 'clock', arguments: { tz: 'UTC' } },
    ]);
    expect(result.finishReason).toBe('tool-calls');
    expect(result.inputTokens).toBeUndefined();
  });

  it('a server that reuses index 0 for parallel calls, or sends no id or no index, still gets every call', () => {
    const reused = decode(
      wireOf([
        chunk({ tool_calls: [{ index: 0, id: 'x1', function: { name: 'clock', arguments: '{}' } }] }),
        chunk({ tool_calls: [{ index: 0, id: 'x2', function: { name: 'clock', arguments: '{"tz":"CET"}' } }] }),
        chunk({}, 'tool_calls'),
      ]),
    ).result.tool_calls;
    expect(reused).toEqual([
      { id: 'x1', name: 'clock', arguments: {} },
      { id: 'x2', name: 'clock', arguments: { tz: 'CET' } },
    ]);
    const noIds = decode(
      wireOf([
        chunk({ tool_calls: [{ function: { name: 'add', arguments: '{"a":' } }] }),
        chunk({ tool_calls: [{ function: { arguments: '1}' } }] }),
        chunk({ tool_calls: [{ function: { name: 'add', arguments: '{}' } }] }),
        chunk({}, 'stop'),
      ]),
    ).result.tool_calls;
    expect(noIds.map((c) => [c.name, c.arguments])).toEqual([
      ['add', { a: 1 }],
      ['add', {}],
    ]);
    expect(noIds[0].id).not.toBe(noIds[1].id);
    expect(noIds[0].id).toMatch(/\S/);
  });

  it('reads content sent as parts, keeping text parts only', () => {
    const { result } = decode(
      wireOf([
        chunk({
          content: [
            { type: 'thinking', thinking: [{ type: 'text', text: 'hmm' }] },
            { type: 'text', text: 'Hi' },
          ],
        }),
        chunk({ reasoning_content: 'private' }, 'stop'),
      ]),
    );
    expect(result.text).toBe('Hi');
  });

  it('maps finish reasons to the SDK unified names', () => {
    const finish = (r: string) => decode(wireOf([chunk({ content: 'x' }, r)]), 4096).result.finishReason;
    expect(['stop', 'length', 'content_filter', 'tool_calls', 'function_call', 'weird'].map(finish)).toEqual([
      'stop',
      'length',
      'content-filter',
      'tool-calls',
      'tool-calls',
      'other',
    ]);
  });

  it('a stream that ends without a finish reason fails, as the provider does', () => {
    expect(() => decode(wireOf([chunk({ content: 'half an ans' })]), 4096)).toThrow(new ChatStreamDataError('Response stream ended without a finish reason.'));
  });

  it('a malformed JSON chunk fails at once, after the text before it reached onText', () => {
    const deltas: string[] = [];
    const decoder = new ChatCompletionsDecoder((t) => deltas.push(t), toArguments);
    const events = sseEvents(wireOf([chunk({ content: 'ok ' }), '{"choices": [', chunk({ content: 'never' }, 'stop')]), 1);
    expect(() => {
      for (const e of events) decoder.push(e);
    }).toThrow(/^JSON parsing failed: Text: \{"choices": \[\./);
    expect(deltas).toEqual(['ok ']);
  });

  it('an error chunk mid-stream fails with the API message; a chunk without choices fails validation', () => {
    const decoder = new ChatCompletionsDecoder(() => {}, toArguments);
    decoder.push(JSON.stringify(chunk({ content: 'a' })));
    expect(() => decoder.push(JSON.stringify({ error: { message: 'overloaded', type: 'server_error' } }))).toThrow(
      'model stream reported an error: overloaded',
    );
    expect(() => new ChatCompletionsDecoder(() => {}, toArguments).push('{"id":"x"}')).toThrow(/^Type validation failed/);
  });
});
