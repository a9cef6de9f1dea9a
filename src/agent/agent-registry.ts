// Registered agents that really run. A BackgroundAgentSpec is
// planned (src/agent/agent-spec.ts), built once (model provider, tools module, MCP connections) and
// cached per agent; a run holds the build it started with until it ends. `replace` installs a new
// build; the old one is closed when its last run lets go of it. MCP connections are pooled: agents
// naming the same server share one connection, closed when no build uses it any more.
import { statSync } from 'node:fs';
import { join } from 'node:path';
import type { Clock } from '../clock.js';
import { notFound, AppError, domainError, HttpValidationFailure } from '../errors.js';
import type { Store } from '../store/store.js';
import type { AgentRow } from './agent-row.js';
import { AgentSpecError, isServedAgentSpec, planAgent, type AgentPlan, type AgentSpecInput, type PlanOptions } from './agent-spec.js';
import type { AgentLease, AgentProfile, AgentSource } from './agent-profile.js';
import { loadModelProvider } from './model/load.js';
import type { ModelProvider } from './model/types.js';
import { ToolRegistry, type McpLease, type McpPool } from './tools/registry.js';
import type { McpConnection } from './tools/mcp.js';
import type { BuiltinToolSet, McpServerConfig, ToolLogger } from './tools/types.js';
import { repos } from '../store/repos/index.js';
import { swallow } from '../telemetry/swallowed.js';

/** 409: the agent is registered but its stored spec does not build any more; no run started. */
export class AgentUnavailableError extends AppError {
  constructor(message: string) {
    super('Conflict', message, 'fix the environment or replace the agent spec', {}, 'AGT_ERR_AGENT_UNAVAILABLE');
  }
}

export interface AgentRegistryOptions {
  store: Store;
  clock: Clock;
  /** The served agent: what a spec's unset fields fall back to, and what served-agent rows run as. */
  served: AgentProfile;
  servedBuiltin: readonly BuiltinToolSet[];
  /** background.workspace_root (absolute). */
  workspace_root: string;
  plan: Omit<PlanOptions, 'cwd' | 'privileged'> & { cwd?: string };
  /**
   * Auth is off: every caller is an admin, so a stored row counts as registered with an admin key
   * even without the mark (rows stored before the mark existed included).
   */
  everyRowPrivileged: boolean;
  /** agents.max_cached. */
  max_cached: number;
  /** agents.max_mcp_processes: MCP stdio processes open at once for registered agents. */
  maxMcpProcesses?: number;
  /** Wraps each built model (call metrics). */
  wrapModel?: (m: ModelProvider) => ModelProvider;
  logger?: ToolLogger;
  /** MCP connection settings (tests shorten them). */
  mcp?: { connectTimeoutMs?: number; reconnectBaseMs?: number; reconnectMaxMs?: number; healthCheckMs?: number; callTimeoutMs?: number };
}

/** A built agent: held by the cache (while current) and by every run using it. */
class Build {
  private refs = 1; // the cache's
  private closed = false;
  constructor(
    readonly key: string,
    readonly profile: AgentProfile,
    private readonly tools: ToolRegistry | null,
  ) {}

  hold(): AgentLease {
    this.refs++;
    let released = false;
    return {
      profile: this.profile,
      release: () => {
        if (released) return;
        released = true;
        this.drop();
      },
    };
  }

  drop(): void {
    if (--this.refs > 0 || this.closed) return;
    this.closed = true;
    void this.tools?.close().catch(swallow('agent_registry.close_tools'));
  }

  /** Let go of by everyone (replaced, evicted) before a run took it. */
  get isClosed(): boolean {
    return this.closed;
  }
}

interface PooledConnection {
  connection: McpConnection;
  /** A stdio server: a child process. */
  stdio: boolean;
  ready: Promise<void>;
  refs: number;
  listeners: Set<(server: string) => void>;
}

/** One MCP connection per distinct server config, counted; closed when its last holder lets go. */
export class SharedMcpPool implements McpPool {
  private readonly entries = new Map<string, PooledConnection>();
  constructor(private readonly opts: AgentRegistryOptions['mcp'] & { logger: ToolLogger; maxProcesses?: number }) {}

  async acquire(server: McpServerConfig, onChange: (server: string) => void): Promise<McpLease> {
    const key = JSON.stringify(server);
    let entry = this.entries.get(key);
    if (!entry) {
      const { McpConnection } = await import('./tools/mcp.js');
      entry = this.entries.get(key); // another acquire may have made it meanwhile
      if (!entry) {
        // Each stdio server is a child process (~70 MB): their number is bounded for the whole
        // process, whatever the number of agents (agents naming one server share it).
        const max = this.opts.maxProcesses ?? Infinity;
        if ('command' in server && this.processes >= max) {
          throw domainError('AGT_ERR_MCP_PROCESS_LIMIT', [max], { headers: { 'retry-after': '30' } });
        }
        const listeners = new Set<(s: string) => void>();
        const connection = new McpConnection(server, {
          connectTimeoutMs: this.opts.connectTimeoutMs ?? 5000,
          reconnectBaseMs: this.opts.reconnectBaseMs ?? 1000,
          reconnectMaxMs: this.opts.reconnectMaxMs ?? 30_000,
          healthCheckMs: this.opts.healthCheckMs ?? 15_000,
          callTimeoutMs: this.opts.callTimeoutMs ?? 600_000,
          logger: this.opts.logger,
          onChange: (name) => {
            for (const l of listeners) l(name);
          },
        });
        entry = { connection, stdio: 'command' in server, ready: connection.start(), refs: 0, listeners };
        this.entries.set(key, entry);
      }
    }
    const e = entry;
    e.refs++;
    e.listeners.add(onChange);
    let released = false;
    return {
      connection: e.connection,
      ready: e.ready,
      release: async () => {
        if (released) return;
        released = true;
        e.listeners.delete(onChange);
        if (--e.refs > 0) return;
        if (this.entries.get(key) === e) this.entries.delete(key);
        await e.connection.close();
      },
    };
  }

  /** Open connections (tests, diagnostics). */
  get size(): number {
    return this.entries.size;
  }

  /** Open stdio connections: child processes. */
  get processes(): number {
    let n = 0;
    for (const e of this.entries.values()) if (e.stdio) n++;
    return n;
  }

  async close(): Promise<void> {
    const all = [...this.entries.values()];
    this.entries.clear();
    await Promise.all(all.map((e) => e.connection.close()));
  }
}

/** What POST /background/agents built before storing the spec; installed once the row is written. */
export interface PreparedAgent {
  plan: AgentPlan | null;
  profile: AgentProfile | null;
  tools: ToolRegistry | null;
}

export class AgentRegistry implements AgentSource {
  /** agent id → its current build, least recently used first. */
  private readonly cache = new Map<string, Build>();
  /** Builds on their way, so concurrent first runs of one agent build it once. */
  private readonly building = new Map<string, Promise<Build>>();
  readonly mcpPool: SharedMcpPool;
  private closed = false;

  constructor(private readonly opts: AgentRegistryOptions) {
    this.mcpPool = new SharedMcpPool({ ...(opts.mcp ?? {}), logger: opts.logger ?? (() => undefined), maxProcesses: opts.maxMcpProcesses });
  }

  /**
   * Checks and builds a spec (registration): throws AgentSpecError naming every problem, so a spec
   * that cannot run is refused before it is stored. The result is handed to install() or discard().
   */
  async prepare(spec: AgentSpecInput, privileged: boolean): Promise<PreparedAgent> {
    if (isServedAgentSpec(spec)) return { plan: null, profile: null, tools: null };
    const plan = planAgent(spec, { cwd: process.cwd(), ...this.opts.plan, privileged });
    const { profile, tools } = await this.build(plan);
    return { plan, profile, tools };
  }

  /** Makes a prepared build the agent's current one (its row now reads `updated_at`). */
  install(agentId: string, updatedAt: string, prepared: PreparedAgent): void {
    if (!prepared.profile) {
      this.evict(agentId);
      return;
    }
    this.put(agentId, new Build(this.keyOf(agentId, updatedAt), prepared.profile, prepared.tools));
  }

  discard(prepared: PreparedAgent): void {
    void prepared.tools?.close().catch(swallow('agent_registry.close_tools'));
  }

  /** The agent was deleted or replaced elsewhere: let go of its build (its runs keep theirs). */
  evict(agentId: string): void {
    const b = this.cache.get(agentId);
    if (!b) return;
    this.cache.delete(agentId);
    b.drop();
  }

  /**
   * The agent a run of `agentId` uses, held until the lease is released. Reads the agent's row
   * (a spec replaced by another instance is seen by its `updated_at`) and builds it when the
   * cached build is older. 404 when the agent is not registered.
   */
  async acquire(agentId: string): Promise<AgentLease> {
    // A build finished and was pushed out of the cache (replaced, or the cache bound) before this
    // run could take it: look again (bounded; the next look finds the newer build).
    for (let i = 0; i < 3; i++) {
      const lease = await this.acquireOnce(agentId);
      if (lease) return lease;
    }
    throw domainError('AGT_ERR_AGENT_REBUILDING', [agentId], { headers: { 'retry-after': '1' } });
  }

  private async acquireOnce(agentId: string): Promise<AgentLease | null> {
    if (this.closed) throw domainError('AGT_ERR_SHUTTING_DOWN', [], { headers: { 'retry-after': '5' } });
    const rec = await repos(this.opts.store).bgAgents.get<AgentRow>(agentId);
    if (!rec) {
      this.evict(agentId); // deleted, maybe by another instance
      throw notFound('agent', agentId);
    }
    const row = rec.value;
    // The served agent's id always runs as the served agent: a row stored under it with a spec of
    // its own (older versions let a request write one) is never built.
    if (isServedAgentSpec(row) || agentId === this.opts.served.agent_id) {
      this.evict(agentId);
      const served = this.opts.served;
      return { profile: served.agent_id === agentId ? served : { ...served, agent_id: agentId }, release: () => {} };
    }
    const key = this.keyOf(agentId, row.updated_at);
    const cached = this.cache.get(agentId);
    if (cached && cached.key === key) {
      this.cache.delete(agentId); // most recently used last
      this.cache.set(agentId, cached);
      return cached.hold();
    }
    let pending = this.building.get(key);
    if (!pending) {
      pending = (async () => {
        let plan: AgentPlan;
        try {
          // Checked again at every build: a stored row no longer allowed by the config (an inline MCP
          // command written by an older version, a host since removed from agents.model_hosts, a
          // tools module registered without an admin key) does not run.
          plan = planAgent(row, { cwd: process.cwd(), ...this.opts.plan, privileged: this.opts.everyRowPrivileged || row.admin_registered === true });
        } catch (err) {
          throw this.cannotRun(agentId, err);
        }
        const built = await this.build(plan).catch((err: unknown) => {
          throw err instanceof AppError ? err : this.cannotRun(agentId, err);
        });
        const b = new Build(key, built.profile, built.tools);
        this.put(agentId, b);
        return b;
      })().finally(() => this.building.delete(key));
      this.building.set(key, pending);
    }
    const b = await pending;
    return b.isClosed ? null : b.hold();
  }

  async variantModel(modelConfig: Record<string, unknown>): Promise<ModelProvider> {
    const refused = (problems: Array<{ path: Array<string | number>; message: string; type?: string }>) =>
      new HttpValidationFailure(
        problems.map((p) => ({ loc: ['body', 'variant', 'model', ...p.path.slice(1)], msg: p.message, type: p.type ?? 'value_error' })),
      );
    let plan: AgentPlan;
    try {
      // Never privileged: a request's model config gets no more than an agent registered by an operator key.
      plan = planAgent({ agent_id: 'replay-variant', model_config: modelConfig }, { cwd: process.cwd(), ...this.opts.plan, privileged: false });
    } catch (err) {
      if (err instanceof AgentSpecError) throw refused(err.problems);
      throw err;
    }
    if (!plan.model) throw refused([{ path: ['model_config'], message: 'a model config is required' }]);
    try {
      const built = await loadModelProvider(plan.model);
      return this.opts.wrapModel ? this.opts.wrapModel(built) : built;
    } catch (err) {
      throw refused([{ path: ['model_config'], message: err instanceof Error ? err.message : String(err) }]);
    }
  }

  /** A stored spec that no longer builds (an env var unset since, a module removed): the run cannot start. */
  private cannotRun(agentId: string, err: unknown): AppError {
    const why = err instanceof Error ? err.message : String(err);
    return new AgentUnavailableError(`agent '${agentId}' cannot be built: ${why}`);
  }

  private keyOf(agentId: string, updatedAt: string | undefined): string {
    return `${agentId}@${updatedAt ?? ''}`;
  }

  private put(agentId: string, b: Build): void {
    const old = this.cache.get(agentId);
    this.cache.delete(agentId);
    this.cache.set(agentId, b);
    if (old && old !== b) old.drop();
    while (this.cache.size > this.opts.max_cached) {
      const [oldestId, oldest] = this.cache.entries().next().value as [string, Build];
      this.cache.delete(oldestId);
      oldest.drop();
    }
  }

  private async build(plan: AgentPlan): Promise<{ profile: AgentProfile; tools: ToolRegistry }> {
    const served = this.opts.served;
    let model: ModelProvider = served.model;
    if (plan.model) {
      try {
        const built = await loadModelProvider(plan.model);
        model = this.opts.wrapModel ? this.opts.wrapModel(built) : built;
      } catch (err) {
        throw new AgentSpecError([{ path: ['model_config'], message: err instanceof Error ? err.message : String(err) }]);
      }
    }
    let tools: ToolRegistry;
    try {
      tools = await ToolRegistry.create(
        { ...(plan.local_tools ? { local: plan.local_tools } : {}), mcp: plan.mcp, builtin: [...(plan.builtin ?? this.opts.servedBuiltin)] },
        {
          clock: this.opts.clock,
          logger: this.opts.logger,
          mcpPool: this.mcpPool,
          ...(this.opts.mcp ?? {}),
          ...(plan.local_tools ? { localVersion: moduleVersion(plan.local_tools) } : {}),
        },
      );
    } catch (err) {
      if (err instanceof AppError) throw err; // the MCP process cap: 503, not a fault of the spec
      throw new AgentSpecError([{ path: [plan.local_tools ? 'local_tools_ref' : 'mcp_tools'], message: err instanceof Error ? err.message : String(err) }]);
    }
    const profile: AgentProfile = {
      agent_id: plan.agent_id,
      agent_name: plan.agent_name,
      system_instruction: plan.system_instruction ?? served.system_instruction,
      model,
      tools,
      max_steps: plan.max_steps ?? served.max_steps,
      max_output_tokens: plan.model?.max_output_tokens ?? served.max_output_tokens,
      session_workspace_root: join(this.opts.workspace_root, plan.workspace_root, 'sessions'),
    };
    return { profile, tools };
  }

  /** Built agents in memory (tests, diagnostics). */
  get size(): number {
    return this.cache.size;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const b of this.cache.values()) b.drop();
    this.cache.clear();
    await this.mcpPool.close();
  }
}

/** The module file's size and modification time: a changed file is imported afresh. */
function moduleVersion(file: string): string | undefined {
  try {
    const s = statSync(file);
    return `${s.size}-${Math.floor(s.mtimeMs)}`;
  } catch {
    return undefined; // the import reports the missing file
  }
}
