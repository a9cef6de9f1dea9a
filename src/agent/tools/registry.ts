/* eslint-disable no-restricted-syntax -- a bad tools config fails the agent build, which agent-registry.ts answers as AgentSpecError (422) or AGT_ERR_AGENT_UNAVAILABLE (409); at start-up the CLI prints it */
import { systemClock, type Clock } from '../../clock.js';
import { clockTool, workspaceTools } from './builtin.js';
import { loadLocalTools, type LoadedTool } from './local.js';
import type { McpConnection } from './mcp.js';
import { lazyInputSchema, schemaHint } from './schema.js';
import type { McpServerConfig, McpServerStatus, RegisteredTool, ToolLogger, ToolsConfig } from './types.js';

export interface ToolRegistryOptions {
  clock?: Clock;
  /** Longest a server may hold up start-up (default 5000 ms); it then goes on in the background. */
  connectTimeoutMs?: number;
  logger?: ToolLogger;
  /** First reconnect delay (default 1000 ms); doubles per failure up to reconnectMaxMs (default 30 s). */
  reconnectBaseMs?: number;
  reconnectMaxMs?: number;
  /** Ping interval for Streamable HTTP servers (default 15000 ms; 0 disables). */
  healthCheckMs?: number;
  /** Per-call timeout for MCP tools (default 10 min); the run's own signal usually ends a call first. */
  callTimeoutMs?: number;
  /**
   * Shares MCP connections between registries (registered agents, src/agent/registry.ts): hands out
   * a connection that is started or starting, and takes it back on close(). Default: own ones.
   */
  mcpPool?: McpPool;
  /** Loads the local tools module afresh when this changes (a module edited since it was imported). */
  localVersion?: string;
}

export interface McpLease {
  connection: McpConnection;
  /** Resolves after the connection's first attempt (never rejects). */
  ready: Promise<void>;
  release(): Promise<void>;
}

export interface McpPool {
  acquire(server: McpServerConfig, onChange: (server: string) => void): Promise<McpLease>;
}

const MCP_SERVER_NAME_RE = /^[a-zA-Z0-9_-]{1,48}$/;

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export class ToolRegistry {
  private index = new Map<string, LoadedTool>();
  private ordered: RegisteredTool[] = [];
  private readonly statusListeners = new Set<(server: string, status: McpServerStatus) => void>();

  private constructor(
    private readonly builtin: LoadedTool[],
    private readonly local: LoadedTool[],
    private readonly connections: McpConnection[],
    private readonly logger: ToolLogger,
    /** How each connection is let go: closed, or handed back to its pool. */
    private readonly closers: Array<() => Promise<void>> = [],
  ) {}

  static async create(cfg: ToolsConfig, opts: ToolRegistryOptions = {}): Promise<ToolRegistry> {
    const logger: ToolLogger = opts.logger ?? (() => undefined);
    const builtin: LoadedTool[] = [];
    for (const set of cfg.builtin ?? []) {
      const tools = set === 'clock' ? [clockTool(opts.clock ?? systemClock)] : set === 'workspace' ? workspaceTools() : null;
      if (tools === null) throw new Error(`unknown built-in tool set '${String(set)}' (known: workspace, clock)`);
      for (const tool of tools) if (!builtin.some((b) => b.tool.name === tool.name)) builtin.push({ tool, validator: lazyInputSchema(tool.input_schema) });
    }
    const local = cfg.local ? await loadLocalTools(cfg.local, process.cwd(), opts.localVersion) : [];
    for (const l of local) {
      if (builtin.some((b) => b.tool.name === l.tool.name))
        throw new Error(`local tools module ${cfg.local}: tool '${l.tool.name}' has the name of a built-in tool`);
    }
    const names = new Set<string>();
    for (const server of cfg.mcp ?? []) {
      if (!MCP_SERVER_NAME_RE.test(server.name)) throw new Error(`MCP server name '${server.name}' must match ^[a-zA-Z0-9_-]{1,48}$`);
      if (names.has(server.name)) throw new Error(`MCP server name '${server.name}' is configured twice`);
      names.add(server.name);
    }
    let registry: ToolRegistry | null = null;
    const onChange = (name: string): void => registry?.changed(name);
    if (opts.mcpPool) {
      const leases: McpLease[] = [];
      try {
        for (const server of cfg.mcp ?? []) leases.push(await opts.mcpPool.acquire(server, onChange));
      } catch (err) {
        await Promise.all(leases.map((l) => l.release()));
        throw err;
      }
      registry = new ToolRegistry(
        builtin,
        local,
        leases.map((l) => l.connection),
        logger,
        leases.map((l) => () => l.release()),
      );
      registry.rebuild();
      await Promise.all(leases.map((l) => l.ready));
      registry.rebuild();
      return registry;
    }
    // The MCP SDK costs ~150 ms to load: only pay it when a server is configured.
    const { McpConnection } = cfg.mcp?.length ? await import('./mcp.js') : ({} as typeof import('./mcp.js'));
    const connections = (cfg.mcp ?? []).map(
      (server) =>
        new McpConnection(server, {
          connectTimeoutMs: opts.connectTimeoutMs ?? 5000,
          reconnectBaseMs: opts.reconnectBaseMs ?? 1000,
          reconnectMaxMs: opts.reconnectMaxMs ?? 30_000,
          healthCheckMs: opts.healthCheckMs ?? 15_000,
          callTimeoutMs: opts.callTimeoutMs ?? 600_000,
          logger,
          onChange,
        }),
    );
    registry = new ToolRegistry(
      builtin,
      local,
      connections,
      logger,
      connections.map((c) => () => c.close()),
    );
    registry.rebuild();
    await Promise.all(connections.map((c) => c.start()));
    registry.rebuild();
    return registry;
  }

  private changed(server: string): void {
    this.rebuild();
    const conn = this.connections.find((c) => c.name === server);
    if (!conn) return;
    const status = conn.status;
    for (const l of this.statusListeners) l(server, status);
  }

  private rebuild(): void {
    const index = new Map<string, LoadedTool>();
    const ordered: RegisteredTool[] = [];
    const add = (l: LoadedTool): void => {
      if (index.has(l.tool.name)) {
        this.logger(`tool '${l.tool.name}' from MCP server '${l.tool.mcp_server ?? '?'}' is hidden: the name is already taken`);
        return;
      }
      index.set(l.tool.name, l);
      ordered.push(l.tool);
    };
    for (const l of this.builtin) add(l);
    for (const l of this.local) add(l);
    for (const c of this.connections) for (const l of c.tools) add(l);
    this.index = index;
    this.ordered = ordered;
  }

  /** Built-in, then local, then MCP tools (servers in config order). */
  list(): RegisteredTool[] {
    return [...this.ordered];
  }

  get(name: string): RegisteredTool | undefined {
    return this.index.get(name)?.tool;
  }

  /**
   * Checks arguments against the tool's input schema. The message is written for the model, so it
   * can correct the call: every problem found, then the schema it should follow.
   */
  validate(name: string, args: unknown): { ok: true; args: Record<string, unknown> } | { ok: false; message: string } {
    const entry = this.index.get(name);
    if (!entry) {
      const known = this.ordered.map((t) => t.name);
      const shown = known.length > 40 ? `${known.slice(0, 40).join(', ')}, …` : known.join(', ');
      return { ok: false, message: `unknown tool '${name}'. Available tools: ${shown || '(none)'}` };
    }
    // A model that produced no arguments at all means "no arguments".
    const given = args === undefined || args === null ? {} : args;
    if (!isPlainObject(given)) {
      return {
        ok: false,
        message: `invalid arguments for tool '${name}': arguments must be a JSON object. Expected input schema: ${schemaHint(entry.tool.input_schema)}`,
      };
    }
    const result = entry.validator(given);
    if (result.ok) return result;
    return {
      ok: false,
      message: `invalid arguments for tool '${name}': ${result.errors.join('; ')}. Expected input schema: ${schemaHint(entry.tool.input_schema)}`,
    };
  }

  mcpStatus(): Record<string, McpServerStatus> {
    const out: Record<string, McpServerStatus> = {};
    for (const c of this.connections) out[c.name] = c.status;
    return out;
  }

  /** True when no MCP server is configured or every configured one is connected (spec /ready). */
  mcpConnected(): boolean {
    return this.connections.every((c) => c.status.status === 'connected');
  }

  /** Called when a server's status or tool list changes (after the list is updated). Returns an unsubscribe function. */
  onMcpStatus(listener: (server: string, status: McpServerStatus) => void): () => void {
    this.statusListeners.add(listener);
    return () => this.statusListeners.delete(listener);
  }

  /** The connection object of a server, for diagnostics and tests. */
  mcpConnection(server: string): McpConnection | undefined {
    return this.connections.find((c) => c.name === server);
  }

  async close(): Promise<void> {
    this.statusListeners.clear();
    const closers = this.closers.splice(0);
    await Promise.all(closers.map((c) => c()));
  }
}
