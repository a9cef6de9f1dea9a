// A2A 1.0 driven by @a2a-js/sdk 1.3's client (ClientFactory from the agent card, JSON-RPC
// transport) against a real server with the scripted model: send, stream, get, input-required on
// an approval then continue with a data part (approve with edited arguments, deny), a budget pause,
// cancel, and the roles.
import { randomUUID } from 'node:crypto';
import { Role, TaskState, type Message, type Part, type Task } from '@a2a-js/sdk';
import { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory, type Client } from '@a2a-js/sdk/client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, startTestServer, type TestServer } from '../helpers/server.js';
import { defaultReplies, GOVERNED, KEYS, useLedger } from '../helpers/protocol-server.js';

let model: ScriptedOpenAI;
let server: TestServer;
const ledger = useLedger();
/** Every JSON-RPC body the client sent, to check the wire it speaks. */
const sent: string[] = [];

async function connect(base: string, key: string, headers: Record<string, string> = {}): Promise<Client> {
  const fetchImpl: typeof fetch = (input, init) => {
    if (typeof init?.body === 'string') sent.push(init.body);
    return fetch(input, { ...init, headers: { ...(init?.headers as Record<string, string>), authorization: `Bearer ${key}`, ...headers } });
  };
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
    }),
  );
  return factory.createFromUrl(base);
}

const part = (content: Part['content']): Part => ({ content, metadata: undefined, filename: '', mediaType: '' });
const text = (value: string) => part({ $case: 'text', value });
const data = (value: unknown) => part({ $case: 'data', value });
const message = (parts: Part[], o: { taskId?: string; contextId?: string } = {}): Message => ({
  messageId: randomUUID(),
  contextId: o.contextId ?? '',
  taskId: o.taskId ?? '',
  role: Role.ROLE_USER,
  parts,
  metadata: undefined,
  extensions: [],
  referenceTaskIds: [],
});
async function send(client: Client, msg: Message): Promise<Task> {
  const res = await client.sendMessage({ tenant: '', message: msg, configuration: undefined, metadata: undefined });
  if (!('status' in res)) throw new Error('expected a task');
  return res;
}
const answerOf = (t: Task) =>
  t.artifacts
    .flatMap((a) => a.parts)
    .map((p) => (p.content?.$case === 'text' ? p.content.value : ''))
    .join('');
const waitingData = (t: Task) =>
  t.status!.message!.parts.find((p) => p.content?.$case === 'data')!.content!.value as {
    status: string;
    approvals: Array<{ approval_id: string; tool_name: string; arguments: unknown }>;
    budget_request: { request_id: string } | null;
  };

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

describe('A2A through @a2a-js/sdk 1.3', () => {
  it('serves a public agent card the client builds itself from, with the JSON-RPC 1.0 interface and bearer auth', async () => {
    const card = (await getJson(`${server.url}/.well-known/agent-card.json`)).body;
    expect(card.supportedInterfaces).toEqual([{ url: `${server.url}/a2a`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' }]);
    expect(card.capabilities.streaming).toBe(true);
    expect(card.skills.map((s: { id: string }) => s.id)).toContain('default');
    expect(card.securitySchemes).toEqual({ bearer: { httpAuthSecurityScheme: expect.objectContaining({ scheme: 'Bearer' }) } });
    const client = await connect(server.url, KEYS.reader);
    expect(client.protocolVersion).toBe('1.0');
  });

  it('SendMessage answers with the completed task (task id = run id, context id = session); GetTask reads it', async () => {
    const client = await connect(server.url, KEYS.operator);
    sent.length = 0;
    const task = await send(client, message([text('hello')], { contextId: 'a2a-ctx-1' }));
    // The 1.0 wire the client sent: method name, enum names, parts by field.
    const rpc = JSON.parse(sent.at(-1)!);
    expect(rpc).toMatchObject({ jsonrpc: '2.0', method: 'SendMessage', params: { message: { role: 'ROLE_USER', parts: [{ text: 'hello' }] } } });
    expect(task.status!.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(task.contextId).toBe('a2a-ctx-1');
    expect(answerOf(task)).toBe('plain answer');
    const run = (await getJson(`${server.url}/runs/${task.id}`, { authorization: `Bearer ${KEYS.reader}` })).body;
    expect(run).toMatchObject({ status: 'completed', session_id: 'a2a-ctx-1' });
    const reader = await connect(server.url, KEYS.reader);
    const got = await reader.getTask({ tenant: '', id: task.id, historyLength: undefined });
    expect(got.status!.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(answerOf(got)).toBe('plain answer');
  });

  it('a retried SendMessage (same Idempotency-Key and message, a new JSON-RPC id) answers with the first task', async () => {
    const client = await connect(server.url, KEYS.operator, { 'idempotency-key': `a2a-retry-${randomUUID()}` });
    const msg = message([text('hello')], { contextId: `a2a-idem-${randomUUID()}` });
    sent.length = 0;
    const first = await send(client, msg);
    const calls = model.requests.length;
    const again = await send(client, msg);
    const [a, b] = sent.slice(-2).map((body) => JSON.parse(body) as { id: unknown });
    expect(a.id).not.toEqual(b.id);
    expect(again.id).toBe(first.id);
    expect(again.status!.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(model.requests.length).toBe(calls);
  });

  it('SendStreamingMessage streams the task, the answer as artifact updates, then the final status', async () => {
    model.enqueue({ text: 'streamed a2a answer' });
    const client = await connect(server.url, KEYS.operator);
    const kinds: string[] = [];
    let answer = '';
    let final: TaskState | undefined;
    for await (const ev of client.sendMessageStream({ tenant: '', message: message([text('stream it')]), configuration: undefined, metadata: undefined })) {
      const p = ev.payload!;
      kinds.push(p.$case);
      if (p.$case === 'artifactUpdate') answer += p.value.artifact!.parts.map((x) => (x.content?.$case === 'text' ? x.content.value : '')).join('');
      if (p.$case === 'statusUpdate') final = p.value.status!.state;
    }
    expect(kinds[0]).toBe('task');
    expect(kinds.at(-1)).toBe('statusUpdate');
    expect(kinds).toContain('artifactUpdate');
    expect(answer).toBe('streamed a2a answer');
    expect(final).toBe(TaskState.TASK_STATE_COMPLETED);
  });

  it('an approval puts the task in input-required with the approval in a data part; an approver continues it with edited arguments', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 10' } }] });
    const operator = await connect(server.url, KEYS.operator);
    const paused = await send(operator, message([text('pay')]));
    expect(paused.status!.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    const waiting = waitingData(paused);
    expect(waiting.status).toBe('awaiting_approval');
    expect(waiting.approvals).toEqual([expect.objectContaining({ tool_name: 'ledger_append', arguments: { entry: 'pay 10' } })]);

    const decision = message([data({ decision: 'approve', arguments: { entry: 'pay 5' } })], { taskId: paused.id, contextId: paused.contextId });
    // An operator starts tasks but does not decide them: a 403, as on POST /runs/{id}/approvals/{id}.
    await expect(send(operator, decision)).rejects.toThrow(/403/);
    expect(ledger.lines()).toHaveLength(0);

    const approver = await connect(server.url, KEYS.approver);
    // A decision naming an approval the task does not have is a bad request, not a missing task.
    const unknown = message([data({ decision: 'approve', approval_id: 'approval_nope' })], { taskId: paused.id });
    await expect(send(approver, unknown)).rejects.toMatchObject({ name: 'RequestMalformedError' });
    const done = await send(approver, { ...decision, messageId: randomUUID() });
    expect(done.id).toBe(paused.id);
    expect(done.status!.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(answerOf(done)).toBe('saw: {"appended":"pay 5"}');
    expect(ledger.lines().map((l) => l.entry)).toEqual(['pay 5']);
    const run = (await getJson(`${server.url}/runs/${paused.id}`, { authorization: `Bearer ${KEYS.reader}` })).body;
    expect(run.approvals[0]).toMatchObject({ approver: 'approver-key', edited_arguments: { entry: 'pay 5' } });

    // The task ended: another message on it is refused in the protocol's terms.
    await expect(send(approver, message([data({ decision: 'deny' })], { taskId: paused.id }))).rejects.toMatchObject({ name: 'UnsupportedOperationError' });
  });

  it('deny through a streamed continuation: the tool never runs and the note reaches the model', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 99' } }] });
    const admin = await connect(server.url, KEYS.admin);
    const paused = await send(admin, message([text('pay big')]));
    let final: TaskState | undefined;
    let answer = '';
    const deny = message([data({ decision: 'deny', note: 'not today' })], { taskId: paused.id });
    for await (const ev of admin.sendMessageStream({ tenant: '', message: deny, configuration: undefined, metadata: undefined })) {
      const p = ev.payload!;
      if (p.$case === 'artifactUpdate') answer += p.value.artifact!.parts.map((x) => (x.content?.$case === 'text' ? x.content.value : '')).join('');
      if (p.$case === 'statusUpdate') final = p.value.status!.state;
    }
    expect(final).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(answer).toContain('Denied by admin-key: not today');
    expect(ledger.lines()).toHaveLength(0);
  });

  it("a decision's streamed continuation carries the resumed run's text deltas, each model call's text once", async () => {
    model.enqueue(
      { tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 2' } }] },
      { text: 'looking it up', tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] },
      { text: 'the resumed answer in seven words' },
    );
    const admin = await connect(server.url, KEYS.admin);
    const paused = await send(admin, message([text('pay two')]));
    expect(paused.status!.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    const approve = message([data({ decision: 'approve' })], { taskId: paused.id });
    const pieces: string[] = [];
    let final: TaskState | undefined;
    for await (const ev of admin.sendMessageStream({ tenant: '', message: approve, configuration: undefined, metadata: undefined })) {
      const p = ev.payload!;
      if (p.$case === 'artifactUpdate') pieces.push(p.value.artifact!.parts.map((x) => (x.content?.$case === 'text' ? x.content.value : '')).join(''));
      if (p.$case === 'statusUpdate') final = p.value.status!.state;
    }
    expect(final).toBe(TaskState.TASK_STATE_COMPLETED);
    // The scripted model streams word by word: in one piece per model call these would be 2 updates.
    expect(pieces.filter(Boolean).length).toBeGreaterThan(4);
    expect(pieces.join('')).toBe('looking it upthe resumed answer in seven words');
  });

  it("a decision's streamed continuation is live: a resumed model call's text arrives while the task is still working", async () => {
    // Resumed: the model says something and calls an ungoverned tool, then its next call never
    // answers, so the task cannot end before the test cancels it.
    model.enqueue(
      { tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 1' } }] },
      { text: 'first part', tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] },
      { hang: true },
    );
    const admin = await connect(server.url, KEYS.admin);
    const paused = await send(admin, message([text('pay one')]));
    expect(paused.status!.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    const approve = message([data({ decision: 'approve' })], { taskId: paused.id });
    let answer = '';
    let final: TaskState | undefined;
    let cancelled = false;
    for await (const ev of admin.sendMessageStream({ tenant: '', message: approve, configuration: undefined, metadata: undefined })) {
      const p = ev.payload!;
      if (p.$case === 'artifactUpdate') answer += p.value.artifact!.parts.map((x) => (x.content?.$case === 'text' ? x.content.value : '')).join('');
      if (p.$case === 'statusUpdate') final = p.value.status!.state;
      if (answer.includes('first part') && !cancelled) {
        cancelled = true;
        const run = (await getJson(`${server.url}/runs/${paused.id}`, { authorization: `Bearer ${KEYS.reader}` })).body;
        expect(run.status).toBe('running');
        const task = await admin.cancelTask({ tenant: '', id: paused.id, metadata: undefined });
        expect(task.status!.state).toBe(TaskState.TASK_STATE_CANCELED);
      }
    }
    expect(cancelled).toBe(true);
    expect(final).toBe(TaskState.TASK_STATE_CANCELED);
    expect(ledger.lines().map((l) => l.entry)).toEqual(['pay 1']);
  });

  it('CancelTask cancels a working task; cancelling it again is TaskNotCancelable; an unknown task is TaskNotFound', async () => {
    model.enqueue({ tool_calls: [{ name: 'slow', arguments: { ms: 30_000 } }] });
    const operator = await connect(server.url, KEYS.operator);
    const working = await operator.sendMessage({
      tenant: '',
      message: message([text('take your time')]),
      configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, historyLength: undefined, returnImmediately: true },
      metadata: undefined,
    });
    const id = (working as Task).id;
    await eventually(
      async () => (await getJson(`${server.url}/runs/${id}/inbox`, { authorization: `Bearer ${KEYS.reader}` })).status === 200 && model.requests.length > 0,
    );
    const cancelled = await operator.cancelTask({ tenant: '', id, metadata: undefined });
    expect(cancelled.status!.state).toBe(TaskState.TASK_STATE_CANCELED);
    await expect(operator.cancelTask({ tenant: '', id, metadata: undefined })).rejects.toMatchObject({ name: 'TaskNotCancelableError' });
    await expect(operator.getTask({ tenant: '', id: 'run_missing', historyLength: undefined })).rejects.toMatchObject({ name: 'TaskNotFoundError' });
  });

  it('a reader key starts no task', async () => {
    const reader = await connect(server.url, KEYS.reader);
    const before = model.requests.length;
    await expect(send(reader, message([text('hello')]))).rejects.toThrow(/403/);
    expect(model.requests.length).toBe(before);
  });
});

describe('A2A: a budget pause', () => {
  let budgeted: TestServer;
  beforeAll(async () => {
    budgeted = await startTestServer({ ...GOVERNED, budgets: { run: [{ meter: 'model_calls', limit: 1 }] } }, { modelUrl: model.url });
  });
  afterAll(async () => {
    await budgeted?.stop();
    budgeted?.cleanup();
  });

  it('is input-required with the budget request in a data part; a grant continues the task', async () => {
    model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] });
    const admin = await connect(budgeted.url, KEYS.admin);
    const paused = await send(admin, message([text('two calls')]));
    expect(paused.status!.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    expect(waitingData(paused)).toMatchObject({ status: 'awaiting_budget', budget_request: { meter: 'model_calls' } });
    const done = await send(admin, message([data({ decision: 'grant' })], { taskId: paused.id }));
    expect(done.status!.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(answerOf(done)).toBe('saw: echo: x');
  });
});
