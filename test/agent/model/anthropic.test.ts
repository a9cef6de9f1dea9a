import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createModelProvider, ModelCallError, type ChatMessage } from '../../../src/agent/model/index.js';

// A minimal Anthropic Messages endpoint: enough to prove our message mapping and error mapping
// hold for a provider whose wire format differs from OpenAI's.
type Reply = { status: number; body: unknown; headers?: Record<string, string> };

describe('anthropic provider', () => {
  let server: Server;
  let url: string;
  const bodies: Array<Record<string, unknown>> = [];
  const replies: Reply[] = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      const parts: Buffer[] = [];
      req.on('data', (c: Buffer) => parts.push(c));
      req.on('end', () => {
        bodies.push(JSON.parse(Buffer.concat(parts).toString('utf8')) as Record<string, unknown>);
        const r = replies.shift() ?? { status: 500, body: { type: 'error', error: { type: 'api_error', message: 'no reply scripted' } } };
        res.writeHead(r.status, { 'content-type': 'application/json', ...(r.headers ?? {}) });
        res.end(JSON.stringify(r.body));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('maps tool calls, tool results, system text and usage', async () => {
    replies.push({
      status: 200,
      body: {
        id: 'msg_1',
        type: 'message',
        role: 'assistant',
        model: 'claude-test',
        content: [
          { type: 'text', text: 'Checking.' },
          { type: 'tool_use', id: 'toolu_2', name: 'clock', input: { timezone: 'UTC' } },
        ],
        stop_reason: 'tool_use',
        stop_sequence: null,
        usage: { input_tokens: 42, output_tokens: 9 },
      },
    });
    const p = createModelProvider({ provider: 'anthropic', base_url: url, model: 'claude-test', api_key: 'ak-test', max_output_tokens: 256 });
    const messages: ChatMessage[] = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'time?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'toolu_1', name: 'clock', arguments: {} }] },
      { role: 'tool', tool_call_id: 'toolu_1', tool_name: 'clock', content: 'Denied by bob: no' },
      { role: 'system', content: 'Late note.' },
    ];
    const r = await p.call({
      messages,
      tools: [{ name: 'clock', description: 'time', input_schema: { type: 'object', properties: { timezone: { type: 'string' } } } }],
    });
    expect(r).toEqual({
      text: 'Checking.',
      tool_calls: [{ id: 'toolu_2', name: 'clock', arguments: { timezone: 'UTC' } }],
      usage: { input_tokens: 42, output_tokens: 9, total_tokens: 51 },
      finish_reason: 'tool_calls',
      model: 'claude-test',
      response_id: 'msg_1',
    });
    const body = bodies[0];
    expect(body.model).toBe('claude-test');
    expect(body.max_tokens).toBe(256);
    expect(JSON.stringify(body.system)).toContain('Be brief.');
    const sent = body.messages as Array<{ role: string; content: Array<Record<string, unknown>> }>;
    expect(sent[0]).toMatchObject({ role: 'user', content: [{ type: 'text', text: 'time?' }] });
    expect(sent[1]).toMatchObject({ role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'clock', input: {} }] });
    // Anthropic carries tool results in a user turn; the late system text rides along as user text.
    expect(sent[2].role).toBe('user');
    expect(sent[2].content[0]).toMatchObject({ type: 'tool_result', tool_use_id: 'toolu_1' });
    expect(JSON.stringify(sent[2].content[0])).toContain('Denied by bob: no');
    expect(JSON.stringify(sent)).toContain('Late note.');
    expect(body.tools).toMatchObject([{ name: 'clock', description: 'time', input_schema: { type: 'object' } }]);
  });

  it('maps 429 with retry-after and 529 overloaded', async () => {
    const p = createModelProvider({ provider: 'anthropic', base_url: url, model: 'claude-test', api_key: 'ak-test' });
    replies.push({ status: 429, headers: { 'retry-after': '7' }, body: { type: 'error', error: { type: 'rate_limit_error', message: 'slow down' } } });
    const e1 = await p.call({ messages: [{ role: 'user', content: 'x' }], tools: [] }).catch((e: unknown) => e);
    expect(e1).toBeInstanceOf(ModelCallError);
    expect(e1).toMatchObject({ kind: 'rate_limited', status: 429, retryable: true, retryAfterMs: 7000 });
    replies.push({ status: 529, body: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } } });
    const e2 = await p.call({ messages: [{ role: 'user', content: 'x' }], tools: [] }).catch((e: unknown) => e);
    expect(e2).toMatchObject({ kind: 'server', status: 529, retryable: true });
  });
});
