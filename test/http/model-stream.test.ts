// POST /run through a real agentd server with the openai-compatible provider, whose streaming model
// calls go through our own Chat Completions client (src/agent/model/chat-completions-stream.ts):
// the same scripted conversation run on a second server whose provider streams through the AI
// SDK's doStream (the path before) must give the same model requests, events and answer.
import { join } from 'node:path';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI, type ScriptedReply } from '../fixtures/scripted-openai.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { streamRun, type Frame } from '../helpers/sse.js';
import { AiSdkProvider } from '../../src/agent/model/index.js';
import { createNodeFetch } from '../../src/agent/model/node-fetch.js';

const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');
const CONFIG = { agent: { tools: { local: TOOLS, builtin: ['clock'] } } };

/** What a run's stream says, without what differs between two runs (ids, times, durations). */
function essence(frames: Frame[]) {
  const complete = frames.at(-1)!;
  const r = complete.data as Record<string, unknown>;
  return {
    events: frames.filter((f) => f.event !== 'delta').map((f) => f.event),
    text: frames
      .filter((f) => f.event === 'delta')
      .map((f) => (f.data as { text: string }).text)
      .join(''),
    // The model's side of each model event: what it was sent and answered, the tokens it reported.
    modelEvents: frames
      .filter((f) => f.event === 'model_call' || f.event === 'model_response' || f.event === 'model_error')
      .map((f) => {
        const e = f.data as { input?: unknown; output?: unknown; error?: unknown; token_usage?: unknown };
        return { event: f.event, input: e.input, output: e.output, error: e.error, token_usage: e.token_usage };
      }),
    result: { status: r.status, response: r.response, termination_reason: r.termination_reason, usage: r.usage, tool_calls: r.tool_calls },
  };
}

describe('POST /run on the openai-compatible provider: own stream client vs the SDK doStream', () => {
  let model: ScriptedOpenAI;
  let own: TestServer;
  let sdk: TestServer;

  beforeAll(async () => {
    model = await startScriptedOpenAI();
    own = await startTestServer(CONFIG, { modelUrl: model.url });
    const languageModel = createOpenAICompatible({ name: 'openai-compatible', baseURL: model.url, includeUsage: true, fetch: createNodeFetch() }).chatModel(
      'scripted',
    );
    sdk = await startTestServer(CONFIG, {
      model: new AiSdkProvider({ provider: 'openai-compatible', model: 'scripted', languageModel, inlineSystemMessages: true, max_output_tokens: 1024 }),
    });
  });
  afterAll(async () => {
    await Promise.all([own?.stop(), sdk?.stop()]);
    own?.cleanup();
    sdk?.cleanup();
    await model.close();
  });

  it('a tool run (two tool calls in one answer, then a streamed answer) gives the same requests, events and answer', async () => {
    const script: ScriptedReply[] = [
      {
        text: 'Let me check.',
        tool_calls: [
          { id: 'k1', name: 'echo', arguments: { text: 'hi' } },
          { id: 'k2', name: 'echo', arguments: { text: 'there' } },
        ],
      },
      { text: 'The echo said hi, then there.', usage: { prompt_tokens: 80, completion_tokens: 11 } },
    ];
    const runs: Array<ReturnType<typeof essence>> = [];
    for (const server of [sdk, own]) {
      model.reset();
      model.enqueue(...script);
      const { status, frames } = await streamRun(server.url, { query: 'say hi and there', session_id: 'same' });
      expect(status).toBe(200);
      expect(frames.at(-1)!.event).toBe('complete');
      runs.push({ ...essence(frames), requests: model.requests.map((q) => JSON.stringify(q)) } as never);
      expect(model.headers.every((h) => /^agentd /.test(String(h['user-agent'])) === (server === own))).toBe(true);
    }
    expect(runs[1]).toEqual(runs[0]);
    expect(runs[1].text).toBe('Let me check.The echo said hi, then there.');
    expect(runs[1].result).toMatchObject({ status: 'success', response: 'The echo said hi, then there.' });
    expect(runs[1].modelEvents.at(-1)?.token_usage).toMatchObject({ input_tokens: 80, output_tokens: 11 });
  });

  it('a 500 then a streamed answer: the same retry events and answer', async () => {
    const runs: Array<ReturnType<typeof essence>> = [];
    for (const server of [sdk, own]) {
      model.reset();
      model.enqueue({ status: 500, message: 'upstream broke' }, { text: 'Recovered.' });
      const { frames } = await streamRun(server.url, { query: 'try again', session_id: 'retry' });
      runs.push(essence(frames));
    }
    expect(runs[1]).toEqual(runs[0]);
    expect(runs[1].events).toContain('model_error');
    expect(runs[1].result).toMatchObject({ status: 'success', response: 'Recovered.' });
  });
});
