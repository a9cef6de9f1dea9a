// What people and other services decide about a run: approvals, budget grants, outcomes,
// cancellation, steer messages and interrupt requests. Each decision is one compare-and-set on the
// run record (casUpdate: read, decide, write on the version read, retried with backoff); a
// decision that lets a paused run go on hands it to RunRecovery.resume.
import { runEventIds, sessionKeyOf } from './tenancy.js';
import { matchGlob } from '../../machines/policies/governance.js';
import type { ApprovalState, BudgetRequest, RunContext } from '../../machines/run.machine.js';
import { decideApproval as decideApprovalRule } from '../../machines/policies/approval.js';
import { checkInput } from '../agent/guardrails.js';
import { type AppError, domainError, notFound } from '../errors.js';
import { newId } from '../ids.js';
import { casUpdate, CasExhaustedError } from '../store/cas.js';
import type { StoredEvent, Versioned, WriteOp } from '../store/store.js';
import type { CarriedWrite } from './persistence.js';
import type { InboxValue } from './run-inbox.js';
import type { RunKernel } from './run-kernel.js';
import { TERMINAL_RUN_STATUSES, WAITING_RUN_STATUSES, runIndexes, type OutcomeRecord, type RunRecord, type RunRecordStatus } from './run-record.js';
import type { ResumePrefetch, RunRecovery } from './run-recovery.js';
import { iso, mergeById, type SnapshotValue, type TraceValue } from './run-types.js';
import { repos } from '../store/repos/index.js';
import { swallow } from '../telemetry/swallowed.js';

/** Statuses a steer message is accepted in (docs/contract.md §11). */
const STEERABLE: ReadonlySet<RunRecordStatus> = new Set(['running', 'awaiting_approval', 'interrupted']);

/** A decision that lost its compare-and-set every time: the run kept changing under it. */
const tooBusy = (what = 'the run'): AppError => domainError('AGT_ERR_CONCURRENT_UPDATE', [what]);

export class RunDecisions {
  /**
   * Set by the cluster link on a store several instances share: asks the owner of a run live in
   * another instance to cancel it (src/runtime/cluster.ts). Unset: such a cancel is a 409.
   */
  remoteCancel: ((runId: string) => Promise<void>) | null = null;

  constructor(
    private readonly kernel: RunKernel,
    private readonly recovery: RunRecovery,
  ) {}

  private get deps() {
    return this.kernel.deps;
  }

  async decideApproval(
    runId: string,
    approvalId: string,
    body: { decision: 'approve' | 'deny'; approver: string; arguments?: Record<string, unknown> | null; note?: string | null },
    /** The key deciding (null: auth is off): checked against the approval's `approvers`. */
    decider: Decider | null = null,
  ): Promise<ApprovalState> {
    if (body.decision === 'deny' && body.arguments) throw domainError('AGT_ERR_DENY_WITH_ARGUMENTS', [], { detail: 'decision=deny with arguments' });
    const { store } = this.deps;
    return retryDecision(async () => {
      // The snapshot a resume needs is read in the same round as the run (unused if this fails).
      const snapshotRead = repos(store).snapshots.get<SnapshotValue>(runId);
      snapshotRead.catch(() => undefined);
      const rec = await repos(store).runs.get<RunRecord>(runId);
      if (!rec) throw notFound('run', runId);
      const override = decider
        ? approverCheck(
            rec.value.approvals.find((a) => a.approval_id === approvalId),
            decider,
          )
        : false;
      const now = this.deps.clock.now();
      const verdict = decideApprovalRule(rec.value.approvals, rec.value.status === 'awaiting_approval', approvalId, body, now, iso(now));
      switch (verdict.kind) {
        case 'unknown':
          throw notFound('approval', approvalId);
        case 'expired':
          await repos(store)
            .runs.update<RunRecord>(runId, { ...rec.value, approvals: verdict.approvals }, rec.version)
            // Best effort: the sweep expires it too; the caller gets its 409 either way.
            .catch(swallow('decisions.mark_expired', { run_id: runId, approval_id: approvalId }));
          throw domainError('AGT_ERR_APPROVAL_EXPIRED', [approvalId, String(verdict.expires_at)], { detail: 'expired' });
        case 'already_decided':
          throw domainError('AGT_ERR_APPROVAL_ALREADY_DECIDED', [approvalId, verdict.status], { detail: verdict.status });
        case 'run_not_waiting':
          throw domainError('AGT_ERR_RUN_NOT_WAITING', [`run ${runId}`, 'an approval', rec.value.status]);
      }
      const { allDecided } = verdict;
      // A global admin outside the rule's approvers: recorded on the approval (docs/policies.md).
      const decided = override ? { ...verdict.decided, override: true } : verdict.decided;
      const approvals = override ? verdict.approvals.map((a) => (a.approval_id === approvalId ? { ...a, override: true } : a)) : verdict.approvals;
      const next: RunRecord = {
        ...rec.value,
        approvals,
        updated_at: iso(now),
        decided_at: allDecided ? iso(now) : null,
        decision: allDecided ? 'approval' : null,
      };
      // A background agent run goes on through its background run: the decision's commit
      // carries that run's RESUME, and its claim continues the agent run under its lease.
      const through = allDecided && rec.value.kind === 'background' && this.kernel.resumeThrough ? await this.kernel.resumeThrough(runId) : null;
      if (through) {
        await this.commitCarrying([repos(store).runs.updateOp(runId, next, rec.version, runIndexes(next))], through);
        return decided;
      }
      // Everything the resume reads (snapshot, previous trace, agent) is in hand before the
      // decision goes to the store, so the claim is issued in the same turn and lands in the same
      // fsynced batch (ResumePrefetch). Reads only: the decision waits for no write.
      let pre: ResumePrefetch | undefined;
      if (allDecided && !this.kernel.live.has(runId)) {
        pre = {
          snapshot: snapshotRead,
          prevTrace: repos(store).traces.get<TraceValue>(rec.value.trace_id),
          agent: this.kernel.acquireAgent(rec.value.agent_id, { resuming: true }),
        };
        pre.prevTrace.catch(() => undefined);
        pre.agent.catch(() => undefined);
        await Promise.allSettled([pre.snapshot, pre.prevTrace, pre.agent]);
      }
      const writing = repos(store).runs.update(runId, next, rec.version, runIndexes(next));
      // The resume does not wait for the decision to land: it is told the record the decision
      // writes (the version after it), reads what it needs meanwhile, and its claim (a CAS on
      // that version) joins the same store round or the next. Should the decision fail, the
      // claim fails with it; a decision that landed and a resume that failed are the sweep's.
      const resuming = allDecided
        ? this.recovery.resume(runId, { cause: 'approval', trigger: 'explicit' }, { id: runId, seq: rec.seq, version: rec.version + 1, value: next }, pre)
        : null;
      // Marked handled at once: a resume refused before the decision lands (a snapshot from a
      // newer machine, found by test/runtime/snapshot-fixtures.test.ts) was an unhandled rejection.
      resuming?.catch(() => undefined);
      await writing; // a lost race (stale_version) is retried by retryDecision
      resuming?.catch((err) => this.deps.logger.warn({ run_id: runId, err: String(err) }, 'resume after approval failed; the sweep will retry'));
      return decided;
    });
  }

  /** A decision's write and the background run's write it carries (RunService.resumeThrough): one commit. */
  private async commitCarrying(ops: WriteOp[], through: CarriedWrite): Promise<void> {
    const { store } = this.deps;
    const all = [...ops, ...through.ops];
    let stored: StoredEvent[];
    try {
      stored = through.events.length > 0 ? (await store.commitWithEvents(all, through.events)).events : (await store.commit(all), []);
    } catch (err) {
      through.failed?.(err);
      throw err;
    }
    through.stored(stored);
  }

  async budgetView(runId: string) {
    // The evaluation a run belongs to (its replay or judge run) is in the origin saved with its snapshot.
    const [run, snap] = await Promise.all([this.kernel.get(runId), repos(this.deps.store).snapshots.get<SnapshotValue>(runId)]);
    const budgets = await this.deps.ledger.entriesForRun({
      run_id: run.run_id,
      session_id: sessionKeyOf(run),
      agent_id: run.agent_id,
      tenant: run.tenant ?? null,
      eval_id: snap?.value.origin?.eval_id ?? null,
    });
    return { run_id: runId, budgets, requests: run.budget_requests };
  }

  async decideBudget(
    runId: string,
    body: { decision: 'grant' | 'deny'; approver: string; amount?: number | null; note?: string | null; request_id?: string | null },
  ) {
    const { store } = this.deps;
    const { req, decided, amount, through } = await retryDecision(async () => {
      // The snapshot the resume needs is read in the same round as the run (unused if this fails).
      repos(store)
        .snapshots.get<SnapshotValue>(runId)
        .catch(() => undefined);
      const rec = await repos(store).runs.get<RunRecord>(runId);
      if (!rec) throw notFound('run', runId);
      const req = rec.value.budget_request;
      if (rec.value.status !== 'awaiting_budget' || !req || req.status !== 'pending')
        throw domainError('AGT_ERR_RUN_NOT_WAITING', [`run ${runId}`, 'a budget', rec.value.status]);
      if (body.request_id && body.request_id !== req.request_id) throw domainError('AGT_ERR_BUDGET_REQUEST_MISMATCH', [body.request_id, req.request_id]);
      const amount = body.decision === 'grant' ? (body.amount ?? req.shortfall) : null;
      const now = iso(this.deps.clock.now());
      const decided: BudgetRequest = {
        ...req,
        status: body.decision === 'grant' ? 'granted' : 'denied',
        approver: body.approver,
        note: body.note ?? null,
        decided_at: now,
        amount,
      };
      const next: RunRecord = {
        ...rec.value,
        budget_request: decided,
        budget_requests: mergeById(rec.value.budget_requests, [decided], 'request_id'),
        decided_at: now,
        decision: body.decision === 'grant' ? 'budget_grant' : 'budget_denied',
        updated_at: now,
      };
      // A background agent run goes on through its background run (see decideApproval); its
      // resume applies the grant again (a no-op once it landed), so the claim may come first.
      const through = rec.value.kind === 'background' && this.kernel.resumeThrough ? await this.kernel.resumeThrough(runId) : null;
      if (through) await this.commitCarrying([repos(store).runs.updateOp(runId, next, rec.version, runIndexes(next))], through);
      else await repos(store).runs.update<RunRecord>(runId, next, rec.version, runIndexes(next));
      return { req, decided, amount, through: through !== null };
    });
    if (amount !== null) await this.deps.ledger.grant(req.key, req.meter as never, amount, { grant_id: req.request_id });
    if (!through)
      void this.recovery
        .resume(runId, { cause: body.decision === 'grant' ? 'budget_grant' : 'budget_denied', trigger: 'explicit' })
        .catch((err) => this.deps.logger.warn({ run_id: runId, err: String(err) }, 'resume after budget decision failed; the sweep will retry'));
    return {
      run_id: runId,
      request_id: req.request_id,
      status: decided.status,
      scope: req.scope,
      meter: req.meter,
      amount,
      approver: body.approver,
      note: body.note ?? null,
    };
  }

  async recordOutcome(
    runId: string,
    body: { source: string; label?: string | null; reward?: number | null; detail?: Record<string, unknown> | null },
  ): Promise<OutcomeRecord> {
    const { store } = this.deps;
    const { rec, outcome } = await retryDecision(async () => {
      const rec = await repos(store).runs.get<RunRecord>(runId);
      if (!rec) throw notFound('run', runId);
      const outcome: OutcomeRecord = {
        outcome_id: newId('outcome'),
        source: body.source,
        label: body.label ?? null,
        reward: body.reward ?? null,
        detail: body.detail ?? null,
        recorded_at: iso(this.deps.clock.now()),
      };
      await repos(store).runs.update<RunRecord>(runId, { ...rec.value, outcomes: [...rec.value.outcomes, outcome] }, rec.version);
      return { rec, outcome };
    }, `run ${runId}`);
    await this.deps.telemetry.emitSafe({
      event_type: 'run_outcome',
      trace_id: rec.value.trace_id,
      span_id: newId('span'),
      actor: { type: 'user', id: body.source },
      output: outcome,
      metadata: runEventIds(rec.value),
    });
    return outcome;
  }

  // ---------------------------------------------------------------- cancellation

  /**
   * Cancel a run. `onlyIfLive` is the stream-closed case: a run paused for a person stays paused.
   * `direct`: the background run of a background agent run asks (it stops its own child).
   */
  async cancel(runId: string, opts: { onlyIfLive?: boolean; direct?: boolean } = {}): Promise<{ status: 'cancel_requested'; run_id: string }> {
    const live = this.kernel.live.get(runId);
    // A running background agent run is its background run's child: the cancel goes to that run,
    // whose holder (here, or the instance its lease names) tells its child.
    const throughBackground = async (): Promise<boolean> => !opts.direct && !opts.onlyIfLive && !!this.kernel.cancelRunning && this.kernel.cancelRunning(runId);
    if (live?.kind === 'background' && (await throughBackground())) return { status: 'cancel_requested', run_id: runId };
    // A stream closed by the service's own shutdown (Fastify destroys every connection) is not
    // the client giving up: the run is saved `interrupted` and resumed on the next start. Before
    // this, SIGTERM turned every run streamed over POST /run into `cancelled` (test/http/
    // recovery.test.ts, "SIGTERM while a client streams the run"). The streams' close events
    // arrive after shutdown() began today; calling beginShutdown() before app.close() makes it certain.
    if (opts.onlyIfLive && this.kernel.closing) return { status: 'cancel_requested', run_id: runId };
    if (live?.ref) {
      live.ref.send({ type: 'CANCEL' });
      return { status: 'cancel_requested', run_id: runId };
    }
    // A run still waiting `queued` here counts as live: its stream's client leaving cancels it too.
    if (opts.onlyIfLive && !this.kernel.waitingRuns?.isWaiting(runId)) return { status: 'cancel_requested', run_id: runId };
    const rec = await repos(this.deps.store).runs.get<RunRecord>(runId);
    if (!rec) throw notFound('run', runId);
    if (TERMINAL_RUN_STATUSES.has(rec.value.status)) throw domainError('AGT_ERR_RUN_ENDED', [runId, rec.value.status]);
    if (rec.value.kind === 'background' && rec.value.status === 'running' && (await throughBackground())) return { status: 'cancel_requested', run_id: runId };
    if (rec.value.status === 'running' && this.deps.leases.heldElsewhere(rec.value.owner, rec.value.lease_expires_at, this.deps.workerId)) {
      // Live in another instance of a shared store: its owner is told (the change feed), cancels
      // it there at its next step, and writes the end itself. Writing the record from here would
      // only fence the owner off, leaving the run `running` until its lease lapsed.
      if (this.remoteCancel) {
        await this.remoteCancel(runId);
        return { status: 'cancel_requested', run_id: runId };
      }
      throw domainError('AGT_ERR_RUN_OWNED_ELSEWHERE', [runId, String(rec.value.owner), 'cancel it there']);
    }
    const now = iso(this.deps.clock.now());
    const cancelled: RunRecord = {
      ...rec.value,
      status: 'cancelled',
      termination_reason: 'cancelled',
      error: { type: 'Cancelled', message: 'the run was cancelled' },
      approvals: rec.value.approvals.map((a) => (a.status === 'pending' ? { ...a, status: 'expired' as const } : a)),
      owner: null,
      lease_expires_at: null,
      ended_at: now,
      updated_at: now,
    };
    // A parked background agent run is cancelled with its background run, in one commit (neither
    // is left waiting for the other; src/background/agent-bridge.ts `cancelled`).
    const through =
      rec.value.kind === 'background' && WAITING_RUN_STATUSES.has(rec.value.status) && this.kernel.cancelThrough
        ? await this.kernel.cancelThrough(runId)
        : null;
    let done: Versioned<RunRecord>;
    if (through) {
      await this.commitCarrying([repos(this.deps.store).runs.updateOp(runId, cancelled, rec.version, runIndexes(cancelled))], through);
      done = { ...rec, version: rec.version + 1, value: cancelled };
    } else done = await repos(this.deps.store).runs.update<RunRecord>(runId, cancelled, rec.version, runIndexes(cancelled));
    // Cancelled while `queued` (docs/contract.md §3.4): out of this process's queue; another
    // instance's waiter finds it cancelled when its turn comes.
    if (rec.value.status === 'queued') this.kernel.waitingRuns?.dropped(runId);
    await this.deps.ledger.releaseRun(runId).catch(() => 0);
    this.kernel.inbox.forget(runId);
    await this.setTraceStatus(done.value.trace_id, 'cancelled');
    // The same last word a live run's cancel leaves (RunHost.emitFinal), so the trace ends and the
    // webhook dispatcher (src/integrations/webhooks.ts) sees run.cancelled.
    await this.deps.telemetry.emitSafe({
      event_type: 'runtime_error',
      trace_id: done.value.trace_id,
      span_id: newId('span'),
      actor: { type: 'system', id: this.deps.workerId },
      error: { type: 'Cancelled', message: 'the run was cancelled' },
      metadata: { termination_reason: 'cancelled', status: 'cancelled', ...runEventIds(done.value) },
    });
    this.kernel.notifySettled(done.value);
    return { status: 'cancel_requested', run_id: runId };
  }

  /** A trace segment's status, best effort (a trace that keeps changing or cannot be written is left). */
  private async setTraceStatus(traceId: string, status: string): Promise<void> {
    const { store, clock } = this.deps;
    await casUpdate(
      async () => {
        const cur = await repos(store).traces.get<TraceValue>(traceId);
        if (!cur) return;
        const ended = status === 'running' ? null : iso(clock.now());
        await repos(store).traces.update(traceId, { ...cur.value, status, ended_at: ended }, cur.version);
      },
      { attempts: 5 },
    ).catch(swallow('decisions.trace_status', { trace_id: traceId, status }));
  }

  // ---------------------------------------------------------------- steer and interrupt

  /**
   * Queues a message for the run's next step boundary. Refused (409) unless the run is running,
   * awaiting approval or interrupted; a message the input guardrails block is refused too, and
   * recorded as a `guardrail_violation` event of the run (`blocked` in the answer).
   */
  async steer(
    runId: string,
    body: { message: string; sender: string },
  ): Promise<{ status: 'queued'; message_id: string; run_id: string } | { blocked: { rule: string; message: string } }> {
    const r = await this.kernel.get(runId);
    if (!STEERABLE.has(r.status)) throw domainError('AGT_ERR_RUN_NOT_STEERABLE', [runId, r.status], { detail: r.status });
    const meta = runEventIds(r);
    const verdict = checkInput(body.message, this.deps.guardrails);
    if (!verdict.allowed) {
      await this.deps.telemetry.emitSafe({
        event_type: 'guardrail_violation',
        trace_id: r.trace_id,
        span_id: await this.rootSpanOf(r),
        actor: { type: 'guardrail', id: verdict.rule },
        input: { message: body.message, sender: body.sender },
        error: { type: 'GuardrailViolation', message: verdict.message },
        metadata: { rule: verdict.rule, matched: verdict.matched ?? null, source: 'steer', sender: body.sender, ...meta },
      });
      return { blocked: { rule: verdict.rule, message: verdict.message } };
    }
    const entry = await this.kernel.inbox.queueSteer(runId, body.sender, body.message);
    // The run may have ended between the status check and the append (its last boundary read
    // nothing): then nobody will take the message. Say so instead of answering `queued`.
    const after = await this.kernel.get(runId);
    if (TERMINAL_RUN_STATUSES.has(after.status) && !(await this.steeredInto(runId, entry.message_id))) {
      await this.kernel.inbox.withdrawSteer(runId, entry.message_id);
      throw domainError('AGT_ERR_RUN_ENDED_BEFORE_DELIVERY', [runId, after.status], { detail: after.status });
    }
    await this.deps.telemetry.emitSafe({
      event_type: 'run_steered',
      trace_id: after.trace_id,
      span_id: await this.rootSpanOf(after),
      actor: { type: 'user', id: body.sender },
      input: { message: body.message },
      metadata: { ...meta, message_id: entry.message_id, sender: body.sender, status: after.status },
    });
    return { status: 'queued', message_id: entry.message_id, run_id: runId };
  }

  /**
   * The root span of the run's current trace segment, where events about the run itself go (as
   * run_resumed does): the live segment's, else the span of the segment's first event.
   */
  private async rootSpanOf(r: RunRecord): Promise<string> {
    const live = this.kernel.live.get(r.run_id);
    if (live && live.writer.value.trace_id === r.trace_id) return live.rootSpan;
    const first = await this.deps.store.readEvents({ filters: { trace_id: r.trace_id }, limit: 1 }).catch(() => null);
    const span = first?.events[0]?.span_id;
    return typeof span === 'string' && span ? span : newId('span');
  }

  /** Whether the run's saved context already holds the steer message. */
  private async steeredInto(runId: string, messageId: string): Promise<boolean> {
    const snap = await repos(this.deps.store).snapshots.get<SnapshotValue>(runId);
    const ctx = (snap?.value.snapshot as { context?: RunContext } | undefined)?.context;
    return (ctx?.steered ?? []).includes(messageId);
  }

  /**
   * Asks a running run to stop at its next step boundary (saved `interrupted`, resumable with
   * POST /runs/{id}/resume). A tool call or model call in flight finishes and is saved first.
   */
  async interrupt(
    runId: string,
    opts: { by?: string | null } = {},
  ): Promise<{ status: 'interrupt_requested' | 'interrupted'; run_id: string; interrupt_id: string | null }> {
    const r = await this.kernel.get(runId);
    if (r.status === 'interrupted' && r.machine_state === 'interrupted') return { status: 'interrupted', run_id: runId, interrupt_id: null };
    if (r.kind === 'background') throw domainError('AGT_ERR_RUN_IS_BACKGROUND', [runId, 'cancel'], { detail: 'background' });
    // A run a graceful shutdown interrupted is resumed at the next start: the request makes it
    // stop again at its first boundary there, and stay stopped.
    if (r.status !== 'running' && r.status !== 'interrupted') throw domainError('AGT_ERR_RUN_NOT_INTERRUPTIBLE', [runId, r.status], { detail: r.status });
    const interrupt_id = await this.kernel.inbox.requestInterrupt(runId, opts.by ?? null);
    return { status: 'interrupt_requested', run_id: runId, interrupt_id };
  }

  /** The inbox of a run (steer messages queued so far, the last interrupt request). */
  async inboxOf(runId: string): Promise<InboxValue> {
    const r = await this.kernel.get(runId);
    return (await this.kernel.inbox.get(runId)) ?? { run_id: r.run_id, messages: [], interrupt: null, updated_at: r.updated_at };
  }
}

/** A decision's read → decide → write, retried (with backoff) while its write loses a race; 409 when it keeps losing. */
async function retryDecision<T>(attempt: () => Promise<T>, busy?: string): Promise<T> {
  try {
    return await casUpdate(attempt);
  } catch (err) {
    if (err instanceof CasExhaustedError) throw tooBusy(busy);
    throw err;
  }
}

/** Who decides an approval: the API key's name and role, and whether it acts in no tenant. */
export interface Decider {
  name: string;
  role: string;
  global: boolean;
}

/**
 * Whether a key may decide a pending approval, for the inboxes (GET /runs' `may_decide`, the
 * dashboard, MCP list_pending_approvals): its role decides approvals (approver, admin), and
 * approverCheck below would let it (a global admin always). `decider` null: auth is off.
 */
export function mayDecide(approval: { approvers?: readonly string[] | null }, decider: Decider | null): boolean {
  if (decider === null) return true;
  if (decider.role !== 'approver' && decider.role !== 'admin') return false;
  const allowed = approval.approvers;
  if (!allowed || allowed.length === 0) return true;
  return allowed.some((p) => p === decider.role || matchGlob(p, decider.name)) || (decider.role === 'admin' && decider.global);
}

/**
 * Whether `decider` may decide `approval` (docs/policies.md): any key when the rule named no
 * approvers, else a key whose role or name one of them matches (globs over the name). A global
 * admin key may always decide: true means it did so as an override. Throws 403 otherwise.
 */
function approverCheck(approval: ApprovalState | undefined, decider: Decider): boolean {
  const allowed = approval?.approvers;
  if (!allowed || allowed.length === 0) return false;
  if (allowed.some((p) => p === decider.role || matchGlob(p, decider.name))) return false;
  if (decider.role === 'admin' && decider.global) return true;
  throw domainError('AGT_ERR_APPROVER_NOT_ALLOWED', [decider.name, approval.approval_id]);
}
