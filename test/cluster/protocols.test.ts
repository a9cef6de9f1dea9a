// The chat protocols on two agentd processes and one PostgreSQL database: a run streamed through
// one instance is decided through the other, with each protocol's official client (`ai` 6's
// DefaultChatTransport + readUIMessageStream, `@ag-ui/client`'s HttpAgent, the `openai` client). The decision's
// instance resumes the run and streams it; the first instance's reconnect follows it live.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DefaultChatTransport, readUIMessageStream, type UIMessage, type UIMessageChunk } from 'ai';
import { HttpAgent } from '@ag-ui/client';
import OpenAI from 'openai';
import type { Interrupt } from '@ag-ui/core';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { getJson, killAllChildren, readLedger, routeByTag, type TurnScript } from '../crash/harness.js';
import { startCluster, type Cluster } from './helpers.js';
import { waitFor } from '../helpers/wait.js';

let model: ScriptedOpenAI;
let cluster: Cluster;
const scripts = new Map<string, TurnScript>();
const A = () => cluster.instances[0].url;
const B = () => cluster.instances[1].url;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  routeByTag(model, (tag) => scripts.get(tag));
  cluster = await startCluster(2, model.url, { governance: { rules: [{ tools: ['ask_*'], effect: 'ask', reason: 'a person approves writes' }] } });
}, 60_000);

afterAll(async () => {
  await cluster?.destroy();
  await killAllChildren();
  await model?.close();
});

const ledgerOf = (runId: string, tool: string) => readLedger(cluster.ledger).filter((l) => l.run_id === runId && l.tool === tool);

type Msg = UIMessage<{ run_id: string; session_id: string; trace_id: string; status?: string }>;
const chat = (url: string) => new DefaultChatTransport<Msg>({ api: `${url}/ai-sdk/chat` });
async function readMessage(stream: ReadableStream<UIMessageChunk>, message?: Msg): Promise<Msg> {
  let last: Msg | undefined;
  for await (const m of readUIMessageStream<Msg>({ stream, message, terminateOnError: true })) last = m;
  return last!;
}
const toolPart = (m: Msg) => m.parts.find((p) => p.type === 'dynamic-tool') as { state: string; approval?: { id: string }; output?: unknown };

describe('chat protocols over two instances', () => {
  it('AI SDK: paused on A, approved through B (B streams the resumed run), and A reconnects to it live', async () => {
    scripts.set('aisdk', (turn) =>
      turn === 0
        ? { tool_calls: [{ name: 'ask_write', arguments: { entry: 'pay-aisdk' } }] }
        : turn === 1
          ? { tool_calls: [{ name: 'counted_echo', arguments: { text: 'x', ms: 1500 } }] }
          : { text: 'paid' },
    );
    const user: Msg = { id: 'u1', role: 'user', parts: [{ type: 'text', text: '[aisdk] pay' }] };
    const paused = await readMessage(
      await chat(A()).sendMessages({ chatId: 'pg-chat', messages: [user], trigger: 'submit-message', messageId: undefined, abortSignal: undefined }),
    );
    expect(toolPart(paused).state).toBe('approval-requested');
    const runId = paused.metadata!.run_id;

    const answered: Msg = {
      ...paused,
      parts: paused.parts.map((p) =>
        p.type === 'dynamic-tool' ? ({ ...p, state: 'approval-responded', approval: { id: toolPart(paused).approval!.id, approved: true } } as never) : p,
      ),
    };
    const onB = chat(B()).sendMessages({
      chatId: 'pg-chat',
      messages: [user, answered],
      trigger: 'submit-message',
      messageId: answered.id,
      abortSignal: undefined,
    });
    const continued = readMessage(await onB, structuredClone(answered));
    // While the resumed run is live on B, A's reconnect replays it from its start and follows it.
    const replay = await waitFor(() => chat(A()).reconnectToStream({ chatId: 'pg-chat' }), { what: "A's reconnect to the run live on B" });
    const followed = await readMessage(replay);
    const done = await continued;
    expect(done.parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text)).toEqual(['paid']);
    expect(toolPart(done)).toMatchObject({ state: 'output-available' });
    expect(followed.metadata!.run_id).toBe(runId);
    expect(followed.parts.filter((p) => p.type === 'dynamic-tool')).toHaveLength(2);
    expect(followed.parts.some((p) => p.type === 'text' && (p as { text: string }).text === 'paid')).toBe(true);
    expect((await getJson(`${A()}/runs/${runId}`)).body.status).toBe('completed');
    expect(ledgerOf(runId, 'ask_write').filter((l) => l.phase === 'done')).toHaveLength(1);
  }, 60_000);

  it('AG-UI: the interrupt streamed by A, the resume (edited arguments) sent to B, the same run completes once', async () => {
    scripts.set('agui', (turn) => (turn === 0 ? { tool_calls: [{ name: 'ask_write', arguments: { entry: 'pay-agui' } }] } : { text: 'paid' }));
    const onA = new HttpAgent({ url: `${A()}/ag-ui`, threadId: 'pg-thread' });
    onA.addMessage({ id: 'u1', role: 'user', content: '[agui] pay' });
    let interrupts: Interrupt[] = [];
    let runId = '';
    await onA.runAgent(
      { runId: 'client-1' },
      {
        onCustomEvent: ({ event }) => void (runId = (event.value as { run_id: string }).run_id),
        onRunFinishedEvent: (p) => void (interrupts = p.outcome === 'interrupt' ? p.interrupts : []),
      },
    );
    expect(interrupts).toHaveLength(1);
    const onB = onA.clone();
    onB.url = `${B()}/ag-ui`;
    let outcome = '';
    let seenRun = '';
    await onB.runAgent(
      {
        runId: 'client-2',
        resume: [{ interruptId: interrupts[0].id, status: 'resolved', payload: { decision: 'approve', arguments: { entry: 'pay-edited' } } }],
      },
      { onCustomEvent: ({ event }) => void (seenRun = (event.value as { run_id: string }).run_id), onRunFinishedEvent: (p) => void (outcome = p.outcome) },
    );
    expect(outcome).toBe('success');
    expect(seenRun).toBe(runId);
    const done = ledgerOf(runId, 'ask_write').filter((l) => l.phase === 'done');
    expect(done).toHaveLength(1);
    expect(JSON.stringify(done[0])).toContain('pay-edited');
    expect((await getJson(`${A()}/runs/${runId}`)).body).toMatchObject({ status: 'completed', response: 'paid' });
  }, 60_000);

  it("OpenAI-compatible chat: paused on A, the decision streamed through B carries each resumed model call's text, the run completes once", async () => {
    scripts.set('openai', (turn) =>
      turn === 0
        ? { tool_calls: [{ name: 'ask_write', arguments: { entry: 'pay-openai' } }] }
        : turn === 1
          ? { text: 'writing it down', tool_calls: [{ name: 'counted_echo', arguments: { text: 'x', ms: 10 } }] }
          : { text: 'paid' },
    );
    const client = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', maxRetries: 0 });
    const headers = { 'x-agentd-session-id': 'pg-openai' };
    const paused = await client(A()).chat.completions.create({ model: 'default', messages: [{ role: 'user', content: '[openai] pay' }] }, { headers });
    const info = (paused as unknown as { agentd: { run_id: string; approvals: Array<{ approval_id: string }> } }).agentd;
    expect(info.approvals).toHaveLength(1);
    const stream = await client(B()).chat.completions.create(
      {
        model: 'default',
        stream: true,
        messages: [{ role: 'tool', tool_call_id: info.approvals[0].approval_id, content: JSON.stringify({ decision: 'approve' }) }],
      },
      { headers },
    );
    const texts: string[] = [];
    let status = '';
    for await (const chunk of stream) {
      const t = chunk.choices[0]?.delta?.content;
      if (t) texts.push(t);
      if (chunk.choices[0]?.finish_reason) status = (chunk as unknown as { agentd: { status: string } }).agentd.status;
    }
    expect(status).toBe('success');
    // Each model call's text once: as deltas where the resume ran here (B took the decision), whole otherwise.
    expect(texts.join('')).toBe('writing it downpaid');
    expect(texts.length).toBeGreaterThanOrEqual(2);
    expect(ledgerOf(info.run_id, 'ask_write').filter((l) => l.phase === 'done')).toHaveLength(1);
    expect((await getJson(`${A()}/runs/${info.run_id}`)).body).toMatchObject({ status: 'completed', response: 'paid' });
  }, 60_000);
});
