// Telemetry event records, traces and their query strings (docs/contract.md §14, §8).
import { z } from 'zod';
import {
  Cursor,
  ErrorInfo,
  IsoDateTime,
  JsonObject,
  QueryId,
  RepeatableQueryString,
  SafeId,
  TimeRangeQuery,
  checkTimeRange,
  listOrder,
  queryInt,
} from './common.js';

export const ActorType = z.enum(['user', 'agent', 'model', 'tool', 'mcp_server', 'guardrail', 'background', 'system']).meta({ id: 'ActorType' });
export type ActorType = z.infer<typeof ActorType>;

export const EventActor = z.object({ type: ActorType, id: z.string().nullish(), name: z.string().nullish() }).meta({ id: 'EventActor' });
export type EventActor = z.infer<typeof EventActor>;

export const TokenUsage = z
  .object({
    input_tokens: z.number().int().min(0),
    output_tokens: z.number().int().min(0),
    total_tokens: z.number().int().min(0),
  })
  .meta({ id: 'TokenUsage' });
export type TokenUsage = z.infer<typeof TokenUsage>;

/** Metadata keys the runtime sets where known; any other keys may follow. */
export const EventMetadata = z.looseObject({
  run_id: z.string().nullish(),
  session_id: z.string().nullish(),
  agent_id: z.string().nullish(),
  task_id: z.string().nullish(),
});

/**
 * One stored telemetry event (docs/contract.md §8.1). Loose: the spec calls events free-form
 * objects, and the store adds `cursor` plus top-level index fields.
 */
export const TelemetryEvent = z
  .looseObject({
    event_id: z.string(),
    event_type: z.string(),
    trace_id: z.string(),
    span_id: z.string().nullish(),
    parent_span_id: z.string().nullish(),
    sequence: z.number().int().min(0).optional(),
    timestamp: IsoDateTime,
    actor: EventActor.nullish(),
    input: z.unknown().optional(),
    output: z.unknown().optional(),
    error: ErrorInfo.nullish(),
    token_usage: TokenUsage.nullish(),
    estimated_cost_usd: z.number().nullish(),
    duration_ms: z.number().min(0).nullish(),
    metadata: EventMetadata.optional(),
    cursor: z.string().optional().describe('Store cursor; pass it back as `cursor` / Last-Event-ID.'),
  })
  .meta({ id: 'TelemetryEvent' });
export type TelemetryEvent = z.infer<typeof TelemetryEvent>;

export const EventsResponse = z
  .object({
    session_id: z.string().nullable().describe('The session filter; null when the query had none.'),
    events: z.array(TelemetryEvent),
    count: z.number().int().min(0),
    next_cursor: z.string().nullable(),
  })
  .meta({ id: 'EventsResponse' });
export type EventsResponse = z.infer<typeof EventsResponse>;

// --- traces (docs/contract.md §8.2) ----------------------------------------------------------------

export const TraceStatus = z.enum(['running', 'completed', 'failed', 'cancelled', 'timeout', 'suspended']).meta({ id: 'TraceStatus' });
export type TraceStatus = z.infer<typeof TraceStatus>;

export const SpanName = z
  .enum(['agent.run', 'agent.step', 'model.call', 'tool.batch', 'tool.call', 'observation.pipeline', 'subagent.run', 'background.run'])
  .meta({ id: 'SpanName' });
export type SpanName = z.infer<typeof SpanName>;

export const TraceSpan = z
  .object({
    span_id: z.string(),
    parent_span_id: z.string().nullable(),
    name: SpanName,
    status: z.string().describe('ok, error, running or cancelled.'),
    started_at: IsoDateTime,
    ended_at: IsoDateTime.nullable(),
    duration_ms: z.number().min(0).nullable(),
    attributes: JsonObject,
  })
  .meta({ id: 'TraceSpan' });
export type TraceSpan = z.infer<typeof TraceSpan>;

export const Trace = z
  .object({
    trace_id: z.string(),
    parent_trace_id: z.string().nullable(),
    run_id: z.string().nullable(),
    session_id: z.string().nullable(),
    task_id: z.string().nullable(),
    agent_id: z.string().nullable(),
    status: TraceStatus,
    started_at: IsoDateTime,
    ended_at: IsoDateTime.nullable(),
    spans: z.array(TraceSpan),
    events: z.array(TelemetryEvent),
  })
  .meta({ id: 'Trace' });
export type Trace = z.infer<typeof Trace>;

export const TraceSummary = z
  .object({
    trace_id: z.string(),
    run_id: z.string().nullable(),
    session_id: z.string().nullable(),
    status: TraceStatus,
    event_count: z.number().int().min(0),
    span_count: z.number().int().min(0),
    started_at: IsoDateTime,
    ended_at: IsoDateTime.nullable(),
  })
  .meta({ id: 'TraceSummary' });
export type TraceSummary = z.infer<typeof TraceSummary>;

/** The trace routes: exact, latest of a run, latest of a session. */
export const TraceResponse = z.object({ summary: TraceSummary, trace: Trace }).meta({ id: 'TraceResponse' });
export type TraceResponse = z.infer<typeof TraceResponse>;

export const WaitDecision = z
  .object({
    kind: z.enum(['approval', 'budget']),
    id: z.string().describe('The approval id or the budget request id.'),
    subject: z.string().describe('The tool of an approval, the budget key of a budget request.'),
    decision: z.string().describe('approved, denied, expired, used or pending (approvals); granted, denied or pending (budgets).'),
    approver: z.string().nullable(),
    note: z.string().nullable(),
    decided_at: IsoDateTime.nullable(),
    edited_arguments: JsonObject.nullable().describe('The arguments an approver edited the call to; null when approved as asked.'),
    amount: z.number().nullable().describe('The amount a budget grant added.'),
  })
  .meta({ id: 'WaitDecision' });

export const RunWait = z
  .object({
    after_trace_id: z.string(),
    before_trace_id: z.string().nullable().describe('The segment that resumed the run; null while it still waits.'),
    started_at: IsoDateTime,
    ended_at: IsoDateTime.nullable(),
    duration_ms: z.number().min(0).nullable(),
    cause: z.string().nullable().describe("The resuming segment's run_resumed cause: approval, budget_grant, budget_denied, interrupted, …"),
    decisions: z.array(WaitDecision),
  })
  .meta({ id: 'RunWait' });

/** GET /telemetry/runs/{id}/trace: the latest segment as before, plus all of the run. */
export const RunTraceResponse = z
  .object({
    summary: TraceSummary,
    trace: Trace,
    segments: z.array(Trace).describe('Every segment of the run, oldest first (the last is `trace`); at most the newest 100.'),
    waits: z.array(RunWait).describe('The waits for a person between consecutive segments, oldest first.'),
    earlier_segments_omitted: z.boolean().describe('True when the run has more than 100 segments and the oldest are left out.'),
  })
  .meta({ id: 'RunTraceResponse' });

export const TracesListResponse = z
  .object({ traces: z.array(TraceSummary), count: z.number().int().min(0), next_cursor: z.string().nullable() })
  .meta({ id: 'TracesListResponse' });
export type TracesListResponse = z.infer<typeof TracesListResponse>;

// --- query strings and path parameters ---------------------------------------------------------

/** GET /telemetry/events. `event_type` may be repeated; see asArray() in common.ts. */
export const EventsQuery = z.object({
  trace_id: QueryId.optional(),
  run_id: QueryId.optional(),
  session_id: QueryId.optional(),
  task_id: QueryId.optional(),
  event_type: RepeatableQueryString.optional(),
  cursor: Cursor.optional(),
  limit: queryInt(1, 1000, 200),
});
export type EventsQuery = z.infer<typeof EventsQuery>;

/** GET /telemetry/events/stream (the Last-Event-ID header, when present, wins over `cursor`). */
export const EventStreamQuery = z.object({
  session_id: QueryId,
  run_id: QueryId.optional(),
  cursor: Cursor.optional(),
});
export type EventStreamQuery = z.infer<typeof EventStreamQuery>;

/** GET /events/{session_id}, /list, /trace. */
export const SessionEventsQuery = z.object({ run_id: QueryId.optional(), cursor: Cursor.optional() });
export type SessionEventsQuery = z.infer<typeof SessionEventsQuery>;

/** GET /events/{session_id}/list: the follow stream's query plus a page size. */
export const SessionEventsListQuery = SessionEventsQuery.extend({ limit: queryInt(1, 1000, 1000) });
export type SessionEventsListQuery = z.infer<typeof SessionEventsListQuery>;

export const TracesListQuery = TimeRangeQuery.extend({
  run_id: QueryId.optional(),
  session_id: QueryId.optional(),
  task_id: QueryId.optional(),
  agent_id: QueryId.optional().describe('Only traces of this agent.'),
  status: TraceStatus.optional(),
  order: listOrder('desc'),
  limit: queryInt(1, 1000, 100),
  cursor: Cursor.optional(),
}).superRefine(checkTimeRange);
export type TracesListQuery = z.infer<typeof TracesListQuery>;

export const TraceIdParams = z.object({ trace_id: SafeId });
export type TraceIdParams = z.infer<typeof TraceIdParams>;
