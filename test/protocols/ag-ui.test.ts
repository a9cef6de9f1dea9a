// POST /ag-ui driven by `@ag-ui/client`'s HttpAgent (its verifier checks every event stream),
// against a real server and the scripted model: a run, tool calls, an approval interrupt resumed
// with approve / deny / edited arguments, a budget interrupt resumed with a grant, a cancelled run.
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { HttpAgent, type AgentSubscriber } from '@ag-ui/client';
import type { BaseEvent, Interrupt } from '@ag-ui/core';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { AUTH, defaultReplies, GOVERNED_OPEN, KEYS, useLedger } from '../helpers/protocol-server.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

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

interface Outcome {
  events: BaseEvent[];
  outcome: 'success' | 'interrupt' | 'cancelled' | 'error' | null;
  interrupts: Interrupt[];
  runId: string | null;
}

/** One HttpAgent run, recording what the client saw. */
async function run(agent: HttpAgent, params: Parameters<HttpAgent['runAgent']>[0] = {}, extra: AgentSubscriber = {}): Promise<Outcome> {
  const seen: Outcome = { events: [], outcome: null, interrupts: [], runId: null };
  await agent.runAgent(params, {
    ...extra,
    onEvent: ({ event }) => void seen.events.push(event),
    onCustomEvent: (p) => {
      if (p.event.name === 'agentd.run') seen.runId = (p.event.value as { run_id: string }).run_id;
      return extra.onCustomEvent?.(p);
    },
    onRunFinishedEvent: (p) => {
      seen.outcome = p.outcome;
      if (p.outcome === 'interrupt') seen.interrupts = p.interrupts;
    },
    onRunErrorEvent: () => void (seen.outcome = 'error'),
  });
  return seen;
}

const newAgent = (url: string, threadId: string, text: string, key?: string) => {
  const agent = new HttpAgent({ url: `${url}/ag-ui`, threadId, headers: key ? { authorization: `Bearer ${key}` } : {} });
  agent.addMessage({ id: `u-${threadId}`, role: 'user', content: text });
  return agent;
};
const types = (o: Outcome) => o.events.map((e) => e.type);
const assistantText = (agent: HttpAgent) =>
  agent.messages
    .filter((m) => m.role === 'assistant')
    .map((m) => (typeof m.content === 'string' ? m.content : ''))
    .join('|');

describe('AG-UI (HttpAgent)', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(GOVERNED, { modelUrl: model.url });
  });
  afterAll(async () => {
    await server.stop();
    server.cleanup();
  });

  it('context reaches the model for that run only (redacted in its user_message event); small state and forwardedProps are recorded; frontend tools are not offered', async () => {
    const agent = new HttpAgent({
      url: `${server.url}/ag-ui`,
      threadId: 'thread-context',
      headers: { authorization: `Bearer ${KEYS.operator}` },
      initialState: { page: 'checkout', cart: 3 },
    });
    agent.addMessage({ id: 'u-ctx-1', role: 'user', content: 'what am I looking at?' });
    const o = await run(agent, {
      context: [{ description: 'current page', value: 'checkout with sk-live-0123456789abcdefghijklmn' }],
      forwardedProps: { locale: 'fr' },
      tools: [{ name: 'show_toast', description: 'frontend only', parameters: { type: 'object', properties: {} } }],
    });
    expect(o.outcome).toBe('success');
    const sent = model.requests.at(-1)!;
    const msgs = sent.messages.map((m) => [m.role, m.content]);
    // The context sits right before the query, as a system message.
    expect(msgs.at(-2)?.[0]).toBe('system');
    expect(String(msgs.at(-2)?.[1])).toContain('- current page: checkout');
    expect(msgs.at(-1)).toEqual(['user', 'what am I looking at?']);
    expect(JSON.stringify(sent.tools ?? [])).not.toContain('show_toast');
    const rec = (await getJson(`${server.url}/runs/${o.runId}`, { authorization: `Bearer ${KEYS.reader}` })).body;
    expect(rec.metadata).toEqual({ ag_ui_state: { page: 'checkout', cart: 3 }, ag_ui_forwarded_props: { locale: 'fr' } });
    const events = (await getJson(`${server.url}/telemetry/events?run_id=${o.runId}&event_type=user_message`, { authorization: `Bearer ${KEYS.reader}` })).body
      .events;
    expect(events[0].input.context).toContain('current page: checkout');
    expect(JSON.stringify(events[0])).not.toContain('sk-live-0123456789abcdefghijklmn');

    // The next run on the thread: the context is not part of the conversation the server keeps.
    agent.addMessage({ id: 'u-ctx-2', role: 'user', content: 'and now?' });
    expect((await run(agent)).outcome).toBe('success');
    expect(JSON.stringify(model.requests.at(-1)!.messages)).not.toContain('current page');

    // Too much context is a 422 naming it.
    const big = await postJson(
      `${server.url}/ag-ui`,
      {
        threadId: 'thread-context-big',
        runId: 'r-big',
        messages: [{ id: 'u', role: 'user', content: 'x' }],
        context: [{ description: 'huge', value: 'y'.repeat(40_000) }],
      },
      { authorization: `Bearer ${KEYS.operator}` },
    );
    expect(big.status).toBe(422);
    expect(big.body.detail[0].loc.slice(0, 2)).toEqual(['body', 'context']);
  });

  it('a run: RUN_STARTED echoing the ids, CUSTOM agentd.run, a step, the text, RUN_FINISHED success', async () => {
    const agent = newAgent(server.url, 'thread-plain', 'hello');
    const o = await run(agent, { runId: 'client-run-1' });
    expect(types(o)).toEqual([
      'RUN_STARTED',
      'CUSTOM',
      'STEP_STARTED',
      'TEXT_MESSAGE_START',
      'TEXT_MESSAGE_CONTENT',
      'TEXT_MESSAGE_CONTENT',
      'TEXT_MESSAGE_END',
      'STEP_FINISHED',
      'RUN_FINISHED',
    ]);
    expect(o.events[0]).toMatchObject({ threadId: 'thread-plain', runId: 'client-run-1' });
    expect(o.events.at(-1)).toMatchObject({ threadId: 'thread-plain', runId: 'client-run-1' });
    expect(o.outcome).toBe('success');
    expect(assistantText(agent)).toBe('plain answer');
    const rec = (await getJson(`${server.url}/runs/${o.runId}`)).body;
    expect(rec).toMatchObject({ session_id: 'thread-plain', status: 'completed' });
    expect(o.events[1]).toMatchObject({ name: 'agentd.run', value: { run_id: o.runId, trace_id: rec.trace_id } });

    // The next run on the thread: the client re-sends the whole conversation, the model sees each message once.
    agent.addMessage({ id: 'u-2', role: 'user', content: 'again' });
    await run(agent);
    const sent = model.requests.at(-1)!.messages.map((m) => `${m.role}:${String(m.content)}`);
    expect(sent.slice(-3)).toEqual(['user:hello', 'assistant:plain answer', 'user:again']);
  });

  it('a tool call: TOOL_CALL_START/ARGS/END then TOOL_CALL_RESULT, in the agent messages', async () => {
    model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] });
    const agent = newAgent(server.url, 'thread-tool', 'echo x');
    const o = await run(agent);
    expect(types(o)).toEqual(expect.arrayContaining(['TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'TOOL_CALL_RESULT']));
    const call = agent.messages.find((m) => m.role === 'assistant' && m.toolCalls?.length) as {
      toolCalls: Array<{ function: { name: string; arguments: string } }>;
    };
    expect(call.toolCalls[0].function).toEqual({ name: 'echo', arguments: '{"text":"x"}' });
    expect(agent.messages.find((m) => m.role === 'tool')).toMatchObject({ content: 'echo: x' });
    expect(o.outcome).toBe('success');
  });

  it('an approval is an interrupt; resume with approve continues the same agentd run under the new runId', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 10' } }] });
    const agent = newAgent(server.url, 'thread-approve', 'pay');
    const paused = await run(agent, { runId: 'r-1' });
    expect(paused.outcome).toBe('interrupt');
    const rec = (await getJson(`${server.url}/runs/${paused.runId}`)).body;
    expect(rec.status).toBe('awaiting_approval');
    expect(paused.interrupts).toEqual([
      {
        id: rec.approvals[0].approval_id,
        reason: 'tool_approval',
        toolCallId: rec.approvals[0].tool_call_id,
        message: expect.stringContaining('ledger_append'),
        responseSchema: expect.objectContaining({ required: ['decision'] }),
        expiresAt: rec.approvals[0].expires_at,
      },
    ]);
    expect(ledgerLines()).toHaveLength(0);
    const resumed = await run(agent, {
      runId: 'r-2',
      resume: [{ interruptId: paused.interrupts[0].id, status: 'resolved', payload: { decision: 'approve' } }],
    });
    expect(resumed.events[0]).toMatchObject({ type: 'RUN_STARTED', runId: 'r-2' });
    expect(resumed.runId).toBe(paused.runId);
    expect(resumed.outcome).toBe('success');
    expect(types(resumed)).toContain('TOOL_CALL_RESULT');
    expect(ledgerLines().map((l) => l.entry)).toEqual(['pay 10']);
    const done = (await getJson(`${server.url}/runs/${paused.runId}`)).body;
    expect(done).toMatchObject({ status: 'completed', response: 'saw: {"appended":"pay 10"}' });
    expect(done.approvals[0]).toMatchObject({ status: 'used', approver: 'ag-ui' });
  });

  it('resume with deny (and a note) and with edited arguments', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 99' } }] });
    const a1 = newAgent(server.url, 'thread-deny', 'pay big');
    const p1 = await run(a1);
    const r1 = await run(a1, { resume: [{ interruptId: p1.interrupts[0].id, status: 'resolved', payload: { decision: 'deny', note: 'too much' } }] });
    expect(r1.outcome).toBe('success');
    expect(ledgerLines()).toHaveLength(0);
    expect(String(model.requests.at(-1)!.messages.at(-1)!.content)).toContain('too much');

    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 10' } }] });
    const a2 = newAgent(server.url, 'thread-edit', 'pay');
    const p2 = await run(a2);
    await run(a2, { resume: [{ interruptId: p2.interrupts[0].id, status: 'resolved', payload: { decision: 'approve', arguments: { entry: 'pay 5' } } }] });
    expect(ledgerLines().map((l) => l.entry)).toEqual(['pay 5']);
    expect((await getJson(`${server.url}/runs/${p2.runId}`)).body.approvals[0].edited_arguments).toEqual({ entry: 'pay 5' });
  });

  it('a run cancelled while it streams ends with the cancelled outcome', async () => {
    model.enqueue({ tool_calls: [{ name: 'slow', arguments: { ms: 30_000 } }] });
    const agent = newAgent(server.url, 'thread-cancel', 'slow');
    let runId = '';
    const o = await run(
      agent,
      {},
      {
        onCustomEvent: ({ event }) => void (runId = (event.value as { run_id: string }).run_id),
        onToolCallEndEvent: () => void postJson(`${server.url}/runs/${runId}/cancel`, {}),
      },
    );
    expect(o.outcome).toBe('cancelled');
    expect((await getJson(`${server.url}/runs/${runId}`)).body.status).toBe('cancelled');
  });

  it('Idempotency-Key: a retry gets the same run replayed, and the model is called once', async () => {
    model.enqueue({ text: 'the one answer' });
    const agentOf = () => {
      const a = new HttpAgent({ url: `${server.url}/ag-ui`, threadId: 'thread-idem', headers: { 'idempotency-key': 'agui-key-1' } });
      a.addMessage({ id: 'u-idem', role: 'user', content: 'once only' });
      return a;
    };
    const first = await run(agentOf(), { runId: 'same-run' });
    const calls = model.requests.length;
    const retryAgent = agentOf();
    const retry = await run(retryAgent, { runId: 'same-run' });
    expect(retry.runId).toBe(first.runId);
    expect(retry.outcome).toBe('success');
    expect(assistantText(retryAgent)).toBe('the one answer');
    expect(model.requests.length).toBe(calls);
  });

  it('refuses input without a user message, and a resume naming no pending interrupt', async () => {
    const empty = await postJson(`${server.url}/ag-ui`, { threadId: 't', runId: 'r', messages: [] });
    expect(empty.status).toBe(422);
    expect(empty.body.detail[0]).toMatchObject({ loc: ['body', 'messages'], type: 'value_error' });
    const none = await postJson(`${server.url}/ag-ui`, {
      threadId: 't',
      runId: 'r',
      messages: [],
      resume: [{ interruptId: 'approval_nope', status: 'resolved' }],
    });
    expect(none.status).toBe(404);
    expect(none.body.code).toBe('AGT_ERR_APPROVAL_NOT_FOUND');
  });
});

describe('AG-UI: budgets and roles', () => {
  it('a budget pause is an interrupt; resume with a grant continues the run', async () => {
    const server = await startTestServer({ ...GOVERNED, budgets: { run: [{ meter: 'model_calls', limit: 1 }] } }, { modelUrl: model.url });
    try {
      model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] });
      const agent = newAgent(server.url, 'thread-budget', 'two calls');
      const paused = await run(agent);
      expect(paused.outcome).toBe('interrupt');
      const rec = (await getJson(`${server.url}/runs/${paused.runId}`)).body;
      expect(rec.status).toBe('awaiting_budget');
      expect(paused.interrupts[0]).toMatchObject({ id: rec.budget_requests[0].request_id, reason: 'budget_exhausted' });
      const resumed = await run(agent, { resume: [{ interruptId: paused.interrupts[0].id, status: 'resolved', payload: { decision: 'grant', amount: 2 } }] });
      expect(resumed.outcome).toBe('success');
      const done = (await getJson(`${server.url}/runs/${paused.runId}`)).body;
      expect(done.status).toBe('completed');
      expect(done.budget_requests[0]).toMatchObject({ status: 'granted', amount: 2, approver: 'ag-ui' });
    } finally {
      await server.stop();
      server.cleanup();
    }
  });

  it('roles: a reader runs nothing, an operator runs but does not resume, an approver resumes (recorded with its key name)', async () => {
    const server = await startTestServer({ ...GOVERNED, auth: AUTH }, { modelUrl: model.url });
    // HttpAgent logs a refused run to console.error before it rejects.
    const quiet = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    try {
      await expect(run(newAgent(server.url, 'thread-roles', 'hi', KEYS.reader))).rejects.toThrow(/403/);
      model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'r' } }] });
      const operator = newAgent(server.url, 'thread-roles', 'pay', KEYS.operator);
      const paused = await run(operator);
      expect(paused.outcome).toBe('interrupt');
      const resume = [{ interruptId: paused.interrupts[0].id, status: 'resolved' as const, payload: { decision: 'approve' } }];
      await expect(run(operator.clone(), { resume })).rejects.toThrow(/403/);
      const approver = operator.clone();
      approver.headers = { authorization: `Bearer ${KEYS.approver}` };
      expect((await run(approver, { resume })).outcome).toBe('success');
      const rec = (await getJson(`${server.url}/runs/${paused.runId}`, { authorization: `Bearer ${KEYS.reader}` })).body;
      expect(rec.approvals[0].approver).toBe('approver-key');
    } finally {
      quiet.mockRestore();
      await server.stop();
      server.cleanup();
    }
  });
});
