// The openai-compatible provider's streaming calls go through our own client
// (src/agent/model/chat-completions-stream.ts), not the AI SDK's doStream. Both are run here against
// the same servers: what reaches the server (body, key order, headers) and what comes back (text
// deltas, tool calls, usage, finish reason, model; every failure's ModelCallError) must be the same.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ScriptedOpenAI, ScriptedReply } from '../../fixtures/scripted-openai.js';
import { AiSdkProvider, createModelProvider, ModelCallError, type ModelProvider } from '../../../src/agent/model/index.js';
import { createNodeFetch } from '../../../src/agent/model/node-fetch.js';
import { clockTools, everyShapeConversation } from '../../helpers/model-conversation.js';
import { useScriptedOpenAI } from '../../helpers/scripted-model.js';

const tools = clockTools({ required: true });
const conversation = everyShapeConversation({ query: 'What time is it in two zones? "quoted" \u2028 ✓', emptyAssistant: true });

/** The old path: the provider as createModelProvider built it before, streaming through the SDK's doStream. */
function sdkPath(url: string, settings: { max_output_tokens?: number; temperature?: number } = {}): ModelProvider {
  const languageModel = createOpenAICompatible({
    name: 'openai-compatible',
    baseURL: url,
    apiKey: 'sk-test',
    includeUsage: true,
    fetch: createNodeFetch(),
  }).chatModel('scripted-1');
  return new AiSdkProvider({ provider: 'openai-compatible', model: 'scripted-1', languageModel, inlineSystemMessages: true, ...settings });
}
const ownPath = (url: string, settings: { max_output_tokens?: number; temperature?: number } = {}): ModelProvider =>
  createModelProvider({ provider: 'openai-compatible', base_url: url, model: 'scripted-1', api_key: 'sk-test', ...settings });

async function streamed(p: ModelProvider, messages = conversation, signal?: AbortSignal) {
  const deltas: string[] = [];
  try {
    const result = await p.call({ messages, tools, onDelta: (t) => deltas.push(t), ...(signal ? { signal } : {}) });
    // The scripted server numbers its responses (chatcmpl-scripted-<n>), so two calls of one
    // reply differ only there: both paths must carry the id, not the same one.
    const numbered = result.response_id?.startsWith('chatcmpl-scripted-');
    return { deltas, result: numbered ? { ...result, response_id: 'chatcmpl-scripted-<n>' } : result };
  } catch (err) {
    expect(err).toBeInstanceOf(ModelCallError);
    const e = err as ModelCallError;
    return { deltas, error: { ...e.toJSON(), partialOutput: e.partialOutput } };
  }
}

describe('own Chat Completions client against the AI SDK provider', () => {
  let s: ScriptedOpenAI;
  useScriptedOpenAI((server) => (s = server));

  it('sends the same JSON body (key order included) and headers, user-agent aside, for a tools + system + history request', async () => {
    const reply = {
      text: 'Now is 12:01.',
      tool_calls: [{ id: 'c9', name: 'clock', arguments: { timezone: 'UTC' } }],
      usage: { prompt_tokens: 40, completion_tokens: 9 },
    };
    s.enqueue(reply, reply);
    const settings = { max_output_tokens: 256, temperature: 0.2 };
    const viaSdk = await streamed(sdkPath(s.url, settings));
    const own = await streamed(ownPath(s.url, settings));
    expect(s.requests).toHaveLength(2);
    expect(JSON.stringify(s.requests[1])).toBe(JSON.stringify(s.requests[0]));
    expect(s.requests[1]).toMatchObject({ stream: true, stream_options: { include_usage: true }, tool_choice: 'auto', max_tokens: 256, temperature: 0.2 });
    const h = (i: number) =>
      Object.fromEntries(Object.entries(s.headers[i]).filter(([k]) => !['content-length', 'connection', 'host', 'user-agent'].includes(k)));
    expect(h(1)).toEqual(h(0));
    expect(s.headers[1].authorization).toBe('Bearer sk-test');
    // The call went through our client, not the SDK's (which names itself ai-sdk/…).
    expect(s.headers[0]['user-agent']).toMatch(/ai-sdk\/openai-compatible/);
    expect(s.headers[1]['user-agent']).toMatch(/^agentd runtime\/node\.js\//);
    expect(own).toEqual(viaSdk);
    expect(own.result).toMatchObject({ usage: { input_tokens: 40, output_tokens: 9, total_tokens: 49 }, finish_reason: 'tool_calls', model: 'scripted-1' });
  });

  it('reads the same deltas, tool calls, usage, finish reason and model for every reply shape', async () => {
    const replies: ScriptedReply[] = [
      { text: 'one two three' },
      {
        text: '',
        tool_calls: [
          { name: 'clock', arguments: { timezone: 'UTC' } },
          { id: 'x2', name: 'noschema', arguments: {} },
        ],
      },
      { text: 'cut short', finish_reason: 'length', model: 'served-model' },
      { text: 'bad args', tool_calls: [{ id: 'x3', name: 'clock', arguments: '{not json' }] },
      { text: 'odd', finish_reason: 'content_filter' },
    ];
    for (const reply of replies) {
      s.enqueue(reply, reply);
      const viaSdk = await streamed(sdkPath(s.url), [{ role: 'user', content: 'hi' }]);
      const own = await streamed(ownPath(s.url), [{ role: 'user', content: 'hi' }]);
      // Ids the server left out are generated on both sides: compare the rest.
      const calls = (r: typeof own) => r.result?.tool_calls.map((c) => ({ ...c, id: c.id.startsWith('call_') ? 'generated' : c.id }));
      expect(calls(own)).toEqual(calls(viaSdk));
      expect({ ...own, result: { ...own.result, tool_calls: [] } }).toEqual({ ...viaSdk, result: { ...viaSdk.result, tool_calls: [] } });
    }
  });

  it('fails the same way on HTTP errors and connection resets (kind, status, retry-after, message, partial output)', async () => {
    const failures: ScriptedReply[] = [
      { status: 429, retry_after: 2, message: 'slow down' },
      { status: 400, message: 'bad tool schema' },
      { status: 401 },
      { status: 503, body: 'upstream down' },
      { destroy: true },
      { destroy: true, after_chunks: 3, text: 'one two three four five' },
    ];
    for (const reply of failures) {
      s.enqueue(reply, reply);
      const viaSdk = await streamed(sdkPath(s.url));
      const own = await streamed(ownPath(s.url));
      expect(own.error, JSON.stringify(reply)).toBeDefined();
      expect(own).toEqual(viaSdk);
    }
  });

  it('fails the same way when nothing listens', async () => {
    const dead = 'http://127.0.0.1:9/v1';
    expect(await streamed(ownPath(dead))).toEqual(await streamed(sdkPath(dead)));
  });

  it('an abort ends a hanging call and one mid-stream as aborted', async () => {
    for (const reply of [{ hang: true }, { text: 'a b c d e f g h', chunkDelayMs: 40 }] as ScriptedReply[]) {
      s.enqueue(reply);
      const ctl = new AbortController();
      const pending = streamed(ownPath(s.url), conversation, ctl.signal);
      await s.waitForRequests(s.requests.length + 1);
      ctl.abort();
      const r = await pending;
      expect(r.error).toMatchObject({ kind: 'aborted', retryable: false });
    }
  });
});

describe('bad stream data, both paths', () => {
  let raw: Server;
  let url = '';
  let body = '';
  beforeAll(async () => {
    raw = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(body);
      });
    });
    await new Promise<void>((r) => raw.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(raw.address() as AddressInfo).port}/v1`;
  });
  afterAll(() => new Promise<void>((r) => raw.close(() => r())));

  const chunk = (delta: unknown, finish_reason: string | null = null) =>
    `data: ${JSON.stringify({ id: 'r1', created: 1, model: 'raw', choices: [{ index: 0, delta, finish_reason }] })}\n\n`;

  it('a stream without a finish reason and one with a malformed chunk fail as unknown, not retried, partial output flagged', async () => {
    for (const wire of [chunk({ content: 'half' }) + 'data: [DONE]\n\n', chunk({ content: 'half' }) + 'data: {"choices":[\n\n' + chunk({}, 'stop')]) {
      body = wire;
      const viaSdk = await streamed(sdkPath(url));
      const own = await streamed(ownPath(url));
      expect(own.error).toMatchObject({ kind: 'unknown', retryable: false, partialOutput: true });
      expect(own).toEqual(viaSdk);
    }
  });

  it('keep-alive comments, CRLF line ends and a usage chunk after the finish read as the SDK reads them', async () => {
    body = (
      ': ping\n\n' +
      chunk({ role: 'assistant', content: 'Hi' }) +
      ': ping\n\n' +
      chunk({ content: ' there' }, 'stop') +
      `data: ${JSON.stringify({ id: 'r1', choices: [], usage: { prompt_tokens: 3, completion_tokens: 2 } })}\n\ndata: [DONE]\n\n`
    ).replaceAll('\n', '\r\n');
    const own = await streamed(ownPath(url));
    expect(own).toEqual(await streamed(sdkPath(url)));
    expect(own.result).toMatchObject({ text: 'Hi there', usage: { input_tokens: 3, output_tokens: 2, total_tokens: 5 }, model: 'raw' });
  });
});
