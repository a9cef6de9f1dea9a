// The stored run record (kind 'runs') and the views built from it. The conversation lives in the
// actor snapshot (kind 'snapshots'), never here, so listing runs never loads conversations.
import type { ApprovalState, BudgetRequest, TerminationReason, Usage } from '../../machines/run.machine.js';
import { redact, type Redactor } from '../telemetry/redact.js';
import { QUERY_PREVIEW_CHARS } from '../schemas/runs.js';
import { bgIdOf, idOfTenantKey, sessionKeyOf } from './tenancy.js';

export type RunRecordStatus =
  'queued' | 'running' | 'awaiting_approval' | 'awaiting_budget' | 'interrupted' | 'completed' | 'blocked' | 'failed' | 'cancelled' | 'timeout';

export const TERMINAL_RUN_STATUSES: ReadonlySet<RunRecordStatus> = new Set(['completed', 'blocked', 'failed', 'cancelled', 'timeout']);
export const WAITING_RUN_STATUSES: ReadonlySet<RunRecordStatus> = new Set(['awaiting_approval', 'awaiting_budget']);

export type ToolCallOutcome = 'success' | 'error' | 'denied' | 'rejected' | 'timeout' | 'cancelled' | 'unknown';

export interface ToolCallRecord {
  tool_call_id: string;
  tool_name: string;
  source: 'local' | 'mcp' | 'builtin' | 'subagent' | 'unknown';
  idempotent: boolean;
  step: number;
  state: 'started' | 'completed';
  outcome: ToolCallOutcome | null;
  started_at: string;
  ended_at: string | null;
  /** What the model was told; kept so a replayed batch returns it instead of running the tool again. */
  result_content?: string | null;
}

export interface OutcomeRecord {
  outcome_id: string;
  source: string;
  label: string | null;
  reward: number | null;
  detail: Record<string, unknown> | null;
  recorded_at: string;
}

export interface SideEffect {
  tool_call_id: string;
  tool_name: string;
  outcome: ToolCallOutcome;
}

export interface RunRecord {
  run_id: string;
  session_id: string;
  /** The tenant of the key that started the run (docs/multi-tenant.md); absent or null: none. */
  tenant?: string | null;
  /** The run request's metadata, what policy conditions see as `metadata` (docs/policies.md); absent: none. */
  metadata?: Record<string, unknown>;
  agent_name: string;
  agent_id: string;
  kind: 'sync' | 'background';
  task_id: string | null;
  query: string;
  status: RunRecordStatus;
  step: number;
  /** Incremented each time an owner (re)starts the actor: fencing generation and idempotency key part. */
  attempt: number;
  trace_id: string;
  trace_ids: string[];
  tool_calls: ToolCallRecord[];
  usage: Usage;
  approvals: ApprovalState[];
  budget_requests: BudgetRequest[];
  budget_request: BudgetRequest | null;
  outcomes: OutcomeRecord[];
  error: { type: string; message: string } | null;
  response: string | null;
  termination_reason: TerminationReason | null;
  guardrail_result: Record<string, unknown> | null;
  machine_state: string;
  created_at: string;
  updated_at: string;
  heartbeat_at: string | null;
  lease_seconds: number;
  lease_expires_at: string | null;
  owner: string | null;
  recoveries: number;
  /** When a person's decision made the run resumable; the sweep resumes it if nobody did. */
  decided_at: string | null;
  decision: string | null;
  ended_at: string | null;
  /** The concurrency key the run runs under and its limit (docs/contract.md §3.4); absent: none. */
  concurrency?: { key: string; limit: number } | null;
  /** −100..100, default 0: among waiting runs, higher goes first. */
  priority?: number;
  /**
   * Set when the run waited for its key's slot: what it waited on, since when and (once it started)
   * when its key admitted it (ms). Kept after admission.
   */
  queue?: { key: string; limit: number; priority: number; enqueued_at: number; admitted_at?: number } | null;
  /** While a model call waits for its provider's rate limit: until when (ISO). */
  throttled_until?: string | null;
}

/** What names a new run and its lease; everything else a run starts with is the same for all. */
export type NewRunFields = Pick<
  RunRecord,
  'run_id' | 'session_id' | 'agent_name' | 'agent_id' | 'kind' | 'task_id' | 'query' | 'trace_id' | 'lease_seconds' | 'lease_expires_at' | 'owner'
> & { now: string; tenant?: string | null; metadata?: Record<string, unknown> | null };

/** The record of a run that has just started: step 0, first attempt, nothing called or decided yet. */
export function newRunRecord(f: NewRunFields): RunRecord {
  return {
    run_id: f.run_id,
    session_id: f.session_id,
    // Stamped only for a tenant: a run without one keeps the record it always had.
    ...(f.tenant ? { tenant: f.tenant } : {}),
    // Likewise only when the request gave some.
    ...(f.metadata && Object.keys(f.metadata).length > 0 ? { metadata: f.metadata } : {}),
    agent_name: f.agent_name,
    agent_id: f.agent_id,
    kind: f.kind,
    task_id: f.task_id,
    query: f.query,
    status: 'running',
    step: 0,
    attempt: 1,
    trace_id: f.trace_id,
    trace_ids: [f.trace_id],
    tool_calls: [],
    usage: { requests: 0, request_tokens: 0, response_tokens: 0, total_tokens: 0, estimated_cost_usd: 0 },
    approvals: [],
    budget_requests: [],
    budget_request: null,
    outcomes: [],
    error: null,
    response: null,
    termination_reason: null,
    guardrail_result: null,
    machine_state: 'checking',
    created_at: f.now,
    updated_at: f.now,
    heartbeat_at: f.now,
    lease_seconds: f.lease_seconds,
    lease_expires_at: f.lease_expires_at,
    owner: f.owner,
    recoveries: 0,
    decided_at: null,
    decision: null,
    ended_at: null,
  };
}

/**
 * A queued run's place in its key's admission order, as an index value: `<100 - priority, 3
 * digits>:<key>`, so a key's waiters listed by value, then by creation (the index's seq), come in
 * admission order (machines/policies/flow.ts). The PostgreSQL store hands a key's freed slots out
 * in that order, across instances (src/store/migrations/006_flow_key_order.sql).
 */
export function flowWaitIndex(q: { key: string; priority: number }): string {
  return `${String(100 - q.priority).padStart(3, '0')}:${q.key}`;
}

export function runIndexes(r: RunRecord): Record<string, string | null> {
  return {
    status: r.status,
    // A tenant's session ids live in its namespace (src/runtime/tenancy.ts): the index holds the key.
    session_id: sessionKeyOf(r),
    task_id: r.task_id,
    // A tenant's lists and counts: one index each for all its runs and for its runs in a status.
    tenant: r.tenant ?? null,
    tenant_status: r.tenant ? `${r.tenant}\u001f${r.status}` : null,
    // Only the few decided-but-not-resumed runs carry this, so the sweep finds them without
    // reading every run that waits for a person (there may be 100,000 of those).
    resumable: WAITING_RUN_STATUSES.has(r.status) && r.decided_at ? 'decided' : null,
    // Runs that waited for a concurrency key: indexed by key while queued (positions, the queue's
    // recovery); others carry no such index at all.
    ...(r.queue ? { flow_key: r.status === 'queued' ? r.queue.key : null, flow_wait: r.status === 'queued' ? flowWaitIndex(r.queue) : null } : {}),
  };
}

/** Non-idempotent calls that ran (or may have): a retry from scratch would repeat them. */
export function sideEffectsOf(r: Pick<RunRecord, 'tool_calls'>): SideEffect[] {
  return r.tool_calls
    .filter((c) => !c.idempotent && (c.outcome === 'success' || c.outcome === 'unknown' || (c.state === 'started' && c.outcome === null)))
    .map((c) => ({ tool_call_id: c.tool_call_id, tool_name: c.tool_name, outcome: c.outcome ?? 'unknown' }));
}

/**
 * An approval as answers show it (GET /runs*, the RunResponse, the decision's answer, hence the
 * dashboard): its arguments redacted. Records are stored that way too (run-projection.ts); this
 * also covers records written before, and secrets of the current redaction set.
 */
export function approvalForAnswer(a: ApprovalState, redactor: Redactor): ApprovalState {
  return {
    ...a,
    arguments: redact(a.arguments, redactor) as ApprovalState['arguments'],
    edited_arguments: a.edited_arguments === null ? null : (redact(a.edited_arguments, redactor) as ApprovalState['edited_arguments']),
  };
}

/** docs/contract.md §3.3 public run view; `redactor`: the process's (approvals of older records). */
export function publicRunView(r: RunRecord, redactor: Redactor) {
  return {
    run_id: r.run_id,
    session_id: r.session_id,
    tenant: r.tenant ?? null,
    ...(r.metadata ? { metadata: r.metadata } : {}),
    agent_name: r.agent_name,
    // A tenant's own agent and task are keys inside (src/background/tenancy.ts): shown as its client chose them.
    agent_id: bgIdOf(r.agent_id),
    query_preview: redactor.text(r.query.slice(0, QUERY_PREVIEW_CHARS)),
    status: r.status,
    step: r.step,
    attempt: r.attempt,
    task_id: r.task_id === null ? null : bgIdOf(r.task_id),
    trace_id: r.trace_id,
    trace_ids: r.trace_ids,
    tool_calls: r.tool_calls.map(({ result_content: _omit, ...c }) => c),
    usage: r.usage,
    approvals: r.approvals.map((a) => approvalForAnswer(a, redactor)),
    budget_requests: r.budget_requests,
    outcomes: r.outcomes,
    error: r.error,
    response: r.response,
    termination_reason: r.termination_reason,
    created_at: r.created_at,
    updated_at: r.updated_at,
    heartbeat_at: r.heartbeat_at,
    ended_at: r.ended_at ?? null,
    lease_seconds: r.lease_seconds,
    // The key as the client named it (records hold it in the run's tenant: keyInTenant).
    concurrency: r.concurrency ? { ...r.concurrency, key: idOfTenantKey(r.concurrency.key) } : null,
    priority: r.priority ?? 0,
    throttled_until: r.throttled_until ?? null,
  };
}

/** RunResponse status for a record status (docs/contract.md §3.1). */
export function responseStatusOf(
  status: RunRecordStatus,
): 'success' | 'error' | 'cancelled' | 'awaiting_approval' | 'awaiting_budget' | 'interrupted' | 'timeout' {
  switch (status) {
    case 'completed':
      return 'success';
    case 'awaiting_approval':
      return 'awaiting_approval';
    case 'awaiting_budget':
      return 'awaiting_budget';
    case 'cancelled':
      return 'cancelled';
    case 'timeout':
      return 'timeout';
    case 'interrupted':
    case 'running':
    case 'queued':
      return 'interrupted';
    default:
      return 'error';
  }
}

/** The RunResponse / `complete` frame: every key of the run result. */
export function runResponseOf(r: RunRecord, redactor: Redactor) {
  const status = responseStatusOf(r.status);
  const waiting = WAITING_RUN_STATUSES.has(r.status);
  const shown = r.approvals.map((a) => approvalForAnswer(a, redactor));
  return {
    agent_name: r.agent_name,
    approvals: r.status === 'awaiting_approval' ? shown.filter((a) => a.status === 'pending') : shown.length ? shown : null,
    budget_request: r.budget_request,
    guardrail_result: r.guardrail_result,
    metric: { usage: r.usage, steps: r.step, tool_calls: r.tool_calls.length },
    response: waiting ? null : r.response,
    run_id: r.run_id,
    session_id: r.session_id,
    status,
    trace_id: r.trace_id,
    termination_reason: r.termination_reason,
    side_effects: status === 'success' ? null : sideEffectsOf(r),
    error: r.error,
  };
}

// The value type of kind `runs` for the typed repositories (src/store/repos/values.ts).
declare module '../store/repos/values.js' {
  interface RecordValues {
    runs: RunRecord;
  }
}
