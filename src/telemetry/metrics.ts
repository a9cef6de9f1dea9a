import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { registerSwallowedErrors, reportSwallowed } from './swallowed.js';
import { HttpRequestMetrics } from './http-metrics.js';

/** Route label of a request that matched no route: a fixed value, so scanners cannot add series. */
export const UNMATCHED_ROUTE = 'unmatched';
/** Tool label of a call to a tool the registry does not have (a model can name anything). */
export const UNKNOWN_TOOL = '_unknown';

/** What a scrape reads from the store (cluster-wide truth, not this process's view). */
export interface MetricsSources {
  runsWithStatus(status: 'awaiting_approval' | 'awaiting_budget'): Promise<number>;
  backgroundQueued(): Promise<number>;
  /** Run folders waiting for this process's workspace mirror (this process only, not the store). */
  workspaceBacklog?(): number;
}

/** Distinct agent label values a process reports; later agents count under OTHER_AGENT. */
const MAX_AGENT_LABELS = 100;
const OTHER_AGENT = '_other';

const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/**
 * Run metrics: the spec's MetricsResponse (JSON) and the Prometheus text of /metrics/prometheus.
 * `total_requests` counts run requests (synchronous runs started), not every HTTP request.
 *
 * Names follow Prometheus conventions so `promtool check metrics` passes: agentd's own families
 * are `agentd_*` with the unit in the name (`_seconds`, `_bytes`) and counters end in `_total`;
 * Node's default metrics keep their standard unprefixed names (`process_*`, `nodejs_*`), which
 * is what dashboards and alerts written for Node services expect. Every label has a bounded set
 * of values (route patterns, configured providers and tools, enum outcomes), never raw input.
 */
export class Metrics {
  private totals = { total_requests: 0, total_tokens: 0, total_request_tokens: 0, total_response_tokens: 0, total_time: 0 };
  readonly registry = new Registry();
  private sources: MetricsSources | null = null;
  private readonly runs = new Counter({ name: 'agentd_runs_total', help: 'Runs finished, by status', labelNames: ['status'], registers: [this.registry] });
  private readonly tokens = new Counter({
    name: 'agentd_tokens_total',
    help: 'Model tokens, by direction, agent, provider and model',
    labelNames: ['direction', 'agent', 'provider', 'model'],
    registers: [this.registry],
  });
  private readonly cost = new Counter({
    name: 'agentd_model_cost_usd_total',
    help: 'Estimated model cost in US dollars (pricing config), by agent, provider and model',
    labelNames: ['agent', 'provider', 'model'],
    registers: [this.registry],
  });
  /** Agent label values seen: registered agents come and go through the API, so the set is capped. */
  private readonly agentLabels = new Set<string>();
  private readonly runSeconds = new Histogram({
    name: 'agentd_run_duration_seconds',
    help: 'Run duration',
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300],
    registers: [this.registry],
  });
  readonly liveRuns = new Gauge({ name: 'agentd_live_runs', help: 'Runs holding a slot in this process', registers: [this.registry] });
  readonly backgroundRuns = new Counter({
    name: 'agentd_background_runs_total',
    help: 'Background runs finished, by status',
    labelNames: ['status'],
    registers: [this.registry],
  });

  // Updated on every HTTP request: plain numbers, written out at scrape time (http-metrics.ts).
  private readonly http = new HttpRequestMetrics(
    this.registry,
    {
      requests: 'agentd_http_requests_total',
      requestsHelp: 'HTTP requests answered, by method, route pattern and status',
      seconds: 'agentd_http_request_duration_seconds',
      secondsHelp: 'HTTP request duration until the response ended (a stream: its whole life), by method, route pattern and status',
    },
    LATENCY_BUCKETS,
  );
  private readonly modelSeconds = new Histogram({
    name: 'agentd_model_call_duration_seconds',
    help: 'Model call attempts (each retry is one), by provider, model and outcome',
    labelNames: ['provider', 'model', 'outcome'],
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  private readonly modelErrors = new Counter({
    name: 'agentd_model_call_errors_total',
    help: 'Failed model call attempts, by provider, model and error kind',
    labelNames: ['provider', 'model', 'kind'],
    registers: [this.registry],
  });
  private readonly toolCalls = new Counter({
    name: 'agentd_tool_calls_total',
    help: 'Tool calls completed, by tool and outcome (success, error, timeout, cancelled, denied, rejected, unknown)',
    labelNames: ['tool', 'outcome'],
    registers: [this.registry],
  });
  private readonly toolSeconds = new Histogram({
    name: 'agentd_tool_call_duration_seconds',
    help: 'Duration of tool calls that ran, by tool',
    labelNames: ['tool'],
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  private readonly awaiting: Gauge = new Gauge({
    name: 'agentd_runs_awaiting',
    help: 'Runs parked for a person, by reason (approval, budget), from the store',
    labelNames: ['reason'],
    registers: [this.registry],
    collect: async (): Promise<void> => {
      if (!this.sources) return;
      const [approval, budget] = await Promise.all([
        this.sources.runsWithStatus('awaiting_approval').catch((e: unknown) => (reportSwallowed('metrics.scrape_awaiting', e), null)),
        this.sources.runsWithStatus('awaiting_budget').catch((e: unknown) => (reportSwallowed('metrics.scrape_awaiting', e), null)),
      ]);
      if (approval !== null) this.awaiting.set({ reason: 'approval' }, approval);
      if (budget !== null) this.awaiting.set({ reason: 'budget' }, budget);
    },
  });
  private readonly bgQueue: Gauge = new Gauge({
    name: 'agentd_background_queue_depth',
    help: 'Background runs queued and not yet claimed, from the store',
    registers: [this.registry],
    collect: async (): Promise<void> => {
      const n = this.sources
        ? await this.sources.backgroundQueued().catch((e: unknown) => (reportSwallowed('metrics.scrape_background_queue', e), null))
        : null;
      if (n !== null) this.bgQueue.set(n);
    },
  });
  private readonly wsBacklog: Gauge = new Gauge({
    name: 'agentd_background_workspace_backlog',
    help: "Background run folders waiting for this process's workspace mirror (no new claims at 256)",
    registers: [this.registry],
    collect: (): void => {
      const n = this.sources?.workspaceBacklog?.();
      if (n !== undefined) this.wsBacklog.set(n);
    },
  });
  private readonly settleFailures = new Counter({
    name: 'agentd_budget_settle_failures_total',
    help: 'Budget holds that could not be settled with the actual use (the hold stays until the run releases it), by phase',
    labelNames: ['phase'],
    registers: [this.registry],
  });
  // Model-provider rate limits (docs/flow-control.md): labels are the configured provider and model.
  private readonly rateWait = new Histogram({
    name: 'agentd_model_rate_wait_seconds',
    help: "Time model calls waited for their provider's rate limit or Retry-After before they were sent",
    labelNames: ['provider', 'model'],
    buckets: [0, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
  private readonly throttled = new Counter({
    name: 'agentd_model_throttled_total',
    help: 'Model calls that had to wait, by reason (rate_limit: the configured limit; retry_after: a provider 429)',
    labelNames: ['provider', 'model', 'reason'],
    registers: [this.registry],
  });
  /** Read at scrape time from the rate limiter (set by the runtime). */
  rateLevels: (() => Array<{ key: string; requests: number; tokens: number; paused: boolean }>) | null = null;
  private readonly rateLevel: Gauge = new Gauge({
    name: 'agentd_model_rate_bucket_level',
    help: "Budget in use of each rate-limited provider key in this process's view, by unit (requests, tokens)",
    labelNames: ['key', 'unit'],
    registers: [this.registry],
    collect: () => {
      this.rateLevel.reset();
      this.ratePaused.reset();
      for (const l of this.rateLevels?.() ?? []) {
        this.rateLevel.set({ key: l.key, unit: 'requests' }, l.requests);
        this.rateLevel.set({ key: l.key, unit: 'tokens' }, l.tokens);
        this.ratePaused.set({ key: l.key }, l.paused ? 1 : 0);
      }
    },
  });
  private readonly ratePaused: Gauge = new Gauge({
    name: 'agentd_model_rate_paused',
    help: "1 while a provider key is paused by a provider's Retry-After (docs/flow-control.md)",
    labelNames: ['key'],
    registers: [this.registry],
  });
  private readonly leaseLosses = new Counter({
    name: 'agentd_lease_losses_total',
    help: 'Leases this process lost to another owner (its copy of the run stopped), by kind (run, background)',
    labelNames: ['kind'],
    registers: [this.registry],
  });
  private readonly recoveries = new Counter({
    name: 'agentd_recoveries_total',
    help: 'Runs this process recovered (resumed after a lapsed lease, an interruption or a decision), by kind and cause',
    labelNames: ['kind', 'cause'],
    registers: [this.registry],
  });
  private readonly otlpSpans = new Counter({ name: 'agentd_otlp_spans_exported_total', help: 'Spans the OTLP collector accepted', registers: [this.registry] });
  private readonly otlpFailed = new Counter({
    name: 'agentd_otlp_traces_failed_total',
    help: 'Traces whose OTLP export failed after its retries',
    registers: [this.registry],
  });
  private readonly otlpDropped = new Counter({
    name: 'agentd_otlp_traces_dropped_total',
    help: 'Traces not exported, by reason (queue_full, shut_down, invalid_trace)',
    labelNames: ['reason'],
    registers: [this.registry],
  });

  /** Open SSE streams (src/http/sse.ts adds and removes itself): counted and summed on scrape. */
  readonly sseStreams = new Set<{ readonly bufferedBytes: number }>();
  private readonly sseOpen: Gauge = new Gauge({
    name: 'agentd_sse_streams',
    help: 'Open SSE streams',
    registers: [this.registry],
    collect: (): void => this.sseOpen.set(this.sseStreams.size),
  });
  private readonly sseBuffered: Gauge = new Gauge({
    name: 'agentd_sse_buffered_bytes',
    help: 'Bytes held for SSE readers: frames not yet written and socket buffers',
    registers: [this.registry],
    collect: (): void => {
      let sum = 0;
      for (const s of this.sseStreams) sum += s.bufferedBytes;
      this.sseBuffered.set(sum);
    },
  });
  private readonly sseDroppedTotal = new Counter({
    name: 'agentd_sse_streams_dropped_total',
    help: 'SSE streams dropped because the reader fell too far behind',
    registers: [this.registry],
  });

  constructor() {
    registerSwallowedErrors(this.registry);
    // Unprefixed on purpose (see the class comment): `agentd_process_cpu_seconds_total` failed
    // promtool and matched no standard Node dashboard.
    // The event-loop delay histogram samples every 100 ms, not every 10 ms (prom-client's default):
    // that timer was more than half of an idle server's CPU (docs/operations.md, Metrics).
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: 100 });
    // prom-client's three `*_total` gauges fail promtool's lint (only counters may end in
    // `_total`); the same counts stay available, by type, as nodejs_active_{handles,requests,resources}.
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) this.registry.removeSingleMetric(name);
    // Zero series for the fixed label values, so rate() and alerts see 0 before the first event.
    for (const reason of ['queue_full', 'shut_down', 'invalid_trace']) this.otlpDropped.inc({ reason }, 0);
    for (const kind of ['run', 'background']) this.leaseLosses.inc({ kind }, 0);
    for (const phase of ['model', 'tools', 'subagent']) this.settleFailures.inc({ phase }, 0);
  }

  /** The store the scrape-time gauges read (set once the runtime is wired). */
  setSources(sources: MetricsSources): void {
    this.sources = sources;
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

  /**
   * One model call's tokens and estimated cost. provider and model come from the config (or a
   * registered agent's spec, checked against agents.model_hosts); the agent label is capped at
   * MAX_AGENT_LABELS values, later agents count under OTHER_AGENT, so no label set grows unbounded.
   */
  tokensUsed(requestTokens: number, responseTokens: number, by: { agent: string; provider: string; model: string }, costUsd: number): void {
    this.totals.total_request_tokens += requestTokens;
    this.totals.total_response_tokens += responseTokens;
    this.totals.total_tokens += requestTokens + responseTokens;
    const labels = { agent: this.agentLabel(by.agent), provider: by.provider, model: by.model };
    this.tokens.inc({ direction: 'request', ...labels }, requestTokens);
    this.tokens.inc({ direction: 'response', ...labels }, responseTokens);
    if (costUsd > 0 && Number.isFinite(costUsd)) this.cost.inc(labels, costUsd);
  }

  private agentLabel(agent: string): string {
    if (this.agentLabels.has(agent)) return agent;
    if (this.agentLabels.size >= MAX_AGENT_LABELS) return OTHER_AGENT;
    this.agentLabels.add(agent);
    return agent;
  }

  /** `route`: the matched route pattern (`/runs/:run_id`), or null when nothing matched. */
  httpRequest(method: string, route: string | null, status: number, seconds: number): void {
    this.http.observe(method, route ?? UNMATCHED_ROUTE, status, seconds);
  }

  /** One model call attempt: `errorKind` is the ModelCallError kind when it failed. */
  modelCall(provider: string, model: string, seconds: number, errorKind: string | null): void {
    this.modelSeconds.observe({ provider, model, outcome: errorKind === null ? 'ok' : 'error' }, seconds);
    if (errorKind !== null) this.modelErrors.inc({ provider, model, kind: errorKind });
  }

  /** A model call let go by the rate limiter after `seconds` of waiting (0: at once). */
  modelRateWait(provider: string, model: string, seconds: number): void {
    this.rateWait.observe({ provider, model }, seconds);
  }

  /** A model call that has to wait (once per call and reason). */
  modelThrottled(provider: string, model: string, reason: string): void {
    this.throttled.inc({ provider, model, reason });
  }

  /** A completed tool call; `seconds` is null for calls that never ran (denied, rejected). */
  toolCall(tool: string, outcome: string, seconds: number | null): void {
    this.toolCalls.inc({ tool, outcome });
    if (seconds !== null) this.toolSeconds.observe({ tool }, seconds);
  }

  /** A budget settle failed (src/agent/budget-settle.ts). */
  settleFailed(phase: 'model' | 'tools' | 'subagent'): void {
    this.settleFailures.inc({ phase });
  }

  leaseLost(kind: 'run' | 'background'): void {
    this.leaseLosses.inc({ kind });
  }

  recovered(kind: 'run' | 'background', cause: string): void {
    this.recoveries.inc({ kind, cause });
  }

  /** The OTLP exporter's events (src/telemetry/otlp.ts onEvent). */
  otlpEvent(e: { type: string; span_count?: number; trace_ids?: string[]; reason?: string }): void {
    if (e.type === 'exported') this.otlpSpans.inc(e.span_count ?? 0);
    else if (e.type === 'failed') this.otlpFailed.inc(e.trace_ids?.length ?? 1);
    else if (e.type === 'dropped') this.otlpDropped.inc({ reason: e.reason ?? 'unknown' });
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
