// A2A 1.0 over JSON-RPC, as @a2a-js/sdk 1.3's client speaks it (its JsonRpcTransport and the
// protobuf-JSON forms in its src/types): method names SendMessage, SendStreamingMessage, GetTask,
// CancelTask; enums as names (ROLE_USER, TASK_STATE_*); parts `{text}` / `{data}`; a result of
// SendMessage is `{task}` and each stream event one of `{task}`, `{statusUpdate}`, `{artifactUpdate}`.
// Pure: records in, wire objects out (src/protocols/a2a/routes.ts does the I/O).
import { z } from 'zod';
import { responseStatusOf, type RunRecord } from '../../runtime/run-record.js';
import { JsonObject, SafeId } from '../../schemas/common.js';
import { pendingApprovalsOf } from '../run-calls.js';

export const A2A_PROTOCOL_VERSION = '1.0';

/** JSON-RPC error codes of A2A (JSON_RPC_ERROR_CODE in the SDK) and JSON-RPC's own. */
export const RPC = {
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL: -32603,
  TASK_NOT_FOUND: -32001,
  TASK_NOT_CANCELABLE: -32002,
  UNSUPPORTED_OPERATION: -32004,
  VERSION_NOT_SUPPORTED: -32009,
} as const;

const REASONS: Record<number, string> = {
  [RPC.INVALID_REQUEST]: 'INVALID_REQUEST',
  [RPC.METHOD_NOT_FOUND]: 'METHOD_NOT_FOUND',
  [RPC.INVALID_PARAMS]: 'INVALID_PARAMS',
  [RPC.INTERNAL]: 'INTERNAL_ERROR',
  [RPC.TASK_NOT_FOUND]: 'TASK_NOT_FOUND',
  [RPC.TASK_NOT_CANCELABLE]: 'TASK_NOT_CANCELABLE',
  [RPC.UNSUPPORTED_OPERATION]: 'UNSUPPORTED_OPERATION',
  [RPC.VERSION_NOT_SUPPORTED]: 'VERSION_NOT_SUPPORTED',
};

/** A JSON-RPC error whose `data` is A2A's google.rpc.ErrorInfo, carrying agentd's code (and validation items). */
export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly agentdCode: string,
    readonly detail?: Array<{ loc: Array<string | number>; msg: string; type: string }>,
  ) {
    super(message);
    this.name = 'RpcError';
  }

  toJSON() {
    return {
      code: this.code,
      message: this.message,
      data: [
        {
          '@type': 'type.googleapis.com/google.rpc.ErrorInfo',
          reason: REASONS[this.code] ?? 'INTERNAL_ERROR',
          domain: 'a2a-protocol.org',
          metadata: { code: this.agentdCode },
        },
        ...(this.detail ? [{ '@type': 'agentd.HTTPValidationError', detail: this.detail }] : []),
      ],
    };
  }
}

export const JsonRpcRequest = z
  .looseObject({
    jsonrpc: z.literal('2.0'),
    id: z.union([z.string().max(256), z.number(), z.null()]).optional(),
    method: z.string().min(1).max(128),
    params: z.unknown().optional(),
  })
  .meta({
    id: 'A2AJsonRpcRequest',
    description: 'A JSON-RPC 2.0 request: SendMessage, SendStreamingMessage, GetTask or CancelTask with its params (A2A 1.0).',
  });

export const JsonRpcResponse = z
  .looseObject({
    jsonrpc: z.literal('2.0'),
    id: z.union([z.string(), z.number(), z.null()]),
    result: z
      .unknown()
      .optional()
      .describe('SendMessage: `{task}`; GetTask, CancelTask: the task; a stream event: `{task}`, `{statusUpdate}` or `{artifactUpdate}`.'),
    error: z
      .object({ code: z.number().int(), message: z.string(), data: z.array(JsonObject).optional() })
      .optional()
      .describe("A2A's JSON-RPC error; `data[0]` is a google.rpc.ErrorInfo whose metadata.code is the AGT_ERR_* code."),
  })
  .meta({ id: 'A2AJsonRpcResponse', description: 'A JSON-RPC 2.0 response: `result` or `error`.' });

const Part = z.looseObject({
  text: z.string().max(1_000_000).optional(),
  data: z.unknown().optional(),
  url: z.string().max(4096).optional(),
  raw: z.string().optional(),
  mediaType: z.string().max(256).optional(),
  metadata: JsonObject.optional(),
});

const Message = z.looseObject({
  messageId: z.string().min(1).max(256),
  contextId: SafeId.optional(),
  taskId: SafeId.optional(),
  role: z.literal('ROLE_USER', { error: 'a client message has role ROLE_USER' }),
  parts: z.array(Part).min(1).max(256),
  metadata: JsonObject.optional(),
});

export const SendMessageParams = z.looseObject({
  message: Message,
  configuration: z.looseObject({ returnImmediately: z.boolean().optional() }).optional(),
  metadata: JsonObject.optional(),
});
export type SendMessageParams = z.infer<typeof SendMessageParams>;

export const TaskIdParams = z.looseObject({ id: SafeId });

/** The data part that decides what an input-required task waits for. */
export const ApprovalDecisionData = z.strictObject({
  decision: z.enum(['approve', 'deny']),
  arguments: JsonObject.nullish(),
  note: z.string().max(10_000).nullish(),
  approval_id: SafeId.optional(),
});
export const BudgetDecisionData = z.strictObject({
  decision: z.enum(['grant', 'deny']),
  amount: z.number().positive().nullish(),
  note: z.string().max(10_000).nullish(),
});

type TaskState =
  'TASK_STATE_WORKING' | 'TASK_STATE_COMPLETED' | 'TASK_STATE_FAILED' | 'TASK_STATE_CANCELED' | 'TASK_STATE_INPUT_REQUIRED' | 'TASK_STATE_REJECTED';

export function taskStateOf(r: RunRecord): TaskState {
  switch (r.status) {
    case 'completed':
      return 'TASK_STATE_COMPLETED';
    case 'awaiting_approval':
    case 'awaiting_budget':
      return 'TASK_STATE_INPUT_REQUIRED';
    case 'cancelled':
      return 'TASK_STATE_CANCELED';
    case 'blocked':
      return 'TASK_STATE_REJECTED'; // a guardrail refused the input
    case 'failed':
    case 'timeout':
      return 'TASK_STATE_FAILED';
    default:
      return 'TASK_STATE_WORKING'; // running, or interrupted (it is resumed)
  }
}

/** What the task's status says besides its state: what it waits for, or why it failed. */
function statusMessageOf(r: RunRecord) {
  const base = { messageId: `${r.run_id}:${r.status}:${r.updated_at}`, role: 'ROLE_AGENT', taskId: r.run_id, contextId: r.session_id };
  if (r.status === 'awaiting_approval') {
    const approvals = pendingApprovalsOf(r);
    return {
      ...base,
      parts: [
        {
          text: `Waiting for approval of ${approvals.map((a) => a.tool_name).join(', ')}. Reply on this task with a data part {"decision":"approve"|"deny","arguments"?,"note"?}.`,
        },
        { data: { status: 'awaiting_approval', approvals }, mediaType: 'application/json' },
      ],
    };
  }
  if (r.status === 'awaiting_budget') {
    return {
      ...base,
      parts: [
        { text: 'Waiting for more budget. Reply on this task with a data part {"decision":"grant"|"deny","amount"?,"note"?}.' },
        { data: { status: 'awaiting_budget', budget_request: r.budget_request }, mediaType: 'application/json' },
      ],
    };
  }
  if ((r.status === 'failed' || r.status === 'timeout' || r.status === 'blocked') && (r.error || r.response))
    return { ...base, parts: [{ text: r.error?.message ?? r.response ?? '' }] };
  return undefined;
}

export function taskStatusOf(r: RunRecord) {
  const message = statusMessageOf(r);
  return { state: taskStateOf(r), ...(message ? { message } : {}), timestamp: r.updated_at };
}

export const RESPONSE_ARTIFACT = 'response';

export function responseArtifact(text: string) {
  return { artifactId: RESPONSE_ARTIFACT, name: RESPONSE_ARTIFACT, parts: [{ text }] };
}

/** The task a run is (task id = run id, context id = session id). */
export function taskOf(r: RunRecord) {
  return {
    id: r.run_id,
    contextId: r.session_id,
    status: taskStatusOf(r),
    ...(r.status === 'completed' && r.response !== null ? { artifacts: [responseArtifact(r.response)] } : {}),
    metadata: { run_id: r.run_id, trace_id: r.trace_id, agent_id: r.agent_id, status: responseStatusOf(r.status) },
  };
}

/** The agent card's `skills`, `securitySchemes` and interfaces (src/protocols/a2a/routes.ts fills in the rest). */
export function agentCardOf(o: {
  name: string;
  description: string;
  version: string;
  url: string;
  auth: boolean;
  skills: Array<{ id: string; name: string; description: string }>;
}) {
  return {
    name: o.name,
    description: o.description,
    version: o.version,
    supportedInterfaces: [{ url: o.url, protocolBinding: 'JSONRPC', protocolVersion: A2A_PROTOCOL_VERSION }],
    provider: { organization: 'agentd', url: o.url.replace(/\/a2a$/, '') },
    capabilities: { streaming: true, pushNotifications: false },
    defaultInputModes: ['text/plain', 'application/json'],
    defaultOutputModes: ['text/plain', 'application/json'],
    skills: o.skills.map((s) => ({ id: s.id, name: s.name, description: s.description, tags: ['agent'] })),
    ...(o.auth
      ? {
          securitySchemes: { bearer: { httpAuthSecurityScheme: { scheme: 'Bearer', description: 'An agentd API key (auth.api_keys).' } } },
          securityRequirements: [{ schemes: { bearer: { list: [] } } }],
        }
      : {}),
  };
}

export const AgentCard = z
  .looseObject({
    name: z.string(),
    description: z.string(),
    version: z.string(),
    supportedInterfaces: z.array(z.object({ url: z.string(), protocolBinding: z.string(), protocolVersion: z.string() })),
    capabilities: z.looseObject({ streaming: z.boolean() }),
    skills: z.array(z.looseObject({ id: z.string(), name: z.string(), description: z.string() })),
  })
  .meta({ id: 'A2AAgentCard', description: 'The A2A 1.0 agent card (protobuf JSON form).' });
