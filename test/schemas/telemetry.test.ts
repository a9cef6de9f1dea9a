import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  EventStreamQuery,
  EventsQuery,
  EventsResponse,
  HealthResponse,
  MetricsResponse,
  ReadinessResponse,
  TelemetryEvent,
  TraceIdParams,
  TraceResponse,
  TracesListQuery,
  TracesListResponse,
  asArray,
} from '../../src/schemas/index.js';

const paths = (s: z.ZodType, v: unknown) => {
  const r = s.safeParse(v);
  return r.success ? [] : r.error.issues.map((i) => i.path.join('.'));
};

const event = {
  event_id: 'event_1',
  event_type: 'model_call',
  trace_id: 'trace_1',
  span_id: 'span_1',
  parent_span_id: null,
  sequence: 3,
  timestamp: '2026-01-01T00:00:00.123Z',
  actor: { type: 'model', id: 'demo', name: 'demo' },
  input: { messages: 2 },
  output: null,
  error: null,
  token_usage: { input_tokens: 10, output_tokens: 5, total_tokens: 15 },
  estimated_cost_usd: 0,
  duration_ms: 12,
  metadata: { run_id: 'run_1', session_id: 's', agent_id: 'assistant' },
};

describe('telemetry events', () => {
  it('accepts the §8.1 record and keeps extra keys (free-form)', () => {
    const parsed = TelemetryEvent.parse({ ...event, cursor: '0000000000000007', run_id: 'run_1' });
    expect(parsed.cursor).toBe('0000000000000007');
    expect((parsed as Record<string, unknown>).run_id).toBe('run_1');
    expect(paths(TelemetryEvent, { ...event, trace_id: undefined })).toEqual(['trace_id']);
    expect(paths(TelemetryEvent, { ...event, actor: { type: 'robot' } })).toEqual(['actor.type']);
  });

  it('EventsResponse carries next_cursor', () => {
    expect(EventsResponse.safeParse({ session_id: 's', events: [event], count: 1, next_cursor: null }).success).toBe(true);
    expect(paths(EventsResponse, { session_id: 's', events: [event], count: 1 })).toEqual(['next_cursor']);
  });

  it('EventsQuery: event_type repeatable, limit 1..1000 default 200', () => {
    expect(EventsQuery.parse({})).toEqual({ limit: 200 });
    expect(EventsQuery.parse({ event_type: 'tool_call' }).event_type).toBe('tool_call');
    expect(EventsQuery.parse({ event_type: ['tool_call', 'tool_result'] }).event_type).toEqual(['tool_call', 'tool_result']);
    expect(asArray(EventsQuery.parse({ event_type: 'x' }).event_type)).toEqual(['x']);
    expect(asArray(undefined)).toBeUndefined();
    expect(EventsQuery.parse({ limit: '1000' }).limit).toBe(1000);
    expect(paths(EventsQuery, { limit: '1001' })).toEqual(['limit']);
    expect(paths(EventsQuery, { limit: '0' })).toEqual(['limit']);
  });

  it('stream query requires session_id', () => {
    expect(paths(EventStreamQuery, {})).toEqual(['session_id']);
    expect(EventStreamQuery.parse({ session_id: 's', run_id: 'r' })).toEqual({ session_id: 's', run_id: 'r' });
  });
});

describe('traces', () => {
  const summary = {
    trace_id: 'trace_1',
    run_id: 'run_1',
    session_id: 's',
    status: 'completed',
    event_count: 1,
    span_count: 1,
    started_at: '2026-01-01T00:00:00Z',
    ended_at: '2026-01-01T00:00:01Z',
  };
  const trace = {
    trace_id: 'trace_1',
    parent_trace_id: null,
    run_id: 'run_1',
    session_id: 's',
    task_id: null,
    agent_id: 'assistant',
    status: 'completed',
    started_at: '2026-01-01T00:00:00Z',
    ended_at: '2026-01-01T00:00:01Z',
    spans: [
      {
        span_id: 'span_1',
        parent_span_id: null,
        name: 'agent.run',
        status: 'ok',
        started_at: '2026-01-01T00:00:00Z',
        ended_at: '2026-01-01T00:00:01Z',
        duration_ms: 1000,
        attributes: {},
      },
    ],
    events: [event],
  };

  it('trace answer and list', () => {
    expect(TraceResponse.safeParse({ summary, trace }).success).toBe(true);
    expect(paths(TraceResponse, { summary: { ...summary, status: 'done' }, trace })).toEqual(['summary.status']);
    expect(paths(TraceResponse, { summary, trace: { ...trace, spans: [{ ...trace.spans[0], name: 'db.query' }] } })).toEqual(['trace.spans.0.name']);
    expect(TracesListResponse.safeParse({ traces: [summary], count: 1, next_cursor: null }).success).toBe(true);
  });

  it('list query: limit 1..1000 default 100, status enum', () => {
    expect(TracesListQuery.parse({})).toEqual({ order: 'desc', limit: 100 });
    expect(TracesListQuery.parse({ status: 'suspended' }).status).toBe('suspended');
    expect(paths(TracesListQuery, { status: 'paused' })).toEqual(['status']);
    expect(paths(TraceIdParams, { trace_id: 'a/../b' })).toEqual(['trace_id']);
  });
});

describe('health, readiness, metrics', () => {
  it('health version default', () => {
    expect(HealthResponse.parse({ status: 'healthy', agent_name: 'assistant', uptime: 1.5 }).version).toBe('0+unknown');
    expect(paths(HealthResponse, { status: 'ok', agent_name: 'a', uptime: 1 })).toEqual(['status']);
  });

  it('readiness with MCP server states', () => {
    expect(
      ReadinessResponse.safeParse({
        ready: false,
        agent_name: 'a',
        initialized: true,
        mcp_connected: false,
        mcp_servers: { files: { status: 'failed', error: 'spawn ENOENT' } },
      }).success,
    ).toBe(true);
    expect(
      paths(ReadinessResponse, {
        ready: false,
        agent_name: 'a',
        initialized: true,
        mcp_connected: false,
        mcp_servers: { files: { status: 'sleeping', error: null } },
      }),
    ).toEqual(['mcp_servers.files.status']);
  });

  it('metrics default to 0', () => {
    expect(MetricsResponse.parse({})).toEqual({
      total_requests: 0,
      total_tokens: 0,
      total_request_tokens: 0,
      total_response_tokens: 0,
      total_time: 0,
      average_time: 0,
    });
  });
});
