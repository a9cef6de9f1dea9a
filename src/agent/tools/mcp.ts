import { createHash } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { McpError, type Tool as McpTool } from '@modelcontextprotocol/sdk/types.js';
import { compileInputSchema, type ArgsValidator } from './schema.js';
import type { LoadedTool } from './local.js';
import { TOOL_NAME_RE, type McpServerConfig, type McpServerStatus, type RegisteredTool, type ToolContext, type ToolLogger } from './types.js';
import { swallow } from '../../telemetry/swallowed.js';
import { errorSummary } from '../error-summary.js';

export interface McpConnectionOptions {
  connectTimeoutMs: number;
  reconnectBaseMs: number;
  reconnectMaxMs: number;
  /** Streamable HTTP has no connection to watch, so the server is pinged this often (0: never). */
  healthCheckMs: number;
  callTimeoutMs: number;
  logger: ToolLogger;
  /** Status or tool list changed. */
  onChange: (server: string) => void;
}

/** A call to a tool whose server is not connected right now. */
export class McpUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'McpUnavailableError';
  }
}

/** The server ran the tool and reported failure (`isError`). */
export class McpToolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'McpToolError';
  }
}

type CallResult = Awaited<ReturnType<Client['callTool']>>;

const CLIENT_INFO = { name: 'agentd', version: '0.1.0' };
const STDERR_TAIL_CHARS = 2000;

/**
 * An error as runs, events, logs and GET /tools may show it: a short summary (errorSummary), since
 * the transport's messages quote the server's answer (`Error POSTing to endpoint (HTTP 401): <body>`).
 */
function errorText(err: unknown): string {
  if (!(err instanceof Error)) return errorSummary(String(err));
  // undici says only "fetch failed"; the reason (ECONNREFUSED, a DNS error, ...) is in the cause.
  const cause = err.cause instanceof Error ? err.cause.message : null;
  return errorSummary(cause && !err.message.includes(cause) ? `${err.message} (${cause})` : err.message);
}

function shortHash(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 8);
}

/**
 * `<server>__<tool>`: '.' and '/' are common in MCP tool names but refused by OpenAI, so anything
 * outside [a-zA-Z0-9_-] becomes '_'; a name past 64 chars (or one that collides after that) gets a
 * hash of the original name so it stays unique and stable across restarts.
 */
export function exposedToolName(server: string, tool: string, taken: ReadonlySet<string> = new Set()): string {
  const plain = `${server}__${tool.replace(/[^a-zA-Z0-9_-]/g, '_')}`;
  if (plain.length <= 64 && !taken.has(plain) && TOOL_NAME_RE.test(plain)) return plain;
  const suffix = `_${shortHash(tool)}`;
  return `${plain.slice(0, 64 - suffix.length)}${suffix}`;
}

/** Maps a CallToolResult to what a local tool would have returned (or thrown). */
export function mapCallResult(result: CallResult): unknown {
  if (!('content' in result) && 'toolResult' in result) return result.toolResult;
  const parts = Array.isArray(result.content) ? result.content : [];
  const text = parts
    .map((p) => {
      switch (p.type) {
        case 'text':
          return p.text;
        case 'resource':
          return 'text' in p.resource ? p.resource.text : `[resource ${p.resource.uri}]`;
        case 'resource_link':
          return `[resource ${p.uri}]`;
        default:
          return `[${p.type}${'mimeType' in p && typeof p.mimeType === 'string' ? ` ${p.mimeType}` : ''}]`;
      }
    })
    .join('\n');
  if (result.isError === true) throw new McpToolError(text !== '' ? text : 'the tool reported an error without a message');
  if (result.structuredContent !== undefined) return result.structuredContent;
  return text;
}

/** Accepts any object: used when a server's schema does not compile, so the tool stays usable. */
const permissive: ArgsValidator = (args) => ({ ok: true, args });

/**
 * One configured MCP server: connects, watches the connection, reconnects with exponential backoff
 * (capped) and keeps the last tool list it saw so tools stay declared while the server is away.
 */
export class McpConnection {
  readonly name: string;
  private state: McpServerStatus = { status: 'not_connected', last_error: null };
  private loaded: LoadedTool[] = [];
  private client: Client | null = null;
  private pending: Client | null = null;
  private failures = 0;
  private retryTimer: NodeJS.Timeout | null = null;
  private healthTimer: NodeJS.Timeout | null = null;
  private closed = false;
  private stderrTail = '';
  /** Clients being shut down in the background; close() waits for them so no child outlives us. */
  private readonly closing = new Set<Promise<void>>();

  constructor(
    private readonly cfg: McpServerConfig,
    private readonly opts: McpConnectionOptions,
  ) {
    this.name = cfg.name;
  }

  get status(): McpServerStatus {
    return { ...this.state };
  }

  get tools(): readonly LoadedTool[] {
    return this.loaded;
  }

  /** First connection attempt; never throws (a failure is a status, retried in the background). */
  async start(): Promise<void> {
    await this.connectOnce();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.stopHealthCheck();
    const clients = [this.client, this.pending].filter((c): c is Client => c !== null);
    this.client = null;
    this.pending = null;
    for (const c of clients) this.dispose(c);
    await Promise.all([...this.closing]);
  }

  private dispose(client: Client): void {
    const p: Promise<void> = client
      .close()
      .catch(swallow('mcp.close_client', { server: this.name }))
      .finally(() => this.closing.delete(p));
    this.closing.add(p);
  }

  /** pid of the stdio server process while connected (tests use it to simulate a crash). */
  get pid(): number | null {
    const transport = this.client?.transport;
    return transport instanceof StdioClientTransport ? transport.pid : null;
  }

  private setState(status: McpServerStatus['status'], lastError: string | null): void {
    this.state = { status, last_error: lastError };
    this.opts.onChange(this.name);
  }

  private makeTransport(): Transport {
    if ('url' in this.cfg) {
      return new StreamableHTTPClientTransport(new URL(this.cfg.url), { requestInit: { headers: this.cfg.headers ?? {} } });
    }
    const transport = new StdioClientTransport({ command: this.cfg.command, args: this.cfg.args ?? [], env: this.cfg.env, stderr: 'pipe' });
    transport.stderr?.on('data', (chunk: Buffer) => {
      const text = chunk.toString('utf8');
      this.stderrTail = (this.stderrTail + text).slice(-STDERR_TAIL_CHARS);
      for (const line of text.split('\n')) if (line.trim() !== '') this.opts.logger(`mcp server '${this.name}' stderr`, { line });
    });
    return transport;
  }

  /** The last stderr line explains most start-up failures ("Cannot find module ..."). */
  private withStderr(message: string): string {
    const last = this.stderrTail.trim().split('\n').pop()?.trim();
    return last ? `${message} (stderr: ${last.slice(0, 300)})` : message;
  }

  private async connectOnce(): Promise<void> {
    if (this.closed) return;
    const ms = this.opts.connectTimeoutMs;
    const client = new Client(CLIENT_INFO, {
      capabilities: {},
      listChanged: {
        tools: {
          onChanged: (err, tools) => {
            if (this.client !== client) return;
            if (err) this.opts.logger(`mcp server '${this.name}': refreshing tools failed`, { error: errorText(err) });
            else if (tools) this.setTools(tools);
          },
        },
      },
    });
    // Set before connect: the SDK chains its own handler to ours.
    client.onclose = () => this.lost(client, 'connection closed');
    client.onerror = (err) => this.opts.logger(`mcp server '${this.name}' transport error`, { error: errorText(err) });
    this.pending = client;
    this.stderrTail = '';
    let timer: NodeJS.Timeout | undefined;
    try {
      const attempt = (async () => {
        await client.connect(this.makeTransport(), { timeout: ms });
        return this.listAllTools(client);
      })();
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
      });
      attempt.catch(() => undefined); // the loser of the race must not surface as unhandled
      const tools = await Promise.race([attempt, timeout]);
      if (this.closed) {
        this.dispose(client);
        return;
      }
      this.pending = null;
      this.client = client;
      this.failures = 0;
      this.setTools(tools, false);
      this.setState('connected', null);
      this.opts.logger(`mcp server '${this.name}' connected`, { tools: tools.length });
      this.startHealthCheck(client);
    } catch (err) {
      if (this.pending === client) this.pending = null;
      this.dispose(client);
      if (this.closed) return;
      const message = this.withStderr(errorText(err));
      this.opts.logger(`mcp server '${this.name}' connection failed`, { error: message });
      this.setState('failed', message);
      this.scheduleReconnect();
    } finally {
      clearTimeout(timer);
    }
  }

  private async listAllTools(client: Client): Promise<McpTool[]> {
    const tools: McpTool[] = [];
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor === undefined ? {} : { cursor }, { timeout: this.opts.connectTimeoutMs });
      tools.push(...page.tools);
      cursor = page.nextCursor;
    } while (cursor !== undefined);
    return tools;
  }

  private setTools(tools: McpTool[], notify = true): void {
    const taken = new Set<string>();
    this.loaded = tools.map((t) => {
      const name = exposedToolName(this.name, t.name, taken);
      taken.add(name);
      const raw: Record<string, unknown> = { ...(t.inputSchema as Record<string, unknown>) };
      if (raw.type === undefined) raw.type = 'object';
      // `$schema` only matters to the validator; some model APIs reject keys they do not know.
      const { $schema: _draft, ...schema } = raw;
      let validator: ArgsValidator;
      try {
        validator = compileInputSchema(raw);
      } catch (err) {
        this.opts.logger(`mcp server '${this.name}': input schema of '${t.name}' does not compile; arguments are passed unchecked`, { error: errorText(err) });
        validator = permissive;
      }
      const hints = t.annotations ?? {};
      const tool: RegisteredTool = {
        name,
        description: t.description ?? t.title ?? '',
        input_schema: schema,
        idempotent: hints.idempotentHint === true || hints.readOnlyHint === true,
        source: 'mcp',
        mcp_server: this.name,
        execute: (args, ctx) => this.call(t.name, name, args, ctx),
      };
      return { tool, validator };
    });
    if (notify) this.opts.onChange(this.name);
  }

  private lost(client: Client, reason: string): void {
    if (this.closed || this.client !== client) return;
    this.client = null;
    this.stopHealthCheck();
    const message = this.withStderr(reason);
    this.opts.logger(`mcp server '${this.name}' disconnected`, { error: message });
    this.setState('disconnected', message);
    this.dispose(client);
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.closed || this.retryTimer) return;
    const delay = Math.min(this.opts.reconnectMaxMs, this.opts.reconnectBaseMs * 2 ** this.failures);
    this.failures += 1;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      void this.connectOnce();
    }, delay);
    this.retryTimer.unref();
  }

  private startHealthCheck(client: Client): void {
    if (!('url' in this.cfg) || this.opts.healthCheckMs <= 0) return;
    this.stopHealthCheck();
    this.healthTimer = setInterval(() => void this.check(client), this.opts.healthCheckMs);
    this.healthTimer.unref();
  }

  private stopHealthCheck(): void {
    if (this.healthTimer) clearInterval(this.healthTimer);
    this.healthTimer = null;
  }

  private async check(client: Client): Promise<void> {
    try {
      await client.ping({ timeout: Math.min(this.opts.connectTimeoutMs, 5000) });
    } catch (err) {
      this.lost(client, `ping failed: ${errorText(err)}`);
    }
  }

  private async call(original: string, exposed: string, args: Record<string, unknown>, ctx: ToolContext): Promise<unknown> {
    const client = this.client;
    if (client === null || this.state.status !== 'connected') {
      const why = this.state.last_error ? `: ${this.state.last_error}` : '';
      throw new McpUnavailableError(`MCP server '${this.name}' is ${this.state.status.replace('_', ' ')}${why}; tool '${exposed}' cannot be called now`);
    }
    let result: CallResult;
    try {
      result = await client.callTool(
        // _meta lets a server guard its own side effects the way a local tool can (decisions §6.1).
        {
          name: original,
          arguments: args,
          _meta: { 'agentd/run_id': ctx.run_id, 'agentd/attempt': ctx.attempt, 'agentd/idempotency_key': ctx.idempotency_key },
        },
        undefined,
        { signal: ctx.signal, timeout: this.opts.callTimeoutMs },
      );
    } catch (err) {
      if (ctx.signal.aborted) throw err;
      // A protocol error is the server's answer; anything else may mean the server went away,
      // which Streamable HTTP does not announce, so check now rather than at the next ping.
      if (!(err instanceof McpError) && 'url' in this.cfg) void this.check(client);
      // eslint-disable-next-line no-restricted-syntax -- a tool failure: the tool result the model reads
      throw new Error(`MCP server '${this.name}', tool '${original}': ${errorText(err)}`, { cause: err });
    }
    return mapCallResult(result);
  }
}
