// OpenAI-compatible chat (docs/protocols/openai.md): POST /v1/chat/completions runs an agent (the
// request's `model`) as POST /run/sync does and answers as Chat Completions, streamed or not;
// GET /v1/models lists the agents. A paused run answers with an assistant message saying what it
// waits for and the `agentd` object; a `role: "tool"` message whose tool_call_id is the approval id
// (or budget request id) decides it, in the same session, and the answer is the continued run's.
import { deciderOf } from '../../http/auth.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ChatMessage } from '../../agent/model/types.js';
import { domainError, HttpValidationFailure } from '../../errors.js';
import { requireAccess } from '../../http/auth.js';
import type { AppDeps, ZodApp } from '../../http/deps.js';
import { refTo, sseResponse } from '../../http/openapi.js';
import { SseChannel, streamOptions } from '../../http/sse.js';
import { responseStatusOf, type RunRecord } from '../../runtime/run-record.js';
import { ErrorResponse, HTTPValidationError, RunStreamErrorFrame } from '../../schemas/index.js';
import { swallow, isRefusal } from '../../telemetry/swallowed.js';
import { agentIdOf, listedAgents } from '../agents.js';
import { tenantOf } from '../../http/tenancy.js';
import type { TenantScope } from '../../runtime/tenancy.js';
import { approverOf, DeltaTap, followAfterDecision, pendingApprovalsOf, startProtocolRun, waitAfterDecision } from '../run-calls.js';
import { lastEventCursor } from '../run-events.js';
import { ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, ModelList, SessionHeaders, ToolMessageDecision, type ChatMessageIn } from './schemas.js';

const STREAM = sseResponse('With `stream: true`: `chat.completion.chunk` frames (`data:` lines), then `data: [DONE]`.', [
  {
    event: 'message',
    data: ChatCompletionChunk,
    description:
      'A chunk; the one with `finish_reason` carries `agentd`; with stream_options.include_usage one more has `usage` and no choices; the last frame is `data: [DONE]`.',
  },
  {
    event: 'error',
    data: RunStreamErrorFrame,
    description: 'Instead of the rest: the reader fell too far behind (StreamOverflow; the run goes on) or the run could not be followed.',
  },
]);

/** JSON without `stream`, SSE with it. */
const ANSWER = {
  ...STREAM,
  description: 'The answer: a `chat.completion` (JSON), or with `stream: true` its chunks (SSE).',
  content: { 'application/json': { schema: refTo(ChatCompletion) }, ...(STREAM.content as Record<string, unknown>) },
};

export function openaiRoutes(app: ZodApp, deps: AppDeps): void {
  app.get(
    '/v1/models',
    {
      schema: { operationId: 'listOpenAIModels', tags: ['protocols'], summary: 'OpenAI-compatible: the agents, as models', response: { 200: ModelList } },
    },
    async (request) => ({
      object: 'list' as const,
      data: (await listedAgents(deps, tenantOf(request))).map((a) => ({
        id: a.id,
        object: 'model' as const,
        created: a.created_at ? Math.floor(Date.parse(a.created_at) / 1000) : 0,
        owned_by: 'agentd',
      })),
    }),
  );

  app.post(
    '/v1/chat/completions',
    {
      sse: { kind: 'manual', heartbeat: false },
      schema: {
        operationId: 'createChatCompletion',
        tags: ['protocols'],
        summary: 'OpenAI-compatible chat: run the agent named by `model`; streamed with `stream: true`',
        headers: SessionHeaders,
        body: ChatCompletionRequest,
        response: { 200: ANSWER, 404: ErrorResponse, 409: ErrorResponse, 422: HTTPValidationError, 503: ErrorResponse },
      },
    },
    async (request, reply) => {
      const body = request.body;
      const sessionId = (request.headers['x-agentd-session-id'] as string | undefined) ?? null;
      if (sessionId) reply.header('x-agentd-session-id', sessionId);
      const last = body.messages[body.messages.length - 1];
      if (last.role === 'tool') return continueAfterDecision(deps, request, reply, body, sessionId, last);
      requireAccess(request, 'operate', 'start a run through /v1/chat/completions');
      if (last.role !== 'user')
        throw invalid(
          ['body', 'messages', body.messages.length - 1, 'role'],
          'the last message must be a user message (or a tool message deciding a paused run)',
        );
      const query = textOf(last.content);
      if (!query) throw invalid(['body', 'messages', body.messages.length - 1, 'content'], 'the last user message has no text');
      const run = {
        query,
        session_id: sessionId,
        agent_id: agentIdOf(body.model),
        // Without a session the request's messages are the conversation; with one, the server's history is.
        history: sessionId ? undefined : historyOf(body.messages.slice(0, -1)),
      };
      if (!body.stream) {
        const started = await startProtocolRun(deps, request, 'openaiChat', run);
        return completionOf(await started.settled, body.model);
      }
      let emit: ((text: string) => void) | null = null;
      const early: string[] = [];
      const started = await startProtocolRun(deps, request, 'openaiChat', run, (text) => (emit ? emit(text) : early.push(text)));
      const stream = new ChunkStream(deps, reply, body, started.run_id, started.session_id);
      stream.cancelOnClose(request);
      emit = (text) => stream.text(text);
      for (const t of early.splice(0)) stream.text(t);
      void started.settled.then(
        (r) => stream.finish(r),
        () => stream.fail(),
      );
      await stream.writing;
    },
  );
}

/** A request whose last message decides what a paused run of the session waits for. */
async function continueAfterDecision(
  deps: AppDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  body: ChatCompletionRequest,
  sessionId: string | null,
  last: ChatMessageIn,
): Promise<unknown> {
  const at = body.messages.length - 1;
  requireAccess(request, 'decide', 'decide a run through /v1/chat/completions');
  if (!sessionId)
    throw invalid(['header', 'x-agentd-session-id'], "a tool message decides a paused run of a session: send the paused answer's agentd.session_id");
  const id = last.tool_call_id;
  if (!id) throw invalid(['body', 'messages', at, 'tool_call_id'], 'the approval id (or budget request id) the message decides');
  let parsed: unknown;
  try {
    parsed = JSON.parse(textOf(last.content));
  } catch {
    parsed = null;
  }
  const decision = ToolMessageDecision.safeParse(parsed);
  if (!decision.success)
    throw invalid(
      ['body', 'messages', at, 'content'],
      'expected JSON {"decision":"approve"|"deny","arguments"?,"note"?} or {"decision":"grant"|"deny","amount"?,"note"?}',
    );
  const run = await pausedRunWith(deps, sessionId, id, request.tenantScope);
  const d = decision.data as {
    decision: 'approve' | 'deny' | 'grant';
    arguments?: Record<string, unknown> | null;
    amount?: number | null;
    note?: string | null;
  };
  const approver = approverOf(request, 'openai-client');
  // What a streamed answer follows after: the run's events from here on are the resumed segment's.
  const after = body.stream ? await lastEventCursor(deps, run.run_id) : null;
  if (run.status === 'awaiting_approval' && d.decision === 'grant')
    throw invalid(['body', 'messages', at, 'content', 'decision'], 'an approval is decided with approve or deny');
  if (run.status !== 'awaiting_approval' && d.decision === 'approve')
    throw invalid(['body', 'messages', at, 'content', 'decision'], 'a budget request is decided with grant or deny');
  // The resumed run's text deltas, from before the decision so none is missed (a resume in this process).
  const tap = body.stream ? new DeltaTap(deps, run.run_id) : undefined;
  try {
    if (run.status === 'awaiting_approval')
      await deps.runtime.runs.decisions.decideApproval(
        run.run_id,
        id,
        { decision: d.decision === 'approve' ? 'approve' : 'deny', approver, arguments: d.arguments ?? null, note: d.note ?? null },
        deciderOf(request),
      );
    else
      await deps.runtime.runs.decisions.decideBudget(run.run_id, {
        decision: d.decision === 'grant' ? 'grant' : 'deny',
        approver,
        amount: d.amount ?? null,
        note: d.note ?? null,
        request_id: id,
      });
  } catch (err) {
    tap?.close();
    throw err;
  }
  if (!body.stream) return completionOf(await waitAfterDecision(deps, run.run_id), body.model);
  const stream = new ChunkStream(deps, reply, body, run.run_id, run.session_id);
  const abort = new AbortController();
  request.raw.on('close', () => abort.abort());
  // The resumed run's answer streams as its deltas come (or, resumed elsewhere, as its model calls land).
  void followAfterDecision(deps, run.run_id, after, (text) => stream.text(text), abort.signal, tap).then(
    (r) => stream.finish(r),
    () => stream.fail(),
  );
  await stream.writing;
  return undefined;
}

/** The run of the session waiting for the approval (or budget request) `id`. */
async function pausedRunWith(deps: AppDeps, sessionId: string, id: string, scope: TenantScope): Promise<RunRecord> {
  let cursor: string | null = null;
  // Bounded: a session's runs, a page at a time (the paused one is found on the way).
  for (let page = 0; page < 100; page++) {
    // The session is the request's tenant's (another tenant's of that id is not read).
    const list: { runs: RunRecord[]; next_cursor: string | null } = await deps.runtime.runs.list({ session_id: sessionId, limit: 100, cursor }, scope);
    const hit = list.runs.find(
      (r) =>
        (r.status === 'awaiting_approval' && r.approvals.some((a) => a.approval_id === id)) ||
        (r.status === 'awaiting_budget' && r.budget_request?.request_id === id),
    );
    if (hit) return hit;
    if (!list.next_cursor) break;
    cursor = list.next_cursor;
  }
  throw domainError('AGT_ERR_RUN_NOT_WAITING', [`no run of session ${sessionId}`, `'${id}'`, 'not found']);
}

/** The chunks of one streamed answer, on an SSE channel bounded as every stream is. */
class ChunkStream {
  private readonly channel: SseChannel;
  private readonly id: string;
  private readonly created = Math.floor(Date.now() / 1000);
  private sentText = false;
  readonly writing: Promise<void>;

  constructor(
    private readonly deps: AppDeps,
    reply: FastifyReply,
    private readonly body: ChatCompletionRequest,
    private readonly runId: string,
    sessionId: string,
  ) {
    this.id = `chatcmpl-${runId}`;
    this.channel = new SseChannel(reply, streamOptions(deps, { overflowContext: { run_id: runId, session_id: sessionId } }));
    this.chunk({ role: 'assistant', content: '' }, null);
    this.writing = this.channel.run();
  }

  /** The client closing the stream cancels the run, as closing POST /run does (not with an Idempotency-Key: the client means to come back). */
  cancelOnClose(request: FastifyRequest): void {
    if (request.headers['idempotency-key'] !== undefined) return;
    this.channel.onClientClose(
      () =>
        void this.deps.runtime.runs.cancel(this.runId, { onlyIfLive: true }).catch(swallow('openai.cancel_on_client_close', { run_id: this.runId }, isRefusal)),
    );
  }

  text(text: string): void {
    this.sentText = true;
    this.chunk({ content: text }, null);
  }

  finish(r: RunRecord): void {
    // A run that streamed no text (a resumed run, a pause, an error) says it in one chunk.
    if (!this.sentText || r.status !== 'completed') {
      const said = contentOf(r, this.sentText);
      if (said) this.chunk({ content: said }, null);
    }
    this.channel.push({
      event: 'message',
      data: { ...this.base(), choices: [{ index: 0, delta: {}, finish_reason: finishReasonOf(r) }], agentd: agentdOf(r) },
    });
    if (this.body.stream_options?.include_usage) this.channel.push({ event: 'message', data: { ...this.base(), choices: [], usage: usageOf(r) } });
    this.channel.push({ event: 'message', data: null, raw: '[DONE]' });
    this.channel.close();
  }

  fail(): void {
    this.channel.push({ event: 'error', data: { error: 'InternalServerError', message: 'the run could not be followed', run_id: this.runId } });
    this.channel.close();
  }

  private base() {
    return { id: this.id, object: 'chat.completion.chunk' as const, created: this.created, model: this.body.model };
  }

  private chunk(delta: { role?: 'assistant'; content?: string }, finish: string | null): void {
    this.channel.push({ event: 'message', data: { ...this.base(), choices: [{ index: 0, delta, finish_reason: finish }] } });
  }
}

function completionOf(r: RunRecord, model: string) {
  return {
    id: `chatcmpl-${r.run_id}`,
    object: 'chat.completion' as const,
    created: Math.floor(Date.parse(r.created_at) / 1000),
    model,
    choices: [
      { index: 0, message: { role: 'assistant' as const, content: contentOf(r, false), refusal: null }, finish_reason: finishReasonOf(r), logprobs: null },
    ],
    usage: usageOf(r),
    agentd: agentdOf(r),
  };
}

/** The assistant's text for a run: its answer, or what it waits for, or how it ended. */
function contentOf(r: RunRecord, answerSent: boolean): string {
  switch (r.status) {
    case 'completed':
      return answerSent ? '' : (r.response ?? '');
    case 'awaiting_approval': {
      const calls = pendingApprovalsOf(r).map((a) => `${a.tool_name} ${JSON.stringify(a.arguments)} (approval ${a.approval_id})`);
      return `This run is waiting for approval of ${calls.join(', ')}. Decide with a tool message whose tool_call_id is the approval id and whose content is {"decision":"approve"} or {"decision":"deny","note":"..."}, in session ${r.session_id}.`;
    }
    case 'awaiting_budget': {
      const b = r.budget_request;
      return `This run is waiting for more budget (${b?.scope ?? ''} ${b?.meter ?? ''}, request ${b?.request_id ?? ''}). Decide with a tool message whose tool_call_id is the request id and whose content is {"decision":"grant"} or {"decision":"deny"}, in session ${r.session_id}.`;
    }
    case 'cancelled':
      return 'The run was cancelled.';
    case 'running':
      return `The run is still going on: follow it at GET /runs/${r.run_id}.`;
    default:
      return r.response ?? `The run ended with ${responseStatusOf(r.status)}${r.error ? `: ${r.error.message}` : ''}.`;
  }
}

function finishReasonOf(r: RunRecord): 'stop' | 'length' | 'content_filter' {
  if (r.termination_reason === 'max_steps') return 'length';
  if (r.termination_reason === 'guardrail') return 'content_filter';
  return 'stop';
}

function usageOf(r: RunRecord) {
  return { prompt_tokens: r.usage.request_tokens, completion_tokens: r.usage.response_tokens, total_tokens: r.usage.total_tokens };
}

function agentdOf(r: RunRecord) {
  return {
    run_id: r.run_id,
    session_id: r.session_id,
    status: responseStatusOf(r.status),
    trace_id: r.trace_id,
    approvals: pendingApprovalsOf(r).map((a) => ({ approval_id: a.approval_id, tool_name: a.tool_name, arguments: a.arguments })),
    budget_request: r.status === 'awaiting_budget' ? (r.budget_request as unknown as Record<string, unknown>) : null,
  };
}

function textOf(content: ChatMessageIn['content']): string {
  if (typeof content === 'string') return content;
  if (!content) return '';
  return content
    .filter((p): p is { type: 'text'; text: string } => p.type === 'text' && typeof (p as { text?: unknown }).text === 'string')
    .map((p) => p.text)
    .join('\n');
}

/** The request's earlier messages as the run's conversation: text only (tool traffic of another agent means nothing to this one). */
function historyOf(messages: ChatMessageIn[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (const m of messages) {
    const content = textOf(m.content);
    if (!content) continue;
    if (m.role === 'system' || m.role === 'developer') out.push({ role: 'system', content });
    else if (m.role === 'user' || m.role === 'assistant') out.push({ role: m.role, content });
  }
  return out;
}

function invalid(loc: Array<string | number>, msg: string): HttpValidationFailure {
  return new HttpValidationFailure([{ loc, msg, type: 'value_error' }]);
}
