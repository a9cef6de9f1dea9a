// Service-level answers: health, readiness, metrics, the machine catalogue and the tool list
// (docs/contract.md §12.19, §1 and §9).
import { z } from 'zod';
import { JsonObject } from './common.js';
import { ToolSource } from './runs.js';

export const HealthResponse = z
  .object({
    status: z.enum(['healthy', 'unhealthy']),
    agent_name: z.string(),
    uptime: z.number().min(0).describe('Seconds since the process started.'),
    version: z.string().default('0+unknown'),
  })
  .meta({ id: 'HealthResponse' });
export type HealthResponse = z.infer<typeof HealthResponse>;

export const McpServerState = z
  .object({
    status: z.enum(['connected', 'disconnected', 'failed', 'not_connected']),
    error: z.string().nullable().describe('Last error, if any.'),
  })
  .meta({ id: 'McpServerState' });
export type McpServerState = z.infer<typeof McpServerState>;

export const ReadinessResponse = z
  .object({
    ready: z.boolean(),
    agent_name: z.string(),
    initialized: z.boolean(),
    mcp_connected: z.boolean().describe('True when no tool servers are configured or every configured one is connected.'),
    mcp_servers: z.record(z.string(), McpServerState).optional(),
    store: z
      .object({
        adapter: z.enum(['memory', 'level', 'postgres']),
        ok: z.boolean().describe('The store is open and (PostgreSQL) its database answered the last query or probe (every 2 s).'),
        error: z.string().optional().describe('Why the database is not reachable (never holds credentials).'),
      })
      .optional()
      .describe('The store and, on PostgreSQL, whether its database answers; `ready` is false while it does not.'),
  })
  .meta({ id: 'ReadinessResponse' });
export type ReadinessResponse = z.infer<typeof ReadinessResponse>;

export const MetricsResponse = z
  .object({
    total_requests: z.number().int().min(0).default(0),
    total_tokens: z.number().int().min(0).default(0),
    total_request_tokens: z.number().int().min(0).default(0),
    total_response_tokens: z.number().int().min(0).default(0),
    total_time: z.number().min(0).default(0).describe('Seconds.'),
    average_time: z.number().min(0).default(0).describe('Seconds per request.'),
  })
  .meta({ id: 'MetricsResponse' });
export type MetricsResponse = z.infer<typeof MetricsResponse>;

export const MachineInfo = z
  .object({
    id: z.string(),
    version: z.union([z.string(), z.number()]),
    states: z.array(z.string()).describe('State ids, dotted for nested states.'),
    transitions: z
      .array(z.object({ source: z.string(), target: z.string(), event: z.string() }))
      .describe('Edges: `event` is the event name, `done` / `error` for an invoked effect, `(always)` for eventless, with `[guard]` when guarded.'),
    mermaid: z.string().describe('The statechart as a Mermaid stateDiagram-v2.'),
    definition: JsonObject.describe("The XState JSON definition (machine.toJSON(), functions dropped): what Stately's visualiser and the dashboard draw."),
  })
  .meta({ id: 'MachineInfo' });
export type MachineInfo = z.infer<typeof MachineInfo>;

export const MachinesResponse = z.object({ machines: z.array(MachineInfo) }).meta({ id: 'MachinesResponse' });
export type MachinesResponse = z.infer<typeof MachinesResponse>;

/** An actor's systemId: what `GET /machines/live` follows. */
export const ActorId = z
  .string()
  .regex(/^(run|bgrun|task|session):(?!\.$)(?!.*\.\.)[^/\\\u0000-\u001f\u007f\ud800-\udfff]{1,256}$/u, {
    error: 'must be run:<run_id>, bgrun:<background run id>, task:<task_id> or session:<session_id>',
  })
  .meta({ id: 'ActorId', description: 'An actor of the actor system: `run:<run_id>`, `bgrun:<id>`, `task:<task_id>` or `session:<session_id>`.' });

export const MachineLiveQuery = z.strictObject({ actor: ActorId });

/** A frame of GET /machines/live: one state of the watched actor. */
export const LiveStateFrame = z
  .object({
    actor: z.string(),
    value: z.unknown().describe('XState state value: a state name, or an object for nested states.'),
    status: z.string().describe('XState actor status: active, done, error, stopped.'),
    event: z.string().nullable().describe('The event that led to this state; null for the first frame.'),
  })
  .meta({ id: 'LiveStateFrame' });

/** First frame of GET /machines/live. */
export const LiveWatchFrame = z
  .object({
    actor: z.string(),
    live: z.boolean().describe('True when the actor runs in this process now; a paused or ended run has no actor (read its record instead).'),
  })
  .meta({ id: 'LiveWatchFrame' });

export const ToolInfo = z
  .object({
    name: z.string(),
    description: z.string(),
    input_schema: JsonObject.describe('JSON Schema of the arguments.'),
    source: ToolSource,
    requires_approval: z.boolean(),
  })
  .meta({ id: 'ToolInfo' });
export type ToolInfo = z.infer<typeof ToolInfo>;

export const ToolsResponse = z.object({ tools: z.array(ToolInfo), total: z.number().int().min(0) }).meta({ id: 'ToolsResponse' });
export type ToolsResponse = z.infer<typeof ToolsResponse>;

/** GET /whoami: the key a request was made with (docs/contract.md §1). */
export const WhoAmIResponse = z
  .object({
    name: z.string().nullable().describe("The API key's name from auth.api_keys; null when auth is off."),
    role: z.enum(['reader', 'operator', 'approver', 'admin']).describe('What the key may do; with auth off every caller counts as admin.'),
    auth: z.boolean().describe('Whether the server checks API keys (auth.api_keys is not empty).'),
  })
  .meta({ id: 'WhoAmIResponse' });
export type WhoAmIResponse = z.infer<typeof WhoAmIResponse>;
