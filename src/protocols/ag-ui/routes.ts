// AG-UI 1.0 over agentd runs: POST /ag-ui takes the RunAgentInput `@ag-ui/client`'s HttpAgent
// sends and answers its event stream. The thread is the agentd session, whose history the server
// keeps: a new run reads only the newest user message. An approval or a budget pause ends the
// stream with an interrupt outcome; the next input on the thread answers it in `resume`, which
// decides and continues the same agentd run (under the client's new runId).
import { flowOfHeaders } from '../flow-headers.js';
import { deciderOf } from '../../http/auth.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { BaseEvent } from '@ag-ui/core';
import { newId } from '../../ids.js';
import { domainError, HttpValidationFailure } from '../../errors.js';
import type { RunRecord } from '../../runtime/run-record.js';
import { AgUiEvent, AgUiRunAgentInput, ErrorResponse, HTTPValidationError } from '../../schemas/index.js';
import { swallow, isRefusal } from '../../telemetry/swallowed.js';
import type { AppDeps, ZodApp } from '../../http/deps.js';
import { requireAccess } from '../../http/auth.js';
import { dataStreamResponse } from '../../http/openapi.js';
import { SseChannel, streamOptions, type SseFrame } from '../../http/sse.js';
import { IdempotencyHeaders, idempotencyRequestOf, runExists } from '../../http/idempotent.js';
import { tenantOf } from '../../http/tenancy.js';
import { followOnChannel, lastEventCursor, lastRunOfSession, startRunItems, type StartedRunItems } from '../run-events.js';
import { AgUiEvents } from './events.js';
import { redact } from '../../telemetry/redact.js';
import { redactorForConfig } from '../../telemetry/secrets.js';

const ROUTE = 'POST /ag-ui';

const EVENT_STREAM = dataStreamResponse(
  'An AG-UI event stream: RUN_STARTED, CUSTOM `agentd.run`, steps, text messages, tool calls, then RUN_FINISHED (outcome success, interrupt or cancelled) or RUN_ERROR.',
  AgUiEvent,
);

const frame = (event: BaseEvent): SseFrame => ({ event: '', data: event });
const isTerminal = (e: BaseEvent) => e.type === 'RUN_FINISHED' || e.type === 'RUN_ERROR';

/** The text of the newest user message (a string, or its text parts). */
function queryOf(input: AgUiRunAgentInput): string {
  const i = input.messages.findLastIndex((m) => m.role === 'user');
  const content = i >= 0 ? input.messages[i].content : undefined;
  const text =
    typeof content === 'string'
      ? content
      : Array.isArray(content)
        ? content
            .flatMap((p) => (p && typeof p === 'object' && (p as { type?: unknown }).type === 'text' ? [String((p as { text?: unknown }).text ?? '')] : []))
            .join('\n')
        : '';
  if (!text.trim())
    throw new HttpValidationFailure([
      { loc: ['body', 'messages'], msg: 'a new run needs a user message with text (or `resume` answering an interrupt)', type: 'value_error' },
    ]);
  return text;
}

/** `state` or `forwardedProps` larger than this as JSON is not recorded on the run. */
const RECORDED_MAX_BYTES = 4096;

/**
 * What a new run takes from the input besides its query: `context` as one text the model sees
 * before the query (for this run only), and `state` / `forwardedProps` in the run's metadata when
 * small and not empty (redacted as stored values are). `tools` stay unused (docs/protocols/ag-ui.md).
 */
function extrasOf(deps: AppDeps, input: AgUiRunAgentInput): { context?: string; metadata?: Record<string, unknown> } {
  const out: { context?: string; metadata?: Record<string, unknown> } = {};
  const items = (input.context ?? []).filter((c) => c.value.trim() || c.description.trim());
  if (items.length) out.context = ['Context from the application:', ...items.map((c) => `- ${c.description}: ${c.value}`)].join('\n');
  const recorded = (v: unknown): boolean => {
    if (v === undefined || v === null) return false;
    const json = JSON.stringify(v);
    return json !== '{}' && json !== '[]' && Buffer.byteLength(json) <= RECORDED_MAX_BYTES;
  };
  const redactor = redactorForConfig(deps.config);
  const metadata: Record<string, unknown> = {};
  if (recorded(input.state)) metadata.ag_ui_state = redact(input.state, redactor);
  if (recorded(input.forwardedProps)) metadata.ag_ui_forwarded_props = redact(input.forwardedProps, redactor);
  if (Object.keys(metadata).length) out.metadata = metadata;
  return out;
}

export function agUiRoutes(app: ZodApp, deps: AppDeps): void {
  app.post(
    '/ag-ui',
    {
      sse: { kind: 'manual', heartbeat: false },
      schema: {
        operationId: 'agUiRun',
        tags: ['protocols'],
        summary: 'AG-UI: run the agent (or resume its interrupt) and stream AG-UI events',
        headers: IdempotencyHeaders,
        body: AgUiRunAgentInput,
        response: { 200: EVENT_STREAM, 403: ErrorResponse, 404: ErrorResponse, 409: ErrorResponse, 422: HTTPValidationError, 503: ErrorResponse },
      },
    },
    async (request, reply) => {
      const input = request.body;
      if (input.resume && input.resume.length > 0) {
        requireAccess(request, 'decide', ROUTE);
        return resumeRun(deps, request, reply, input);
      }
      requireAccess(request, 'operate', ROUTE);
      const query = queryOf(input);
      const extras = extrasOf(deps, input);
      const flow = flowOfHeaders(request); // X-Agentd-Concurrency-Key and friends
      // With an Idempotency-Key, a retry (same key, same body) gets the first request's run again,
      // replayed from its start; leaving such a stream never cancels (the client means to come back).
      const idem = idempotencyRequestOf(request, 'agUiRun');
      let started: StartedRunItems;
      if (idem) {
        const once = await deps.runtime.idempotency.startOnce(
          idem,
          () => newId('run'),
          (id) => runExists(deps, id),
          (run_id) => startRunItems(deps, { query, session_id: input.threadId, run_id, tenant: tenantOf(request), ...extras, ...flow }),
        );
        if (!once.fresh)
          return followToReply(deps, reply, input, await deps.runtime.runs.get(once.target_id), { after: null, settledAfterTrace: null, cancelOnClose: false });
        started = once.started;
      } else started = await startRunItems(deps, { query, session_id: input.threadId, tenant: tenantOf(request), ...extras, ...flow });
      const ch = new SseChannel(reply, streamOptions(deps, { overflowContext: { run_id: started.run_id, session_id: started.session_id } }));
      const ag = new AgUiEvents(input.threadId, input.runId, newId('msg'));
      for (const e of ag.start(started)) ch.push(frame(e));
      started.open((item) => {
        const delta = item.kind === 'delta' ? ag.deltaFrame(item.text) : null;
        if (delta) return void ch.push(delta);
        for (const e of ag.item(item)) {
          ch.push(frame(e));
          if (isTerminal(e)) ch.close();
        }
      });
      ch.onDropped(() => started.detach());
      // HttpAgent's abortRun closes the stream: the run is cancelled, as with POST /run.
      ch.onClientClose(() => {
        started.detach();
        if (idem) return;
        void deps.runtime.runs
          .cancel(started.run_id, { onlyIfLive: true })
          .catch(swallow('ag_ui.cancel_on_client_close', { run_id: started.run_id }, isRefusal));
      });
      await ch.run();
    },
  );
}

/** `resume` answers the interrupts of the thread's paused run: each becomes its decision, then the run streams on. */
async function resumeRun(deps: AppDeps, request: FastifyRequest, reply: FastifyReply, input: AgUiRunAgentInput): Promise<void> {
  const entries = input.resume!;
  const ids = new Set(entries.map((e) => e.interruptId));
  const waitsFor = (r: RunRecord) =>
    (r.status === 'awaiting_approval' && r.approvals.some((a) => a.status === 'pending' && ids.has(a.approval_id))) ||
    (r.status === 'awaiting_budget' && r.budget_request?.status === 'pending' && ids.has(r.budget_request.request_id));
  // The thread is a session of the request's tenant: another tenant's paused run is not found.
  const run = await lastRunOfSession(deps, input.threadId, waitsFor, tenantOf(request));
  if (!run) throw domainError('AGT_ERR_APPROVAL_NOT_FOUND', ['interrupt', [...ids][0]]);
  const after = await lastEventCursor(deps, run.run_id);
  const approver = request.apiKeyName ?? 'ag-ui';
  const { runs } = deps.runtime;
  let answered = 0;
  let open = 0;
  if (run.status === 'awaiting_approval') {
    for (const a of run.approvals.filter((x) => x.status === 'pending')) {
      const entry = entries.find((e) => e.interruptId === a.approval_id);
      if (!entry) {
        open++;
        continue;
      }
      const p = entry.payload;
      if (entry.status === 'resolved' && p?.decision === 'grant') throw badDecision(entries.indexOf(entry), 'an approval is answered with approve or deny');
      // A cancelled interrupt is a denial: the tool does not run, the run goes on.
      const approve = entry.status === 'resolved' && p?.decision === 'approve';
      await runs.decisions.decideApproval(
        run.run_id,
        a.approval_id,
        {
          decision: approve ? 'approve' : 'deny',
          approver,
          arguments: approve ? (p?.arguments ?? null) : null,
          note: p?.note ?? (entry.status === 'cancelled' ? 'cancelled by the client' : null),
        },
        deciderOf(request),
      );
      answered++;
    }
  } else {
    const req = run.budget_request!;
    const i = entries.findIndex((e) => e.interruptId === req.request_id);
    const entry = entries[i];
    const p = entry.payload;
    if (entry.status === 'resolved' && p?.decision === 'approve') throw badDecision(i, 'a budget is answered with grant or deny');
    const grant = entry.status === 'resolved' && p?.decision === 'grant';
    await runs.decisions.decideBudget(run.run_id, {
      decision: grant ? 'grant' : 'deny',
      approver,
      amount: grant ? (p?.amount ?? null) : null,
      note: p?.note ?? (entry.status === 'cancelled' ? 'cancelled by the client' : null),
      request_id: req.request_id,
    });
    answered++;
  }
  // Approvals left unanswered: the run does not resume yet, and the stream ends with them.
  const settledAfterTrace = answered > 0 && open === 0 ? run.trace_id : null;
  await followToReply(deps, reply, input, run, { after, settledAfterTrace, cancelOnClose: true });
}

/** A stored run (on any instance) as AG-UI events, from `after`, until it settles. */
async function followToReply(
  deps: AppDeps,
  reply: FastifyReply,
  input: AgUiRunAgentInput,
  run: RunRecord,
  opts: { after: string | null; settledAfterTrace: string | null; cancelOnClose: boolean },
): Promise<void> {
  const ch = new SseChannel(reply, streamOptions(deps, { overflowContext: { run_id: run.run_id, session_id: run.session_id } }));
  const ag = new AgUiEvents(input.threadId, input.runId, newId('msg'));
  await followOnChannel(deps, ch, run, {
    protocol: 'ag_ui',
    first: ag.start(run).map(frame),
    framesOf: (item) => ag.item(item).map(frame),
    cancelOnClose: opts.cancelOnClose,
    after: opts.after,
    settledAfterTrace: opts.settledAfterTrace,
  });
}

function badDecision(index: number, msg: string): HttpValidationFailure {
  return new HttpValidationFailure([{ loc: ['body', 'resume', index, 'payload', 'decision'], msg, type: 'value_error' }]);
}
