// Traces are derived, not stored span by span (docs/contract.md §8.2): the runtime stores one trace
// record per run segment and the events; a trace view groups the events by span_id. Keeping spans
// derived means a crash can never leave a stored span that disagrees with the event log.
import type { EventInput } from '../store/store.js';

export type TraceStatus = 'running' | 'completed' | 'failed' | 'cancelled' | 'timeout' | 'suspended';

/** What the runtime stores (kind `traces`) for one run segment. */
export interface TraceRecord {
  trace_id: string;
  /** The previous segment of the same run (a resumed run starts a new trace). */
  parent_trace_id: string | null;
  run_id: string | null;
  session_id: string | null;
  task_id: string | null;
  agent_id: string | null;
  status: TraceStatus;
  started_at: string;
  ended_at: string | null;
}

export type SpanName = 'agent.run' | 'agent.step' | 'model.call' | 'tool.batch' | 'tool.call' | 'observation.pipeline' | 'subagent.run' | 'background.run';

export type SpanStatus = 'ok' | 'error' | 'unset';
/** OpenTelemetry attribute values: primitives or arrays of strings. */
export type SpanAttributeValue = string | number | boolean | string[];
export type SpanAttributes = Record<string, SpanAttributeValue>;

export interface TraceSpan {
  span_id: string;
  parent_span_id: string | null;
  /** One of SpanName; an event type nobody mapped yet names its own span. */
  name: SpanName | (string & {});
  status: SpanStatus;
  started_at: string;
  ended_at: string | null;
  duration_ms: number | null;
  attributes: SpanAttributes;
}

export type Trace<R extends TraceRecord = TraceRecord, E extends EventInput = EventInput> = R & {
  spans: TraceSpan[];
  events: E[];
};

export interface TraceSummary {
  trace_id: string;
  run_id: string | null;
  session_id: string | null;
  status: TraceStatus;
  event_count: number;
  span_count: number;
  started_at: string;
  ended_at: string | null;
}

export const RUN_LEVEL_TYPES = new Set([
  'user_message',
  'run_resumed',
  'run_steered',
  'run_interrupted',
  'final_answer',
  'runtime_error',
  'guardrail_violation',
]);

const SPAN_NAME_BY_TYPE: Record<string, SpanName> = {
  agent_step: 'agent.step',
  model_call: 'model.call',
  model_response: 'model.call',
  model_error: 'model.call',
  model_throttled: 'model.call',
  tool_batch_start: 'tool.batch',
  tool_call: 'tool.call',
  tool_result: 'tool.call',
  tool_error: 'tool.call',
  policy_request_created: 'tool.call',
  policy_decision_allow: 'tool.call',
  policy_decision_ask: 'tool.call',
  policy_decision_deny: 'tool.call',
  observation_pipeline_end: 'observation.pipeline',
  subagent_spawn: 'subagent.run',
  subagent_result: 'subagent.run',
  subagent_error: 'subagent.run',
};

/** Event types after which their span is over. */
export const ENDING_EVENT_TYPES: ReadonlySet<string> = new Set([
  'model_response',
  'model_error',
  'tool_result',
  'tool_error',
  'observation_pipeline_end',
  'subagent_result',
  'subagent_error',
  'final_answer',
  'runtime_error',
  'background_run_completed',
  'background_run_failed',
  'background_run_timeout',
  'background_run_cancelled',
  'background_run_skipped',
]);

export const ERROR_EVENT_TYPES: ReadonlySet<string> = new Set([
  'model_error',
  'tool_error',
  'subagent_error',
  'runtime_error',
  'policy_decision_deny',
  'background_run_failed',
  'background_run_timeout',
]);

/** Span name for an event type, ignoring the root rule. Null for run-level and unknown types. */
export function spanNameForEventType(eventType: string): SpanName | null {
  if (eventType.startsWith('background_')) return 'background.run';
  return SPAN_NAME_BY_TYPE[eventType] ?? null;
}

export function summarizeTrace(trace: Trace<TraceRecord, EventInput>): TraceSummary {
  return {
    trace_id: trace.trace_id,
    run_id: trace.run_id,
    session_id: trace.session_id,
    status: trace.status,
    event_count: trace.events.length,
    span_count: trace.spans.length,
    started_at: trace.started_at,
    ended_at: trace.ended_at,
  };
}

export type TraceLookupKey = 'trace_id' | 'run_id' | 'session_id';
export interface TraceLookup {
  key: TraceLookupKey;
  value: string;
}

/**
 * Spec Errors rule 5: a trace lookup takes exactly one of trace id, run id, session id.
 * Undefined and null count as absent; an empty string is a given but invalid key.
 */
export function resolveTraceLookup(key: { trace_id?: string | null; run_id?: string | null; session_id?: string | null }): TraceLookup {
  const given = (['trace_id', 'run_id', 'session_id'] as const).filter((k) => key[k] !== undefined && key[k] !== null);
  if (given.length !== 1) {
    throw new TypeError(`a trace lookup takes exactly one of trace_id, run_id, session_id (got ${given.length === 0 ? 'none' : given.join(', ')})`);
  }
  const k = given[0];
  const value = key[k];
  if (typeof value !== 'string' || value.length === 0) throw new TypeError(`${k} must be a non-empty string`);
  return { key: k, value };
}

// The value type of kind `traces` for the typed repositories (src/store/repos/values.ts).
declare module '../store/repos/values.js' {
  interface RecordValues {
    traces: TraceRecord;
  }
}
