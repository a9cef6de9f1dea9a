import { describe, expect, it } from 'vitest';
import { resolveTraceLookup, summarizeTrace, type TraceSpan } from '../../src/telemetry/traces.js';
import { buildTrace } from '../../src/telemetry/trace-build.js';
import { IDS, at, runEvents, traceRecord } from './fixtures.js';

const byId = (spans: TraceSpan[]) => Object.fromEntries(spans.map((s) => [s.span_id, s]));

describe('buildTrace', () => {
  it('groups a realistic run into named spans with the events\u2019 parents', () => {
    const events = runEvents();
    const trace = buildTrace(traceRecord(), events);
    expect(trace.events.map((e) => e.event_id)).toEqual(events.map((e) => e.event_id));
    expect(trace.spans.map((s) => [s.span_id, s.name, s.parent_span_id])).toEqual([
      [IDS.root, 'agent.run', null],
      [IDS.step1, 'agent.step', IDS.root],
      [IDS.model1, 'model.call', IDS.step1],
      [IDS.batch, 'tool.batch', IDS.step1],
      [IDS.tool1, 'tool.call', IDS.batch],
      [IDS.tool2, 'tool.call', IDS.batch],
      [IDS.obs, 'observation.pipeline', IDS.step1],
      [IDS.step2, 'agent.step', IDS.root],
      [IDS.model2, 'model.call', IDS.step2],
    ]);
    // Every parent is a span of the trace: the tree has one root.
    const ids = new Set(trace.spans.map((s) => s.span_id));
    expect(trace.spans.filter((s) => s.parent_span_id === null)).toHaveLength(1);
    for (const s of trace.spans) if (s.parent_span_id) expect(ids.has(s.parent_span_id)).toBe(true);
  });

  it('sets start, end, duration and status per span', () => {
    const s = byId(buildTrace(traceRecord(), runEvents()).spans);
    const timing = (id: string) => [s[id].started_at, s[id].ended_at, s[id].duration_ms, s[id].status];
    expect(timing(IDS.root)).toEqual([at(0), at(320), 320, 'ok']); // trace end
    expect(timing(IDS.step1)).toEqual([at(10), at(200), 190, 'ok']); // next step starts
    expect(timing(IDS.step2)).toEqual([at(200), at(320), 120, 'ok']); // run end
    expect(timing(IDS.model1)).toEqual([at(20), at(120), 100, 'ok']);
    expect(timing(IDS.batch)).toEqual([at(130), at(170), 40, 'ok']); // last child ends
    expect(timing(IDS.tool1)).toEqual([at(131), at(150), 19, 'ok']);
    expect(timing(IDS.tool2)).toEqual([at(132), at(170), 38, 'ok']);
    expect(timing(IDS.obs)).toEqual([at(180), at(180), 0, 'ok']);
  });

  it('sets gen_ai and agentd attributes', () => {
    const s = byId(buildTrace(traceRecord(), runEvents()).spans);
    const ctx = { 'agentd.run_id': IDS.run, 'agentd.session_id': IDS.session, 'agentd.agent_id': IDS.agent };
    expect(s[IDS.model1].attributes).toEqual({
      ...ctx,
      'gen_ai.operation.name': 'chat',
      'gen_ai.conversation.id': IDS.session,
      'gen_ai.request.model': 'demo-model',
      'gen_ai.provider.name': 'demo',
      'gen_ai.response.finish_reasons': ['tool-calls'],
      'gen_ai.usage.input_tokens': 100,
      'gen_ai.usage.output_tokens': 20,
      'agentd.estimated_cost_usd': 0.001,
    });
    expect(s[IDS.tool2].attributes).toEqual({
      ...ctx,
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.conversation.id': IDS.session,
      'gen_ai.tool.name': 'clock',
      'gen_ai.tool.call.id': 'call_2',
      'gen_ai.tool.type': 'function',
    });
    expect(s[IDS.root].attributes).toMatchObject({
      ...ctx,
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.agent.id': IDS.agent,
      'gen_ai.agent.name': 'helper',
      'gen_ai.usage.input_tokens': 250,
      'gen_ai.usage.output_tokens': 30,
      'agentd.trace.status': 'completed',
    });
    expect(s[IDS.root].attributes['agentd.estimated_cost_usd']).toBeCloseTo(0.003);
    expect(s[IDS.step2].attributes).toEqual({ ...ctx, 'agentd.step': 2 });
    expect(s[IDS.step1].attributes['agentd.task_id']).toBeUndefined();
  });

  it('orders events by cursor whatever order they are given in', () => {
    const events = runEvents();
    const trace = buildTrace(traceRecord(), [...events].reverse());
    expect(trace.events.map((e) => e.cursor)).toEqual(events.map((e) => e.cursor));
    expect(trace.spans[0].span_id).toBe(IDS.root);
  });

  it('a running trace leaves open spans open and unset', () => {
    const events = runEvents().slice(0, 7); // through the 2nd tool_call
    const s = byId(buildTrace(traceRecord({ status: 'running', ended_at: null }), events).spans);
    expect([s[IDS.root].ended_at, s[IDS.root].status, s[IDS.root].duration_ms]).toEqual([null, 'unset', null]);
    expect([s[IDS.step1].ended_at, s[IDS.step1].status]).toEqual([null, 'unset']);
    expect([s[IDS.tool1].ended_at, s[IDS.tool1].status]).toEqual([null, 'unset']);
    expect([s[IDS.batch].ended_at, s[IDS.batch].status]).toEqual([null, 'unset']);
    expect([s[IDS.model1].ended_at, s[IDS.model1].status]).toEqual([at(120), 'ok']);
  });

  it('a suspended segment closes open spans at its end without calling them ok', () => {
    const events = runEvents().slice(0, 7);
    const s = byId(buildTrace(traceRecord({ status: 'suspended', ended_at: at(140) }), events).spans);
    expect([s[IDS.tool1].ended_at, s[IDS.tool1].status]).toEqual([at(140), 'unset']);
    expect([s[IDS.root].ended_at, s[IDS.root].status]).toEqual([at(140), 'unset']);
    expect(s[IDS.step1].ended_at).toBe(at(140));
  });

  it('marks errors on the failing span, its batch, and the root of a failed trace', () => {
    const events = runEvents().slice(0, 9);
    const failed = {
      ...events[7],
      event_type: 'tool_error',
      output: null,
      error: { type: 'ToolTimeout', message: 'calculator timed out' },
    };
    events[7] = failed;
    const runtimeError = {
      ...events[0],
      event_id: 'event_rt',
      event_type: 'runtime_error',
      timestamp: at(175),
      cursor: '0000000000000099',
      error: { type: 'RuntimeError', message: 'gave up' },
    };
    const s = byId(buildTrace(traceRecord({ status: 'failed', ended_at: at(176) }), [...events, runtimeError]).spans);
    expect(s[IDS.tool1].status).toBe('error');
    expect(s[IDS.tool1].attributes).toMatchObject({ 'error.type': 'ToolTimeout', 'agentd.error.message': 'calculator timed out' });
    expect(s[IDS.tool2].status).toBe('ok');
    expect(s[IDS.batch].status).toBe('error');
    expect(s[IDS.root].status).toBe('error');
    expect(s[IDS.root].attributes['error.type']).toBe('RuntimeError');
  });

  it('names spans of policy, sub-agent and background events', () => {
    const base = runEvents()[0];
    const e = (i: number, event_type: string, span_id: string, parent_span_id: string | null) => ({
      ...base,
      event_id: `event_${i}`,
      event_type,
      span_id,
      parent_span_id,
      cursor: String(100 + i).padStart(16, '0'),
    });
    const trace = buildTrace(traceRecord(), [
      e(0, 'user_message', 'r', null),
      e(1, 'policy_request_created', 'p', 'r'),
      e(2, 'policy_decision_deny', 'p', 'r'),
      e(3, 'subagent_spawn', 'sa', 'r'),
      e(4, 'subagent_result', 'sa', 'r'),
      e(5, 'policy_decision_allow', 'r', null),
      e(6, 'background_run_heartbeat', 'bg', 'r'),
    ]);
    const s = byId(trace.spans);
    expect(s.r.name).toBe('agent.run');
    expect([s.p.name, s.p.status, s.p.attributes['agentd.policy.decision']]).toEqual(['tool.call', 'error', 'deny']);
    expect([s.sa.name, s.sa.status, s.sa.attributes['gen_ai.operation.name']]).toEqual(['subagent.run', 'ok', 'invoke_agent']);
    expect(s.bg.name).toBe('background.run');

    const bgTrace = buildTrace(traceRecord({ task_id: 'task_1' }), [
      e(0, 'background_run_claimed', 'root', null),
      e(1, 'background_run_completed', 'root', null),
    ]);
    expect(bgTrace.spans).toHaveLength(1);
    expect(bgTrace.spans[0]).toMatchObject({ name: 'background.run', status: 'ok' });
    expect(bgTrace.spans[0].attributes['agentd.task_id']).toBe('task_1');
  });

  it("folds a call's policy check into its execution span: one tool.call span per call", () => {
    const base = runEvents()[0];
    const e = (
      i: number,
      event_type: string,
      span_id: string,
      parent_span_id: string | null,
      metadata: Record<string, unknown> = {},
      error: unknown = null,
    ) => ({
      ...base,
      event_id: `event_${i}`,
      event_type,
      span_id,
      parent_span_id,
      cursor: String(100 + i).padStart(16, '0'),
      timestamp: at(i * 10),
      metadata: { ...(base.metadata as object), ...metadata },
      error,
    });
    const trace = buildTrace(traceRecord(), [
      e(0, 'user_message', 'r', null),
      e(1, 'agent_step', 'st', 'r'),
      e(2, 'policy_request_created', 'p1', 'st', { tool_call_id: 'c1', tool_name: 'clock' }),
      e(3, 'policy_decision_allow', 'p1', 'st', { tool_call_id: 'c1', tool_name: 'clock' }),
      e(4, 'policy_request_created', 'p2', 'st', { tool_call_id: 'c2', tool_name: 'rm' }),
      e(5, 'policy_decision_deny', 'p2', 'st', { tool_call_id: 'c2', tool_name: 'rm' }),
      e(6, 'tool_batch_start', 'b', 'st'),
      e(7, 'tool_call', 'x1', 'b', { tool_call_id: 'c1', tool_name: 'clock' }),
      e(8, 'tool_error', 'x2', 'st', { tool_call_id: 'c2', tool_name: 'rm' }, { type: 'denied', message: 'Denied by policy.' }),
      e(9, 'tool_result', 'x1', 'b', { tool_call_id: 'c1', tool_name: 'clock' }),
      e(10, 'policy_request_created', 'p3', 'st', { tool_call_id: 'c3', tool_name: 'pay' }),
      e(11, 'policy_decision_ask', 'p3', 'st', { tool_call_id: 'c3', tool_name: 'pay' }),
    ]);
    const calls = trace.spans.filter((x) => x.name === 'tool.call').sort((a, b) => a.span_id.localeCompare(b.span_id));
    expect(
      calls.map((x) => [
        x.span_id,
        x.parent_span_id,
        x.status,
        x.attributes['gen_ai.tool.call.id'],
        x.attributes['agentd.policy.decision'],
        x.attributes['agentd.policy.span_id'],
      ]),
    ).toEqual([
      ['p3', 'st', 'unset', 'c3', 'ask', undefined], // its execution is in a later segment
      ['x1', 'b', 'ok', 'c1', 'allow', 'p1'],
      ['x2', 'st', 'error', 'c2', 'deny', 'p2'],
    ]);
    const x1 = calls.find((x) => x.span_id === 'x1')!;
    expect([x1.started_at, x1.ended_at]).toEqual([at(70), at(90)]);
    expect(calls.find((x) => x.span_id === 'x2')!.attributes['error.type']).toBe('denied');
  });

  it('an empty trace has no spans', () => {
    const trace = buildTrace(traceRecord({ status: 'running', ended_at: null }), []);
    expect(trace.spans).toEqual([]);
    expect(trace.events).toEqual([]);
  });
});

describe('summarizeTrace', () => {
  it('counts events and spans', () => {
    const trace = buildTrace(traceRecord({ parent_trace_id: 'trace_prev' }), runEvents());
    expect(summarizeTrace(trace)).toEqual({
      trace_id: IDS.trace,
      run_id: IDS.run,
      session_id: IDS.session,
      status: 'completed',
      event_count: 14,
      span_count: 9,
      started_at: at(0),
      ended_at: at(320),
    });
  });
});

describe('resolveTraceLookup', () => {
  it('returns the one key given', () => {
    expect(resolveTraceLookup({ trace_id: 'trace_1' })).toEqual({ key: 'trace_id', value: 'trace_1' });
    expect(resolveTraceLookup({ run_id: 'run_1', session_id: undefined })).toEqual({ key: 'run_id', value: 'run_1' });
    expect(resolveTraceLookup({ session_id: 's', trace_id: null })).toEqual({ key: 'session_id', value: 's' });
  });
  it('throws a TypeError for none, several, or an empty key', () => {
    expect(() => resolveTraceLookup({})).toThrow(TypeError);
    expect(() => resolveTraceLookup({ trace_id: 't', run_id: 'r' })).toThrow(/exactly one/);
    expect(() => resolveTraceLookup({ trace_id: 't', run_id: 'r', session_id: 's' })).toThrow(TypeError);
    expect(() => resolveTraceLookup({ run_id: '' })).toThrow(TypeError);
  });
});
