// Checkpoints, forks, counterfactual replays and comparisons through HTTP (docs/contract.md
// §3.4-3.6), with the scripted model; the variant model of a replay is a second scripted server.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { AUTH, GOVERNED_OPEN, KEYS, defaultReplies, useLedger } from '../helpers/protocol-server.js';
import { streamPost } from '../helpers/sse.js';
import { CheckpointDetail, CheckpointListResponse, CompareResponse, DebugRunResponse } from '../../src/schemas/index.js';

const ledger = useLedger();
let model: ScriptedOpenAI;
let variant: ScriptedOpenAI;
let server: TestServer;
const op = { authorization: `Bearer ${KEYS.operator}` };
const reader = { authorization: `Bearer ${KEYS.reader}` };

beforeAll(async () => {
  model = await startScriptedOpenAI();
  variant = await startScriptedOpenAI();
  const variantHost = new URL(variant.url).host;
  server = await startTestServer({ ...GOVERNED_OPEN, auth: AUTH, agents: { model_hosts: [variantHost] } }, { modelUrl: model.url });
});
afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
  await variant.close();
});
beforeEach(() => {
  ledger.reset();
  defaultReplies(model);
  variant.reset();
});

/** A run that calls echo, then ledger_append (which asks for approval: a pause), approved, then answers. */
async function toolRunWithPause(): Promise<{ run_id: string; session_id: string }> {
  model.enqueue(
    { tool_calls: [{ id: 'c1', name: 'echo', arguments: { text: 'hi' } }] },
    { tool_calls: [{ id: 'c2', name: 'ledger_append', arguments: { entry: 'pay 10' } }] },
    { text: 'paid 10' },
  );
  const paused = (await postJson(`${server.url}/run/sync`, { query: 'pay ten' }, op)).body;
  expect(paused.status).toBe('awaiting_approval');
  const approval = paused.approvals[0].approval_id;
  const approver = { authorization: `Bearer ${KEYS.approver}` };
  expect(
    (await postJson(`${server.url}/runs/${paused.run_id}/approvals/${approval}`, { decision: 'approve', approver: 'approver-key' }, approver)).status,
  ).toBe(200);
  await eventually(async () => ((await getJson(`${server.url}/runs/${paused.run_id}`, reader)).body.status === 'completed' ? true : null));
  expect(ledger.lines()).toHaveLength(1);
  return { run_id: paused.run_id, session_id: paused.session_id };
}

describe('checkpoints', () => {
  it('keeps one before each model call, at the pause, at the resume and at the end; each shows the conversation there', async () => {
    const { run_id } = await toolRunWithPause();
    const list = await getJson(`${server.url}/runs/${run_id}/checkpoints`, reader);
    expect(list.status).toBe(200);
    const body = CheckpointListResponse.parse(list.body);
    expect(body.count).toBe(body.checkpoints.length);
    const states = body.checkpoints.map((c) => `${c.step}:${c.state}`);
    // start (before the first model call), after the echo batch, the pause, the resume, after the ledger batch, the end
    expect(states).toEqual(['1:calling', '2:calling', '2:awaitingApproval', '2:budgeting', '3:calling', '3:completed']);
    const pause = body.checkpoints[2];
    expect(pause.pending.approvals).toHaveLength(1);
    expect(body.checkpoints[3].pending.approvals).toEqual([]);
    // Message counts only grow, and the first model call saw system? + user.
    const counts = body.checkpoints.map((c) => c.message_count);
    expect([...counts].sort((a, b) => a - b)).toEqual(counts);

    const first = CheckpointDetail.parse((await getJson(`${server.url}/runs/${run_id}/checkpoints/cp_1`, reader)).body);
    expect(first.messages.at(-1)).toMatchObject({ role: 'user', content: 'pay ten' });
    expect(first.messages).toHaveLength(first.message_count);
    // What the model saw at its first request is exactly the checkpoint's conversation.
    const firstRequest = model.requests.find((r) => r.messages.some((m) => m.content === 'pay ten'))!;
    expect(firstRequest.messages.length).toBe(first.message_count);
    const second = CheckpointDetail.parse((await getJson(`${server.url}/runs/${run_id}/checkpoints/cp_2`, reader)).body);
    expect(second.messages.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'c1', content: 'echo: hi' });

    const missing = await getJson(`${server.url}/runs/${run_id}/checkpoints/cp_99`, reader);
    expect(missing.status).toBe(404);
    expect(missing.body.code).toBe('AGT_ERR_CHECKPOINT_NOT_FOUND');
    expect((await getJson(`${server.url}/runs/run_nope/checkpoints`, reader)).body.code).toBe('AGT_ERR_RUN_NOT_FOUND');
  });
});

describe('fork', () => {
  it('from step 2 with an edited tool result reaches another answer and leaves the original untouched', async () => {
    model.enqueue({ tool_calls: [{ id: 'e1', name: 'echo', arguments: { text: 'weather' } }] });
    const original = (await postJson(`${server.url}/run/sync`, { query: 'what is the weather' }, op)).body;
    expect(original.response).toBe('saw: echo: weather');
    const before = (await getJson(`${server.url}/runs/${original.run_id}`, reader)).body;
    const sessionBefore = (await getJson(`${server.url}/sessions/${original.session_id}/history`, reader)).body;

    const forked = await postJson(`${server.url}/runs/${original.run_id}/fork`, { checkpoint_id: 'cp_2', edits: { tool_results: { e1: 'echo: snow' } } }, op);
    expect(forked.status, JSON.stringify(forked.body)).toBe(200);
    const fork = DebugRunResponse.parse(forked.body);
    expect(fork.forked_from).toEqual({ run_id: original.run_id, checkpoint_id: 'cp_2' });
    expect(fork.response).toBe('saw: echo: snow');
    expect(fork.session_id).not.toBe(original.session_id);
    // The tool did not run again in the fork: its answer came from the edit.
    const forkRun = (await getJson(`${server.url}/runs/${fork.run_id}`, reader)).body;
    expect(forkRun.tool_calls).toHaveLength(0);
    // The original and its session are untouched.
    expect((await getJson(`${server.url}/runs/${original.run_id}`, reader)).body).toEqual(before);
    expect((await getJson(`${server.url}/sessions/${original.session_id}/history`, reader)).body).toEqual(sessionBefore);
    // The fork's new session is seeded with the conversation up to the checkpoint.
    const forkSession = (await getJson(`${server.url}/sessions/${fork.session_id}/history`, reader)).body;
    expect(JSON.stringify(forkSession)).toContain('what is the weather');

    // The fork's events carry its origin.
    const events = (await getJson(`${server.url}/telemetry/events?run_id=${fork.run_id}&event_type=user_message`, reader)).body.events;
    expect(events[0].metadata.forked_from).toEqual({ run_id: original.run_id, checkpoint_id: 'cp_2' });
    const cmp = CompareResponse.parse((await getJson(`${server.url}/runs/${original.run_id}/compare/${fork.run_id}`, reader)).body);
    expect(cmp.diff.response_changed).toBe(true);
    expect(cmp.diff.response_diff).toContain('-saw: echo: weather');
    expect(cmp.diff.response_diff).toContain('+saw: echo: snow');
    expect(cmp.diff.tool_calls.removed).toEqual([{ name: 'echo', arguments: { text: 'weather' }, outcome: 'success' }]);
  });

  it('refuses an edit naming a tool call the checkpoint does not hold (422), and a reader key (403)', async () => {
    const original = (await postJson(`${server.url}/run/sync`, { query: 'hello' }, op)).body;
    const bad = await postJson(`${server.url}/runs/${original.run_id}/fork`, { checkpoint_id: 'cp_1', edits: { tool_results: { zz: 'x' } } }, op);
    expect(bad.status).toBe(422);
    expect(bad.body.detail[0].loc).toEqual(['body', 'edits', 'tool_results', 'zz']);
    const asReader = await postJson(`${server.url}/runs/${original.run_id}/fork`, { checkpoint_id: 'cp_1' }, reader);
    expect(asReader.status).toBe(403);
    expect((await postJson(`${server.url}/runs/${original.run_id}/fork`, { checkpoint_id: 1 }, op)).status).toBe(422);
  });
});

describe('replay', () => {
  it('on another model with recorded tools never runs the ledger tool, answers from the recording, and reports an unmatched call', async () => {
    const { run_id } = await toolRunWithPause();
    expect(ledger.lines()).toHaveLength(1);
    // The variant makes the same echo and ledger calls (arguments in another key order), then one the original never made.
    variant.enqueue(
      { tool_calls: [{ id: 'v1', name: 'echo', arguments: { text: 'hi' } }] },
      { tool_calls: [{ id: 'v2', name: 'ledger_append', arguments: { entry: 'pay 10' } }] },
      { tool_calls: [{ id: 'v3', name: 'echo', arguments: { text: 'never recorded' } }] },
      (req) => ({ text: `variant done after ${req.messages.filter((m) => m.role === 'tool').length} tool results` }),
    );
    const res = await postJson(
      `${server.url}/runs/${run_id}/replay`,
      { variant: { model: { provider: 'openai-compatible', base_url: variant.url, model: 'variant-b' } } },
      op,
    );
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const replay = DebugRunResponse.parse(res.body);
    expect(replay.replay_of?.run_id).toBe(run_id);
    expect(replay.status).toBe('success'); // no approval asked: the original's decision is in the recording
    expect(replay.response).toBe('variant done after 3 tool results');
    expect(ledger.lines()).toHaveLength(1); // the ledger-writing tool never ran again
    expect(variant.requests).toHaveLength(4);
    const toolMessages = variant.requests[3].messages.filter((m) => m.role === 'tool').map((m) => String(m.content));
    expect(toolMessages[0]).toBe('echo: hi');
    expect(toolMessages[1]).toBe('{"appended":"pay 10"}');
    expect(toolMessages[2]).toContain('no recorded result');
    // The original model was not asked.
    expect(model.requests.filter((r) => r.model === 'variant-b')).toHaveLength(0);

    const cmp = CompareResponse.parse((await getJson(`${server.url}/runs/${run_id}/compare/${replay.run_id}`, reader)).body);
    expect(cmp.diff.tool_calls.added).toEqual([{ name: 'echo', arguments: { text: 'never recorded' }, outcome: 'error' }]);
    expect(cmp.diff.response_changed).toBe(true);
  });

  it('with live tools still never runs a non-idempotent tool it cannot match', async () => {
    model.enqueue({ text: 'nothing to do' });
    const original = (await postJson(`${server.url}/run/sync`, { query: 'idle' }, op)).body;
    variant.enqueue(
      { tool_calls: [{ id: 'w1', name: 'ledger_append', arguments: { entry: 'new' } }] },
      { tool_calls: [{ id: 'w2', name: 'echo', arguments: { text: 'live' } }] },
      { text: 'ok' },
    );
    const res = await postJson(
      `${server.url}/runs/${original.run_id}/replay`,
      { variant: { model: { provider: 'openai-compatible', base_url: variant.url, model: 'variant-b' } }, tools: 'live' },
      op,
    );
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(ledger.lines()).toHaveLength(0);
    const tools = variant.requests[2].messages.filter((m) => m.role === 'tool').map((m) => String(m.content));
    expect(tools[0]).toContain('not executed during a replay');
    expect(tools[1]).toBe('echo: live'); // an idempotent tool runs live
  });

  it('refuses a model host the operator did not list and a key env var not in secret_env, without connecting', async () => {
    model.enqueue({ text: 'x' });
    const original = (await postJson(`${server.url}/run/sync`, { query: 'q' }, op)).body;
    const asked = model.requests.length;
    const host = await postJson(
      `${server.url}/runs/${original.run_id}/replay`,
      { variant: { model: { provider: 'openai-compatible', base_url: 'http://169.254.169.254/v1', model: 'm' } } },
      op,
    );
    expect(host.status).toBe(422);
    expect(host.body.detail[0].loc).toEqual(['body', 'variant', 'model', 'base_url']);
    const key = await postJson(
      `${server.url}/runs/${original.run_id}/replay`,
      { variant: { model: { provider: 'openai-compatible', base_url: variant.url, model: 'm', api_key_env: 'HOME' } } },
      op,
    );
    expect(key.status).toBe(422);
    expect(variant.requests).toHaveLength(0);
    expect(model.requests.length).toBe(asked);
    expect((await postJson(`${server.url}/runs/${original.run_id}/replay`, { variant: {} }, op)).status).toBe(422);
  });

  it('with a system instruction variant re-asks the same inputs', async () => {
    model.enqueue({ text: 'first' });
    const original = (await postJson(`${server.url}/run/sync`, { query: 'say it' }, op)).body;
    model.enqueue((req) => ({ text: `system: ${String(req.messages[0].content)}` }));
    const res = await postJson(`${server.url}/runs/${original.run_id}/replay`, { variant: { system_instruction: 'be brief' } }, op);
    expect(res.body.response).toBe('system: be brief');
    expect(model.requests.at(-1)!.messages.at(-1)).toMatchObject({ role: 'user', content: 'say it' });
  });
});

describe('stream: true', () => {
  it('a fork answers with the POST /run stream: session, its events, deltas, then complete with forked_from', async () => {
    model.enqueue({ tool_calls: [{ id: 's1', name: 'echo', arguments: { text: 'rain' } }] });
    const original = (await postJson(`${server.url}/run/sync`, { query: 'stream me' }, op)).body;
    const { status, frames } = await streamPost(
      `${server.url}/runs/${original.run_id}/fork`,
      { checkpoint_id: 'cp_2', edits: { tool_results: { s1: 'echo: sun' } }, stream: true },
      op,
    );
    expect(status).toBe(200);
    const kinds = frames.map((f) => f.event);
    expect(kinds[0]).toBe('session');
    expect(kinds.at(-1)).toBe('complete');
    const session = frames[0].data;
    const complete = DebugRunResponse.parse(frames.at(-1)!.data);
    expect(complete.run_id).toBe(session.run_id);
    expect(complete.session_id).toBe(session.session_id);
    expect(complete.forked_from).toEqual({ run_id: original.run_id, checkpoint_id: 'cp_2' });
    expect(complete.response).toBe('saw: echo: sun');
    // The run's stored events, with ids to resume from, as on POST /run; the answer's text as deltas.
    const userMessage = frames.find((f) => f.event === 'user_message')!;
    expect(userMessage.id).toBeTruthy();
    expect(userMessage.data.run_id).toBe(complete.run_id);
    expect(userMessage.data.metadata.forked_from).toEqual({ run_id: original.run_id, checkpoint_id: 'cp_2' });
    expect(kinds).toContain('final_answer');
    const deltas = frames.filter((f) => f.event === 'delta').map((f) => f.data.text as string);
    expect(deltas.join('')).toBe('saw: echo: sun');
    // The run's result is stored like any run's.
    expect((await getJson(`${server.url}/runs/${complete.run_id}`, reader)).body.status).toBe('completed');
  });

  it('a replay answers with the stream, complete carrying replay_of; the recorded tool answers without running', async () => {
    const { run_id } = await toolRunWithPause();
    variant.enqueue({ tool_calls: [{ id: 'r1', name: 'ledger_append', arguments: { entry: 'pay 10' } }] }, { text: 'variant streamed' });
    const variantModel = { provider: 'openai-compatible', base_url: variant.url, model: 'variant-b' };
    const { status, frames } = await streamPost(`${server.url}/runs/${run_id}/replay`, { variant: { model: variantModel }, stream: true }, op);
    expect(status).toBe(200);
    expect(frames[0].event).toBe('session');
    const complete = DebugRunResponse.parse(frames.at(-1)!.data);
    expect(frames.at(-1)!.event).toBe('complete');
    expect(complete.replay_of).toEqual({ run_id, variant: { model: variantModel } });
    expect(complete.response).toBe('variant streamed');
    const toolResult = frames.find((f) => f.event === 'tool_result')!;
    expect(toolResult.data.run_id).toBe(complete.run_id);
    expect(ledger.lines()).toHaveLength(1); // the original's one line: nothing ran again
  });

  it('a request refused before the run starts is a plain JSON error, not a stream', async () => {
    const original = (await postJson(`${server.url}/run/sync`, { query: 'hello' }, op)).body;
    const missing = await streamPost(`${server.url}/runs/${original.run_id}/fork`, { checkpoint_id: 'cp_99', stream: true }, op);
    expect(missing.status).toBe(404);
    expect(missing.frames[0].data.code).toBe('AGT_ERR_CHECKPOINT_NOT_FOUND');
    const noRun = await streamPost(`${server.url}/runs/run_nope/replay`, { variant: { system_instruction: 'x' }, stream: true }, op);
    expect(noRun.status).toBe(404);
    expect(noRun.frames[0].data.code).toBe('AGT_ERR_RUN_NOT_FOUND');
  });
});

describe('runs.checkpoints: false', () => {
  it('keeps no checkpoints (the benchmark baseline), and the run is otherwise the same; asking for one is 409 AGT_ERR_CHECKPOINTS_OFF', async () => {
    const bare = await startTestServer({ ...GOVERNED_OPEN, runs: { checkpoints: false } }, { modelUrl: model.url });
    try {
      model.enqueue({ tool_calls: [{ id: 'n1', name: 'echo', arguments: { text: 'plain' } }] });
      const run = (await postJson(`${bare.url}/run/sync`, { query: 'no checkpoints' })).body;
      expect(run.response).toBe('saw: echo: plain');
      const list = CheckpointListResponse.parse((await getJson(`${bare.url}/runs/${run.run_id}/checkpoints`)).body);
      expect(list).toEqual({ run_id: run.run_id, checkpoints: [], count: 0 });
      // The run exists but kept none: a 409 saying so, not a 404 (docs/debugging.md).
      for (const asked of [
        getJson(`${bare.url}/runs/${run.run_id}/checkpoints/cp_1`),
        postJson(`${bare.url}/runs/${run.run_id}/fork`, { checkpoint_id: 'cp_1' }),
        postJson(`${bare.url}/runs/${run.run_id}/fork`, { checkpoint_id: 'cp_1', stream: true }),
        postJson(`${bare.url}/runs/${run.run_id}/replay`, { variant: { system_instruction: 'v2' }, from_checkpoint: 'cp_1' }),
      ]) {
        const r = await asked;
        expect(r.status).toBe(409);
        expect(r.body.code).toBe('AGT_ERR_CHECKPOINTS_OFF');
      }
      expect((await postJson(`${bare.url}/runs/run_missing/fork`, { checkpoint_id: 'cp_1' })).body.code).toBe('AGT_ERR_RUN_NOT_FOUND');
      // From its start, a replay needs no checkpoint.
      model.enqueue({ text: 'replayed' });
      const replay = await postJson(`${bare.url}/runs/${run.run_id}/replay`, { variant: { system_instruction: 'v2' } });
      expect(replay.status, JSON.stringify(replay.body)).toBe(200);
      expect(DebugRunResponse.parse(replay.body)).toMatchObject({ response: 'replayed', replay_of: { run_id: run.run_id } });
    } finally {
      await bare.stop();
      bare.cleanup();
    }
  });
});
