// OTLP/HTTP export of finished traces (docs/contract.md §8.2). Spans are not recorded through an
// OpenTelemetry tracer: traces are derived from stored events after the fact, so each built trace
// is converted to ReadableSpan objects and handed straight to the OTLP exporter. Export must never
// fail or slow a run: `exportTrace` only enqueues; one background loop sends, retries with
// backoff, and reports what happened through `onEvent` instead of throwing.
import { OTLPTraceExporter as OTLPHttpJsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as OTLPHttpProtoTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { EventInput } from '../store/store.js';
import type { Trace, TraceRecord } from './traces.js';
import { Redactor } from './redact.js';
import { reportSwallowed } from './swallowed.js';
import { traceToReadableSpans, type InstrumentationScope, type OriginRoot, type SegmentRoot } from './otlp-spans.js';

export type OtlpProtocol = 'http/json' | 'http/protobuf';

type ExportResult = Parameters<Parameters<SpanExporter['export']>[1]>[0];

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

const TRACES_PATH = '/v1/traces';

/** OTLP base-endpoint rule: append `/v1/traces` unless the URL already names the traces path. */
export function resolveOtlpTracesUrl(endpoint: string): string {
  const url = new URL(endpoint);
  if (!url.pathname.endsWith(TRACES_PATH)) {
    url.pathname = url.pathname.replace(/\/+$/, '') + TRACES_PATH;
  }
  return url.toString();
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
