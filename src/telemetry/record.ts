// Telemetry event records (docs/contract.md §8.1): one function turns what an emitter knows into the
// stored record, applying the capture setting and redaction from redact.ts.
import { canonicalIso, isoAt, type Clock } from '../clock.js';
import { newId } from '../ids.js';
import type { EventInput } from '../store/store.js';
import { capturePayload, defaultRedactor, redact, type CaptureMode, type Redactor } from './redact.js';

export type { CaptureMode } from './redact.js';

export const RUN_EVENT_TYPES = [
  'user_message',
  'model_call',
  'model_response',
  'model_error',
  'model_throttled',
  'agent_step',
  'tool_batch_start',
  'tool_call',
  'tool_result',
  'tool_error',
  'observation_pipeline_end',
  'subagent_spawn',
  'subagent_result',
  'subagent_error',
  'guardrail_violation',
  'final_answer',
  'runtime_error',
  'policy_request_created',
  'policy_decision_allow',
  'policy_decision_ask',
  'policy_decision_deny',
  'run_resumed',
  'run_steered',
  'run_interrupted',
] as const;

export const BACKGROUND_EVENT_TYPES = [
  'background_task_scheduled',
  'background_run_queued',
  'background_run_claimed',
  'background_run_started',
  'background_run_heartbeat',
  'background_run_retrying',
  'background_run_recovered',
  'background_run_completed',
  'background_run_failed',
  'background_run_timeout',
  'background_run_cancelled',
  'background_run_skipped',
] as const;

export type KnownEventType = (typeof RUN_EVENT_TYPES)[number] | (typeof BACKGROUND_EVENT_TYPES)[number];
/** Known types autocomplete; other strings stay allowed so a new emitter needs no change here. */
export type EventType = KnownEventType | (string & {});

export type ActorType = 'user' | 'agent' | 'model' | 'tool' | 'mcp_server' | 'guardrail' | 'background' | 'system';

export interface EventActor {
  type: ActorType;
  id: string;
  name?: string | null;
}

export interface EventError {
  type: string;
  message: string;
}

export interface TokenUsage {
  input_tokens: number;
  output_tokens: number;
  total_tokens: number;
}

export interface EventMetadata {
  run_id?: string | null;
  session_id?: string | null;
  agent_id?: string | null;
  task_id?: string | null;
  [key: string]: unknown;
}

export interface CaptureSettings {
  capture: CaptureMode;
  /**
   * Finds secrets inside strings (value patterns and the configured secret values). Default: the
   * value patterns only. The runtime passes one built from the config (secrets.ts).
   */
  redactor?: Redactor;
}

export interface EventRecordInput {
  event_type: EventType;
  trace_id: string;
  span_id: string;
  parent_span_id?: string | null;
  actor: EventActor;
  input?: unknown;
  output?: unknown;
  error?: EventError | null;
  token_usage?: TokenUsage | null;
  estimated_cost_usd?: number | null;
  duration_ms?: number | null;
  /** Per-run (or per background run) order, when the emitter keeps one. */
  sequence?: number | null;
  /** Given only when an emitter must be idempotent under replay (architecture fact 3). */
  event_id?: string;
  /**
   * When the event happened (ISO 8601), stamped by the emitter at the moment it emits: an event
   * may wait before it is stored (a run's first events wait for its creating write), and a span
   * stamped when stored could end before it started. Absent: the clock when the record is built.
   */
  timestamp?: string;
  metadata: EventMetadata;
}

/** The §8.1 record. run_id/session_id/task_id are copied to the top level because the store indexes only top-level fields. */
export interface EventRecord extends EventInput {
  event_id: string;
  event_type: EventType;
  trace_id: string;
  span_id: string;
  parent_span_id: string | null;
  sequence: number | null;
  timestamp: string;
  actor: { type: ActorType; id: string; name: string | null };
  input: unknown;
  output: unknown;
  error: EventError | null;
  token_usage: TokenUsage | null;
  estimated_cost_usd: number | null;
  duration_ms: number | null;
  metadata: EventMetadata;
  run_id: string | null;
  session_id: string | null;
  task_id: string | null;
}

const str = (v: unknown): string | null => (typeof v === 'string' && v.length > 0 ? v : null);
const validTimestamp = (v: unknown): string | null => (typeof v === 'string' ? canonicalIso(v) : null);
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/** Builds a full §8.1 record. Pure apart from the id and the clock reading. */
export function createEventRecord(input: EventRecordInput, settings: CaptureSettings, clock: Clock): EventRecord {
  const redactor = settings.redactor ?? defaultRedactor;
  const metadata = (redact(input.metadata ?? {}, redactor) ?? {}) as EventMetadata;
  // An error message quotes whatever failed: a provider's 401 body may echo the Authorization
  // header, a tool's error its connection string.
  const error = input.error ? { type: redactor.text(String(input.error.type)), message: redactor.text(String(input.error.message)) } : null;
  const usage = input.token_usage
    ? {
        input_tokens: num(input.token_usage.input_tokens) ?? 0,
        output_tokens: num(input.token_usage.output_tokens) ?? 0,
        total_tokens: num(input.token_usage.total_tokens) ?? (num(input.token_usage.input_tokens) ?? 0) + (num(input.token_usage.output_tokens) ?? 0),
      }
    : null;
  return {
    event_id: input.event_id ?? newId('event'),
    event_type: input.event_type,
    trace_id: input.trace_id,
    span_id: input.span_id,
    parent_span_id: input.parent_span_id ?? null,
    sequence: num(input.sequence),
    timestamp: validTimestamp(input.timestamp) ?? isoAt(clock.now()),
    actor: { type: input.actor.type, id: input.actor.id, name: input.actor.name ?? null },
    input: capturePayload(input.input, settings.capture, redactor),
    output: capturePayload(input.output, settings.capture, redactor),
    error,
    token_usage: usage,
    estimated_cost_usd: num(input.estimated_cost_usd),
    duration_ms: num(input.duration_ms),
    metadata,
    run_id: str(input.metadata?.run_id),
    session_id: str(input.metadata?.session_id),
    task_id: str(input.metadata?.task_id),
  };
}
