import { join } from 'node:path';
import { compileConditions } from './agent/policy-conditions.js';
import type { Config } from './config.js';
import { systemClock, type Clock } from './clock.js';
import { LeaseClock } from './lease-clock.js';
import { newId } from './ids.js';
import { loadModelProvider } from './agent/model/load.js';
import { abortableSleep } from './agent/model/retry.js';
import { RateLimiter } from './flow/rate-limiter.js';
import type { ModelProvider } from './agent/model/types.js';
import { ToolRegistry } from './agent/tools/registry.js';
import type { ToolLogger } from './agent/tools/types.js';
import { BudgetLedger } from './agent/budget-ledger.js';
import { compileGuardrails } from './agent/guardrails.js';
import type { Store } from './store/store.js';
import { EventBus } from './telemetry/bus.js';
import { TelemetryEmitter } from './runtime/emitter.js';
import { Metrics } from './telemetry/metrics.js';
import { withCallMetrics } from './agent/model/metered.js';
import { TelemetryQueries } from './runtime/telemetry-queries.js';
import type { OtlpTraceExporter } from './telemetry/otlp.js';
import { redactorForConfig } from './telemetry/secrets.js';
import { readVersion } from './version.js';
import { RunService, type RunSettings } from './runtime/runs.js';
import { ActorSystem, type SystemHooks } from './runtime/system.js';
import { LiveStates } from './runtime/live-states.js';
import { Subagents } from './agent/subagents.js';
import { BackgroundManager } from './background/manager.js';
import { isSharedStore } from './store/changes.js';
import { ClusterLink } from './runtime/cluster.js';
import { AgentRegistry } from './agent/agent-registry.js';
import { Idempotency } from './integrations/idempotency.js';
import { Webhooks } from './integrations/webhooks.js';
import { repos } from './store/repos/index.js';
import { RunsDebug } from './runtime/debug/runs-debug.js';
import { EvalService } from './runtime/evals/eval-service.js';
import { swallow, reportSwallowed } from './telemetry/swallowed.js';
import { silentLogger, type AppLogger } from './telemetry/logger.js';

export interface RuntimeOptions {
  clock?: Clock;
  /** Tests and benchmarks inject a model; otherwise the configured provider is built. */
  model?: ModelProvider;
  inspect?: SystemHooks['inspect'];
  /** The process's logger (src/main.ts builds it); default silent. */
  logger?: AppLogger;
  /** A new run's creating-write fold window (RunServiceDeps.createFoldMs): tests that count commits hold it open. */
  createFoldMs?: number;
}

export interface Readiness {
  ready: boolean;
  agent_name: string;
  initialized: boolean;
  mcp_connected: boolean;
  mcp_servers?: Record<string, { status: string; last_error: string | null }>;
  store?: { adapter: 'memory' | 'level' | 'postgres'; ok: boolean; error?: string };
}

/**
 * Everything the HTTP layer talks to, wired once per process (composition root helpers). Routes
 * receive this object; they never build services themselves.
 */
export class Runtime {
  readonly bus = new EventBus();
  readonly workerId = newId('worker');
  readonly telemetry: TelemetryEmitter;
  readonly telemetryQueries: TelemetryQueries;
  readonly system: ActorSystem;
  /** Live machine states for GET /machines/live (inspection only while someone watches). */
  readonly liveStates: LiveStates;
  readonly runs: RunService;
  /** Checkpoints, forks and replays of runs (src/runtime/debug/). */
  readonly debug: RunsDebug;
  /** Evaluations over past runs (src/runtime/evals/). */
  readonly evals: EvalService;
  readonly background: BackgroundManager;
  /** Registered agents, built and cached by id (docs/agents.md). */
  readonly agents: AgentRegistry;
  /** Idempotency-Key records. */
  readonly idempotency: Idempotency;
  /** Completion webhooks: outbox dispatcher and sender. */
  readonly webhooks: Webhooks;
  readonly agentName: string;
  private readonly startedAt: number;
  private initialized = false;
  private retentionTimer: NodeJS.Timeout | null = null;
  /** How each open replay/follow stream ends itself when the service shuts down (see endStreams). */
  private readonly openStreams = new Set<() => void>();
  private streamsEnded = false;
  /** OTLP/HTTP export of finished trace segments; null when no endpoint is configured. */
  readonly otlp: OtlpTraceExporter | null;
  /** The link to the other instances of a shared store (its change feed); null on the embedded store. */
  readonly cluster: ClusterLink | null;
  /** The one clock leases are written and judged on, for both run kinds (src/lease-clock.ts). */
  readonly leases: LeaseClock;
  /** Model-provider rate limits and 429 pauses, shared by every run of this process (docs/flow-control.md). */
  readonly rateLimiter: RateLimiter;

  private constructor(
    readonly config: Config,
    readonly store: Store,
    readonly clock: Clock,
    readonly tools: ToolRegistry,
    readonly model: ModelProvider,
    readonly ledger: BudgetLedger,
    opts: RuntimeOptions,
    otlp: OtlpTraceExporter | null,
    readonly metrics: Metrics,
  ) {
    this.startedAt = clock.now();
    this.leases = new LeaseClock(clock);
    this.agentName = config.agent.name;
    const logger = opts.logger ?? silentLogger;
    // One redactor (value patterns + the config's secret values) for everything a run stores or exports.
    this.telemetry = new TelemetryEmitter(store, this.bus, { capture: config.telemetry.capture, redactor: redactorForConfig(config) }, clock);
    this.telemetryQueries = new TelemetryQueries(store);
    this.system = new ActorSystem({
      inspect: opts.inspect,
      onChildFailed: (systemId, error) => logger.error({ systemId, err: String(error) }, 'actor failed'),
    });
    this.liveStates = new LiveStates(this.system);
    const settings = runSettingsOf(config);
    this.rateLimiter = new RateLimiter(store, clock, {
      sleep: abortableSleep,
      onError: (site, err) => reportSwallowed(site, err),
    });
    metrics.rateLevels = () => this.rateLimiter.levels();
    const subagents =
      config.agent.subagents.length > 0
        ? new Subagents(config.agent.subagents, {
            system: this.system,
            model,
            tools,
            governance: settings.governance,
            ledger,
            pricing: settings.pricing,
            clock,
            max_steps: settings.max_steps,
            max_output_tokens: settings.max_output_tokens,
            metrics,
            logger,
          })
        : undefined;
    this.agents = new AgentRegistry({
      store,
      clock,
      served: {
        agent_id: settings.agent_id,
        agent_name: settings.agent_name,
        system_instruction: settings.system_instruction,
        model,
        tools,
        subagents,
        max_steps: settings.max_steps,
        max_output_tokens: settings.max_output_tokens,
        session_workspace_root: settings.session_workspace_root,
      },
      servedBuiltin: config.agent.tools.builtin,
      workspace_root: config.background.workspace_root,
      plan: {
        tools_dirs: config.agents.tools_dirs,
        mcp_servers: config.agents.resolved.mcp,
        secret: (name) => (Object.hasOwn(config.agents.resolved.secrets, name) ? config.agents.resolved.secrets[name] : undefined),
        model_hosts: config.agents.model_hosts,
        max_mcp_servers: config.agents.max_mcp_servers_per_agent,
        max_spec_bytes: config.agents.max_spec_bytes,
      },
      everyRowPrivileged: (config.auth?.api_keys ?? []).length === 0,
      maxMcpProcesses: config.agents.max_mcp_processes,
      max_cached: config.agents.max_cached,
      wrapModel: (m) => withCallMetrics(m, (provider, name, seconds, errorKind) => metrics.modelCall(provider, name, seconds, errorKind)),
      logger: toolLogger(logger),
    });
    this.runs = new RunService({
      store,
      system: this.system,
      clock,
      leases: this.leases,
      telemetry: this.telemetry,
      metrics: this.metrics,
      model,
      tools,
      ledger,
      subagents,
      agents: this.agents,
      guardrails: compileGuardrails({
        max_input_chars: config.agent.guardrails.max_input_chars,
        deny_patterns: [...config.agent.guardrails.deny_patterns],
        injection_check: config.agent.guardrails.injection_check,
      }),
      settings,
      workerId: this.workerId,
      logger,
      rateLimiter: this.rateLimiter,
      ...(opts.createFoldMs !== undefined ? { createFoldMs: opts.createFoldMs } : {}),
    });
    this.debug = new RunsDebug(store, this.runs, config.runs.checkpoints);
    this.evals = new EvalService({
      store,
      clock,
      leases: this.leases,
      workerId: this.workerId,
      logger,
      runs: this.runs,
      replay: (id, body, original) => this.debug.replay(id, body, {}, original),
      readRuns: (ids) => this.debug.readMany(ids),
      checkModel: (m) => this.agents.variantModel(m),
      leaseMs: config.runs.lease_seconds * 1000,
      scanMs: config.runs.orphan_sweep.interval_seconds * 1000,
    });
    this.background = new BackgroundManager({
      store,
      clock,
      leases: this.leases,
      telemetry: this.telemetry,
      metrics: this.metrics,
      config,
      system: this.system,
      workerId: this.workerId,
      runs: this.runs,
      agents: this.agents,
      logger,
    });
    this.otlp = otlp;
    this.idempotency = new Idempotency({
      store,
      clock,
      workerId: this.workerId,
      ttlSeconds: config.idempotency.ttl_seconds,
      sharedStore: isSharedStore(store),
      logger,
    });
    this.webhooks = new Webhooks({ config, store, clock, bus: this.bus, registry: metrics.registry, workerId: this.workerId, logger });
    this.cluster = store.changes ? this.linkCluster(store, logger) : null;
    // A run segment ends when the run finishes or parks for a person: export that trace. The
    // exporter queues and retries in the background, so a slow collector never slows a run.
    if (this.otlp) {
      const exporter = this.otlp;
      this.runs.onSettled((record) => {
        void this.telemetryQueries.trace(record.trace_id).then(
          async (t) =>
            exporter.exportTrace(
              t.trace,
              await this.telemetryQueries.previousSegmentRoot(t.trace).catch(() => null),
              await this.telemetryQueries.originRoot(t.trace).catch(() => null),
            ),
          () => undefined,
        );
      });
    }
  }

  /** Streams, cancels and task edits across the instances of a shared store (src/runtime/cluster.ts). */
  private linkCluster(store: Store, logger: AppLogger): ClusterLink {
    const link = new ClusterLink(store, store.changes!, this.bus, this.workerId, logger);
    this.telemetry.onAppending = (events) => link.appending(events);
    this.telemetry.onAppended = (events) => link.appended(events);
    link.onControlMessage((msg) => {
      if (msg.type === 'cancel') this.runs.cancelIfLive(msg.run_id);
      else this.background.engine.operator.cancelIfHeld(msg.run_id, msg.reason);
    });
    this.background.engine.operator.remoteCancel = (runId, reason) =>
      link.sendControl({ type: 'bg_cancel', run_id: runId, reason: reason?.slice(0, 1000) ?? null });
    this.runs.remoteCancel = async (runId) => {
      await link.sendControl({ type: 'cancel', run_id: runId });
      // A notification is a hint: while the run is still live elsewhere, ask again (its owner may
      // have been reconnecting its feed). Bounded: 4 more asks over ~3 s, not awaited.
      void (async () => {
        for (const wait of [250, 500, 1000, 1500]) {
          await new Promise((r) => setTimeout(r, wait).unref());
          const rec = await repos(store).runs.get<{ status: string; owner: string | null }>(runId);
          if (!rec || rec.value.status !== 'running' || !rec.value.owner || rec.value.owner === this.workerId) return;
          await link.sendControl({ type: 'cancel', run_id: runId });
        }
      })().catch(swallow('runtime.remote_cancel_retry', { run_id: runId }));
    };
    this.background.onTaskEdited = (taskId) => link.taskChanged(taskId);
    link.onTaskChanged(
      (taskId) => void this.background.scheduler.resync(taskId).catch((err) => logger.warn({ task_id: taskId, err: String(err) }, 'task resync failed')),
      () => void this.background.scheduler.resyncAll().catch((err) => logger.warn({ err: String(err) }, 'task resync failed')),
    );
    return link;
  }

  static async create(config: Config, store: Store, opts: RuntimeOptions = {}): Promise<Runtime> {
    const clock = opts.clock ?? systemClock;
    const logger = opts.logger ?? silentLogger;
    const tools = await ToolRegistry.create(
      { local: config.agent.tools.local, mcp: config.agent.tools.mcp.map((m) => ({ ...m }) as never), builtin: [...config.agent.tools.builtin] },
      { clock, logger: toolLogger(logger) },
    );
    const metrics = new Metrics();
    const m = config.agent.model;
    const unmetered =
      opts.model ??
      (await loadModelProvider({
        provider: m.provider,
        base_url: m.base_url,
        model: m.model,
        api_key: m.api_key ?? undefined,
        max_output_tokens: m.max_output_tokens,
        temperature: m.temperature,
        rate_limit: m.rate_limit ?? null,
      }));
    const model = withCallMetrics(unmetered, (provider, name, seconds, errorKind) => metrics.modelCall(provider, name, seconds, errorKind));
    const ledger = new BudgetLedger(store, config.budgets as never, clock);
    // The OTLP exporter (~120 ms to load) is imported only when an endpoint is configured.
    const o = config.telemetry.otlp;
    const otlp =
      o.endpoint || o.traces_endpoint
        ? (await import('./telemetry/otlp.js')).createOtlpExporter({
            endpoint: o.endpoint,
            tracesEndpoint: o.traces_endpoint,
            headers: { ...o.headers },
            protocol: o.protocol,
            timeoutMillis: o.timeout_ms,
            serviceName: o.service_name,
            captureMessageContent: o.capture_message_content,
            serviceVersion: readVersion(),
            redactor: redactorForConfig(config),
            onEvent: (e) => {
              metrics.otlpEvent(e);
              if (e.type === 'failed' || e.type === 'dropped') logger.warn({ ...e }, `otlp export ${e.type}`);
            },
          })
        : null;
    const runtime = new Runtime(config, store, clock, tools, model, ledger, opts, otlp, metrics);
    // Gauges read at scrape time from the store: with a shared store, the whole deployment's count.
    metrics.setSources({
      runsWithStatus: (status) => repos(store).runs.count({ name: 'status', value: status }),
      backgroundQueued: () => repos(store).bgRuns.count({ name: 'status', value: 'queued' }),
      workspaceBacklog: () => runtime.background.engine.workspaceBacklog,
    });
    return runtime;
  }

  /** Start-up recovery and the periodic orphan sweep (docs/contract.md §6.2). */
  async start(): Promise<void> {
    this.initialized = true;
    // Leases are written and judged on the store's clock where it has one (src/lease-clock.ts).
    await this.leases.sync(this.store);
    // The embedded store is single-process: every run it holds as `running` has a dead owner. On
    // a shared store the other instances' runs are theirs until their leases lapse.
    await this.runs.lifecycle.sweep({ startup: !isSharedStore(this.store) });
    this.runs.lifecycle.startSweeper();
    await this.background.start();
    this.startRetention();
    this.idempotency.startSweeper(this.config.idempotency.sweep_interval_seconds);
    await this.webhooks.start();
    this.evals.start();
  }

  /**
   * Telemetry retention (`telemetry.retention_days`): delete older events now and then hourly.
   * The store walks from the oldest event and stops at the first newer one, so this is cheap.
   */
  private startRetention(): void {
    const sweep = () => {
      const cutoff = new Date(this.clock.now() - this.config.telemetry.retention_days * 86_400_000).toISOString();
      this.store.deleteEventsBefore(cutoff).catch(() => 0);
    };
    sweep();
    this.retentionTimer = setInterval(sweep, 3_600_000);
    this.retentionTimer.unref();
  }

  isHealthy(): boolean {
    return this.store.isOpen();
  }

  uptimeSeconds(): number {
    return (this.clock.now() - this.startedAt) / 1000;
  }

  readiness(): Readiness {
    const servers = this.tools.mcpStatus();
    const mcp_connected = this.tools.mcpConnected();
    const initialized = this.initialized;
    // PostgreSQL: false while the database does not answer (the process keeps running and
    // serves again once it is back); the embedded store is healthy while open.
    const health = this.store.healthStatus?.() ?? { ok: this.store.isOpen() };
    return {
      // False from the first moment of a graceful shutdown: the process still answers (runs are
      // draining) but refuses new runs, so a load balancer must stop sending them (it used to
      // say ready until the store closed).
      ready: this.store.isOpen() && health.ok && initialized && mcp_connected && !this.runs.shuttingDown,
      agent_name: this.agentName,
      initialized,
      mcp_connected,
      store: { adapter: this.store.adapter, ok: this.store.isOpen() && health.ok, ...(health.error && !health.ok ? { error: health.error } : {}) },
      ...(Object.keys(servers).length > 0 ? { mcp_servers: servers } : {}),
    };
  }

  /**
   * Registers an open replay/follow stream (GET /telemetry/events/stream, GET /events/{id}).
   * `end` is called once, when a shutdown has drained the live runs (so followers saw their last
   * events): it sends the stream's final frame and closes it, before the HTTP server closes
   * connections, instead of the socket being cut. Returns the function that unregisters it.
   */
  trackStream(end: () => void): () => void {
    if (this.streamsEnded) {
      queueMicrotask(end);
      return () => {};
    }
    this.openStreams.add(end);
    return () => this.openStreams.delete(end);
  }

  private endStreams(): void {
    this.streamsEnded = true;
    for (const end of [...this.openStreams]) {
      try {
        end();
      } catch (err) {
        // one stream's failure must not keep the others open
        reportSwallowed('runtime.end_stream', err);
      }
    }
    this.openStreams.clear();
  }

  async close(graceMs = 30_000): Promise<void> {
    if (this.retentionTimer) clearInterval(this.retentionTimer);
    this.idempotency.stop();
    await this.background.stop();
    await this.evals.stop();
    await this.runs.lifecycle.shutdown(graceMs);
    await this.background.close();
    this.endStreams();
    // What it did not dispatch stays in the event log, after its stored cursor, for the next start.
    await this.webhooks.stop();
    this.cluster?.close();
    this.rateLimiter.close();
    this.system.shutdown();
    await this.agents.close();
    await this.tools.close();
    await this.otlp?.shutdown(2000);
  }
}

/** The tool registries' callback (src/agent/tools: MCP servers connecting, their stderr): info lines. */
function toolLogger(logger: AppLogger): ToolLogger {
  return (msg, extra) => logger.info({ ...extra }, msg);
}

export function runSettingsOf(config: Config): RunSettings {
  return {
    agent_name: config.agent.name,
    agent_id: config.background.agent_id,
    system_instruction: config.agent.system_instruction || null,
    max_steps: config.agent.max_steps,
    max_output_tokens: config.agent.model.max_output_tokens,
    governance: config.governance as never,
    policy_conditions: compileConditions(config.governance.rules),
    approval_expires_seconds: config.governance.approval_expires_seconds,
    budgets: config.budgets as never,
    pricing: config.pricing as never,
    lease_seconds: config.runs.lease_seconds,
    max_concurrent_runs: config.server.max_concurrent_runs,
    admission_wait_ms: 5000,
    request_timeout_seconds: config.server.request_timeout_seconds,
    tool_timeout_ms: 120_000,
    session_workspace_root: join(config.background.workspace_root, 'sessions'),
    sweep: { ...config.runs.orphan_sweep, max_concurrent: recoveryConcurrency(config.server.max_concurrent_runs, config.runs.orphan_sweep.max_concurrent) },
    session_policy: config.runs.session_policy,
    checkpoints: config.runs.checkpoints,
    flow: config.flow,
  };
}

/**
 * Live recovered runs at most (`runs.orphan_sweep.max_concurrent`): by default a quarter of the
 * run slots, at least 1, and never all of them, so new runs always have one (with a single slot,
 * recovery and new runs share it).
 */
export function recoveryConcurrency(maxConcurrentRuns: number, configured: number | undefined): number {
  const wanted = configured ?? Math.max(1, Math.floor(maxConcurrentRuns / 4));
  return Math.max(1, Math.min(wanted, maxConcurrentRuns - 1));
}
