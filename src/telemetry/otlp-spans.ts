// A built trace as OpenTelemetry ReadableSpans (docs/contract.md §8.2): our ids hashed to OTel
// ids, span names and kinds per the GenAI conventions, each stored event a span event, a resumed
// segment's root linked to the segment it continues. otlp.ts exports them.
import { createHash } from 'node:crypto';
import { SpanKind, SpanStatusCode, TraceFlags, type Attributes, type HrTime, type Link, type SpanContext } from '@opentelemetry/api';
import type { Resource } from '@opentelemetry/resources';
import type { ReadableSpan, TimedEvent } from '@opentelemetry/sdk-trace-base';
import type { EventInput } from '../store/store.js';
import type { Trace, TraceRecord, TraceSpan } from './traces.js';
import { Redactor, defaultRedactor } from './redact.js';
import { genAiContentAttributes } from './genai-content.js';

export type InstrumentationScope = ReadableSpan['instrumentationScope'];

/** Our ids of a trace's root span (the segment a resumed run segment continues). */
export interface SegmentRoot {
  trace_id: string;
  span_id: string;
}

/**
 * The root span of the run a fork or replay started from (its first segment), and how the new
 * run relates to it: the root of the new run's first segment gets a span link to it.
 */
export interface OriginRoot extends SegmentRoot {
  type: 'forked_from' | 'replay_of';
  run_id: string;
  /** An evaluation's replay: its evaluation. */
  eval_id?: string;
}

function hexDigest(input: string, chars: number): string {
  const hex = createHash('sha256').update(input).digest('hex').slice(0, chars);
  // An all-zero id is invalid in OTel; sha256 will not produce one in practice, but be exact.
  return /^0+$/.test(hex) ? `${'0'.repeat(chars - 1)}1` : hex;
}

/** Our `trace_…` id as a 32-hex OTel trace id, the same on every export. */
export function toOtelTraceId(traceId: string): string {
  return hexDigest(`trace:${traceId}`, 32);
}

/** Our `span_…` id as a 16-hex OTel span id, the same on every export. */
export function toOtelSpanId(spanId: string): string {
  return hexDigest(`span:${spanId}`, 16);
}

function toHrTime(iso: string): HrTime {
  const t = Date.parse(iso);
  const msValue = Number.isNaN(t) ? 0 : t;
  const seconds = Math.floor(msValue / 1000);
  return [seconds, (msValue - seconds * 1000) * 1_000_000];
}

function hrDuration(start: HrTime, end: HrTime): HrTime {
  let seconds = end[0] - start[0];
  let nanos = end[1] - start[1];
  if (nanos < 0) {
    seconds -= 1;
    nanos += 1_000_000_000;
  }
  if (seconds < 0) return [0, 0];
  return [seconds, nanos];
}

/**
 * GenAI semantic-convention kinds: a model call (`chat`) leaves the process, so CLIENT; the agent
 * runs in-process (`invoke_agent` INTERNAL) and `execute_tool` SHOULD be INTERNAL, MCP tools
 * included (their transport would be the MCP instrumentation's own CLIENT span).
 */
export function otlpSpanKind(span: Pick<TraceSpan, 'name'>): SpanKind {
  return span.name === 'model.call' ? SpanKind.CLIENT : SpanKind.INTERNAL;
}

/**
 * GenAI semantic-convention span names: `{gen_ai.operation.name} {target}`, the target being the
 * model for `chat`, the tool for `execute_tool`, the agent for `invoke_agent` (the operation alone
 * when the target is unknown). Spans that are no GenAI operation keep agentd's name.
 */
export function otlpSpanName(span: Pick<TraceSpan, 'name' | 'attributes'>): string {
  const target = (key: string): string => {
    const v = span.attributes[key];
    return typeof v === 'string' && v.length > 0 ? ` ${v}` : '';
  };
  switch (span.name) {
    case 'model.call':
      return `chat${target('gen_ai.request.model')}`;
    case 'tool.call':
      return `execute_tool${target('gen_ai.tool.name')}`;
    case 'agent.run':
    case 'subagent.run':
      return `invoke_agent${target('gen_ai.agent.name')}`;
    default:
      return span.name;
  }
}

function eventAttributes(event: EventInput, redactor: Redactor): Attributes {
  const attrs: Attributes = { 'agentd.event_id': event.event_id };
  const actor = event.actor as { type?: unknown; id?: unknown } | undefined;
  if (actor && typeof actor.type === 'string') attrs['agentd.actor.type'] = actor.type;
  if (actor && typeof actor.id === 'string') attrs['agentd.actor.id'] = redactor.text(actor.id);
  if (typeof event.cursor === 'string') attrs['agentd.cursor'] = event.cursor;
  const error = event.error as { type?: unknown; message?: unknown } | null | undefined;
  if (error && typeof error.type === 'string') attrs['error.type'] = redactor.text(error.type);
  return attrs;
}

/**
 * Span attributes with secrets inside strings redacted. Stored events are redacted when they are
 * recorded; this second pass covers events stored before that (or by an older version) and
 * values that only the exporter knows are secret, at the cost of one scan per attribute string.
 */
function redactAttributes(attrs: Attributes, redactor: Redactor): Attributes {
  const out: Attributes = {};
  for (const [k, v] of Object.entries(attrs)) {
    out[k] = typeof v === 'string' ? redactor.text(v) : Array.isArray(v) ? (v.map((x) => (typeof x === 'string' ? redactor.text(x) : x)) as typeof v) : v;
  }
  return out;
}

/**
 * Converts a built trace into ReadableSpans. Each stored event becomes a span event on its span.
 * Spans still open (a running trace) end at their last event and carry `agentd.span.incomplete`.
 */
export function traceToReadableSpans(
  trace: Trace<TraceRecord, EventInput>,
  resource: Resource,
  scope: InstrumentationScope,
  redactor: Redactor = defaultRedactor,
  previous: SegmentRoot | null = null,
  captureContent = false,
  origin: OriginRoot | null = null,
): ReadableSpan[] {
  const traceId = toOtelTraceId(trace.trace_id);
  const eventsBySpan = new Map<string, EventInput[]>();
  const lastEventAt = new Map<string, string>();
  const rootSpanId = trace.events.length > 0 && typeof trace.events[0].span_id === 'string' ? trace.events[0].span_id : null;
  for (const e of trace.events) {
    const sid = typeof e.span_id === 'string' && e.span_id.length > 0 ? e.span_id : rootSpanId;
    if (sid === null) continue;
    const list = eventsBySpan.get(sid) ?? [];
    list.push(e);
    eventsBySpan.set(sid, list);
    lastEventAt.set(sid, e.timestamp);
  }
  // A tool call's policy events sit on a span of their own in the log; the trace view folds that
  // span into the call's execution span (traces.ts), so its events land there too.
  for (const span of trace.spans) {
    const folded = span.attributes['agentd.policy.span_id'];
    if (typeof folded !== 'string') continue;
    const moved = eventsBySpan.get(folded);
    if (!moved) continue;
    eventsBySpan.set(span.span_id, [...moved, ...(eventsBySpan.get(span.span_id) ?? [])]);
    eventsBySpan.delete(folded);
  }
  const known = new Set(trace.spans.map((s) => s.span_id));

  return trace.spans.map((span): ReadableSpan => {
    const context: SpanContext = { traceId, spanId: toOtelSpanId(span.span_id), traceFlags: TraceFlags.SAMPLED };
    const parentSpanContext: SpanContext | undefined =
      span.parent_span_id !== null && known.has(span.parent_span_id)
        ? { traceId, spanId: toOtelSpanId(span.parent_span_id), traceFlags: TraceFlags.SAMPLED }
        : undefined;
    const startTime = toHrTime(span.started_at);
    const incomplete = span.ended_at === null;
    const endTime = toHrTime(span.ended_at ?? lastEventAt.get(span.span_id) ?? span.started_at);
    const attributes: Attributes = {
      ...redactAttributes(span.attributes, redactor),
      ...(captureContent ? redactAttributes(genAiContentAttributes(span.name, eventsBySpan.get(span.span_id) ?? []), redactor) : {}),
      'agentd.span.name': span.name,
      'agentd.trace_id': trace.trace_id,
      'agentd.span_id': span.span_id,
    };
    if (span.parent_span_id !== null) attributes['agentd.parent_span_id'] = span.parent_span_id;
    if (incomplete) attributes['agentd.span.incomplete'] = true;
    const isRoot = span.span_id === rootSpanId;
    if (isRoot && trace.parent_trace_id) attributes['agentd.parent_trace_id'] = trace.parent_trace_id;
    // A resumed segment is its own OTel trace (a person may decide days later); the link lets a
    // backend walk from it to the segment it continues, which a string attribute cannot.
    const links: Link[] =
      isRoot && previous && previous.trace_id === trace.parent_trace_id
        ? [
            {
              context: { traceId: toOtelTraceId(previous.trace_id), spanId: toOtelSpanId(previous.span_id), traceFlags: TraceFlags.SAMPLED },
              attributes: { 'agentd.link.type': 'previous_segment', 'agentd.trace_id': previous.trace_id, 'agentd.span_id': previous.span_id },
            },
          ]
        : [];
    // A fork or replay is a new run with its own trace; the link leads to the run it came from.
    if (isRoot && origin && !trace.parent_trace_id)
      links.push({
        context: { traceId: toOtelTraceId(origin.trace_id), spanId: toOtelSpanId(origin.span_id), traceFlags: TraceFlags.SAMPLED },
        attributes: {
          'agentd.link.type': origin.type,
          'agentd.run_id': origin.run_id,
          'agentd.trace_id': origin.trace_id,
          'agentd.span_id': origin.span_id,
          ...(origin.eval_id ? { 'agentd.eval_id': origin.eval_id } : {}),
        },
      });
    const message = span.attributes['agentd.error.message'];
    const events: TimedEvent[] = (eventsBySpan.get(span.span_id) ?? []).map((e) => ({
      name: e.event_type,
      time: toHrTime(e.timestamp),
      attributes: eventAttributes(e, redactor),
    }));
    return {
      name: redactor.text(otlpSpanName(span)),
      kind: otlpSpanKind(span),
      spanContext: () => context,
      parentSpanContext,
      startTime,
      endTime,
      status:
        span.status === 'error'
          ? { code: SpanStatusCode.ERROR, message: typeof message === 'string' ? redactor.text(message) : undefined }
          : { code: span.status === 'ok' ? SpanStatusCode.OK : SpanStatusCode.UNSET },
      attributes,
      links,
      events,
      duration: hrDuration(startTime, endTime),
      ended: true,
      resource,
      instrumentationScope: scope,
      droppedAttributesCount: 0,
      droppedEventsCount: 0,
      droppedLinksCount: 0,
    };
  });
}
