// POST /ai-sdk/chat and GET /ai-sdk/chat/{id}/stream driven by the AI SDK's own client: `ai` 6's
// DefaultChatTransport (what useChat sends and how it reconnects) and readUIMessageStream (how
// useChat builds the assistant message from the stream), against a real server and the scripted model.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DefaultChatTransport, readUIMessageStream, type UIMessage, type UIMessageChunk } from 'ai';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { AUTH, defaultReplies, GOVERNED_OPEN, KEYS, useLedger } from '../helpers/protocol-server.js';
import { eventually, getJson, startTestServer, type TestServer } from '../helpers/server.js';

const GOVERNED = GOVERNED_OPEN;
const ledger = useLedger();
const ledgerLines = ledger.lines;

let model: ScriptedOpenAI;
beforeAll(async () => {
  model = await startScriptedOpenAI();
});
afterAll(async () => {
  await model.close();
});
beforeEach(() => {
  ledger.reset();
  defaultReplies(model);
});

type Meta = { run_id: string; session_id: string; trace_id: string; status?: string };
type Msg = UIMessage<Meta>;

const transportOf = (url: string, key?: string, extra: Record<string, unknown> = {}) =>
  new DefaultChatTransport<Msg>({ api: `${url}/ai-sdk/chat`, headers: key ? { authorization: `Bearer ${key}` } : undefined, ...extra });
const userMessage = (text: string): Msg => ({ id: `u-${Math.random().toString(36).slice(2)}`, role: 'user', parts: [{ type: 'text', text }] });

/** The assistant message as useChat builds it from the stream (continuing `message` when given). */
async function readMessage(stream: ReadableStream<UIMessageChunk>, message?: Msg): Promise<Msg> {
  let last: Msg | undefined;
  for await (const m of readUIMessageStream<Msg>({ stream, message, terminateOnError: true })) last = m;
  return last!;
}

async function send(
  t: DefaultChatTransport<Msg>,
  chatId: string,
  messages: Msg[],
  opts: { trigger?: 'submit-message' | 'regenerate-message'; continuing?: Msg } = {},
) {
  const stream = await t.sendMessages({
    chatId,
    messages,
    trigger: opts.trigger ?? 'submit-message',
    messageId: opts.continuing?.id,
    abortSignal: undefined,
  });
  return readMessage(stream, opts.continuing ? structuredClone(opts.continuing) : undefined);
}

const textOf = (m: Msg) =>
  m.parts
    .filter((p) => p.type === 'text')
    .map((p) => (p as { text: string }).text)
    .join('');
const toolParts = (m: Msg) => m.parts.filter((p) => p.type === 'dynamic-tool') as Array<Extract<Msg['parts'][number], { type: 'dynamic-tool' }>>;

/** What addToolApprovalResponse does to the message (ai/src/ui/chat.ts), and optionally an edited input. */
function answer(m: Msg, approved: boolean, opts: { reason?: string; input?: unknown } = {}): Msg {
  return {
    ...m,
    parts: m.parts.map((p) =>
      p.type === 'dynamic-tool' && p.state === 'approval-requested'
        ? ({
            ...p,
            ...(opts.input ? { input: opts.input } : {}),
            state: 'approval-responded',
            approval: { ...p.approval, approved, reason: opts.reason },
          } as never)
        : p,
    ),
  };
}

describe('AI SDK chat (useChat transport)', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(GOVERNED, { modelUrl: model.url });
  });
  afterAll(async () => {
    await server.stop();
    server.cleanup();
  });

  it('streams a plain run as a UI message; the chat id is the session and earlier messages never reach the model twice', async () => {
    const t = transportOf(server.url);
    const u1 = userMessage('hello');
    const a1 = await send(t, 'chat-plain', [u1]);
    expect(a1.role).toBe('assistant');
    expect(textOf(a1)).toBe('plain answer');
    expect(a1.metadata).toMatchObject({
      run_id: expect.stringMatching(/^run_/),
      session_id: 'chat-plain',
      trace_id: expect.stringMatching(/^trace_/),
      status: 'completed',
    });
    const run = (await getJson(`${server.url}/runs/${a1.metadata!.run_id}`)).body;
    expect(run).toMatchObject({ session_id: 'chat-plain', status: 'completed', response: 'plain answer' });

    model.enqueue({ text: 'second answer' });
    const a2 = await send(t, 'chat-plain', [u1, a1, userMessage('again')]);
    expect(textOf(a2)).toBe('second answer');
    const sent = model.requests.at(-1)!.messages.map((m) => `${m.role}:${String(m.content)}`);
    expect(sent.filter((m) => m === 'user:hello')).toHaveLength(1);
    expect(sent.slice(-3)).toEqual(['user:hello', 'assistant:plain answer', 'user:again']);
  });

  it('answers with the UI message stream headers', async () => {
    const res = await fetch(`${server.url}/ai-sdk/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'chat-headers', messages: [userMessage('hi')], trigger: 'submit-message' }),
    });
    expect(res.headers.get('x-vercel-ai-ui-message-stream')).toBe('v1');
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    expect((await res.text()).trimEnd().endsWith('data: [DONE]')).toBe(true);
  });

  it('shows a tool call as a dynamic-tool part with its input and output', async () => {
    model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] });
    const a = await send(transportOf(server.url), 'chat-tool', [userMessage('echo x')]);
    const [tool] = toolParts(a);
    expect(tool).toMatchObject({ type: 'dynamic-tool', toolName: 'echo', state: 'output-available', input: { text: 'x' }, output: 'echo: x' });
    expect(textOf(a)).toBe('saw: echo: x');
    expect(a.parts.filter((p) => p.type === 'step-start')).toHaveLength(2);
  });

  it('a governance ask is the AI SDK tool approval; approving through the message parts resumes the run in that response', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 10' } }] });
    const t = transportOf(server.url);
    const u = userMessage('pay');
    const paused = await send(t, 'chat-approve', [u]);
    const [asked] = toolParts(paused);
    expect(asked).toMatchObject({ state: 'approval-requested', toolName: 'ledger_append', input: { entry: 'pay 10' } });
    const run = (await getJson(`${server.url}/runs/${paused.metadata!.run_id}`)).body;
    expect(run.status).toBe('awaiting_approval');
    expect((asked as { approval: { id: string } }).approval.id).toBe(run.approvals[0].approval_id);
    expect(ledgerLines()).toHaveLength(0);

    const answered = answer(paused, true);
    const done = await send(t, 'chat-approve', [u, answered], { continuing: answered });
    expect(done.id).toBe(paused.id);
    expect(toolParts(done)[0]).toMatchObject({ state: 'output-available', output: { appended: 'pay 10' } });
    expect(textOf(done)).toBe('saw: {"appended":"pay 10"}');
    expect(ledgerLines()).toHaveLength(1);
    const after = (await getJson(`${server.url}/runs/${paused.metadata!.run_id}`)).body;
    expect(after.status).toBe('completed');
    expect(after.approvals[0]).toMatchObject({ status: 'used', approver: 'ai-sdk' });
  });

  it('a denial (with its reason) never runs the tool; the part ends output-denied', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 99' } }] });
    const t = transportOf(server.url);
    const u = userMessage('pay big');
    const paused = await send(t, 'chat-deny', [u]);
    const answered = answer(paused, false, { reason: 'too much' });
    const done = await send(t, 'chat-deny', [u, answered], { continuing: answered });
    expect(toolParts(done)[0].state).toBe('output-denied');
    expect(ledgerLines()).toHaveLength(0);
    expect(String(model.requests.at(-1)!.messages.at(-1)!.content)).toContain('too much');
  });

  it("edited arguments: the approved part's changed input is what runs", async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 10' } }] });
    const t = transportOf(server.url);
    const u = userMessage('pay');
    const paused = await send(t, 'chat-edit', [u]);
    const answered = answer(paused, true, { input: { entry: 'pay 5' } });
    const done = await send(t, 'chat-edit', [u, answered], { continuing: answered });
    expect(ledgerLines().map((l) => l.entry)).toEqual(['pay 5']);
    expect(toolParts(done)[0]).toMatchObject({ state: 'output-available', input: { entry: 'pay 5' }, output: { appended: 'pay 5' } });
    const run = (await getJson(`${server.url}/runs/${paused.metadata!.run_id}`)).body;
    expect(run.approvals[0].edited_arguments).toEqual({ entry: 'pay 5' });
  });

  it('an answer to an approval that is not pending is refused with its code', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'once' } }] });
    const t = transportOf(server.url);
    const u = userMessage('pay once');
    const paused = await send(t, 'chat-twice', [u]);
    const answered = answer(paused, true);
    await send(t, 'chat-twice', [u, answered], { continuing: answered });
    await expect(send(t, 'chat-twice', [u, answered], { continuing: answered })).rejects.toThrow(/AGT_ERR_APPROVAL_ALREADY_DECIDED/);
    await expect(send(t, 'chat-none', [u, answered], { continuing: answered })).rejects.toThrow(/AGT_ERR_APPROVAL_NOT_FOUND/);
  });

  it('regenerate-message runs the last query again with the previous answer out of the history', async () => {
    const t = transportOf(server.url);
    const u = userMessage('tell me');
    model.enqueue({ text: 'first take' });
    const a1 = await send(t, 'chat-regen', [u]);
    expect(textOf(a1)).toBe('first take');
    model.enqueue({ text: 'second take' });
    const a2 = await send(t, 'chat-regen', [u], { trigger: 'regenerate-message' });
    expect(textOf(a2)).toBe('second take');
    const sent = model.requests.at(-1)!.messages.map((m) => `${m.role}:${String(m.content)}`);
    expect(sent).not.toContain('assistant:first take');
    expect(sent.filter((m) => m === 'user:tell me')).toHaveLength(1);
    const history = (await getJson(`${server.url}/sessions/chat-regen/history`)).body;
    expect(JSON.stringify(history)).not.toContain('first take');
    expect(JSON.stringify(history)).toContain('second take');
  });

  it('reconnect: closing the stream detaches, GET /ai-sdk/chat/{id}/stream replays the live run from its start then follows; 204 when none is live', async () => {
    model.enqueue({ text: 'working', tool_calls: [{ name: 'slow', arguments: { ms: 1500 } }] });
    const t = transportOf(server.url);
    const abort = new AbortController();
    const stream = await t.sendMessages({
      chatId: 'chat-resume',
      messages: [userMessage('slow')],
      trigger: 'submit-message',
      messageId: undefined,
      abortSignal: abort.signal,
    });
    let runId = '';
    const reader = stream.getReader();
    for (;;) {
      const { value } = await reader.read();
      if (value?.type === 'start') runId = (value.messageMetadata as Meta).run_id;
      if (value?.type === 'tool-input-available') break;
    }
    abort.abort();
    await reader.cancel().catch(() => undefined);
    const resumed = await t.reconnectToStream({ chatId: 'chat-resume' });
    expect(resumed).not.toBeNull();
    const m = await readMessage(resumed!);
    expect(m.metadata!.run_id).toBe(runId);
    expect(textOf(m)).toBe('workingsaw: {"waited":1500}');
    expect(toolParts(m)[0]).toMatchObject({ toolName: 'slow', state: 'output-available' });
    expect((await getJson(`${server.url}/runs/${runId}`)).body.status).toBe('completed');
    expect(await t.reconnectToStream({ chatId: 'chat-resume' })).toBeNull();
    expect(await t.reconnectToStream({ chatId: 'chat-never-used' })).toBeNull();
  });

  it('Idempotency-Key: a retry gets the same run replayed, and the model is called once', async () => {
    const t = new DefaultChatTransport<Msg>({ api: `${server.url}/ai-sdk/chat`, headers: { 'idempotency-key': 'chat-key-1' } });
    const u = userMessage('once only');
    model.enqueue({ text: 'the one answer' });
    const first = await send(t, 'chat-idem', [u]);
    const calls = model.requests.length;
    const retry = await send(t, 'chat-idem', [u]);
    expect(retry.metadata!.run_id).toBe(first.metadata!.run_id);
    expect(textOf(retry)).toBe('the one answer');
    expect(model.requests.length).toBe(calls);
  });

  it('refuses a body that is not a chat request with 422 loc/msg/type', async () => {
    const res = await fetch(`${server.url}/ai-sdk/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'x', messages: [{ id: 'a', role: 'assistant', parts: [{ type: 'text', text: 'hi' }] }], trigger: 'submit-message' }),
    });
    expect(res.status).toBe(422);
    const body = (await res.json()) as { detail: unknown[] };
    expect(body.detail[0]).toMatchObject({ loc: ['body', 'messages', 0], type: 'value_error' });
    const bad = await fetch(`${server.url}/ai-sdk/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'x' }),
    });
    expect(bad.status).toBe(422);
  });
});

describe('AI SDK chat: budgets, resumable: false, roles', () => {
  it('a budget pause is a data-agentd-budget part', async () => {
    const server = await startTestServer({ ...GOVERNED, budgets: { run: [{ meter: 'model_calls', limit: 1 }] } }, { modelUrl: model.url });
    try {
      model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] });
      const a = await send(transportOf(server.url), 'chat-budget', [userMessage('two calls')]);
      const part = a.parts.find((p) => p.type === 'data-agentd-budget') as { id: string; data: Record<string, unknown> } | undefined;
      expect(part).toBeDefined();
      expect(part!.data).toMatchObject({ run_id: a.metadata!.run_id, scope: 'run', meter: 'model_calls', status: 'pending', request_id: part!.id });
      expect(a.metadata!.status).toBe('awaiting_budget');
    } finally {
      await server.stop();
      server.cleanup();
    }
  });

  it('with resumable: false, closing the stream cancels the run', async () => {
    const server = await startTestServer({ ...GOVERNED, server: { protocols: { ai_sdk: { resumable: false } } } }, { modelUrl: model.url });
    try {
      model.enqueue({ tool_calls: [{ name: 'slow', arguments: { ms: 30_000 } }] });
      const abort = new AbortController();
      const t = transportOf(server.url);
      const stream = await t.sendMessages({
        chatId: 'chat-cancel',
        messages: [userMessage('slow')],
        trigger: 'submit-message',
        messageId: undefined,
        abortSignal: abort.signal,
      });
      const reader = stream.getReader();
      let runId = '';
      for (;;) {
        const { value } = await reader.read();
        if (value?.type === 'start') runId = (value.messageMetadata as Meta).run_id;
        if (value?.type === 'tool-input-available') break;
      }
      abort.abort();
      await reader.cancel().catch(() => undefined);
      await eventually(async () => (await getJson(`${server.url}/runs/${runId}`)).body.status === 'cancelled');
    } finally {
      await server.stop();
      server.cleanup();
    }
  });

  it('roles: a reader starts nothing, an operator starts but does not decide, an approver decides (recorded with its key name)', async () => {
    const server = await startTestServer({ ...GOVERNED, auth: AUTH }, { modelUrl: model.url });
    try {
      const u = userMessage('pay');
      await expect(send(transportOf(server.url, KEYS.reader), 'chat-roles', [u])).rejects.toThrow(/AGT_ERR_FORBIDDEN/);
      await expect(send(transportOf(server.url, KEYS.approver), 'chat-roles', [u])).rejects.toThrow(/AGT_ERR_FORBIDDEN/);
      model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'r' } }] });
      const paused = await send(transportOf(server.url, KEYS.operator), 'chat-roles', [u]);
      const answered = answer(paused, true);
      await expect(send(transportOf(server.url, KEYS.operator), 'chat-roles', [u, answered], { continuing: answered })).rejects.toThrow(/AGT_ERR_FORBIDDEN/);
      await expect(send(transportOf(server.url, KEYS.reader), 'chat-roles', [u, answered], { continuing: answered })).rejects.toThrow(/AGT_ERR_FORBIDDEN/);
      const done = await send(transportOf(server.url, KEYS.approver), 'chat-roles', [u, answered], { continuing: answered });
      expect(toolParts(done)[0].state).toBe('output-available');
      const run = (await getJson(`${server.url}/runs/${paused.metadata!.run_id}`, { authorization: `Bearer ${KEYS.reader}` })).body;
      expect(run.approvals[0].approver).toBe('approver-key');
      // The reconnect is a read.
      expect(await transportOf(server.url, KEYS.reader).reconnectToStream({ chatId: 'chat-roles' })).toBeNull();
    } finally {
      await server.stop();
      server.cleanup();
    }
  });
});
