// Pure projections between the run machine and the stored run record: what a snapshot makes of
// the record (recordFromSnapshot, called after every transition by RunHost.onSnapshot), and which
// event a restored run continues with (resumeEventFor, at the end of a resume). No I/O, no clock:
// the time arrives as an argument. Unit-tested in test/runtime/run-projection.test.ts.
import { recordStatusOf, type ApprovalState, type RunContext, type RunEvent, type RunStateValue } from '../../machines/run.machine.js';
import { TERMINAL_RUN_STATUSES, WAITING_RUN_STATUSES, type RunRecord, type RunRecordStatus } from './run-record.js';
import { mergeById } from './run-types.js';

/** How a snapshot's state stands for the record, and whether the host lets go of the run. */
export interface SnapshotPhase {
  /** The record status of the machine state. */
  status: RunRecordStatus;
  terminal: boolean;
  /** Stopped at a step boundary on request (POST /runs/{id}/interrupt). */
  stopped: boolean;
  /** Parked: waiting for a person, or stopped. */
  waiting: boolean;
  /**
   * Graceful shutdown (docs/contract.md §9): a run reaching a step boundary (about to reserve for its
   * next model call or tool batch) stops there, saved `interrupted`, instead of starting work the
   * grace period may not cover. Restoring a `budgeting` snapshot only repeats the budget
   * reservation, which is idempotent.
   */
  interrupt: boolean;
  /** terminal, waiting or interrupt: the run's last write in this process. */
  ending: boolean;
}

export function phaseOf(state: RunStateValue, closing: boolean): SnapshotPhase {
  const status = recordStatusOf(state);
  const terminal = TERMINAL_RUN_STATUSES.has(status);
  const stopped = state === 'interrupted';
  const waiting = WAITING_RUN_STATUSES.has(status) || stopped;
  const interrupt = closing && state === 'budgeting' && !terminal && !waiting;
  return { status, terminal, stopped, waiting, interrupt, ending: terminal || waiting || interrupt };
}

/** Redaction of what the record serves (the snapshot keeps the conversation as the model saw it). */
export interface RecordRedactor {
  redactText<T extends string | null | undefined>(text: T): T;
  redactValue<T>(value: T): T;
}

/** The stored record `r` after the machine reached `state` with `ctx` at `now` (ISO time). */
export function recordFromSnapshot(r: RunRecord, state: RunStateValue, ctx: RunContext, phase: SnapshotPhase, now: string, redact: RecordRedactor): RunRecord {
  return {
    ...r,
    status: phase.interrupt ? 'interrupted' : phase.status,
    machine_state: state,
    step: ctx.step,
    usage: ctx.usage,
    approvals: storedApprovals(mergeById(r.approvals, ctx.approvals, 'approval_id'), redact),
    tool_calls: phase.terminal ? storedToolCalls(r.tool_calls, redact) : r.tool_calls,
    budget_request: ctx.budget_request,
    budget_requests: ctx.budget_request ? mergeById(r.budget_requests, [ctx.budget_request], 'request_id') : r.budget_requests,
    // The run as stored and served (GET /runs*, the complete frame, the history) is redacted
    // like its events; the conversation in the snapshot stays as the model saw it.
    response: redact.redactText(ctx.response),
    termination_reason: ctx.termination_reason,
    error: redact.redactValue(ctx.error),
    guardrail_result: redact.redactValue(ctx.guardrail_result as Record<string, unknown> | null),
    updated_at: now,
    owner: phase.ending ? null : r.owner,
    lease_expires_at: phase.ending ? null : r.lease_expires_at,
    ended_at: phase.terminal ? now : r.ended_at,
    decided_at: WAITING_RUN_STATUSES.has(phase.status) ? null : r.decided_at,
  };
}

/**
 * Approvals as the record keeps them (and answers show them): the call's `arguments` redacted (the
 * tool runs with the call's own arguments, kept in the snapshot), an approver's
 * `edited_arguments` kept as given until the call ran with them (status `used`), or never will
 * (`denied`, `expired`).
 */
export function storedApprovals(approvals: ApprovalState[], redact: RecordRedactor): ApprovalState[] {
  return approvals.map((a) => ({
    ...a,
    arguments: redact.redactValue(a.arguments),
    edited_arguments: a.status === 'approved' ? a.edited_arguments : redact.redactValue(a.edited_arguments),
  }));
}

/** A run that ended replays no tool batch: the results it kept for that are redacted. */
function storedToolCalls(calls: RunRecord['tool_calls'], redact: RecordRedactor): RunRecord['tool_calls'] {
  return calls.map((c) => (typeof c.result_content === 'string' ? { ...c, result_content: redact.redactText(c.result_content) } : c));
}

/** The approvals of the batch the run paused on (older batches are already used/denied); lapsed ones read `expired`. */
export function currentBatch(r: RunRecord, nowMs: number): ApprovalState[] {
  const snapApprovals = r.approvals.filter((a) => a.status !== 'used');
  return snapApprovals.map((a) => (a.status === 'pending' && Date.parse(a.expires_at) <= nowMs ? { ...a, status: 'expired' as const } : a));
}

/**
 * The event a restored run continues with, from its record `r` (as it read before the claim) and
 * the state its snapshot rests in; undefined: it goes on from the snapshot as it is. It is sent
 * before anything is persisted, because persisting a restored `awaiting*` state first would park
 * the run again.
 */
export function resumeEventFor(r: RunRecord, snapshotState: string, nowMs: number): RunEvent | undefined {
  if (snapshotState === 'interrupted') return { type: 'RESUME' };
  if (r.status === 'awaiting_approval') return { type: 'APPROVALS_DECIDED', approvals: currentBatch(r, nowMs) };
  if (r.status === 'awaiting_budget' && r.budget_request) {
    return { type: r.budget_request.status === 'granted' ? 'BUDGET_GRANTED' : 'BUDGET_DENIED', request: r.budget_request };
  }
  if (snapshotState === 'awaitingApproval' && !currentBatch(r, nowMs).some((a) => a.status === 'pending')) {
    // A resume claimed this decided run (record `running`) and its process died before the
    // actor saved again, so the snapshot still waits. Restored without the decision, the actor
    // parked again and its stale context reverted the approvals to `pending`: the person's
    // decision was lost (found by the crash harness, test/crash/harness.ts).
    return { type: 'APPROVALS_DECIDED', approvals: currentBatch(r, nowMs) };
  }
  if (snapshotState === 'awaitingBudget' && r.budget_request && r.budget_request.status !== 'pending') {
    return { type: r.budget_request.status === 'granted' ? 'BUDGET_GRANTED' : 'BUDGET_DENIED', request: r.budget_request };
  }
  return undefined;
}
