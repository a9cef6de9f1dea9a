import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/**
 * Run metrics: the spec's MetricsResponse (JSON) and the same counters in Prometheus text.
 * `total_requests` counts run requests (synchronous runs started), not every HTTP request.
 */
export class Metrics {
  private totals = { total_requests: 0, total_tokens: 0, total_request_tokens: 0, total_response_tokens: 0, total_time: 0 };
  readonly registry = new Registry();
  private readonly runs = new Counter({ name: 'agentd_runs_total', help: 'Runs finished, by status', labelNames: ['status'], registers: [this.registry] });
  private readonly tokens = new Counter({ name: 'agentd_tokens_total', help: 'Model tokens, by direction', labelNames: ['direction'], registers: [this.registry] });
  private readonly runSeconds = new Histogram({ name: 'agentd_run_duration_seconds', help: 'Run duration', buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300], registers: [this.registry] });
  readonly liveRuns = new Gauge({ name: 'agentd_live_runs', help: 'Runs holding a slot in this process', registers: [this.registry] });
  readonly backgroundRuns = new Counter({ name: 'agentd_background_runs_total', help: 'Background runs finished, by status', labelNames: ['status'], registers: [this.registry] });
  /** Open SSE streams (src/http/sse.ts adds and removes itself): counted and summed on scrape. */
  readonly sseStreams = new Set<{ readonly bufferedBytes: number }>();
  private readonly sseOpen: Gauge = new Gauge({
    name: 'agentd_sse_streams', help: 'Open SSE streams', registers: [this.registry],
    collect: (): void => this.sseOpen.set(this.sseStreams.size),
  });
  private readonly sseBuffered: Gauge = new Gauge({
    name: 'agentd_sse_buffered_bytes', help: 'Bytes held for SSE readers: frames not yet written and socket buffers', registers: [this.registry],
    collect: (): void => {
      let sum = 0;
      for (const s of this.sseStreams) sum += s.bufferedBytes;
      this.sseBuffered.set(sum);
    },
  });
  private readonly sseDroppedTotal = new Counter({ name: 'agentd_sse_streams_dropped_total', help: 'SSE streams dropped because the reader fell too far behind', registers: [this.registry] });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'agentd_' });
  }

  sseDropped(): void {
    this.sseDroppedTotal.inc();
  }

  runStarted(): void {
    this.totals.total_requests += 1;
  }

  runFinished(status: string, seconds: number): void {
    this.totals.total_time += seconds;
    this.runs.inc({ status });
    this.runSeconds.observe(seconds);
  }

  tokensUsed(requestTokens: number, responseTokens: number): void {
    this.totals.total_request_tokens += requestTokens;
    this.totals.total_response_tokens += responseTokens;
    this.totals.total_tokens += requestTokens + responseTokens;
    this.tokens.inc({ direction: 'request' }, requestTokens);
    this.tokens.inc({ direction: 'response' }, responseTokens);
  }

  snapshot() {
    const t = this.totals;
    return { ...t, average_time: t.total_requests === 0 ? 0 : t.total_time / t.total_requests };
  }

  get prometheusContentType(): string {
    return this.registry.contentType;
  }

  prometheusText(): Promise<string> {
    return this.registry.metrics();
  }
}
