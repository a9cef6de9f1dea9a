// The OpenAI-compatible routes driven by the official `openai` client against a real server with
// the scripted model: plain and streamed answers, sessions kept by the server, a paused run's
// `agentd` object and its decision (approve with edited arguments, deny), a budget pause, roles.
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { defaultReplies, GOVERNED, KEYS, useLedger } from '../helpers/protocol-server.js';

let model: ScriptedOpenAI;
let server: TestServer;
const ledger = useLedger();
const client = (key: string) => new OpenAI({ baseURL: `${server.url}/v1`, apiKey: key, maxRetries: 0 });
const auth = (key: string) => ({ authorization: `Bearer ${key}` });

beforeAll(async () => {
  model = await startScriptedOpenAI();
  server = await startTestServer(GOVERNED, { modelUrl: model.url });
});
afterAll(async () => {
  await server?.stop();
  server?.cleanup();
  await model?.close();
});
beforeEach(() => {
  defaultReplies(model);
  ledger.reset();
});

type Agentd = { run_id: string; session_id: string; status: string; approvals: Array<{ approval_id: string; tool_name: string; arguments: unknown }> };
const agentdOf = (x: unknown) => (x as { agentd: Agentd }).agentd;

describe('OpenAI-compatible chat through the openai client', () => {
  it('lists the agents as models', async () => {
    const models = await client(KEYS.reader).models.list();
    expect(models.data.map((m) => m.id)).toContain('default');
  });

  it('answers a plain completion as the same run POST /run would make', async () => {
    const res = await client(KEYS.operator).chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'hello' }] });
    expect(res.object).toBe('chat.completion');
    expect(res.choices[0].message.content).toBe('plain answer');
    expect(res.choices[0].finish_reason).toBe('stop');
    expect(res.usage!.total_tokens).toBeGreaterThan(0);
    const { run_id, status } = agentdOf(res);
    expect(status).toBe('success');
    const run = (await getJson(`${server.url}/runs/${run_id}`, auth(KEYS.reader))).body;
    expect(run).toMatchObject({ status: 'completed', response: 'plain answer' });
  });

  it('stateless by default: the request messages are the conversation the model sees', async () => {
    await client(KEYS.operator).chat.completions.create({
      model: 'default',
      messages: [
        { role: 'user', content: 'my name is Ada' },
        { role: 'assistant', content: 'hello Ada' },
        { role: 'user', content: 'what is my name?' },
      ],
    });
    const sent = model.requests.at(-1)!.messages.map((m) => [m.role, m.content]);
    expect(sent.slice(-3)).toEqual([
      ['user', 'my name is Ada'],
      ['assistant', 'hello Ada'],
      ['user', 'what is my name?'],
    ]);
  });

  it('streams chunks, with usage in the last one when asked', async () => {
    model.enqueue({ text: 'streamed words here' });
    const stream = await client(KEYS.operator).chat.completions.create({
      model: 'default',
      messages: [{ role: 'user', content: 'stream please' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    const chunks = [];
    for await (const chunk of stream) {
      chunks.push(chunk);
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    expect(text).toBe('streamed words here');
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage!.total_tokens).toBeGreaterThan(0);
    const finished = chunks.find((c) => c.choices[0]?.finish_reason);
    expect(finished?.choices[0].finish_reason).toBe('stop');
    expect(agentdOf(finished).status).toBe('success');
  });

  it('x-agentd-session-id keeps the history on the server: earlier messages are not re-sent', async () => {
    const session = { headers: { 'x-agentd-session-id': 'oa-session-1' } };
    await client(KEYS.operator).chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'first question' }] }, session);
    const second = await client(KEYS.operator).chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'second question' }] }, session);
    expect(agentdOf(second).session_id).toBe('oa-session-1');
    const sent = model.requests.at(-1)!.messages.map((m) => [m.role, m.content]);
    expect(sent.slice(-3)).toEqual([
      ['user', 'first question'],
      ['assistant', 'plain answer'],
      ['user', 'second question'],
    ]);
    const history = (await getJson(`${server.url}/sessions/oa-session-1/history`, auth(KEYS.reader))).body;
    expect(history.count).toBe(4);
  });

  it('a paused run answers with the agentd object; a tool message with edited arguments approves it', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 10' } }] });
    const paused = await client(KEYS.operator).chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'pay' }] });
    const info = agentdOf(paused);
    expect(info.status).toBe('awaiting_approval');
    expect(info.approvals).toEqual([{ approval_id: expect.any(String), tool_name: 'ledger_append', arguments: { entry: 'pay 10' } }]);
    expect(paused.choices[0].message.content).toContain(info.approvals[0].approval_id);
    expect(ledger.lines()).toHaveLength(0);

    const decide = (key: string) =>
      client(key).chat.completions.create(
        {
          model: 'default',
          messages: [
            { role: 'user', content: 'pay' },
            { role: 'tool', tool_call_id: info.approvals[0].approval_id, content: JSON.stringify({ decision: 'approve', arguments: { entry: 'pay 5' } }) },
          ],
        },
        { headers: { 'x-agentd-session-id': info.session_id } },
      );
    // An operator may start runs, not decide them.
    await expect(decide(KEYS.operator)).rejects.toMatchObject({ status: 403 });
    const done = await decide(KEYS.approver);
    expect(agentdOf(done)).toMatchObject({ run_id: info.run_id, status: 'success' });
    expect(done.choices[0].message.content).toBe('saw: {"appended":"pay 5"}');
    expect(ledger.lines().map((l) => l.entry)).toEqual(['pay 5']);
    const run = (await getJson(`${server.url}/runs/${info.run_id}`, auth(KEYS.reader))).body;
    expect(run.approvals[0]).toMatchObject({ status: 'used', approver: 'approver-key', edited_arguments: { entry: 'pay 5' } });
  });

  it('deny, streamed: the tool never runs and the continued run streams its answer', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 99' } }] });
    const paused = await client(KEYS.operator).chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'pay big' }] });
    const info = agentdOf(paused);
    const stream = await client(KEYS.admin).chat.completions.create(
      {
        model: 'default',
        stream: true,
        messages: [{ role: 'tool', tool_call_id: info.approvals[0].approval_id, content: JSON.stringify({ decision: 'deny', note: 'too much' }) }],
      },
      { headers: { 'x-agentd-session-id': info.session_id } },
    );
    let text = '';
    let status = '';
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.choices[0]?.finish_reason) status = agentdOf(chunk).status;
    }
    expect(status).toBe('success');
    expect(text).toContain('Denied by admin-key: too much');
    expect(ledger.lines()).toHaveLength(0);
  });

  it("a decision's streamed answer carries the resumed run's text deltas, each model call's text once", async () => {
    model.enqueue(
      { tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 2' } }] },
      { text: 'looking it up', tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] },
      { text: 'the resumed answer in seven words' },
    );
    const paused = await client(KEYS.operator).chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'pay two' }] });
    const info = agentdOf(paused);
    const stream = await client(KEYS.approver).chat.completions.create(
      {
        model: 'default',
        stream: true,
        messages: [{ role: 'tool', tool_call_id: info.approvals[0].approval_id, content: JSON.stringify({ decision: 'approve' }) }],
      },
      { headers: { 'x-agentd-session-id': info.session_id } },
    );
    const pieces: string[] = [];
    let status = '';
    for await (const chunk of stream) {
      const c = chunk.choices[0]?.delta?.content;
      if (c) pieces.push(c);
      if (chunk.choices[0]?.finish_reason) status = agentdOf(chunk).status;
    }
    expect(status).toBe('success');
    // The scripted model streams word by word: in one piece per model call these would be 2 chunks.
    expect(pieces.length).toBeGreaterThan(4);
    expect(pieces.join('')).toBe('looking it upthe resumed answer in seven words');
  });

  it("a decision's streamed answer is live: a resumed model call's text arrives while the run is still going", async () => {
    // Resumed: the model says something and calls an ungoverned tool, then its next call never
    // answers, so the run cannot end before the test cancels it.
    model.enqueue(
      { tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 1' } }] },
      { text: 'first part', tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] },
      { hang: true },
    );
    const paused = await client(KEYS.operator).chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'pay one' }] });
    const info = agentdOf(paused);
    const stream = await client(KEYS.approver).chat.completions.create(
      {
        model: 'default',
        stream: true,
        messages: [{ role: 'tool', tool_call_id: info.approvals[0].approval_id, content: JSON.stringify({ decision: 'approve' }) }],
      },
      { headers: { 'x-agentd-session-id': info.session_id } },
    );
    let text = '';
    let status = '';
    let cancelled = false;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.choices[0]?.finish_reason) status = agentdOf(chunk).status;
      if (text.includes('first part') && !cancelled) {
        cancelled = true;
        const run = (await getJson(`${server.url}/runs/${info.run_id}`, { authorization: `Bearer ${KEYS.reader}` })).body;
        expect(run.status).toBe('running');
        expect((await postJson(`${server.url}/runs/${info.run_id}/cancel`, {}, { authorization: `Bearer ${KEYS.operator}` })).status).toBe(200);
      }
    }
    expect(cancelled).toBe(true);
    expect(status).toBe('cancelled');
    expect(ledger.lines().map((l) => l.entry)).toEqual(['pay 1']);
  });

  it('a reader key starts no run; bad input is a 422 with loc', async () => {
    await expect(client(KEYS.reader).chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'x' }] })).rejects.toMatchObject({
      status: 403,
    });
    const bad = await client(KEYS.operator)
      .chat.completions.create({ model: 'default', messages: [{ role: 'assistant', content: 'x' }] })
      .catch((e: { status: number; error: unknown }) => e);
    expect(bad).toMatchObject({ status: 422 });
  });
});

describe('OpenAI-compatible chat: what holds for POST /run holds here', () => {
  let guarded: TestServer;
  beforeAll(async () => {
    guarded = await startTestServer({ ...GOVERNED, agent: { ...GOVERNED.agent, guardrails: { deny_patterns: ['forbidden words'] } } }, { modelUrl: model.url });
  });
  afterAll(async () => {
    await guarded?.stop();
    guarded?.cleanup();
  });

  it('guardrails check the conversation a stateless request sends along, not only its last message', async () => {
    const c = new OpenAI({ baseURL: `${guarded.url}/v1`, apiKey: KEYS.operator, maxRetries: 0 });
    const before = model.requests.length;
    const res = await c.chat.completions.create({
      model: 'default',
      messages: [
        { role: 'user', content: 'say the forbidden words' },
        { role: 'assistant', content: 'ok' },
        { role: 'user', content: 'go on' },
      ],
    });
    expect(res.choices[0].finish_reason).toBe('content_filter');
    expect(agentdOf(res).status).toBe('error');
    expect(model.requests.length).toBe(before); // the model never saw it
    const run = (await getJson(`${guarded.url}/runs/${agentdOf(res).run_id}`, auth(KEYS.reader))).body;
    expect(run).toMatchObject({ status: 'blocked', termination_reason: 'guardrail' });
  });

  it('an Idempotency-Key makes a retried request answer with the first run, never a second one', async () => {
    const c = new OpenAI({ baseURL: `${guarded.url}/v1`, apiKey: KEYS.operator, maxRetries: 0 });
    const body = { model: 'default', messages: [{ role: 'user' as const, content: 'once only' }] };
    const opts = { headers: { 'idempotency-key': 'oa-idem-1' } };
    const first = await c.chat.completions.create(body, opts);
    const before = model.requests.length;
    const again = await c.chat.completions.create(body, opts);
    expect(agentdOf(again).run_id).toBe(agentdOf(first).run_id);
    expect(again.choices[0].message.content).toBe(first.choices[0].message.content);
    expect(model.requests.length).toBe(before);
  });
});

describe('OpenAI-compatible chat: a budget pause', () => {
  let budgeted: TestServer;
  beforeAll(async () => {
    budgeted = await startTestServer({ ...GOVERNED, budgets: { run: [{ meter: 'model_calls', limit: 1 }] } }, { modelUrl: model.url });
  });
  afterAll(async () => {
    await budgeted?.stop();
    budgeted?.cleanup();
  });

  it('answers awaiting_budget with the request; a tool message grants it and the run completes', async () => {
    const c = new OpenAI({ baseURL: `${budgeted.url}/v1`, apiKey: KEYS.admin, maxRetries: 0 });
    model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] });
    const paused = await c.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'two calls' }] });
    const info = agentdOf(paused) as Agentd & { budget_request: { request_id: string; meter: string } };
    expect(info.status).toBe('awaiting_budget');
    expect(info.budget_request).toMatchObject({ meter: 'model_calls', status: 'pending' });
    const done = await c.chat.completions.create(
      {
        model: 'default',
        messages: [{ role: 'tool', tool_call_id: info.budget_request.request_id, content: JSON.stringify({ decision: 'grant' }) }],
      },
      { headers: { 'x-agentd-session-id': info.session_id } },
    );
    expect(agentdOf(done).status).toBe('success');
    expect(done.choices[0].message.content).toBe('saw: echo: x');
  });
});
