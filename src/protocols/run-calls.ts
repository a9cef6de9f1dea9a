// What the request/answer protocol adapters (A2A, MCP, OpenAI-compatible) do with the run service
// (the streamed chat protocols follow a run as items instead: run-events.ts): start one
// run exactly as POST /run/sync does (Idempotency-Key, governance, budgets, webhooks and traces are
// the run's), and wait for a run a person's decision let go on. The adapters own no run state: a
// run is read back from the store by its id whenever a protocol asks about it.
import { flowOfHeaders } from './flow-headers.js';
import type { FastifyRequest } from 'fastify';
import type { ChatMessage } from '../agent/model/types.js';
import { domainError } from '../errors.js';
import type { AppDeps } from '../http/deps.js';
import { idempotencyRequestOf, runExists, waitRunSettled } from '../http/idempotent.js';
import { newId } from '../ids.js';
import { tenantOf } from '../http/tenancy.js';
import { TERMINAL_RUN_STATUSES, WAITING_RUN_STATUSES, type RunRecord } from '../runtime/run-record.js';
import { repos } from '../store/repos/index.js';
import type { StoredEvent } from '../store/store.js';
import { swallow } from '../telemetry/swallowed.js';

export interface ProtocolRunRequest {
  query: string;
  session_id?: string | null;
  agent_id?: string | null;
  /** The conversation before the query (only without a session: StartOptions.history). */
  history?: ChatMessage[];
  /**
   * What an Idempotency-Key's retry must repeat, when not the whole request body: the JSON-RPC
   * bindings (A2A, MCP) pass the call's parameters, so a retry under a new JSON-RPC `id` replays.
   */
  idempotency_body?: unknown;
}

export interface ProtocolRun {
  run_id: string;
  session_id: string;
  /** The run once it ended or waits for a person (or, past the wait budget of a retried key, as it is). */
  settled: Promise<RunRecord>;
}

/**
 * Starts a run for a protocol request. `operation` scopes an Idempotency-Key (a retry with the same
 * key and body gets the first request's run, never a second one). `onDelta` receives the live
 * answer text of a run started here (a keyed retry's run streams none).
 */
export async function startProtocolRun(
  deps: AppDeps,
  request: FastifyRequest,
  operation: string,
  run: ProtocolRunRequest,
  onDelta?: (text: string) => void,
): Promise<ProtocolRun> {
  const runs = deps.runtime.runs;
  const flow = flowOfHeaders(request); // X-Agentd-Concurrency-Key and friends (flow-headers.ts)
  const begin = (run_id: string, isNew = false) =>
    runs.start(run.query, run.session_id ?? null, {
      run_id,
      run_id_is_new: isNew,
      ...(run.agent_id ? { agent_id: run.agent_id } : {}),
      ...(run.history && !run.session_id ? { history: run.history } : {}),
      ...(onDelta ? { onDelta: (text: string) => onDelta(text) } : {}),
      ...flow,
      // The tenant the request acts in: the run, its session and its agent are the tenant's.
      ...(tenantOf(request) ? { tenant: tenantOf(request) } : {}),
    });
  const idem = idempotencyRequestOf(request, operation, 'idempotency_body' in run ? run.idempotency_body : request.body);
  if (!idem) {
    const started = await begin(newId('run'), true);
    return { run_id: started.run_id, session_id: started.session_id, settled: started.settled };
  }
  const once = await deps.runtime.idempotency.startOnce(
    idem,
    () => newId('run'),
    (id) => runExists(deps, id),
    begin,
  );
  if (once.fresh) return { run_id: once.started.run_id, session_id: once.started.session_id, settled: once.started.settled };
  const first = await repos(deps.store).runs.get<RunRecord>(once.target_id);
  if (!first) throw domainError('AGT_ERR_RUN_TIMEOUT', [once.target_id, once.target_id]);
  const settled = waitRunSettled(deps, once.target_id).then((r) => r ?? first.value);
  return { run_id: once.target_id, session_id: first.value.session_id, settled };
}

/** The run has nothing left to do before someone acts: ended, or waiting with no decision taken yet. */
function restsAfterDecision(r: RunRecord): boolean {
  return TERMINAL_RUN_STATUSES.has(r.status) || r.status === 'interrupted' || (WAITING_RUN_STATUSES.has(r.status) && r.decided_at === null);
}

/**
 * Waits for a run that a decision just let go on (approval, budget, cancel): until it ends or waits
 * for a person again, bounded by server.request_timeout_seconds (then the record as it is). A
 * decided run still reads `awaiting_*` until its resume claims it, so "not running" is not enough.
 * Wakes on the run's events and settles and re-reads the record at least every second (the resume
 * may happen in another instance).
 */
export async function waitAfterDecision(deps: AppDeps, runId: string, signal?: AbortSignal): Promise<RunRecord> {
  const deadline = Date.now() + deps.config.server.request_timeout_seconds * 1000;
  let wake: (() => void) | null = null;
  const unsubscribe = deps.runtime.bus.subscribe({ run_id: runId }, () => wake?.());
  const offSettled = deps.runtime.runs.onSettled((r) => {
    if (r.run_id === runId) wake?.();
  });
  const onAbort = () => wake?.();
  signal?.addEventListener('abort', onAbort);
  try {
    for (;;) {
      const rec = await deps.runtime.runs.get(runId);
      if (restsAfterDecision(rec) || Date.now() > deadline || signal?.aborted) return rec;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 1000);
        wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      wake = null;
    }
  } finally {
    unsubscribe();
    offSettled();
    signal?.removeEventListener('abort', onAbort);
  }
}

/** Live text a DeltaTap holds for its reader at most (then the model calls' text comes whole from their events). */
const TAP_MAX_CHARS = 1_000_000;

/**
 * A run's live text deltas in this process (RunService.followDeltas), opened before a decision so
 * the resumed run's first deltas are not missed, and held until followAfterDecision reads them.
 * Bounded: past TAP_MAX_CHARS held, it stops (the answer then comes whole from the events).
 */
export class DeltaTap {
  private held: Array<{ text: string; after: number }> | null = [];
  private heldChars = 0;
  private sink: ((text: string, after: number) => void) | null = null;
  private readonly off: () => void;

  constructor(deps: AppDeps, runId: string) {
    this.off = deps.runtime.runs.followDeltas(runId, (text, _seq, after) => {
      if (this.sink) return this.sink(text, after);
      if (!this.held) return;
      this.heldChars += text.length;
      if (this.heldChars > TAP_MAX_CHARS) {
        this.held = null;
        this.off();
      } else this.held.push({ text, after });
    });
  }

  /** Deltas go to `sink` from now on, those held first; false when the tap overflowed (nothing goes). */
  open(sink: (text: string, after: number) => void): boolean {
    if (!this.held) return false;
    for (const d of this.held) sink(d.text, d.after);
    this.held = [];
    this.sink = sink;
    return true;
  }

  close(): void {
    this.off();
    this.held = null;
    this.sink = null;
  }
}

/**
 * waitAfterDecision for a streamed answer: meanwhile `onText` gets the resumed run's text. With a
 * `tap` opened before the decision and the resume running in this process, that is its live
 * deltas as the model streams them; a model call whose deltas did not come here (the resume ran on
 * another instance) gives its text whole when its `model_response` event lands (events read from
 * `after`, the run's last event cursor before the decision, on whichever instance the resume
 * runs), as the AI SDK and AG-UI streams show a decided run. Every event stored before the run
 * came to rest is read before this resolves. The tap is closed when this resolves.
 */
export async function followAfterDecision(
  deps: AppDeps,
  runId: string,
  after: string | null,
  onText: (text: string) => void,
  signal?: AbortSignal,
  tap?: DeltaTap,
): Promise<RunRecord> {
  let cursor = after;
  let reading: Promise<void> = Promise.resolve();
  let queued = false;
  /** Deltas sent and not yet matched with their model call's `model_response` (in order). */
  const sent: Array<{ text: string; after: number }> = [];
  const live = tap?.open((text, afterEvent) => {
    sent.push({ text, after: afterEvent });
    onText(text);
  });
  const drain = async (): Promise<void> => {
    queued = false;
    for (;;) {
      const page = await deps.store.readEvents({ filters: { run_id: runId }, after: cursor, limit: 200 });
      for (const ev of page.events) {
        cursor = ev.cursor;
        const text = modelTextOf(ev);
        if (!text) continue;
        // The deltas emitted before this event are this model call's (and any before it).
        let streamed = '';
        while (live && sent.length > 0 && (typeof ev.sequence !== 'number' || sent[0].after < ev.sequence)) streamed += sent.shift()!.text;
        if (!streamed) onText(text);
        else if (text.startsWith(streamed) && text.length > streamed.length) onText(text.slice(streamed.length));
      }
      if (!page.next_cursor || page.events.length === 0) return;
    }
  };
  // One read at a time, and at most one more queued behind it whatever the number of events.
  const pump = (): void => {
    if (queued) return;
    queued = true;
    reading = reading.then(drain).catch(swallow('protocols.follow_after_decision', { run_id: runId }));
  };
  const unsubscribe = deps.runtime.bus.subscribe({ run_id: runId }, () => pump());
  try {
    pump();
    const rec = await waitAfterDecision(deps, runId, signal);
    pump();
    await reading;
    return rec;
  } finally {
    unsubscribe();
    tap?.close();
  }
}

function modelTextOf(ev: StoredEvent): string | null {
  if (ev.event_type !== 'model_response') return null;
  const text = (ev.output as { text?: unknown } | null | undefined)?.text;
  return typeof text === 'string' && text.length > 0 ? text : null;
}

/** The approver a protocol decision is recorded with: the caller's key name (auth off: the protocol's name). */
export function approverOf(request: FastifyRequest, fallback: string): string {
  return request.apiKeyName ?? fallback;
}

/** The pending approvals of a run waiting for them, as every protocol shows them. */
export function pendingApprovalsOf(r: RunRecord) {
  if (r.status !== 'awaiting_approval') return [];
  return r.approvals
    .filter((a) => a.status === 'pending')
    .map((a) => ({ approval_id: a.approval_id, tool_name: a.tool_name, arguments: a.arguments, reason: a.reason, expires_at: a.expires_at }));
}
