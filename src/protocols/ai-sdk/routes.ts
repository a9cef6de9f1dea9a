// The AI SDK's chat transport (`useChat` with DefaultChatTransport, `ai` 6) over agentd runs:
// POST /ai-sdk/chat starts a run (or answers its approvals) and streams it as a UI message
// stream; GET /ai-sdk/chat/{id}/stream is the transport's reconnect. The chat id is the agentd
// session, whose history the server keeps: only the newest message of the request is read.
import { flowOfHeaders } from '../flow-headers.js';
import { deciderOf } from '../../http/auth.js';
import { isDeepStrictEqual } from 'node:util';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { newId } from '../../ids.js';
import { domainError, HttpValidationFailure } from '../../errors.js';
import { WAITING_RUN_STATUSES, type RunRecord } from '../../runtime/run-record.js';
import { AiSdkChatParams, AiSdkChatRequest, AiSdkUiMessageChunk, ErrorResponse, HTTPValidationError, type UiMessagePart } from '../../schemas/index.js';
import { swallow, isRefusal } from '../../telemetry/swallowed.js';
import type { AppDeps, ZodApp } from '../../http/deps.js';
import { requireAccess } from '../../http/auth.js';
import { dataStreamResponse } from '../../http/openapi.js';
import { SseChannel, streamOptions, type SseFrame } from '../../http/sse.js';
import { IdempotencyHeaders, idempotencyRequestOf, runExists } from '../../http/idempotent.js';
import { tenantOf } from '../../http/tenancy.js';
import { followOnChannel, lastEventCursor, lastRunOfSession, startRunItems, type StartedRunItems, type StartRunInput } from '../run-events.js';
import { UiMessageChunks, type UiChunk } from './ui-stream.js';

const ROUTE = 'POST /ai-sdk/chat';

const UI_STREAM = dataStreamResponse(
  'A UI message stream (header `x-vercel-ai-ui-message-stream: v1`), as `useChat` reads it.',
  AiSdkUiMessageChunk,
  'The last frame is `data: [DONE]`.',
);

const frame = (chunk: UiChunk): SseFrame => ({ event: '', data: chunk });
const DONE: SseFrame = { event: '', data: null, raw: '[DONE]' };

/** An approval answered in the UI message (`addToolApprovalResponse`): a tool part in state `approval-responded`. */
interface ApprovalAnswer {
  approvalId: string;
  approved: boolean;
  reason: string | null;
  input: unknown;
}

function approvalAnswersOf(parts: UiMessagePart[]): ApprovalAnswer[] {
  const answers: ApprovalAnswer[] = [];
  for (const p of parts) {
    if ((p.type !== 'dynamic-tool' && !p.type.startsWith('tool-')) || p.state !== 'approval-responded' || !p.approval) continue;
    answers.push({ approvalId: p.approval.id, approved: p.approval.approved === true, reason: p.approval.reason ?? null, input: p.input });
  }
  return answers;
}

function queryOf(body: AiSdkChatRequest): string {
  const last = body.messages[body.messages.length - 1];
  const text = last.role === 'user' ? last.parts.flatMap((p) => (p.type === 'text' && typeof p.text === 'string' ? [p.text] : [])).join('\n') : '';
  if (!text.trim())
    throw new HttpValidationFailure([
      {
        loc: ['body', 'messages', body.messages.length - 1],
        msg: 'the newest message must be a user message with text (or an assistant message answering approvals)',
        type: 'value_error',
      },
    ]);
  return text;
}

export function aiSdkRoutes(app: ZodApp, deps: AppDeps): void {
  const { runs } = deps.runtime;

  app.post(
    '/ai-sdk/chat',
    {
      sse: { kind: 'manual', heartbeat: false },
      schema: {
        operationId: 'aiSdkChat',
        tags: ['protocols'],
        summary: 'AI SDK chat (useChat): start a run, or answer its approvals, and stream it as a UI message stream',
        headers: IdempotencyHeaders,
        body: AiSdkChatRequest,
        response: { 200: UI_STREAM, 403: ErrorResponse, 404: ErrorResponse, 409: ErrorResponse, 422: HTTPValidationError, 503: ErrorResponse },
      },
    },
    async (request, reply) => {
      const body = request.body;
      const session_id = body.id;
      const last = body.messages[body.messages.length - 1];
      const answers = body.trigger === 'submit-message' && last.role === 'assistant' ? approvalAnswersOf(last.parts) : [];
      if (answers.length > 0) {
        requireAccess(request, 'decide', ROUTE);
        return answerApprovals(deps, request, reply, session_id, last.id, answers);
      }
      requireAccess(request, 'operate', ROUTE);
      const tenant = tenantOf(request);
      const base: StartRunInput = { query: '', session_id, agent_id: body.agent_id ?? null, tenant, ...flowOfHeaders(request) };
      const query = body.trigger === 'regenerate-message' ? null : queryOf(body);
      /** The run's input; for a regenerated answer, the session's last turn again, its answer taken out of the history. */
      const begin = async (run_id?: string) => {
        if (query !== null) return startRunItems(deps, { ...base, query, run_id });
        const previous = await lastRunOfSession(deps, session_id, () => true, tenant);
        if (!previous) throw domainError('AGT_ERR_SESSION_NOT_FOUND', ['session', session_id]);
        if (WAITING_RUN_STATUSES.has(previous.status))
          await runs.cancel(previous.run_id).catch(swallow('ai_sdk.regenerate_cancel', { run_id: previous.run_id }, isRefusal));
        return startRunItems(deps, { ...base, query: previous.query, session_policy: 'rollback', replaces_run_id: previous.run_id, run_id });
      };
      // With an Idempotency-Key, a retry (same key, same body) gets the first request's run again,
      // replayed from its start; leaving such a stream never cancels (the client means to come back).
      const idem = idempotencyRequestOf(request, 'aiSdkChat');
      let started: StartedRunItems;
      if (idem) {
        const once = await deps.runtime.idempotency.startOnce(
          idem,
          () => newId('run'),
          (id) => runExists(deps, id),
          (run_id) => begin(run_id),
        );
        if (!once.fresh) {
          const first = await runs.get(once.target_id);
          return followToReply(deps, reply, first, first.run_id, { after: null, settledAfterTrace: null, cancelOnClose: false });
        }
        started = once.started;
      } else started = await begin();
      const cancelOnClose = !deps.config.server.protocols.ai_sdk.resumable && !idem;
      reply.header('x-vercel-ai-ui-message-stream', 'v1');
      const ch = new SseChannel(reply, streamOptions(deps, { overflowContext: { run_id: started.run_id, session_id: started.session_id } }));
      const ui = new UiMessageChunks({ run_id: started.run_id, session_id: started.session_id, trace_id: started.trace_id }, newId('msg'));
      ch.push(frame(ui.start(started.run_id)));
      started.open((item) => {
        const delta = item.kind === 'delta' ? ui.deltaFrame(item.text) : null;
        if (delta) return void ch.push(delta);
        for (const c of ui.item(item)) ch.push(frame(c));
        if (item.kind === 'settled' || item.kind === 'failed') {
          ch.push(DONE);
          ch.close();
        }
      });
      ch.onDropped(() => started.detach());
      ch.onClientClose(() => {
        started.detach();
        // Resumable (the default): the run goes on, GET /ai-sdk/chat/{id}/stream picks it up again.
        if (cancelOnClose)
          void runs.cancel(started.run_id, { onlyIfLive: true }).catch(swallow('ai_sdk.cancel_on_client_close', { run_id: started.run_id }, isRefusal));
      });
      await ch.run();
    },
  );

  app.get(
    '/ai-sdk/chat/:id/stream',
    {
      sse: { kind: 'manual', heartbeat: false },
      schema: {
        operationId: 'aiSdkChatStream',
        tags: ['protocols'],
        summary: "AI SDK chat reconnect: the session's live run replayed from its start, then followed; 204 when none is live",
        params: AiSdkChatParams,
        response: { 200: UI_STREAM, 204: { description: 'The session has no run in flight.', type: 'null' }, 422: HTTPValidationError },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const live = await lastRunOfSession(deps, id, (r) => r.status === 'running', tenantOf(request));
      if (!live) return reply.code(204).send();
      await followToReply(deps, reply, live, live.run_id, { after: null, settledAfterTrace: null });
    },
  );
}

/**
 * The newest message answers approvals: each pending one is decided (the approver is the key's
 * name), then the resumed run streams in this response, as a continuation of that message.
 */
async function answerApprovals(
  deps: AppDeps,
  request: FastifyRequest,
  reply: FastifyReply,
  sessionId: string,
  messageId: string,
  answers: ApprovalAnswer[],
): Promise<void> {
  const ids = new Set(answers.map((a) => a.approvalId));
  // Earlier rounds' answers stay in the message: the run is the one still waiting for one of these.
  const run = await lastRunOfSession(
    deps,
    sessionId,
    (r) => r.status === 'awaiting_approval' && r.approvals.some((a) => a.status === 'pending' && ids.has(a.approval_id)),
    tenantOf(request),
  );
  if (!run) {
    const known = await lastRunOfSession(deps, sessionId, (r) => r.approvals.some((a) => ids.has(a.approval_id)), tenantOf(request));
    const approval = known?.approvals.find((a) => ids.has(a.approval_id));
    if (known && approval) throw domainError('AGT_ERR_APPROVAL_ALREADY_DECIDED', [approval.approval_id, approval.status], { detail: approval.status });
    throw domainError('AGT_ERR_APPROVAL_NOT_FOUND', ['approval', [...ids][0]]);
  }
  const after = await lastEventCursor(deps, run.run_id);
  const approver = request.apiKeyName ?? 'ai-sdk';
  const pending = run.approvals.filter((a) => a.status === 'pending');
  for (const a of pending) {
    const answer = answers.find((x) => x.approvalId === a.approval_id);
    if (!answer) continue;
    // Edited arguments: the client changed the tool part's input before approving it.
    const edited = answer.approved && answer.input !== undefined && !isDeepStrictEqual(answer.input, a.arguments) ? answer.input : null;
    await deps.runtime.runs.decisions.decideApproval(
      run.run_id,
      a.approval_id,
      {
        decision: answer.approved ? 'approve' : 'deny',
        approver,
        arguments: edited as Record<string, unknown> | null,
        note: answer.reason,
      },
      deciderOf(request),
    );
  }
  const allAnswered = pending.every((a) => ids.has(a.approval_id));
  // Some approvals still open: the run does not resume yet; the stream says which are left.
  await followToReply(deps, reply, run, messageId, { after, settledAfterTrace: allAnswered ? run.trace_id : null });
}

/** A stored run (on any instance) as a UI message stream, from `after`, until it settles. */
async function followToReply(
  deps: AppDeps,
  reply: FastifyReply,
  run: RunRecord,
  messageId: string,
  opts: { after: string | null; settledAfterTrace: string | null; cancelOnClose?: boolean },
): Promise<void> {
  const cancelOnClose = opts.cancelOnClose ?? !deps.config.server.protocols.ai_sdk.resumable;
  reply.header('x-vercel-ai-ui-message-stream', 'v1');
  const ch = new SseChannel(reply, streamOptions(deps, { overflowContext: { run_id: run.run_id, session_id: run.session_id } }));
  const ui = new UiMessageChunks({ run_id: run.run_id, session_id: run.session_id, trace_id: run.trace_id }, newId('msg'));
  await followOnChannel(deps, ch, run, {
    protocol: 'ai_sdk',
    first: [frame(ui.start(messageId))],
    framesOf: (item) => ui.item(item).map(frame),
    last: DONE,
    cancelOnClose,
    after: opts.after,
    settledAfterTrace: opts.settledAfterTrace,
  });
}
