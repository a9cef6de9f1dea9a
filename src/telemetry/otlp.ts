// OTLP/HTTP export of finished traces (docs/contract.md §8.2). Spans are not recorded through an
// OpenTelemetry tracer: traces are derived from stored events after the fact, so each built trace
// is converted to ReadableSpan objects and handed straight to the OTLP exporter. Export must never
// fail or slow a run: `exportTrace` only enqueues; one background loop sends, retries with
// backoff, and reports what happened through `onEvent` instead of throwing.
import { createHash } from 'node:crypto';
import { SpanKind, SpanStatusCode, TraceFlags, type Attributes, type HrTime, type Link, type SpanContext } from '@opentelemetry/api';
import { OTLPTraceExporter as OTLPHttpJsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as OTLPHttpProtoTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes, type Resource } from '@opentelemetry/resources';
import type { ReadableSpan, SpanExporter, TimedEvent } from '@opentelemetry/sdk-trace-base';
import type { EventInput } from '../store/store.js';
import type { Trace, TraceRecord, TraceSpan } from './traces.js';
import { Redactor, defaultRedactor } from './redact.js';
import { reportSwallowed } from './swallowed.js';
import { genAiContentAttributes } from './genai-content.js';

export type OtlpProtocol = 'http/json' | 'http/protobuf';

type ExportResult = Parameters<Parameters<SpanExporter['export']>[1]>[0];
type InstrumentationScope = ReadableSpan['instrumentationScope'];

export type OtlpExportEvent =
  | { type: 'exported'; trace_ids: string[]; span_count: number; attempts: number }
  | { type: 'retrying'; trace_ids: string[]; attempt: number; delay_ms: number; error: string }
  | { type: 'failed'; trace_ids: string[]; attempts: number; error: string }
  | { type: 'dropped'; trace_id: string; reason: 'queue_full' | 'shut_down' | 'invalid_trace'; error?: string };

export interface OtlpExporterOptions {
  /** Base endpoint (`/v1/traces` is appended) or a full traces URL ending in `/v1/traces`. */
  endpoint?: string;
  /** Full traces URL, used as is (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); wins over `endpoint`. */
  tracesEndpoint?: string;
  headers?: Record<string, string>;
  /** Default `http/protobuf`, the OTLP default. */
  protocol?: OtlpProtocol;
  /** `service.name` of the resource. Default `agentd`. */
  serviceName?: string;
  serviceVersion?: string;
  /** Traces waiting to be sent; more are dropped (reported as `dropped`). Default 1000. */
  maxQueue?: number;
  /** Traces sent per request. Default 32. */
  maxBatch?: number;
  /** Tries per batch, the first included. Default 5. */
  maxAttempts?: number;
  /** Backoff before the 2nd try, doubled each time up to maxBackoffMs. Defaults 1000 / 30000. */
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  /** Per-request timeout handed to the OTLP exporter. Default 10000. */
  timeoutMillis?: number;
  /**
   * Message content on model and tool spans (gen_ai.input.messages and friends, genai-content.ts):
   * telemetry.otlp.capture_message_content. Default false.
   */
  captureMessageContent?: boolean;
  /** Observability hook (architecture habit 9); tests await these instead of sleeping. */
  onEvent?: (event: OtlpExportEvent) => void;
  /** Replaces the OTLP exporter (tests, vendor presets with their own exporter). */
  exporter?: SpanExporter;
  /**
   * Applied to every string attribute and status message before export (the process's redactor:
   * value patterns and configured secrets). The exporter's own header values are always added.
   */
  redactor?: Redactor;
}

export interface OtlpExporterStats {
  queued: number;
  in_flight: number;
  exported_traces: number;
  failed_traces: number;
  dropped_traces: number;
}

export interface OtlpTraceExporter {
  readonly url: string;
  readonly protocol: OtlpProtocol;
  /**
   * Enqueues a finished trace and returns at once; false when it was dropped (queue full, shut
   * down). `previous` is the root span of the run segment this one resumes: the root gets a span
   * link to it.
   */
  exportTrace(trace: Trace<TraceRecord, EventInput>, previous?: SegmentRoot | null, origin?: OriginRoot | null): boolean;
  /** Resolves once everything enqueued so far was sent or given up on. Never rejects. */
  flush(): Promise<void>;
  /** Stops accepting, tries to flush within `graceMs` (default 5000), then closes the exporter. Never rejects. */
  shutdown(graceMs?: number): Promise<void>;
  stats(): OtlpExporterStats;
}

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

const TRACES_PATH = '/v1/traces';

/** OTLP base-endpoint rule: append `/v1/traces` unless the URL already names the traces path. */
export function resolveOtlpTracesUrl(endpoint: string): string {
  const url = new URL(endpoint);
  if (!url.pathname.endsWith(TRACES_PATH)) {
    url.pathname = url.pathname.replace(/\/+$/, '') + TRACES_PATH;
  }
  return url.toString();
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

interface Pending {
  trace: Trace<TraceRecord, EventInput>;
  previous: SegmentRoot | null;
  origin: OriginRoot | null;
}

function errorText(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

export function createOtlpExporter(options: OtlpExporterOptions): OtlpTraceExporter {
  const protocol: OtlpProtocol = options.protocol ?? 'http/protobuf';
  if (!options.tracesEndpoint && !options.endpoint) throw new TypeError('an OTLP exporter needs endpoint or tracesEndpoint');
  const url = options.tracesEndpoint ? new URL(options.tracesEndpoint).toString() : resolveOtlpTracesUrl(options.endpoint!);
  const maxQueue = options.maxQueue ?? 1000;
  const maxBatch = Math.max(1, options.maxBatch ?? 32);
  const maxAttempts = Math.max(1, options.maxAttempts ?? 5);
  const initialBackoffMs = options.initialBackoffMs ?? 1000;
  const maxBackoffMs = options.maxBackoffMs ?? 30_000;
  const timeoutMillis = options.timeoutMillis ?? 10_000;
  const exporterConfig = { url, headers: { ...(options.headers ?? {}) }, timeoutMillis };
  const exporter: SpanExporter =
    options.exporter ?? (protocol === 'http/json' ? new OTLPHttpJsonTraceExporter(exporterConfig) : new OTLPHttpProtoTraceExporter(exporterConfig));
  // One resource object for every span: the OTLP transformer groups spans by resource identity.
  const resource = resourceFromAttributes({
    'service.name': options.serviceName ?? 'agentd',
    ...(options.serviceVersion ? { 'service.version': options.serviceVersion } : {}),
  });
  const scope: InstrumentationScope = { name: 'agentd', version: options.serviceVersion };
  // The collector's own credentials (header values) must never appear in what it receives.
  const headerSecrets = Object.values(options.headers ?? {}).flatMap((v) => [v, v.replace(/^\s*[A-Za-z][\w-]*\s+/, '')]);
  const redactor = new Redactor([...(options.redactor?.secrets ?? []), ...headerSecrets]);

  const queue: Pending[] = [];
  let inFlight = 0;
  let running = false;
  let closed = false;
  let retryTimer: NodeJS.Timeout | null = null;
  let wakeRetry: (() => void) | null = null;
  let idleWaiters: Array<() => void> = [];
  const stats = { exported_traces: 0, failed_traces: 0, dropped_traces: 0 };

  const emit = (event: OtlpExportEvent): void => {
    if (!options.onEvent) return;
    try {
      options.onEvent(event);
    } catch (err) {
      // A faulty listener must not stop the export loop.
      reportSwallowed('otlp.listener', err);
    }
  };

  const notifyIdle = (): void => {
    if (running || queue.length > 0) return;
    const waiters = idleWaiters;
    idleWaiters = [];
    for (const w of waiters) w();
  };

  const send = (spans: ReadableSpan[]): Promise<ExportResult> =>
    new Promise((resolve) => {
      try {
        exporter.export(spans, resolve);
      } catch (err) {
        resolve({ code: 1, error: err instanceof Error ? err : new Error(String(err)) });
      }
    });

  const sleep = (delayMs: number): Promise<void> =>
    new Promise<void>((resolve) => {
      wakeRetry = resolve;
      retryTimer = setTimeout(resolve, delayMs);
      // A pending retry must not keep the process alive at exit.
      retryTimer.unref();
    }).then(() => {
      retryTimer = null;
      wakeRetry = null;
    });

  const loop = async (): Promise<void> => {
    running = true;
    try {
      while (queue.length > 0) {
        const batch = queue.splice(0, maxBatch);
        inFlight = batch.length;
        const traceIds = batch.map((p) => p.trace.trace_id);
        const spans: ReadableSpan[] = [];
        for (const p of batch) {
          try {
            spans.push(...traceToReadableSpans(p.trace, resource, scope, redactor, p.previous, options.captureMessageContent === true, p.origin));
          } catch (err) {
            stats.dropped_traces++;
            emit({ type: 'dropped', trace_id: p.trace.trace_id, reason: 'invalid_trace', error: errorText(err) });
          }
        }
        if (spans.length === 0) {
          inFlight = 0;
          continue;
        }
        let attempt = 0;
        for (;;) {
          attempt++;
          const result = await send(spans);
          if (result.code === 0) {
            stats.exported_traces += batch.length;
            emit({ type: 'exported', trace_ids: traceIds, span_count: spans.length, attempts: attempt });
            break;
          }
          const error = errorText(result.error ?? 'export failed');
          if (attempt >= maxAttempts || closed) {
            stats.failed_traces += batch.length;
            emit({ type: 'failed', trace_ids: traceIds, attempts: attempt, error });
            break;
          }
          const delay = Math.min(maxBackoffMs, initialBackoffMs * 2 ** (attempt - 1));
          emit({ type: 'retrying', trace_ids: traceIds, attempt, delay_ms: delay, error });
          await sleep(delay);
          if (closed) {
            stats.failed_traces += batch.length;
            emit({ type: 'failed', trace_ids: traceIds, attempts: attempt, error });
            break;
          }
        }
        inFlight = 0;
      }
    } catch (err) {
      // Unreachable by design (every step above is guarded); keep the loop's promise resolved.
      reportSwallowed('otlp.export_loop', err);
    } finally {
      running = false;
      inFlight = 0;
      notifyIdle();
    }
  };

  const kick = (): void => {
    if (running) return;
    running = true;
    // Start on a later tick so the caller (a run finishing) does none of the conversion work.
    setImmediate(() => {
      running = false;
      void loop();
    });
  };

  const flush = (): Promise<void> => {
    if (!running && queue.length === 0) return Promise.resolve();
    return new Promise<void>((resolve) => idleWaiters.push(resolve));
  };

  return {
    url,
    protocol,
    exportTrace(trace, previous = null, origin = null) {
      if (closed) {
        stats.dropped_traces++;
        emit({ type: 'dropped', trace_id: trace.trace_id, reason: 'shut_down' });
        return false;
      }
      if (queue.length >= maxQueue) {
        stats.dropped_traces++;
        emit({ type: 'dropped', trace_id: trace.trace_id, reason: 'queue_full' });
        return false;
      }
      queue.push({ trace, previous, origin });
      kick();
      return true;
    },
    flush,
    async shutdown(graceMs = 5000) {
      if (closed) return;
      closed = true;
      // Cut a pending backoff short: with `closed` set the batch gives up instead of waiting.
      if (retryTimer) clearTimeout(retryTimer);
      wakeRetry?.();
      let timer: NodeJS.Timeout | undefined;
      const grace = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, graceMs);
        timer.unref();
      });
      await Promise.race([flush(), grace]);
      if (timer) clearTimeout(timer);
      const left = queue.splice(0);
      for (const p of left) {
        stats.dropped_traces++;
        emit({ type: 'dropped', trace_id: p.trace.trace_id, reason: 'shut_down' });
      }
      try {
        await exporter.shutdown();
      } catch {
        // Closing the transport is best effort.
      }
      notifyIdle();
    },
    stats() {
      return { queued: queue.length, in_flight: inFlight, ...stats };
    },
  };
}
