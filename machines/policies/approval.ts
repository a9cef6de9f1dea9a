// A person's decision on one pending tool-call approval, as a pure rule: whether it may be taken
// (the approval exists, is still pending and not expired, and the run is waiting for it), what the
// run's approvals become, and whether that decided them all (the run may then go on). The runtime
// (src/runtime/run-decisions.ts) reads the run, asks this, and writes what it answers.
import type { ApprovalState } from '../run.machine.js';

export interface ApprovalDecisionInput {
  decision: 'approve' | 'deny';
  approver: string;
  arguments?: Record<string, unknown> | null;
  note?: string | null;
}

export type ApprovalVerdict =
  /** No approval of that id on the run. */
  | { kind: 'unknown' }
  /** Still pending past its `expires_at`: `approvals` is the run's list with it marked expired. */
  | { kind: 'expired'; expires_at: string; approvals: ApprovalState[] }
  /** Decided (or expired, or used) already. */
  | { kind: 'already_decided'; status: ApprovalState['status'] }
  /** Pending, but the run is not waiting for approvals (it is cancelled, say). */
  | { kind: 'run_not_waiting' }
  /** Taken: the decided approval, the run's new list, and whether no approval is pending any more. */
  | { kind: 'decided'; decided: ApprovalState; approvals: ApprovalState[]; allDecided: boolean };

/**
 * The verdict on deciding approval `approvalId` of a run whose approvals are `approvals`
 * (`runWaiting`: the run is `awaiting_approval`) at `nowMs` (`nowIso`, the same instant).
 * Checked in this order: unknown, expired, already decided, run not waiting.
 */
export function decideApproval(
  approvals: readonly ApprovalState[],
  runWaiting: boolean,
  approvalId: string,
  input: ApprovalDecisionInput,
  nowMs: number,
  nowIso: string,
): ApprovalVerdict {
  const approval = approvals.find((a) => a.approval_id === approvalId);
  if (!approval) return { kind: 'unknown' };
  if (approval.status === 'pending' && Date.parse(approval.expires_at) <= nowMs) {
    return {
      kind: 'expired',
      expires_at: approval.expires_at,
      approvals: approvals.map((a) => (a.approval_id === approvalId ? { ...a, status: 'expired' as const } : a)),
    };
  }
  if (approval.status !== 'pending') return { kind: 'already_decided', status: approval.status };
  if (!runWaiting) return { kind: 'run_not_waiting' };
  const decided: ApprovalState = {
    ...approval,
    status: input.decision === 'approve' ? 'approved' : 'denied',
    approver: input.approver,
    note: input.note ?? null,
    decided_at: nowIso,
    edited_arguments: input.decision === 'approve' && input.arguments ? input.arguments : null,
  };
  const next = approvals.map((a) => (a.approval_id === approvalId ? decided : a));
  return { kind: 'decided', decided, approvals: next, allDecided: !next.some((a) => a.status === 'pending') };
}
