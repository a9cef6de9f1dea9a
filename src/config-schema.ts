// The config file's schema (docs/contract.md §10): one zod section per top-level key, with one
// operator-readable message per check. src/config.ts applies env overrides and flags over it and
// resolves paths and secrets.
import { z } from 'zod';
import { LOG_LEVELS } from './telemetry/logger.js';
import { isHostEntry } from './host-names.js';
import { ruleIssues } from './agent/policy-conditions.js';
import { arr, bool, nonEmpty, nonNegNumber, obj, oneOf, origin, posInt, posNumber, str, strMap, url } from './config-fields.js';
import { AgentConfig, BudgetsConfig, GovernanceConfig, PriceConfig, mcpServerName } from './config-schema-agent.js';

// --- sections ----------------------------------------------------------------------------------

const ServerConfig = obj({
  host: nonEmpty().default('127.0.0.1').describe('Interface to listen on.'),
  port: z
    .number({ error: 'expected an integer port between 0 and 65535' })
    .int({ error: 'expected an integer port between 0 and 65535' })
    .min(0, { error: 'expected an integer port between 0 and 65535' })
    .max(65535, { error: 'expected an integer port between 0 and 65535' })
    .default(8000)
    .describe('TCP port; 0 picks a free one.'),
  max_body_bytes: posInt()
    .default(1024 * 1024)
    .describe('Largest accepted request body (413 beyond).'),
  request_timeout_seconds: posNumber().default(300).describe('Outer timeout of a request, and the default wait budget of a `wait` run.'),
  max_concurrent_runs: posInt().default(64).describe('Live runs per process; more wait up to 5 s, then 503.'),
  headers_timeout_seconds: posNumber().default(10).describe('A client must send its request headers within this time, or the connection is closed (408).'),
  body_timeout_seconds: posNumber()
    .default(30)
    .describe('A client must send its whole request (headers and body) within this time, or the connection is closed (408). At least headers_timeout_seconds.'),
  keep_alive_timeout_seconds: posNumber().default(5).describe('An idle keep-alive connection is closed after this time without a new request.'),
  max_connections: posInt().default(4096).describe('Open TCP connections at most; more are closed at once. Keep it under the process file-descriptor limit.'),
  max_connections_per_address: posInt()
    .optional()
    .describe(
      'Open TCP connections one client address may hold; one more is answered 429 (AGT_ERR_TOO_MANY_CONNECTIONS, Retry-After) and closed. Default: a quarter of max_connections (1024). Less than max_connections, so other clients and /health always find a connection. Behind a reverse proxy every client shares its address: raise it.',
    ),
  allowed_hosts: arr(nonEmpty().refine(isHostEntry, { error: 'expected a host name or address, optionally with :port (IPv6 in brackets), or "*"' }))
    .optional()
    .describe(
      'Host headers the service answers (`name` on any port, `name:port`, `[::1]:8000`; "*" for any); other requests get 400 AGT_ERR_HOST_NOT_ALLOWED. /health and /ready answer any. Default: bound to a loopback address with auth off, localhost, 127.0.0.1 and [::1] on the bound port; else any (with auth off, start-up warns).',
    ),
  max_streams_per_key: posInt()
    .default(256)
    .describe(
      'Open SSE streams (POST /run, follow streams, /machines/live) one API key may hold; with auth off, one client address. One more is answered 429 (AGT_ERR_TOO_MANY_STREAMS, Retry-After).',
    ),
  max_json_depth: posInt().default(64).describe('Deepest nesting of arrays and objects accepted in a JSON body (422 beyond).'),
  stream_max_queued_events: posInt()
    .default(1000)
    .describe(
      'SSE frames one stream may hold for a slow reader; past it the stream gets an error frame (StreamOverflow) and is closed, to resume with Last-Event-ID.',
    ),
  stream_max_queued_bytes: posInt()
    .default(8 * 1024 * 1024)
    .describe('Bytes of SSE frames one stream may hold for a slow reader (same rule).'),
  public_url: url()
    .optional()
    .describe(
      'Where clients reach this service (scheme, host, optional path prefix), for URLs the service hands out: the A2A agent card. Default: the scheme and Host header of the request.',
    ),
  stream_drop_grace_seconds: posNumber()
    .default(5)
    .describe('A dropped stream (StreamOverflow) whose reader has not read up to the error frame within this time loses the connection.'),
  cors: obj({
    origins: arr(origin())
      .max(100, { error: 'expected at most 100 origins' })
      .default([])
      .describe(
        'Browser origins (exact, such as https://app.example.com) allowed to call the API cross-origin. Empty: no CORS headers, and preflights are refused. Credentials travel only in the Authorization header: Access-Control-Allow-Credentials is never sent.',
      ),
  })
    .prefault({})
    .describe('Cross-origin access from browsers.'),
  protocols: obj({
    ai_sdk: obj({
      resumable: bool()
        .default(true)
        .describe(
          'POST /ai-sdk/chat: closing the stream detaches (the run goes on; GET /ai-sdk/chat/{id}/stream replays and follows it). false: closing the stream cancels the run, as POST /run does.',
        ),
    })
      .prefault({})
      .describe('The AI SDK UI message stream adapter (POST /ai-sdk/chat).'),
  })
    .prefault({})
    .describe('Settings of the protocol adapters (docs/protocols/).'),
}).superRefine((s, ctx) => {
  if (s.max_connections_per_address !== undefined && s.max_connections_per_address >= s.max_connections) {
    ctx.addIssue({
      code: 'custom',
      path: ['max_connections_per_address'],
      message: `expected less than server.max_connections (${s.max_connections}), so that other clients and /health still find a connection`,
    });
  }
});

const StoreConfig = obj({
  kind: oneOf(['level', 'postgres'])
    .default('level')
    .describe('level: the embedded store in the data dir (one process); postgres: shared by several instances (store.url).'),
  path: nonEmpty().optional().describe('Directory of the embedded store; default: the data dir.'),
  url: nonEmpty()
    .refine((u) => /^postgres(ql)?:\/\//i.test(u), { error: 'expected a postgres:// or postgresql:// connection string' })
    .optional()
    .describe(
      'PostgreSQL connection string (postgres://user:password@host:5432/db); required when kind is postgres. Env: AGENTD_STORE_URL. The password is never logged.',
    ),
  sync: bool()
    .default(true)
    .describe('fsync every write batch of the embedded store. false: writes survive a killed process but not a power loss, for more throughput.'),
  pool_size: posInt().default(10).describe('PostgreSQL: connections in the pool of this process.'),
  statement_timeout_ms: z
    .number({ error: 'expected an integer >= 0' })
    .int({ error: 'expected an integer >= 0' })
    .min(0, { error: 'expected an integer >= 0' })
    .default(30_000)
    .describe('PostgreSQL: server-side statement_timeout of every connection, in ms; 0 = none.'),
});

const OrphanSweepConfig = obj({
  enabled: bool().default(true).describe('Recover runs whose owner stopped (lease lapsed) and decided runs nobody resumed.'),
  interval_seconds: posNumber().default(30).describe('Time between two sweeps.'),
  max_concurrent: posInt()
    .optional()
    .describe(
      'Recovered runs (resumed by the orphan sweep, at start-up or later) live at once. Default: a quarter of server.max_concurrent_runs, at least 1; never more than max_concurrent_runs - 1, so new runs always have a slot.',
    ),
  max_recoveries: posInt().default(3).describe('A run recovered this many times ends failed instead of being resumed again.'),
  decided_grace_seconds: nonNegNumber()
    .default(30)
    .describe('A decided run is resumed by the sweep only after waiting this long for the process that took the decision.'),
});

const RunsConfig = obj({
  lease_seconds: posNumber()
    .default(60)
    .describe(
      "A live run renews its lease; one not renewed for this long is taken over by the sweep. A background run's agent run holds none: its background run's lease (background.lease_seconds) owns it. An evaluation's driving instance holds its lease on the evaluation as long.",
    ),
  orphan_sweep: OrphanSweepConfig.prefault({}).describe('Recovery of runs a stopped process left behind.'),
  checkpoints: bool()
    .default(true)
    .describe(
      "Keep a checkpoint of every run before each model call, at each pause and resume and at its end (docs/debugging.md): what GET /runs/{id}/checkpoints lists and fork and replay start from. false: runs keep none (the checkpoint benchmark's baseline); a fork, a replay from_checkpoint or a checkpoint's conversation of such a run answers 409 AGT_ERR_CHECKPOINTS_OFF (a replay from the start still works).",
    ),
  session_policy: oneOf(['enqueue', 'reject', 'interrupt', 'rollback'] as const)
    .default('enqueue')
    .describe(
      'What a run does when its session already has a run in flight: enqueue (wait its turn), reject (409), interrupt (the running one stops at its next step boundary; the new one continues its conversation), rollback (the running one is cancelled and its turn removed). A request overrides it with `session_policy`.',
    ),
});

const FlowConfig = obj({
  concurrency: arr(
    obj({
      key_prefix: nonEmpty().describe('Every concurrency key starting with this (the longest matching prefix wins).'),
      limit: posInt().describe("Runs of one such key running at once; wins over a request's limit."),
    }),
  )
    .default([])
    .describe('Limits of concurrency keys by prefix (docs/flow-control.md).'),
  max_queued: posInt().default(10_000).describe('Runs waiting `queued` for a concurrency key at most; past it a run is refused with 503 and Retry-After.'),
  poll_ms: posInt()
    .default(250)
    .describe('How often a key with runs waiting in this process looks for a slot that another instance freed (the change feed tells it sooner).'),
});

const BackgroundConfig = obj({
  enabled: bool().default(true).describe('false: no scheduler and no background workers in this process.'),
  agent_id: z
    .string({ error: 'expected an id matching ^[A-Za-z0-9_.-]{1,128}$' })
    .regex(/^(?!\.{1,2}$)[A-Za-z0-9_.-]{1,128}$/, { error: 'expected an id matching ^[A-Za-z0-9_.-]{1,128}$ (not "." or "..")' })
    .default('default')
    .describe('Id under which the served agent runs background tasks that name no agent.'),
  lease_seconds: posNumber().default(30).describe('A claimed background run renews its lease; one not renewed for this long is retried or failed.'),
  concurrency: posInt().default(4).describe('Background runs this process runs at once.'),
  max_queued_runs: posInt()
    .default(10_000)
    .describe('POST /background/tasks/{id}/run answers 503 ServerBusy (Retry-After) while this many runs wait to be claimed (all instances).'),
  workspace_root: nonEmpty().optional().describe('Default: <data dir>/workspaces.'),
  poll_interval_ms: posInt().default(250).describe('How often the scheduler and the claimer look for due and queued work.'),
  // Ended background runs are deleted (row, attempts, occurrence record, workspace folder) by a
  // periodic sweep: by age and by count per task (docs/background.md "Retention").
  run_retention: obj({
    max_age_days: posNumber().default(30).describe('Ended runs older than this (by finished_at) are deleted; fractions allowed.'),
    max_runs_per_task: posInt().default(1000).describe('Only the newest N ended runs of a task are kept.'),
    sweep_interval_seconds: posNumber().default(60).describe('Time between two retention sweeps.'),
  })
    .prefault({})
    .describe('Deletion of ended background runs, by age and by count per task.'),
  workspace: obj({
    allow_shared_namespaces: bool()
      .default(false)
      .describe('Let namespace_template resolve anywhere under workspace_root (e.g. a session folder); default: only under background/<agent_id>/<task_id>/.'),
  })
    .prefault({})
    .describe('Where background runs may write.'),
});

// Registered agents (POST /background/agents; docs/agents.md). Everything a spec may reach is
// named here by the operator, never assembled from a request: MCP servers are defined whole and a
// spec names them, keys come only from the listed env names, model hosts only from the list.
const McpStdioServerBody = obj({
  command: nonEmpty().describe('Program started for this server (stdio transport).'),
  args: arr(str()).default([]).describe('Arguments of the command.'),
  env: strMap().default({}).describe('Extra environment variables; ${NAME} is read from the environment at start-up.'),
});
const McpHttpServerBody = obj({
  url: url().describe('Streamable HTTP endpoint of the MCP server.'),
  headers: strMap().default({}).describe('Sent with every request; ${NAME} is read from the environment at start-up.'),
});
const AGENT_ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const AgentsConfig = obj({
  tools_dirs: arr(nonEmpty())
    .default([])
    .describe(
      "Directories a registered agent's local_tools_ref may load a module from (relative: against the config file). Only an admin key may register a spec with local_tools_ref. Empty: no registered agent may load a tools module.",
    ),
  mcp_commands: z
    .never({
      error:
        'removed: a request may no longer choose an MCP command, its args or env. Define each server whole in agents.mcp_servers and name it in the spec as {"server": "<name>"} (docs/agents.md)',
    })
    .optional()
    .describe('Removed: define MCP servers in agents.mcp_servers instead (start-up fails while this is set).'),
  mcp_servers: z
    .record(mcpServerName(), z.union([McpStdioServerBody, McpHttpServerBody], { error: 'expected {command, args, env} or {url, headers}' }), {
      error: 'expected an object of MCP servers by name',
    })
    .default({})
    .describe(
      'MCP servers a registered agent may name (mcp_tools: [{"server": "<name>"}]), each defined whole: {command, args, env} or {url, headers}. ${NAME} in an env or header value is read from the environment at start-up (unset: start-up fails) and is redacted from everything answered or exported.',
    ),
  secret_env: arr(
    z.string({ error: 'expected the name of an environment variable' }).regex(AGENT_ENV_NAME, { error: 'expected the name of an environment variable' }),
  )
    .default([])
    .describe(
      "Environment variables a registered agent's model_config.api_key_env may name (read at start-up; their values are redacted from everything answered or exported). Empty: registered agents get no key.",
    ),
  model_hosts: arr(nonEmpty())
    .default([])
    .describe(
      "Hosts (host, or host:port when the port is not the scheme's default, as in a URL) a registered agent's model may be reached at; a provider's default URL counts (api.openai.com, api.anthropic.com). Empty: only the demo model and the served agent's.",
    ),
  max_cached: posInt().default(32).describe('Built agents kept in memory at most (least recently used ones are let go; a run keeps its own until it ends).'),
  max_mcp_servers_per_agent: posInt().default(4).describe('MCP servers one registered agent may name (422 beyond).'),
  max_mcp_processes: posInt()
    .default(16)
    .describe(
      'MCP stdio processes registered agents may hold open at once in this process (shared by agents naming one server); a build needing one more is refused with 503.',
    ),
  max_spec_bytes: posInt()
    .default(128 * 1024)
    .describe('Largest registered agent spec, as JSON in UTF-8 bytes (system instruction and metadata included; 422 beyond).'),
});

const LogConfig = obj({
  level: oneOf(LOG_LEVELS).default('info').describe('Lowest level written (AGENTD_LOG_LEVEL). fatal/silent are not offered: every 5xx writes an error line.'),
  format: oneOf(['json', 'pretty']).optional().describe('JSON lines, or a short human format (AGENTD_LOG_FORMAT). Default: pretty on a terminal, else JSON.'),
  requests: bool().default(false).describe('A line per request received and answered (AGENTD_LOG_REQUESTS=1).'),
});

const TelemetryConfig = obj({
  capture: oneOf(['full', 'metadata_only'])
    .default('full')
    .describe('full: events keep their inputs and outputs (redacted, truncated past 64 KB); metadata_only: only their type and size.'),
  retention_days: posNumber().default(30).describe('Events older than this are deleted (at start-up and daily).'),
  otlp: obj({
    endpoint: url()
      .optional()
      .describe('OTLP/HTTP base endpoint, `/v1/traces` appended; default OTEL_EXPORTER_OTLP_ENDPOINT; export is off when neither endpoint is set.'),
    traces_endpoint: url().optional().describe('Full OTLP/HTTP traces URL, used as is; wins over endpoint; default OTEL_EXPORTER_OTLP_TRACES_ENDPOINT.'),
    headers: strMap()
      .default({})
      .describe('Sent with every export; also OTEL_EXPORTER_OTLP_HEADERS / _TRACES_HEADERS (a header the file names wins). Secret: redacted everywhere.'),
    protocol: oneOf(['http/protobuf', 'http/json'])
      .default('http/protobuf')
      .describe('Default OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf.'),
    timeout_ms: posInt('a whole number of milliseconds from 1 to 300000')
      .max(300_000, { error: 'expected a whole number of milliseconds from 1 to 300000' })
      .default(10_000)
      .describe('Per-request timeout; default OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, OTEL_EXPORTER_OTLP_TIMEOUT, else 10000.'),
    service_name: nonEmpty().default('agentd').describe('Resource service.name; default OTEL_SERVICE_NAME, else agentd.'),
    capture_message_content: z
      .boolean({ error: 'expected true or false' })
      .default(false)
      .describe(
        'Prompts, completions, tool arguments and results on the spans (gen_ai.input.messages, gen_ai.output.messages, gen_ai.tool.call.*), redacted; default OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, else false.',
      ),
  })
    .prefault({})
    .describe('OTLP/HTTP export of run traces (GenAI semantic conventions); off unless an endpoint is set.'),
});

const ApiKeyConfig = obj({
  name: nonEmpty().describe('Who the key is: the default approver and steer sender, shown by GET /whoami.'),
  key_sha256: z
    .string({ error: 'expected 64 hex characters (SHA-256 of the key)' })
    .regex(/^[0-9a-fA-F]{64}$/, { error: 'expected 64 hex characters (SHA-256 of the key)' })
    .transform((s) => s.toLowerCase())
    .describe('SHA-256 of the key, hex (printf %s "$KEY" | sha256sum): the config never holds the key itself.'),
  role: oneOf(['reader', 'operator', 'approver', 'admin']).describe(
    'reader: reads; operator: + starts and manages runs and tasks; approver: reads + decides; admin: all.',
  ),
  tenant: z
    .string()
    .regex(/^[A-Za-z0-9_.-]{1,64}$/, { error: 'must be 1-64 characters of A-Z a-z 0-9 _ . -' })
    .optional()
    .describe('Its tenant (docs/multi-tenant.md).'),
});

const AuthConfig = obj({
  api_keys: arr(ApiKeyConfig).default([]).describe('Auth is off when empty.'),
  bind_approver: bool().default(false).describe("Require a decision's approver to equal the key's name."),
});

// Idempotency-Key (docs/http-api.md "Idempotent requests").
const IdempotencyConfig = obj({
  ttl_seconds: posInt().default(86_400).describe('How long an Idempotency-Key is remembered: a retry within it gets the original result.'),
  sweep_interval_seconds: posNumber().default(3600).describe('How often expired keys are deleted.'),
});

export const WEBHOOK_EVENTS = [
  'run.completed',
  'run.failed',
  'run.cancelled',
  'run.awaiting_approval',
  'run.awaiting_budget',
  'background_run.completed',
  'background_run.failed',
  'background_run.cancelled',
  'background_run.timeout',
  'background_run.skipped',
] as const;

const WebhookEndpoint = obj({
  url: url().describe('Receiver of the deliveries (POST, signed).'),
  events: arr(oneOf(WEBHOOK_EVENTS))
    .min(1, { error: 'expected at least one event' })
    .default([...WEBHOOK_EVENTS])
    .describe('Events sent to this receiver; default: all.'),
  secret: nonEmpty().optional().describe('Signing secret as a value (`whsec_<base64>` or any text); prefer secret_env. Never stored, logged or exported.'),
  secret_env: nonEmpty().optional().describe('Name of an environment variable holding the signing secret.'),
});

// Completion webhooks (docs/webhooks.md).
const WebhooksConfig = obj({
  endpoints: arr(WebhookEndpoint).default([]).describe('Receivers of every matching event.'),
  allow_request_hosts: arr(nonEmpty())
    .default([])
    .describe('Hosts a per-request `webhook` URL may name (`example.com`, `*.example.com`, `host:port`); empty: per-request webhooks are refused (SSRF).'),
  request_secret: nonEmpty().optional().describe('Signing secret of per-request webhooks, as a value.'),
  request_secret_env: nonEmpty().optional().describe('Name of an environment variable holding the signing secret of per-request webhooks.'),
  max_concurrent: posInt().default(8).describe('Deliveries in flight at once.'),
  timeout_seconds: posNumber().default(10).describe('Per-attempt timeout.'),
  retry_hours: posNumber().default(24).describe('A delivery is retried with exponential backoff for this long, then marked failed.'),
  initial_backoff_seconds: posNumber().default(5).describe('Wait before the first retry; doubled after each failed attempt.'),
  max_backoff_seconds: posNumber().default(3600).describe('Longest wait between two attempts.'),
  retention_days: posNumber().default(7).describe('Ended deliveries older than this are deleted.'),
});

export const ConfigSchema = obj({
  $schema: str().optional().describe('Ignored; lets editors find the JSON Schema.'),
  server: ServerConfig.prefault({}).describe('HTTP server: address, limits, CORS, protocol adapters.'),
  store: StoreConfig.prefault({}).describe('Where runs, sessions, events and background state are kept.'),
  agent: AgentConfig.prefault({}).describe('The served agent: model, instructions, tools, sub-agents, guardrails.'),
  governance: GovernanceConfig.prefault({}).describe('Tool-call policy: which calls run, wait for a person, or are refused.'),
  budgets: BudgetsConfig.prefault({}).describe('Limits on cost, tokens, model calls and tool calls, by scope.'),
  pricing: z
    .record(z.string(), PriceConfig, { error: 'expected an object of model prices' })
    .default({})
    .describe('Prices by model name, for cost estimates, cost budgets and agentd_model_cost_usd_total.'),
  runs: RunsConfig.prefault({}).describe('Durable runs: leases and recovery.'),
  flow: FlowConfig.prefault({}).describe('Flow control: concurrency keys, the queue of waiting runs (docs/flow-control.md).'),
  background: BackgroundConfig.prefault({}).describe('Background tasks: scheduler, workers, retention, workspaces.'),
  agents: AgentsConfig.prefault({}).describe('What registered agents (POST /background/agents) may reach.'),
  log: LogConfig.prefault({}).describe('Log output.'),
  telemetry: TelemetryConfig.prefault({}).describe('Telemetry events and the OTLP trace export.'),
  auth: AuthConfig.prefault({}).describe('API keys and roles; off when no key is configured.'),
  idempotency: IdempotencyConfig.prefault({}).describe('Idempotency-Key handling of POST requests.'),
  webhooks: WebhooksConfig.prefault({}).describe('Webhook deliveries of run and background-run events.'),
}).superRefine((c, ctx) => {
  if (c.store.kind === 'postgres' && !c.store.url) {
    ctx.addIssue({ code: 'custom', path: ['store', 'url'], message: 'required when store.kind is "postgres"' });
  }
  const seen = new Set<string>();
  c.agent.tools.mcp.forEach((s, i) => {
    if (seen.has(s.name)) {
      ctx.addIssue({ code: 'custom', path: ['agent', 'tools', 'mcp', i, 'name'], message: `duplicate MCP server name "${s.name}"` });
    }
    seen.add(s.name);
  });
  // Conditions are parsed at start-up: an invalid one refuses to start, naming the rule.
  for (const e of ruleIssues(c.governance.rules)) ctx.addIssue({ code: 'custom', path: ['governance', 'rules', ...e.path], message: e.message });
  const keyNames = new Set<string>();
  c.auth.api_keys.forEach((k, i) => {
    if (keyNames.has(k.name)) {
      ctx.addIssue({ code: 'custom', path: ['auth', 'api_keys', i, 'name'], message: `duplicate API key name "${k.name}"` });
    }
    keyNames.add(k.name);
  });
});

export type ParsedConfig = z.output<typeof ConfigSchema>;
