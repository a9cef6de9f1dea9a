// The streaming model call goes straight through the provider's doStream (direct-stream.ts): what
// reaches the model server must be what streamText would have sent for the same call, and the
// result must read the same.
import { describe, expect, it } from 'vitest';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { stepCountIs, streamText } from 'ai';
import type { ScriptedOpenAI } from '../../fixtures/scripted-openai.js';
import { useScriptedOpenAI } from '../../helpers/scripted-model.js';
import { AiSdkProvider, toModelMessages, toToolSet } from '../../../src/agent/model/index.js';
import { clockTools, everyShapeConversation } from '../../helpers/model-conversation.js';
import { isV3, toV3Prompt, toV3Tools } from '../../../src/agent/model/direct-stream.js';

const tools = clockTools();
const conversation = everyShapeConversation();

describe('direct doStream path', () => {
  let s: ScriptedOpenAI;
  useScriptedOpenAI((server) => (s = server));

  const build = () => {
    const languageModel = createOpenAICompatible({ name: 'openai-compatible', baseURL: s.url, apiKey: 'sk-test', includeUsage: true }).chatModel('scripted-1');
    return {
      languageModel,
      provider: new AiSdkProvider({
        provider: 'openai-compatible',
        model: 'scripted-1',
        languageModel,
        inlineSystemMessages: true,
        max_output_tokens: 256,
        temperature: 0.2,
      }),
    };
  };

  it('sends the same request body and headers as streamText for the same call, and reads the same result', async () => {
    const { languageModel, provider } = build();
    expect(isV3(languageModel)).toBe(true);
    const reply = {
      text: 'Now is 12:01.',
      tool_calls: [{ id: 'c9', name: 'clock', arguments: { timezone: 'UTC' } }],
      usage: { prompt_tokens: 40, completion_tokens: 9 },
    };
    s.enqueue(reply, reply);

    const deltas: string[] = [];
    const direct = await provider.call({ messages: conversation, tools, onDelta: (t) => deltas.push(t) });

    const { system, messages } = toModelMessages(conversation, true);
    const viaSdk = streamText({
      model: languageModel,
      system,
      messages,
      allowSystemInMessages: true,
      tools: toToolSet(tools),
      stopWhen: stepCountIs(1),
      maxRetries: 0,
      maxOutputTokens: 256,
      temperature: 0.2,
      onError: () => {},
    });
    const sdkText: string[] = [];
    for await (const p of viaSdk.fullStream) if (p.type === 'text-delta') sdkText.push(p.text);

    expect(s.requests).toHaveLength(2);
    expect(s.requests[0]).toEqual(s.requests[1]);
    const h = (i: number) => Object.fromEntries(Object.entries(s.headers[i]).filter(([k]) => !['content-length', 'connection', 'host'].includes(k)));
    expect(h(0)).toEqual(h(1));
    expect(s.requests[0].tools?.map((t) => t.function.parameters)).toEqual([
      { type: 'object', properties: { timezone: { type: 'string' } } },
      { type: 'object', properties: {} },
    ]);

    expect(deltas).toEqual(sdkText);
    expect(direct.text).toBe(await viaSdk.text);
    expect(direct.tool_calls).toEqual((await viaSdk.toolCalls).map((c) => ({ id: c.toolCallId, name: c.toolName, arguments: c.input })));
    expect(direct.usage).toEqual({ input_tokens: 40, output_tokens: 9, total_tokens: 49 });
    expect(direct.finish_reason).toBe('tool_calls');
    expect(direct.model).toBe('scripted-1');
  });

  it('builds tool declarations and schemas once per list', () => {
    const a = toV3Tools(tools);
    expect(toV3Tools(tools)).toBe(a);
    expect(toV3Tools([...tools])[0].inputSchema).toBe(a[0].inputSchema);
  });

  it('sends a system message after the conversation began as a user message when the API wants system text up front', () => {
    const p = toV3Prompt(conversation, false);
    expect(p[0]).toEqual({ role: 'system', content: 'You are terse.' });
    expect(p.at(-2)).toEqual({ role: 'user', content: [{ type: 'text', text: 'Answer in one line.' }] });
    // Two results of one batch travel in one tool message.
    expect(p[3]).toEqual({
      role: 'tool',
      content: [
        { type: 'tool-result', toolCallId: 'c1', toolName: 'clock', output: { type: 'text', value: '12:00' } },
        { type: 'tool-result', toolCallId: 'c2', toolName: 'clock', output: { type: 'text', value: '13:00' } },
      ],
    });
  });

  it('a stream that breaks after some text fails with partialOutput, not a silent short answer', async () => {
    const { provider } = build();
    s.enqueue({ destroy: true, after_chunks: 3, text: 'one two three four five' });
    const deltas: string[] = [];
    const err = await provider.call({ messages: conversation, tools, onDelta: (t) => deltas.push(t) }).then(
      () => null,
      (e: unknown) => e as { kind: string; partialOutput: boolean },
    );
    expect(err).not.toBeNull();
    expect(deltas.length).toBeGreaterThan(0);
    expect(err!.partialOutput).toBe(true);
    expect(err!.kind).toBe('connection');
  });
});
