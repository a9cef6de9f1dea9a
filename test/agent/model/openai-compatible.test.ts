import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../../fixtures/scripted-openai.js';
import {
  createModelProvider,
  ModelCallError,
  withRetries,
  type ChatMessage,
  type ModelProvider,
  type ToolDeclaration,
} from '../../../src/agent/model/index.js';

const clockTool: ToolDeclaration = {
  name: 'clock',
  description: 'Current time',
  input_schema: { type: 'object', properties: { timezone: { type: 'string' } } },
};
const readTool: ToolDeclaration = {
  name: 'workspace_read',
  description: 'Read a file',
  input_schema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
};
const user = (content: string): ChatMessage[] => [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content },
];

async function expectModelError(p: Promise<unknown>): Promise<ModelCallError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(ModelCallError);
    return err as ModelCallError;
  }
  throw new Error('expected the call to fail');
}

describe('openai-compatible provider against the scripted server', () => {
  let s: ScriptedOpenAI;
  let provider: ModelProvider;

  beforeAll(async () => {
    s = await startScriptedOpenAI();
    provider = createModelProvider({ provider: 'openai-compatible', base_url: s.url, model: 'scripted-1', api_key: 'sk-test' });
  });
  afterAll(async () => {
    await s.close();
  });
  beforeEach(() => {
    s.reset();
  });

  it('streams text deltas that concatenate to the result, with usage from the usage chunk', async () => {
    s.enqueue({ text: 'Hello there, streaming world.', usage: { prompt_tokens: 11, completion_tokens: 7 } });
    const deltas: string[] = [];
    const r = await provider.call({ messages: user('hi'), tools: [], onDelta: (t) => deltas.push(t) });
    expect(r.text).toBe('Hello there, streaming world.');
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.join('')).toBe(r.text);
    expect(r.usage).toEqual({ input_tokens: 11, output_tokens: 7, total_tokens: 18 });
    expect(r.finish_reason).toBe('stop');
    expect(r.tool_calls).toEqual([]);
    expect(r.model).toBe('scripted-1');
    expect(provider.provider).toBe('openai-compatible');
    const body = s.requests[0];
    expect(body.stream).toBe(true);
    expect(body.stream_options).toEqual({ include_usage: true });
    expect(body.model).toBe('scripted-1');
    expect(body.messages).toEqual([
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'hi' },
    ]);
    expect(s.headers[0].authorization).toBe('Bearer sk-test');
  });

  it('makes a non-streamed call when no onDelta is given', async () => {
    s.enqueue({ text: 'plain answer' });
    const r = await provider.call({ messages: user('hello'), tools: [], max_output_tokens: 50, temperature: 0.2 });
    expect(r.text).toBe('plain answer');
    expect(r.finish_reason).toBe('stop');
    // Deterministic server usage: ceil(chars/4) of the prompt and of the output.
    expect(r.usage).toEqual({ input_tokens: Math.ceil('You are terse.hello'.length / 4), output_tokens: 3, total_tokens: 8 });
    expect(s.requests[0].stream).toBeFalsy();
    expect(s.requests[0].max_tokens).toBe(50);
    expect(s.requests[0].temperature).toBe(0.2);
  });

  it('declares tools and returns one streamed tool call with parsed arguments, unexecuted', async () => {
    s.enqueue({ tool_calls: [{ id: 'call_a', name: 'workspace_read', arguments: { path: 'notes/todo.txt' } }] });
    const deltas: string[] = [];
    const r = await provider.call({ messages: user('read my todo'), tools: [clockTool, readTool], onDelta: (t) => deltas.push(t) });
    expect(r.finish_reason).toBe('tool_calls');
    expect(r.text).toBe('');
    expect(deltas).toEqual([]);
    expect(r.tool_calls).toEqual([{ id: 'call_a', name: 'workspace_read', arguments: { path: 'notes/todo.txt' } }]);
    const tools = s.requests[0].tools ?? [];
    expect(tools.map((t) => t.function.name)).toEqual(['clock', 'workspace_read']);
    expect(tools[1]).toMatchObject({
      type: 'function',
      function: {
        name: 'workspace_read',
        description: 'Read a file',
        parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
      },
    });
    // Only one request: the SDK did not run a tool or a second step.
    expect(s.requests).toHaveLength(1);
  });

  it('returns two parallel tool calls, streamed and non-streamed', async () => {
    const reply = {
      text: 'Let me check.',
      tool_calls: [
        { id: 'call_1', name: 'clock', arguments: { timezone: 'UTC' } },
        { id: 'call_2', name: 'workspace_read', arguments: { path: 'a.txt' } },
      ],
    };
    s.enqueue(reply, reply);
    const expected = [
      { id: 'call_1', name: 'clock', arguments: { timezone: 'UTC' } },
      { id: 'call_2', name: 'workspace_read', arguments: { path: 'a.txt' } },
    ];
    const streamed = await provider.call({ messages: user('both'), tools: [clockTool, readTool], onDelta: () => {} });
    expect(streamed.tool_calls).toEqual(expected);
    expect(streamed.text).toBe('Let me check.');
    expect(streamed.finish_reason).toBe('tool_calls');
    const plain = await provider.call({ messages: user('both'), tools: [clockTool, readTool] });
    expect(plain.tool_calls).toEqual(expected);
    expect(plain.finish_reason).toBe('tool_calls');
  });

  it('maps unparsable tool arguments to {}', async () => {
    s.enqueue({ tool_calls: [{ id: 'call_bad', name: 'clock', arguments: '{"timezone": ' }] });
    const r = await provider.call({ messages: user('time'), tools: [clockTool] });
    expect(r.tool_calls).toEqual([{ id: 'call_bad', name: 'clock', arguments: {} }]);
  });

  it('sends assistant tool calls and tool results back in OpenAI shape', async () => {
    s.enqueue({ text: 'It is noon and a.txt says hi.' });
    const messages: ChatMessage[] = [
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'time and file?' },
      {
        role: 'assistant',
        content: '',
        tool_calls: [
          { id: 'call_1', name: 'clock', arguments: { timezone: 'UTC' } },
          { id: 'call_2', name: 'workspace_read', arguments: { path: 'a.txt' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', tool_name: 'clock', content: '2026-01-01T12:00:00Z' },
      { role: 'tool', tool_call_id: 'call_2', tool_name: 'workspace_read', content: 'Denied by alice: not now' },
    ];
    const r = await provider.call({ messages, tools: [clockTool, readTool], onDelta: () => {} });
    expect(r.text).toBe('It is noon and a.txt says hi.');
    const sent = s.requests[0].messages;
    expect(sent[0]).toEqual({ role: 'system', content: 'sys' });
    expect(sent[1]).toEqual({ role: 'user', content: 'time and file?' });
    expect(sent[2]).toMatchObject({
      role: 'assistant',
      tool_calls: [
        { id: 'call_1', type: 'function', function: { name: 'clock', arguments: JSON.stringify({ timezone: 'UTC' }) } },
        { id: 'call_2', type: 'function', function: { name: 'workspace_read', arguments: JSON.stringify({ path: 'a.txt' }) } },
      ],
    });
    expect(sent[3]).toEqual({ role: 'tool', tool_call_id: 'call_1', content: '2026-01-01T12:00:00Z' });
    expect(sent[4]).toEqual({ role: 'tool', tool_call_id: 'call_2', content: 'Denied by alice: not now' });
    expect(sent).toHaveLength(5);
  });

  it('retries a 429, honouring Retry-After as a floor, then succeeds', async () => {
    s.enqueue({ status: 429, retry_after: 2 }, { text: 'after the limit' });
    const sleeps: number[] = [];
    const errors: Array<{ kind: string; attempt: number; willRetry: boolean; delay: number }> = [];
    const p = withRetries(provider, {
      random: () => 0.5,
      sleep: async (ms) => {
        sleeps.push(ms);
      },
      onError: (err, attempt, willRetry, delay) => errors.push({ kind: err.kind, attempt, willRetry, delay }),
    });
    const deltas: string[] = [];
    const r = await p.call({ messages: user('hi'), tools: [], onDelta: (t) => deltas.push(t) });
    expect(r.text).toBe('after the limit');
    expect(deltas.join('')).toBe('after the limit');
    expect(sleeps).toEqual([2000]);
    expect(errors).toEqual([{ kind: 'rate_limited', attempt: 1, willRetry: true, delay: 2000 }]);
    expect(s.requests).toHaveLength(2);
  });

  it('retries 500 twice with growing jittered backoff, then succeeds', async () => {
    s.enqueue({ status: 500 }, { status: 500 }, { text: 'finally' });
    const sleeps: number[] = [];
    const errors: ModelCallError[] = [];
    const p = withRetries(provider, {
      baseDelayMs: 100,
      random: () => 0.5,
      sleep: async (ms) => {
        sleeps.push(ms);
      },
      onError: (err) => errors.push(err),
    });
    const r = await p.call({ messages: user('hi'), tools: [] });
    expect(r.text).toBe('finally');
    expect(sleeps).toEqual([50, 100]);
    expect(errors.map((e) => [e.kind, e.status, e.retryable])).toEqual([
      ['server', 500, true],
      ['server', 500, true],
    ]);
  });

  it('gives up after maxRetries and throws the last error', async () => {
    s.enqueue({ status: 503 }, { status: 503 }, { status: 503 });
    const seen: Array<[number, boolean]> = [];
    const p = withRetries(provider, { maxRetries: 2, sleep: async () => {}, onError: (_e, a, w) => seen.push([a, w]) });
    const err = await expectModelError(p.call({ messages: user('hi'), tools: [] }));
    expect(err.kind).toBe('server');
    expect(err.status).toBe(503);
    expect(seen).toEqual([
      [1, true],
      [2, true],
      [3, false],
    ]);
    expect(s.requests).toHaveLength(3);
  });

  it('retries a connection reset', async () => {
    s.enqueue({ destroy: true }, { text: 'reconnected' });
    const errors: ModelCallError[] = [];
    const p = withRetries(provider, { sleep: async () => {}, onError: (e) => errors.push(e) });
    const r = await p.call({ messages: user('hi'), tools: [], onDelta: () => {} });
    expect(r.text).toBe('reconnected');
    expect(errors).toHaveLength(1);
    expect(errors[0].kind).toBe('connection');
    expect(errors[0].retryable).toBe(true);
  });

  it('does not retry a stream that failed after text reached onDelta', async () => {
    s.enqueue({ text: 'one two three four', destroy: true, after_chunks: 3 }, { text: 'never sent' });
    const errors: Array<[string, boolean]> = [];
    const deltas: string[] = [];
    const p = withRetries(provider, { sleep: async () => {}, onError: (e, _a, w) => errors.push([e.kind, w]) });
    const err = await expectModelError(p.call({ messages: user('hi'), tools: [], onDelta: (t) => deltas.push(t) }));
    expect(err.kind).toBe('connection');
    expect(err.partialOutput).toBe(true);
    expect(err.retryable).toBe(false);
    expect(errors).toEqual([[err.kind, false]]);
    expect(deltas.length).toBeGreaterThan(0);
    expect(s.requests).toHaveLength(1);
  });

  it('fails at once on a non-retryable 400', async () => {
    s.enqueue({ status: 400, message: 'bad tool schema' }, { text: 'never sent' });
    let sleeps = 0;
    const p = withRetries(provider, {
      sleep: async () => {
        sleeps++;
      },
    });
    const err = await expectModelError(p.call({ messages: user('hi'), tools: [] }));
    expect(err.kind).toBe('bad_request');
    expect(err.status).toBe(400);
    expect(err.retryable).toBe(false);
    expect(err.message).toContain('bad tool schema');
    expect(sleeps).toBe(0);
    expect(s.requests).toHaveLength(1);
  });

  it('maps 401 to auth, not retried', async () => {
    s.enqueue({ status: 401, message: 'invalid api key' });
    const err = await expectModelError(withRetries(provider, { sleep: async () => {} }).call({ messages: user('hi'), tools: [] }));
    expect(err.kind).toBe('auth');
    expect(s.requests).toHaveLength(1);
  });

  it('aborts a hanging call', async () => {
    s.enqueue({ hang: true });
    const ac = new AbortController();
    const pending = provider.call({ messages: user('hi'), tools: [], signal: ac.signal, onDelta: () => {} });
    await s.waitForRequests(1);
    ac.abort();
    const err = await expectModelError(pending);
    expect(err.kind).toBe('aborted');
    expect(err.retryable).toBe(false);
  });

  it('aborts mid-stream and during a retry wait', async () => {
    s.enqueue({ text: 'a b c d e f g', chunkDelayMs: 20 });
    const ac = new AbortController();
    const deltas: string[] = [];
    const err = await expectModelError(
      provider.call({
        messages: user('hi'),
        tools: [],
        signal: ac.signal,
        onDelta: (t) => {
          deltas.push(t);
          ac.abort();
        },
      }),
    );
    expect(err.kind).toBe('aborted');
    expect(deltas).toEqual(['a ']);

    s.enqueue({ status: 429, retry_after: 60 }, { text: 'never' });
    const ac2 = new AbortController();
    const p = withRetries(provider, { maxDelayMs: 60_000, onError: () => ac2.abort() });
    const err2 = await expectModelError(p.call({ messages: user('hi'), tools: [], signal: ac2.signal }));
    expect(err2.kind).toBe('aborted');
  });
});

describe('openai provider (Chat Completions) against the scripted server', () => {
  it('uses the same wire format', async () => {
    const s = await startScriptedOpenAI({ defaultReply: (req) => ({ text: `echo: ${String(req.messages.at(-1)?.content)}` }) });
    try {
      const p = createModelProvider({ provider: 'openai', base_url: s.url, model: 'gpt-test', api_key: 'sk-x' });
      const deltas: string[] = [];
      const r = await p.call({ messages: user('ping'), tools: [clockTool], onDelta: (t) => deltas.push(t) });
      expect(r.text).toBe('echo: ping');
      expect(deltas.join('')).toBe('echo: ping');
      expect(r.usage.input_tokens).toBeGreaterThan(0);
      expect(s.requests[0].model).toBe('gpt-test');
      expect(s.headers[0].authorization).toBe('Bearer sk-x');
    } finally {
      await s.close();
    }
  });
});
