// Shared shapes of the tools layer. Kept free of SDK types so the runtime, the HTTP layer and the
// machines' effect handlers can depend on them without pulling in MCP or ajv.

export interface ToolContext {
  run_id: string;
  session_id: string;
  attempt: number;
  /** Fencing token of the run's lease (decisions §6.1): a tool can refuse a stale owner's call. */
  lease_token: string;
  /** Stable across re-executions of the same call, so a tool can make its side effect once. */
  idempotency_key: string;
  workspace_path: string | null;
  signal: AbortSignal;
}

export interface RegisteredTool {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
  /** True when running the call again after a crash has the same effect as running it once. */
  idempotent: boolean;
  source: 'local' | 'mcp' | 'builtin';
  mcp_server?: string;
  execute(args: Record<string, unknown>, ctx: ToolContext): Promise<unknown>;
}

/** The tools of one agent as a run sees them: list, look up, check arguments. */
export interface AgentToolSource {
  list(): RegisteredTool[];
  get(name: string): RegisteredTool | undefined;
  validate(name: string, args: unknown): { ok: true; args: Record<string, unknown> } | { ok: false; message: string };
}

export type McpServerStatus = {
  status: 'connected' | 'disconnected' | 'failed' | 'not_connected';
  last_error: string | null;
};

export type McpStdioServerConfig = { name: string; command: string; args?: string[]; env?: Record<string, string> };
export type McpHttpServerConfig = { name: string; url: string; headers?: Record<string, string> };
export type McpServerConfig = McpStdioServerConfig | McpHttpServerConfig;

export type BuiltinToolSet = 'workspace' | 'clock';

export interface ToolsConfig {
  /** Path to an ES module whose default export is an array of tools; resolved against cwd. */
  local?: string;
  mcp?: McpServerConfig[];
  builtin?: BuiltinToolSet[];
}

export type ToolLogger = (msg: string, extra?: object) => void;

/** Names every model API accepts (OpenAI is the strictest: no '.', at most 64 chars). */
export const TOOL_NAME_RE = /^[a-zA-Z0-9_-]{1,64}$/;
