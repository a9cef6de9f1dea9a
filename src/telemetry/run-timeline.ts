// A run is one trace per segment: it ends a segment when it parks for a person (approval, budget)
// and starts a new trace when it resumes (src/runtime/run-recovery.ts). The run's whole history is
// therefore its segments in order, with the waits between them. This module puts them together:
// pure, from the built traces and the decisions the run record keeps.
import type { EventInput } from '../store/store.js';
import type { Trace, TraceRecord } from './traces.js';

/** A decision a person (or a key) made while the run waited. */
export interface WaitDecision {
  kind: 'approval' | 'budget';
  /** `approval_…` or the budget request's id. */
  id: string;
  /** The tool of an approval, the budget key of a budget request. */
  subject: string;
  /** approved, denied, expired, used, pending (approvals); granted, denied, pending (budgets). */
  decision: string;
  approver: string | null;
  note: string | null;
  decided_at: string | null;
  /** Approvals: the arguments the person edited the call to (null: approved as asked). */
  edited_arguments: Record<string, unknown> | null;
  /** Budget grants: the amount granted. */
  amount: number | null;
}

/** The gap between two segments of a run: from the end of one to the start of the next. */
export interface RunWait {
  after_trace_id: string;
  /** The segment that resumed the run; null while it still waits. */
  before_trace_id: string | null;
  started_at: string;
  ended_at: string | null;
  duration_ms: number | null;
  /** The next segment's `run_resumed` cause (`approval`, `budget_grant`, `interrupted`, …). */
  cause: string | null;
  decisions: WaitDecision[];
}

/** The parts of a run record this view reads (approvals, budget requests). */
export interface RunDecisionsView {
  approvals: ReadonlyArray<{
    approval_id: string;
    status: string;
    tool_name: string;
    created_at: string;
    approver: string | null;
    note: string | null;
    decided_at: string | null;
    edited_arguments: Record<string, unknown> | null;
  }>;
  budget_requests: ReadonlyArray<{
    request_id: string;
    key: string;
    status: string;
    asked_at: string;
    approver?: string | null;
    note?: string | null;
    decided_at?: string | null;
    amount?: number | null;
  }>;
}

const t = (iso: string | null | undefined): number => (iso ? Date.parse(iso) : Number.NaN);

/**
 * The waits between consecutive segments (oldest first). A decision belongs to the wait after
 * the segment it was asked in (its `created_at` / `asked_at` inside that segment). A last segment
 * that is `suspended` opens a wait that has not ended yet.
 */
export function runWaits(segments: ReadonlyArray<Trace<TraceRecord, EventInput>>, run: RunDecisionsView | null): RunWait[] {
  const waits: RunWait[] = [];
  for (let i = 0; i < segments.length; i++) {
    const prev = segments[i];
    const next = segments[i + 1] ?? null;
    if (!next && prev.status !== 'suspended') break;
    const startedAt = prev.ended_at ?? prev.started_at;
    const endedAt = next?.started_at ?? null;
    const from = t(prev.started_at);
    const until = next ? t(next.started_at) : Number.POSITIVE_INFINITY;
    const asked = (at: string) => t(at) >= from && t(at) <= until;
    const decisions: WaitDecision[] = [];
    for (const a of run?.approvals ?? []) {
      if (!asked(a.created_at)) continue;
      decisions.push({
        kind: 'approval',
        id: a.approval_id,
        subject: a.tool_name,
        decision: a.status,
        approver: a.approver,
        note: a.note,
        decided_at: a.decided_at,
        edited_arguments: a.edited_arguments ?? null,
        amount: null,
      });
    }
    for (const b of run?.budget_requests ?? []) {
      if (!asked(b.asked_at)) continue;
      decisions.push({
        kind: 'budget',
        id: b.request_id,
        subject: b.key,
        decision: b.status,
        approver: b.approver ?? null,
        note: b.note ?? null,
        decided_at: b.decided_at ?? null,
        edited_arguments: null,
        amount: b.amount ?? null,
      });
    }
    const resumed = next?.events.find((e) => e.event_type === 'run_resumed');
    const cause = resumed && resumed.metadata && typeof resumed.metadata === 'object' ? (resumed.metadata as Record<string, unknown>).cause : null;
    waits.push({
      after_trace_id: prev.trace_id,
      before_trace_id: next?.trace_id ?? null,
      started_at: startedAt,
      ended_at: endedAt,
      duration_ms: endedAt !== null ? Math.max(0, t(endedAt) - t(startedAt)) : null,
      cause: typeof cause === 'string' ? cause : null,
      decisions,
    });
  }
  return waits;
}
