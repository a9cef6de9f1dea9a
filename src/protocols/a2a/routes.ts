// A2A 1.0 (docs/protocols/a2a.md): the public agent card at /.well-known/agent-card.json and the
// JSON-RPC binding at POST /a2a. A task is a run (task id = run id, context id = session id); an
// approval or budget pause is TASK_STATE_INPUT_REQUIRED with what it waits for in a data part, and
// a message on that task with a data part {decision, …} is that decision (recorded under the
// caller's key name), after which the task goes on. Closing a stream does not cancel the task
// (A2A tasks outlive connections): CancelTask does.
import { deciderOf } from '../../http/auth.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../../errors.js';
import { requireAccess } from '../../http/auth.js';
import type { AppDeps, ZodApp } from '../../http/deps.js';
import { refTo, sseResponse } from '../../http/openapi.js';
import { SseChannel, streamOptions } from '../../http/sse.js';
import { TERMINAL_RUN_STATUSES, WAITING_RUN_STATUSES, type RunRecord } from '../../runtime/run-record.js';
import { ErrorResponse, HTTPValidationError, RunStreamErrorFrame } from '../../schemas/index.js';
import { agentIdOf, listedAgents } from '../agents.js';
import { approverOf, DeltaTap, followAfterDecision, startProtocolRun, waitAfterDecision } from '../run-calls.js';
import { lastEventCursor } from '../run-events.js';
import {
  A2A_PROTOCOL_VERSION,
  AgentCard,
  agentCardOf,
  ApprovalDecisionData,
  BudgetDecisionData,
  JsonRpcRequest,
  JsonRpcResponse,
  RESPONSE_ARTIFACT,
  responseArtifact,
  RPC,
  RpcError,
  SendMessageParams,
  taskOf,
  taskStatusOf,
  TaskIdParams,
} from './wire.js';

type RpcId = string | number | null;

/** Errors answered at the HTTP level (auth, overload), as every other route answers them; the rest are JSON-RPC errors. */
const HTTP_LEVEL = new Set([401, 403, 429, 503]);

export function a2aRoutes(app: ZodApp, deps: AppDeps): void {
  app.get(
    '/.well-known/agent-card.json',
    {
      schema: {
        operationId: 'getA2AAgentCard',
        tags: ['protocols'],
        summary: 'A2A agent card: the agents as skills, the JSON-RPC interface, the auth scheme',
        response: { 200: AgentCard },
      },
    },
    async (request) => {
      // Public (no key): the shared agents only.
      const agents = await listedAgents(deps);
      return agentCardOf({
        name: deps.runtime.agentName,
        description: agents[0].description,
        version: deps.version,
        url: `${baseUrlOf(deps, request)}/a2a`,
        auth: (deps.config.auth?.api_keys ?? []).length > 0,
        skills: agents,
      });
    },
  );

  app.post(
    '/a2a',
    {
      sse: { kind: 'manual', heartbeat: false },
      schema: {
        operationId: 'a2a',
        tags: ['protocols'],
        summary: 'A2A 1.0 JSON-RPC: SendMessage, SendStreamingMessage (SSE), GetTask, CancelTask',
        body: JsonRpcRequest,
        response: {
          200: {
            description: 'A JSON-RPC response (`result` or `error`); for SendStreamingMessage an SSE stream of them.',
            content: {
              'application/json': { schema: refTo(JsonRpcResponse) },
              ...(sseResponse('SendStreamingMessage', [
                {
                  event: 'message',
                  data: JsonRpcResponse,
                  description: 'A JSON-RPC response whose result is `{task}`, `{statusUpdate}` or `{artifactUpdate}`.',
                },
                { event: 'error', data: RunStreamErrorFrame, description: 'The reader fell too far behind (StreamOverflow); the task goes on.' },
              ]).content as Record<string, unknown>),
            },
          },
          422: HTTPValidationError,
          503: ErrorResponse,
        },
      },
    },
    async (request, reply) => {
      const { id = null, method, params } = request.body;
      const version = request.headers['a2a-version'];
      try {
        if (typeof version === 'string' && version !== '' && version !== A2A_PROTOCOL_VERSION)
          throw new RpcError(
            RPC.VERSION_NOT_SUPPORTED,
            `A2A-Version ${version} is not served; this server speaks ${A2A_PROTOCOL_VERSION}`,
            'AGT_ERR_VALIDATION',
          );
        switch (method) {
          case 'SendMessage':
            return rpcResult(id, { task: taskOf(await sendMessage(deps, request, parse(SendMessageParams, params), null)) });
          case 'SendStreamingMessage':
            return await streamMessage(deps, request, reply, id, parse(SendMessageParams, params));
          case 'GetTask':
            requireAccess(request, 'read', 'GetTask');
            return rpcResult(id, taskOf(await taskRun(deps, request, parse(TaskIdParams, params).id)));
          case 'CancelTask':
            return rpcResult(id, taskOf(await cancelTask(deps, request, parse(TaskIdParams, params).id)));
          case 'ListTasks':
          case 'SubscribeToTask':
          case 'GetExtendedAgentCard':
          case 'CreateTaskPushNotificationConfig':
          case 'GetTaskPushNotificationConfig':
          case 'ListTaskPushNotificationConfigs':
          case 'DeleteTaskPushNotificationConfig':
            throw new RpcError(RPC.UNSUPPORTED_OPERATION, `${method} is not served (docs/protocols/a2a.md)`, 'AGT_ERR_VALIDATION');
          default:
            throw new RpcError(RPC.METHOD_NOT_FOUND, `no method ${method}`, 'AGT_ERR_VALIDATION');
        }
      } catch (err) {
        return rpcError(id, err);
      }
    },
  );
}

/**
 * SendMessage's work: a message on an input-required task decides it and waits for the task to go
 * on; any other message starts a run. `onStarted` (streaming) is told the run as soon as it exists.
 */
async function sendMessage(
  deps: AppDeps,
  request: FastifyRequest,
  params: SendMessageParams,
  streaming: { onStarted(r: { run_id: string; session_id: string }): void; onDelta(text: string): void } | null,
): Promise<RunRecord> {
  const msg = params.message;
  if (msg.taskId) {
    const { run, after, tap } = await decideFromMessage(deps, request, params, streaming !== null);
    if (!streaming) return waitAfterDecision(deps, run.run_id);
    streaming.onStarted(run);
    // The resumed run's answer streams as its deltas come (or, resumed elsewhere, as its model calls land).
    return followAfterDecision(deps, run.run_id, after, (t) => streaming.onDelta(t), undefined, tap);
  }
  requireAccess(request, 'operate', 'start a task (SendMessage)');
  const query = msg.parts
    .map((p) => p.text ?? (p.data !== undefined ? JSON.stringify(p.data) : ''))
    .filter(Boolean)
    .join('\n');
  if (!query) throw invalidParams(['params', 'message', 'parts'], 'the message has no text or data part');
  const agent = params.metadata?.agent_id ?? msg.metadata?.agent_id;
  const started = await startProtocolRun(
    deps,
    request,
    'a2aSendMessage',
    // The call's params, not the JSON-RPC envelope: a retry comes with a new JSON-RPC id.
    { query, session_id: msg.contextId ?? null, agent_id: agentIdOf(typeof agent === 'string' ? agent : null), idempotency_body: params },
    streaming ? (t) => streaming.onDelta(t) : undefined,
  );
  streaming?.onStarted(started);
  if (params.configuration?.returnImmediately) return deps.runtime.runs.get(started.run_id, request.tenantScope);
  return started.settled;
}

/**
 * The decision a message on an input-required task carries, made; answers the run as it was and
 * the cursor of its last event before the decision (what a streamed answer follows after).
 */
async function decideFromMessage(
  deps: AppDeps,
  request: FastifyRequest,
  params: SendMessageParams,
  streaming: boolean,
): Promise<{ run: RunRecord; after: string | null; tap?: DeltaTap }> {
  const msg = params.message;
  const run = await taskRun(deps, request, msg.taskId!);
  if (msg.contextId && msg.contextId !== run.session_id)
    throw invalidParams(['params', 'message', 'contextId'], `task ${run.run_id} belongs to context ${run.session_id}`);
  if (!WAITING_RUN_STATUSES.has(run.status))
    throw new RpcError(RPC.UNSUPPORTED_OPERATION, `task ${run.run_id} is not waiting for input (${run.status})`, 'AGT_ERR_RUN_NOT_WAITING');
  requireAccess(request, 'decide', 'decide a task (SendMessage with a decision)');
  const at = msg.parts.findIndex((p) => p.data !== undefined);
  if (at < 0) throw invalidParams(['params', 'message', 'parts'], 'a message on an input-required task carries a data part {decision, ...}');
  const loc = ['params', 'message', 'parts', at, 'data'];
  const after = await lastEventCursor(deps, run.run_id);
  // The resumed run's text deltas, from before the decision so none is missed (a resume in this process).
  const tap = streaming ? new DeltaTap(deps, run.run_id) : undefined;
  try {
    await decide(deps, request, run, msg.parts[at].data, loc);
  } catch (err) {
    tap?.close();
    throw err;
  }
  return { run, after, tap };
}

/** The decision of a message's data part on the run it waits in. */
async function decide(deps: AppDeps, request: FastifyRequest, run: RunRecord, data: unknown, loc: Array<string | number>): Promise<void> {
  const approver = approverOf(request, 'a2a-client');
  if (run.status === 'awaiting_approval') {
    const d = parse(ApprovalDecisionData, data, loc);
    const pending = run.approvals.filter((a) => a.status === 'pending');
    const targets = d.approval_id ? [d.approval_id] : pending.map((a) => a.approval_id);
    for (const approvalId of targets)
      await deps.runtime.runs.decisions.decideApproval(
        run.run_id,
        approvalId,
        { decision: d.decision, approver, arguments: d.arguments ?? null, note: d.note ?? null },
        deciderOf(request),
      );
  } else {
    const d = parse(BudgetDecisionData, data, loc);
    await deps.runtime.runs.decisions.decideBudget(run.run_id, { decision: d.decision, approver, amount: d.amount ?? null, note: d.note ?? null });
  }
}

/** SendStreamingMessage: `{task}` first, the answer as artifact updates, the final status last. */
async function streamMessage(deps: AppDeps, request: FastifyRequest, reply: FastifyReply, id: RpcId, params: SendMessageParams): Promise<unknown> {
  let channel: SseChannel | null = null;
  let writing: Promise<void> | null = null;
  let streamed = false;
  const early: string[] = [];
  const frame = (result: unknown) => channel?.push({ event: 'message', data: { jsonrpc: '2.0', id, result } });
  const sendText = (text: string) => {
    frame({ artifactUpdate: { taskId: ids.run_id, contextId: ids.session_id, artifact: responseArtifact(text), append: streamed, lastChunk: false } });
    streamed = true;
  };
  const ids = { run_id: '', session_id: '' };
  let record: RunRecord;
  try {
    record = await sendMessage(deps, request, params, {
      onStarted: (r) => {
        ids.run_id = r.run_id;
        ids.session_id = r.session_id;
        channel = new SseChannel(reply, streamOptions(deps, { overflowContext: { run_id: r.run_id, session_id: r.session_id } }));
        frame({ task: { id: r.run_id, contextId: r.session_id, status: { state: 'TASK_STATE_WORKING', timestamp: new Date().toISOString() } } });
        for (const t of early.splice(0)) sendText(t);
        writing = channel.run();
      },
      onDelta: (text) => (channel ? sendText(text) : early.push(text)),
    });
  } catch (err) {
    if (!channel) throw err; // nothing streamed yet: a JSON-RPC error answer (the caller's catch)
    const ch: SseChannel = channel;
    let answer: unknown;
    try {
      answer = rpcError(id, err);
    } catch {
      // An error the HTTP layer would answer, after the stream opened: a JSON-RPC internal error instead.
      answer = { jsonrpc: '2.0', id, error: new RpcError(RPC.INTERNAL, 'the task could not be followed', 'AGT_ERR_INTERNAL').toJSON() };
    }
    ch.push({ event: 'message', data: answer });
    ch.close();
    await writing;
    return undefined;
  }
  const ch: SseChannel = channel!;
  if (record.status === 'completed' && record.response !== null && !streamed) sendText(record.response);
  if (streamed)
    frame({
      artifactUpdate: {
        taskId: record.run_id,
        contextId: record.session_id,
        artifact: { artifactId: RESPONSE_ARTIFACT, parts: [{ text: '' }] },
        append: true,
        lastChunk: true,
      },
    });
  frame({ statusUpdate: { taskId: record.run_id, contextId: record.session_id, status: taskStatusOf(record), metadata: taskOf(record).metadata } });
  ch.close();
  await writing;
  return undefined;
}

async function cancelTask(deps: AppDeps, request: FastifyRequest, runId: string): Promise<RunRecord> {
  requireAccess(request, 'operate', 'CancelTask');
  const run = await taskRun(deps, request, runId);
  if (TERMINAL_RUN_STATUSES.has(run.status)) throw new RpcError(RPC.TASK_NOT_CANCELABLE, `task ${runId} already ended (${run.status})`, 'AGT_ERR_RUN_ENDED');
  await deps.runtime.runs.cancel(runId);
  return waitAfterDecision(deps, runId);
}

/** The task (run) of the request's tenant: another tenant's answers as a task that does not exist. */
async function taskRun(deps: AppDeps, request: FastifyRequest, runId: string): Promise<RunRecord> {
  try {
    return await deps.runtime.runs.get(runId, request.tenantScope);
  } catch (err) {
    if (err instanceof AppError && err.status === 404) throw new RpcError(RPC.TASK_NOT_FOUND, `task ${runId} was not found`, err.domainCode);
    throw err;
  }
}

function parse<T>(
  schema: {
    safeParse(v: unknown): { success: true; data: T } | { success: false; error: { issues: Array<{ path: PropertyKey[]; message: string; code: string }> } };
  },
  value: unknown,
  loc: Array<string | number> = ['params'],
): T {
  const r = schema.safeParse(value ?? {});
  if (r.success) return r.data;
  const detail = r.error.issues.map((i) => ({ loc: [...loc, ...i.path.map((p) => (typeof p === 'number' ? p : String(p)))], msg: i.message, type: i.code }));
  throw new RpcError(RPC.INVALID_PARAMS, `invalid params: ${detail.map((d) => `${d.loc.join('.')}: ${d.msg}`).join('; ')}`, 'AGT_ERR_VALIDATION', detail);
}

function invalidParams(loc: Array<string | number>, msg: string): RpcError {
  return new RpcError(RPC.INVALID_PARAMS, msg, 'AGT_ERR_VALIDATION', [{ loc, msg, type: 'value_error' }]);
}

function rpcResult(id: RpcId, result: unknown) {
  return { jsonrpc: '2.0' as const, id, result };
}

/** An error as a JSON-RPC answer; auth and overload errors go up to the HTTP error handler instead. */
function rpcError(id: RpcId, err: unknown) {
  if (err instanceof RpcError) return { jsonrpc: '2.0' as const, id, error: err.toJSON() };
  if (err instanceof AppError && !HTTP_LEVEL.has(err.status)) {
    // Only a missing run is a missing task; a missing approval is a bad decision on a task that exists.
    const code =
      err.domainCode === 'AGT_ERR_RUN_NOT_FOUND'
        ? RPC.TASK_NOT_FOUND
        : err.status === 404 || err.status === 422
          ? RPC.INVALID_PARAMS
          : RPC.UNSUPPORTED_OPERATION;
    return { jsonrpc: '2.0' as const, id, error: new RpcError(code, err.message, err.domainCode).toJSON() };
  }
  throw err;
}

/** Where clients reach this service: `server.public_url`, else the scheme and Host the request came with. */
function baseUrlOf(deps: AppDeps, request: FastifyRequest): string {
  const configured = deps.config.server.public_url;
  if (configured) return configured.replace(/\/+$/, '');
  return `${request.protocol}://${request.host}`;
}
