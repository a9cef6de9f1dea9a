// The background run's domain model and its pure reducers, one per transition: what
// background-run.machine.ts names in setup({ actions }). Split from the machine file so the
// statechart reads as states and transitions; everything here is a pure function of (context, event).
import type { AttemptReason, AttemptStatus, BackgroundAttempt, BackgroundRun, OverlapPolicy } from './background-types.js';
import { retryDecision, type RetryPolicy } from './policies/retry.js';

export type BackgroundLifecycleEventType =
  | 'background_task_scheduled'
  | 'background_run_queued'
  | 'background_run_claimed'
  | 'background_run_started'
  | 'background_run_heartbeat'
  | 'background_run_retrying'
  | 'background_run_recovered'
  | 'background_run_completed'
  | 'background_run_failed'
  | 'background_run_timeout'
  | 'background_run_cancelled'
  | 'background_run_skipped';

/** A lifecycle event the `record` effect emits after the row is durable; `data` goes to the event's metadata. */
export interface LifecycleEvent {
  type: BackgroundLifecycleEventType;
  data?: Record<string, unknown>;
}

export interface SideEffectInfo {
  tool_call_id: string;
  tool_name: string;
  outcome: string;
}

/** What the run needs that the public BackgroundRun has no field for. Stored beside it in the row. */
export interface BackgroundRunInternal {
  /** The background run's own trace and its `background.run` span. */
  trace_id: string;
  span_id: string;
  /** Agent run of the current attempt: the run id for attempt 1, `<run_id>.a<n>` for a retry from scratch. */
  agent_run_id: string | null;
  /** The next START continues agent_run_id (after a pause for a person) instead of a new attempt. */
  continue_agent: boolean;
  /** Reason of the next attempt; null means initial (attempt 1) or retry (later ones). */
  next_reason: AttemptReason | null;
  /** A retrying run is requeued at this instant (RETRY_DUE). */
  retry_at: string | null;
  /** Not claimable before this instant (jitter of a scheduled occurrence). */
  not_before: string | null;
  retry_policy: RetryPolicy;
  timeout_seconds: number | null;
  overlap_policy: OverlapPolicy;
  write_events_jsonl: boolean;
  write_run_json: boolean;
  current_attempt: AttemptRecord | null;
  /** The attempt the latest transition closed (written in the same atomic write as the row). */
  last_closed_attempt: AttemptRecord | null;
}

/** A BackgroundAttempt plus the agent run it drove (the spec's attempt allows more properties). */
export type AttemptRecord = BackgroundAttempt & { agent_run_id: string | null };

export interface BackgroundRunContext {
  run: BackgroundRun;
  internal: BackgroundRunInternal;
}

export type AgentOutcome = 'completed' | 'failed' | 'timeout' | 'cancelled' | 'awaiting_approval' | 'awaiting_budget';

export type BackgroundRunEvent =
  | { type: 'CLAIM'; at: string; worker_id: string; lease_token: string; lease_expires_at: string }
  | { type: 'START'; at: string; attempt_id: string }
  | { type: 'HEARTBEAT'; at: string; lease_expires_at: string }
  | {
      type: 'AGENT_DONE';
      at: string;
      agent_run_id: string;
      outcome: AgentOutcome;
      error: string | null;
      result_preview: string | null;
      /** False for failures a retry cannot fix (a guardrail block). */
      retryable: boolean;
      /** Non-idempotent calls with outcome success/unknown: a retry from scratch would repeat them. */
      side_effects: SideEffectInfo[];
    }
  | { type: 'RETRY_DUE'; at: string }
  | { type: 'RESUME'; at: string }
  | { type: 'CANCEL'; at: string; reason?: string | null }
  /** timeout_seconds reached for the attempt driving `agent_run_id`: its agent run is stopped (AGENT_DONE `timeout` follows). */
  | { type: 'TIMEOUT'; at: string; agent_run_id: string }
  | { type: 'SKIP'; at: string; reason: string }
  /**
   * The lease lapsed (or its owner is known dead): the finder takes over with a new lease. `agent`
   * is the running attempt's agent run as the finder read it: one that already ended or parked
   * settles the run from that (no new attempt, nothing runs again); absent, the attempt is recovered.
   */
  | {
      type: 'RECOVER';
      at: string;
      worker_id: string;
      lease_token: string;
      lease_expires_at: string;
      attempt_id: string;
      previous_owner?: string | null;
      agent?: AgentSettled | null;
    };

/**
 * An agent run's end or park as read from its record (RECOVER.agent): what AGENT_DONE would have
 * carried had its owner lived to send it, plus whether a person already decided a parked one.
 */
export interface AgentSettled {
  outcome: AgentOutcome;
  error: string | null;
  result_preview: string | null;
  retryable: boolean;
  side_effects: SideEffectInfo[];
  /** Parked (awaiting a person) and already decided: the run goes back to the queue at once. */
  decided: boolean;
}

/**
 * The events a RECOVER whose agent run already settled stands for: its AGENT_DONE, and for a
 * parked agent run a person already decided, the RESUME that requeues it.
 */
export function settledEvents(ctx: Ctx, e: Ev<'RECOVER'>): BackgroundRunEvent[] {
  const a = e.agent;
  if (!a || ctx.internal.agent_run_id === null) return [];
  const { decided, ...done } = a;
  const parked = a.outcome === 'awaiting_approval' || a.outcome === 'awaiting_budget';
  return [
    { type: 'AGENT_DONE', at: e.at, agent_run_id: ctx.internal.agent_run_id, ...done },
    ...(parked && decided ? [{ type: 'RESUME' as const, at: e.at }] : []),
  ];
}

export interface RecordParams {
  events: LifecycleEvent[];
  /** Attempt records to upsert in the same atomic write as the row. */
  attempts: BackgroundAttempt[];
}

/** The input of the agent run child actor (`agentRun`) the `running` state invokes. */
export interface StartAgentParams {
  mode: 'fresh' | 'continue';
  agent_run_id: string;
  attempt: number;
}

/** What the background run tells its agent run child: stop (a cancel), or stop for the attempt's timeout. */
export type AgentRunChildEvent = { type: 'CANCEL' } | { type: 'TIMEOUT' };

/**
 * The child's input for the event that entered `running`: a START that opened a new attempt (its
 * attempt id is the current attempt's) starts the agent run fresh; a START after a pause and a
 * RECOVER continue it (completed tool calls do not repeat).
 */
export function agentRunInput(ctx: Ctx, event: BackgroundRunEvent): StartAgentParams {
  const fresh = event.type === 'START' && ctx.internal.current_attempt?.attempt_id === event.attempt_id;
  return { mode: fresh ? 'fresh' : 'continue', agent_run_id: ctx.internal.agent_run_id!, attempt: ctx.run.attempt };
}

export type Ctx = BackgroundRunContext;
export type Ev<T extends BackgroundRunEvent['type']> = Extract<BackgroundRunEvent, { type: T }>;

// ---------------------------------------------------------------- pure reducers, one per transition

export const withRun = (ctx: Ctx, run: Partial<BackgroundRun>, internal: Partial<BackgroundRunInternal> = {}): Ctx => ({
  run: { ...ctx.run, ...run },
  internal: { ...ctx.internal, ...internal },
});

export const noLease = { lease_owner: null, lease_token: null, lease_expires_at: null } as const;

export function closeAttempt(ctx: Ctx, status: AttemptStatus, at: string, error: string | null, retryDelay: number | null = null): AttemptRecord | null {
  const a = ctx.internal.current_attempt;
  if (!a) return null;
  return { ...a, status, finished_at: at, error, retry_delay_seconds: retryDelay };
}

export function openAttempt(
  ctx: Ctx,
  n: number,
  attemptId: string,
  reason: AttemptReason,
  at: string,
  workerId: string,
  leaseToken: string,
  agentRunId: string,
): AttemptRecord {
  return {
    attempt_id: attemptId,
    run_id: ctx.run.run_id,
    attempt_number: n,
    worker_id: workerId,
    lease_token: leaseToken,
    status: 'running',
    reason,
    started_at: at,
    finished_at: null,
    error: null,
    retry_delay_seconds: null,
    agent_run_id: agentRunId,
  };
}

/** Closes the current attempt: it becomes last_closed_attempt and the run has no current one. */
export function closing(ctx: Ctx, status: AttemptStatus, at: string, error: string | null, retryDelay: number | null = null): Partial<BackgroundRunInternal> {
  return { current_attempt: null, last_closed_attempt: closeAttempt(ctx, status, at, error, retryDelay) };
}

export const closedOnly = (ctx: Ctx): AttemptRecord[] => (ctx.internal.last_closed_attempt ? [ctx.internal.last_closed_attempt] : []);

/** Agent run id of attempt n when it starts from scratch. */
export function agentRunIdFor(runId: string, attempt: number): string {
  return attempt <= 1 ? runId : `${runId}.a${attempt}`;
}

/** The background run id an agent run belongs to (inverse of agentRunIdFor). */
export function backgroundRunIdOf(agentRunId: string): string {
  return agentRunId.replace(/\.a\d+$/, '');
}

export function claimed(ctx: Ctx, e: Ev<'CLAIM'>): Ctx {
  return withRun(
    ctx,
    {
      status: 'claimed',
      lease_owner: e.worker_id,
      lease_token: e.lease_token,
      lease_generation: ctx.run.lease_generation + 1,
      claimed_at: e.at,
      heartbeat_at: e.at,
      lease_expires_at: e.lease_expires_at,
    },
    { not_before: null },
  );
}

export function startedFresh(ctx: Ctx, e: Ev<'START'>): Ctx {
  const n = ctx.run.attempt + 1;
  const agentRunId = agentRunIdFor(ctx.run.run_id, n);
  const reason: AttemptReason = ctx.internal.next_reason ?? (n === 1 ? 'initial' : 'retry');
  const attempt = openAttempt(ctx, n, e.attempt_id, reason, e.at, ctx.run.lease_owner ?? '', ctx.run.lease_token ?? '', agentRunId);
  return withRun(
    ctx,
    {
      status: 'running',
      attempt: n,
      started_at: ctx.run.started_at ?? e.at,
      heartbeat_at: e.at,
      error: null,
      metadata: { ...ctx.run.metadata, agent_run_id: agentRunId },
    },
    { agent_run_id: agentRunId, continue_agent: false, next_reason: null, current_attempt: attempt },
  );
}

export function startedContinue(ctx: Ctx, e: Ev<'START'>): Ctx {
  // The same attempt goes on (a person decided): it was never closed, only its lease changes.
  const a = ctx.internal.current_attempt;
  return withRun(
    ctx,
    { status: 'running', heartbeat_at: e.at },
    {
      continue_agent: false,
      current_attempt: a ? { ...a, worker_id: ctx.run.lease_owner ?? a.worker_id, lease_token: ctx.run.lease_token ?? a.lease_token } : a,
    },
  );
}

export function heartbeat(ctx: Ctx, e: Ev<'HEARTBEAT'>): Ctx {
  return withRun(ctx, { heartbeat_at: e.at, lease_expires_at: e.lease_expires_at });
}

export function finished(
  ctx: Ctx,
  status: 'completed' | 'failed' | 'timeout' | 'cancelled',
  at: string,
  error: string | null,
  extra: Partial<BackgroundRun> = {},
): Ctx {
  return withRun(ctx, { status, finished_at: at, error, ...noLease, ...extra }, { retry_at: null, not_before: null });
}

export function sideEffectsMeta(ctx: Ctx, e: Ev<'AGENT_DONE'>): Record<string, unknown> {
  return e.side_effects.length > 0 ? { ...ctx.run.metadata, side_effects: e.side_effects } : ctx.run.metadata;
}

export function retryOf(ctx: Ctx, e: Ev<'AGENT_DONE'>) {
  const errorKind = e.outcome === 'timeout' ? 'timeout' : 'exception';
  return retryDecision({
    policy: ctx.internal.retry_policy,
    attemptNumber: ctx.run.attempt,
    errorKind,
    hasUnsafeSideEffects: e.side_effects.length > 0,
  });
}

export function addSeconds(iso: string, seconds: number): string {
  return new Date(Date.parse(iso) + seconds * 1000).toISOString();
}

// ---------------------------------------------------------------- reducers of the longer transitions

/**
 * queued_at stays the time the run first entered the queue: a run re-queued after a pause for a
 * person, a retry delay or a lapsed claim keeps it, so it never reads as later than started_at
 * (kept from the first start too); the lifecycle events hold each later re-queue.
 */
export const firstQueuedAt = (ctx: Ctx, at: string): string => ctx.run.queued_at ?? at;

/** claimed -> queued: the claim lapsed before the agent started (its reason kept for a continued attempt). */
export const requeuedLapsedClaim = (ctx: Ctx, e: Ev<'RECOVER'>): Ctx =>
  withRun(
    ctx,
    { status: 'queued', queued_at: firstQueuedAt(ctx, e.at), ...noLease },
    { next_reason: ctx.internal.continue_agent ? ctx.internal.next_reason : 'lease_expired' },
  );

/** running -> completed. */
export const completedBy = (ctx: Ctx, e: Ev<'AGENT_DONE'>): Ctx =>
  withRun(
    finished(ctx, 'completed', e.at, null, { result_preview: e.result_preview, metadata: sideEffectsMeta(ctx, e) }),
    {},
    closing(ctx, 'completed', e.at, null),
  );

/** running -> cancelled: the agent run ended cancelled. */
export const cancelledBy = (ctx: Ctx, e: Ev<'AGENT_DONE'>): Ctx =>
  withRun(
    finished(ctx, 'cancelled', e.at, e.error ?? 'cancelled', {
      cancel_requested_at: ctx.run.cancel_requested_at ?? e.at,
      metadata: sideEffectsMeta(ctx, e),
    }),
    {},
    closing(ctx, 'cancelled', e.at, e.error ?? 'cancelled'),
  );

/** running -> retrying: the attempt failed and a retry is allowed. */
export function retryScheduled(ctx: Ctx, e: Ev<'AGENT_DONE'>): Ctx {
  const d = retryOf(ctx, e);
  const delay = d.retry ? d.delaySeconds : 0;
  const status: AttemptStatus = e.outcome === 'timeout' ? 'timeout' : 'failed';
  return withRun(
    ctx,
    { status: 'retrying', error: e.error, ...noLease },
    { retry_at: addSeconds(e.at, delay), continue_agent: false, next_reason: 'retry', ...closing(ctx, status, e.at, e.error, delay) },
  );
}

/** running: the lease lapsed, a recovery attempt continues the agent run. */
export function recoveredAttempt(ctx: Ctx, e: Ev<'RECOVER'>): Ctx {
  const n = ctx.run.attempt + 1;
  const agentRunId = ctx.internal.agent_run_id ?? agentRunIdFor(ctx.run.run_id, n);
  return withRun(
    ctx,
    {
      attempt: n,
      lease_owner: e.worker_id,
      lease_token: e.lease_token,
      lease_generation: ctx.run.lease_generation + 1,
      lease_expires_at: e.lease_expires_at,
      heartbeat_at: e.at,
    },
    {
      agent_run_id: agentRunId,
      continue_agent: false,
      last_closed_attempt: closeAttempt(ctx, 'interrupted', e.at, 'the lease lapsed: its worker stopped'),
      current_attempt: openAttempt(ctx, n, e.attempt_id, 'recovery', e.at, e.worker_id, e.lease_token, agentRunId),
    },
  );
}
