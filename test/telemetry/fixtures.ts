// A realistic run segment, built through createEventRecord so the fixtures have the stored shape.
import { ManualClock } from '../../src/clock.js';
import { encodeCursor, type StoredEvent } from '../../src/store/store.js';
import { createEventRecord, type EventRecordInput } from '../../src/telemetry/record.js';
import type { TraceRecord } from '../../src/telemetry/traces.js';

export const IDS = {
  trace: 'trace_T1',
  run: 'run_R1',
  session: 'session_S1',
  agent: 'agent_A1',
  root: 'span_root',
  step1: 'span_step1',
  model1: 'span_model1',
  batch: 'span_batch',
  tool1: 'span_tool1',
  tool2: 'span_tool2',
  obs: 'span_obs',
  step2: 'span_step2',
  model2: 'span_model2',
} as const;

export const T0 = Date.parse('2026-01-01T00:00:00.000Z');
export const at = (ms: number): string => new Date(T0 + ms).toISOString();

type Step = [ms: number, input: Omit<EventRecordInput, 'trace_id' | 'metadata'> & { metadata?: Record<string, unknown> }];

export function runEvents(): StoredEvent[] {
  const clock = new ManualClock(T0);
  const meta = { run_id: IDS.run, session_id: IDS.session, agent_id: IDS.agent };
  const agent = { type: 'agent' as const, id: IDS.agent, name: 'helper' };
  const model = { type: 'model' as const, id: 'demo-model' };
  const steps: Step[] = [
    [0, { event_type: 'user_message', span_id: IDS.root, actor: { type: 'user', id: 'user' }, input: 'what is 2+2 and the time?' }],
    [10, { event_type: 'agent_step', span_id: IDS.step1, parent_span_id: IDS.root, actor: agent, metadata: { step: 1 } }],
    [20, { event_type: 'model_call', span_id: IDS.model1, parent_span_id: IDS.step1, actor: model, metadata: { provider: 'demo' } }],
    [
      120,
      {
        event_type: 'model_response',
        span_id: IDS.model1,
        parent_span_id: IDS.step1,
        actor: model,
        output: { tool_calls: 2 },
        token_usage: { input_tokens: 100, output_tokens: 20, total_tokens: 120 },
        estimated_cost_usd: 0.001,
        metadata: { finish_reason: 'tool-calls' },
      },
    ],
    [130, { event_type: 'tool_batch_start', span_id: IDS.batch, parent_span_id: IDS.step1, actor: agent, metadata: { size: 2 } }],
    [
      131,
      {
        event_type: 'tool_call',
        span_id: IDS.tool1,
        parent_span_id: IDS.batch,
        actor: { type: 'tool', id: 'calculator' },
        input: { expression: '2+2' },
        metadata: { tool_name: 'calculator', tool_call_id: 'call_1' },
      },
    ],
    [
      132,
      {
        event_type: 'tool_call',
        span_id: IDS.tool2,
        parent_span_id: IDS.batch,
        actor: { type: 'tool', id: 'clock' },
        input: {},
        metadata: { tool_name: 'clock', tool_call_id: 'call_2' },
      },
    ],
    [
      150,
      {
        event_type: 'tool_result',
        span_id: IDS.tool1,
        parent_span_id: IDS.batch,
        actor: { type: 'tool', id: 'calculator' },
        output: '4',
        duration_ms: 19,
        metadata: { tool_name: 'calculator', tool_call_id: 'call_1' },
      },
    ],
    [
      170,
      {
        event_type: 'tool_result',
        span_id: IDS.tool2,
        parent_span_id: IDS.batch,
        actor: { type: 'tool', id: 'clock' },
        output: '12:00',
        duration_ms: 38,
        metadata: { tool_name: 'clock', tool_call_id: 'call_2' },
      },
    ],
    [180, { event_type: 'observation_pipeline_end', span_id: IDS.obs, parent_span_id: IDS.step1, actor: agent }],
    [200, { event_type: 'agent_step', span_id: IDS.step2, parent_span_id: IDS.root, actor: agent, metadata: { step: 2 } }],
    [210, { event_type: 'model_call', span_id: IDS.model2, parent_span_id: IDS.step2, actor: model }],
    [
      300,
      {
        event_type: 'model_response',
        span_id: IDS.model2,
        parent_span_id: IDS.step2,
        actor: model,
        output: '4, and it is noon',
        token_usage: { input_tokens: 150, output_tokens: 10, total_tokens: 160 },
        estimated_cost_usd: 0.002,
      },
    ],
    [310, { event_type: 'final_answer', span_id: IDS.root, actor: agent, output: '4, and it is noon' }],
  ];
  return steps.map(([ms, input], i) => {
    clock.set(T0 + ms);
    const record = createEventRecord(
      { ...input, trace_id: IDS.trace, sequence: i + 1, metadata: { ...meta, ...(input.metadata ?? {}) } },
      { capture: 'full' },
      clock,
    );
    return { ...record, cursor: encodeCursor(i + 1) };
  });
}

export function traceRecord(overrides: Partial<TraceRecord> = {}): TraceRecord {
  return {
    trace_id: IDS.trace,
    parent_trace_id: null,
    run_id: IDS.run,
    session_id: IDS.session,
    task_id: null,
    agent_id: IDS.agent,
    status: 'completed',
    started_at: at(0),
    ended_at: at(320),
    ...overrides,
  };
}
