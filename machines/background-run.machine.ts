// One background run as a pure statechart (decisions.md §7). Its states are the RunStatus values,
// so the stored row's `status` IS the state and a row restores the actor without a separate
// snapshot format. Every transition computes the whole next row (public BackgroundRun + the
// internal bookkeeping) from the event alone: ids, timestamps and leases arrive inside events,
// never from a clock or a random source here.
//
// Effects are named, not performed: `record` (write the row CAS-fenced, with its attempts, then
// emit the lifecycle events in order), `startAgent` (start or continue the agent run of this
// attempt) and `cancelAgent`. The background manager binds them with `.provide()`.
//
// Lease expiry and retry-at are fields of the row that a ticker turns into RECOVER / RETRY_DUE
// events (architecture fact 2): nothing here uses `after`.
import { assign, setup, type Snapshot } from 'xstate';
import type { AttemptReason, AttemptStatus, BackgroundAttempt, BackgroundRun, BackgroundRunStatus, OverlapPolicy } from './background-types.js';
import { retryDecision, type RetryPolicy } from './policies/retry.js';

export const BACKGROUND_RUN_MACHINE_VERSION = 1;

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
  | { type: 'SKIP'; at: string; reason: string }
  /** The lease lapsed (or its owner is known dead): the finder takes over with a new lease. */
  | { type: 'RECOVER'; at: string; worker_id: string; lease_token: string; lease_expires_at: string; attempt_id: string; previous_owner?: string | null };

export interface RecordParams {
  events: LifecycleEvent[];
  /** Attempt records to upsert in the same atomic write as the row. */
  attempts: BackgroundAttempt[];
}

export interface StartAgentParams {
  mode: 'fresh' | 'continue';
  agent_run_id: string;
  attempt: number;
}

type Ctx = BackgroundRunContext;
type Ev<T extends BackgroundRunEvent['type']> = Extract<BackgroundRunEvent, { type: T }>;

// ---------------------------------------------------------------- pure reducers, one per transition

const withRun = (ctx: Ctx, run: Partial<BackgroundRun>, internal: Partial<BackgroundRunInternal> = {}): Ctx => ({
  run: { ...ctx.run, ...run },
  internal: { ...ctx.internal, ...internal },
});

const noLease = { lease_owner: null, lease_token: null, lease_expires_at: null } as const;

function closeAttempt(ctx: Ctx, status: AttemptStatus, at: string, error: string | null, retryDelay: number | null = null): AttemptRecord | null {
  const a = ctx.internal.current_attempt;
  if (!a) return null;
  return { ...a, status, finished_at: at, error, retry_delay_seconds: retryDelay };
}

function openAttempt(
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
function closing(ctx: Ctx, status: AttemptStatus, at: string, error: string | null, retryDelay: number | null = null): Partial<BackgroundRunInternal> {
  return { current_attempt: null, last_closed_attempt: closeAttempt(ctx, status, at, error, retryDelay) };
}

const closedOnly = (ctx: Ctx): AttemptRecord[] => (ctx.internal.last_closed_attempt ? [ctx.internal.last_closed_attempt] : []);

/** Agent run id of attempt n when it starts from scratch. */
export function agentRunIdFor(runId: string, attempt: number): string {
  return attempt <= 1 ? runId : `${runId}.a${attempt}`;
}

/** The background run id an agent run belongs to (inverse of agentRunIdFor). */
export function backgroundRunIdOf(agentRunId: string): string {
  return agentRunId.replace(/\.a\d+$/, '');
}

function claimed(ctx: Ctx, e: Ev<'CLAIM'>): Ctx {
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

function startedFresh(ctx: Ctx, e: Ev<'START'>): Ctx {
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

function startedContinue(ctx: Ctx, e: Ev<'START'>): Ctx {
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

function heartbeat(ctx: Ctx, e: Ev<'HEARTBEAT'>): Ctx {
  return withRun(ctx, { heartbeat_at: e.at, lease_expires_at: e.lease_expires_at });
}

function finished(
  ctx: Ctx,
  status: 'completed' | 'failed' | 'timeout' | 'cancelled',
  at: string,
  error: string | null,
  extra: Partial<BackgroundRun> = {},
): Ctx {
  return withRun(ctx, { status, finished_at: at, error, ...noLease, ...extra }, { retry_at: null, not_before: null });
}

function sideEffectsMeta(ctx: Ctx, e: Ev<'AGENT_DONE'>): Record<string, unknown> {
  return e.side_effects.length > 0 ? { ...ctx.run.metadata, side_effects: e.side_effects } : ctx.run.metadata;
}

function retryOf(ctx: Ctx, e: Ev<'AGENT_DONE'>) {
  const errorKind = e.outcome === 'timeout' ? 'timeout' : 'exception';
  return retryDecision({
    policy: ctx.internal.retry_policy,
    attemptNumber: ctx.run.attempt,
    errorKind,
    hasUnsafeSideEffects: e.side_effects.length > 0,
  });
}

function addSeconds(iso: string, seconds: number): string {
  return new Date(Date.parse(iso) + seconds * 1000).toISOString();
}

// ---------------------------------------------------------------- the machine

const rec = (events: LifecycleEvent[], attempts: AttemptRecord[] = []): RecordParams => ({ events, attempts });

/**
 * A context update for events of type `T`, to be named in setup's actions (setup types their
 * event as the machine's whole event union; the transition that names it takes only `T`).
 */
function on<T extends BackgroundRunEvent['type']>(_type: T, reduce: (context: Ctx, event: Ev<T>) => Ctx) {
  return ({ context, event }: { context: Ctx; event: BackgroundRunEvent }): Ctx => reduce(context, event as Ev<T>);
}

export const backgroundRunMachine = setup({
  types: {
    context: {} as BackgroundRunContext,
    events: {} as BackgroundRunEvent,
    input: {} as BackgroundRunContext,
  },
  actions: {
    /** Named effect: write the row (+ attempts) fenced by its version, then emit `events` in order. */
    record: (_args, _params: RecordParams) => {},
    /** Named effect: start (fresh) or continue the agent run of the current attempt. */
    startAgent: (_args, _params: StartAgentParams) => {},
    /** Named effect: stop the agent run promptly. */
    cancelAgent: (_args, _params: { agent_run_id: string | null }) => {},
    /** queued -> claimed: the lease of the claiming worker. */
    applyClaim: assign(on('CLAIM', claimed)),
    /** queued -> skipped (the overlap policy said so). */
    applySkip: assign(on('SKIP', (context, event) => withRun(context, { status: 'skipped', finished_at: event.at, error: event.reason }))),
    /** queued or claimed -> cancelled. */
    cancelBeforeStart: assign(
      on('CANCEL', (context, event) => finished(context, 'cancelled', event.at, 'cancelled before it started', { cancel_requested_at: event.at })),
    ),
    /** claimed -> running, the paused attempt goes on. */
    continueAttempt: assign(on('START', startedContinue)),
    /** claimed -> running, a new attempt. */
    startAttempt: assign(on('START', startedFresh)),
    /** The lease is extended. */
    applyHeartbeat: assign(on('HEARTBEAT', heartbeat)),
    /** claimed -> queued: the claim lapsed before the agent started. */
    requeueLapsedClaim: assign(
      on('RECOVER', (context, event) =>
        withRun(
          context,
          { status: 'queued', queued_at: event.at, ...noLease },
          {
            next_reason: context.internal.continue_agent ? context.internal.next_reason : 'lease_expired',
          },
        ),
      ),
    ),
    /** running -> completed. */
    complete: assign(
      on('AGENT_DONE', (context, event) =>
        withRun(
          finished(context, 'completed', event.at, null, { result_preview: event.result_preview, metadata: sideEffectsMeta(context, event) }),
          {},
          closing(context, 'completed', event.at, null),
        ),
      ),
    ),
    /** running -> awaiting (approval or budget). */
    park: assign(
      on('AGENT_DONE', (context, event) => withRun(context, { status: event.outcome as BackgroundRunStatus, ...noLease }, { continue_agent: true })),
    ),
    /** running -> cancelled: the agent run ended cancelled. */
    finishCancelled: assign(
      on('AGENT_DONE', (context, event) =>
        withRun(
          finished(context, 'cancelled', event.at, event.error ?? 'cancelled', {
            cancel_requested_at: context.run.cancel_requested_at ?? event.at,
            metadata: sideEffectsMeta(context, event),
          }),
          {},
          closing(context, 'cancelled', event.at, event.error ?? 'cancelled'),
        ),
      ),
    ),
    /** running -> retrying: the attempt failed and a retry is allowed. */
    scheduleRetry: assign(
      on('AGENT_DONE', (context, event) => {
        const d = retryOf(context, event);
        const delay = d.retry ? d.delaySeconds : 0;
        const status: AttemptStatus = event.outcome === 'timeout' ? 'timeout' : 'failed';
        return withRun(
          context,
          { status: 'retrying', error: event.error, ...noLease },
          {
            retry_at: addSeconds(event.at, delay),
            continue_agent: false,
            next_reason: 'retry',
            ...closing(context, status, event.at, event.error, delay),
          },
        );
      }),
    ),
    /** running -> timeout, no retry. */
    finishTimeout: assign(
      on('AGENT_DONE', (context, event) =>
        withRun(
          finished(context, 'timeout', event.at, event.error, { metadata: sideEffectsMeta(context, event) }),
          {},
          closing(context, 'timeout', event.at, event.error),
        ),
      ),
    ),
    /** running -> failed, no retry. */
    finishFailed: assign(
      on('AGENT_DONE', (context, event) =>
        withRun(
          finished(context, 'failed', event.at, event.error ?? 'the agent run failed', { metadata: sideEffectsMeta(context, event) }),
          {},
          closing(context, 'failed', event.at, event.error),
        ),
      ),
    ),
    /** running: cancel requested, the agent run is stopped. */
    requestCancel: assign(on('CANCEL', (context, event) => withRun(context, { cancel_requested_at: context.run.cancel_requested_at ?? event.at }))),
    /** running: the lease lapsed, a recovery attempt continues the agent run. */
    recoverAttempt: assign(
      on('RECOVER', (context, event) => {
        const n = context.run.attempt + 1;
        const agentRunId = context.internal.agent_run_id ?? agentRunIdFor(context.run.run_id, n);
        return withRun(
          context,
          {
            attempt: n,
            lease_owner: event.worker_id,
            lease_token: event.lease_token,
            lease_generation: context.run.lease_generation + 1,
            lease_expires_at: event.lease_expires_at,
            heartbeat_at: event.at,
          },
          {
            agent_run_id: agentRunId,
            continue_agent: false,
            last_closed_attempt: closeAttempt(context, 'interrupted', event.at, 'the lease lapsed: its worker stopped'),
            current_attempt: openAttempt(context, n, event.attempt_id, 'recovery', event.at, event.worker_id, event.lease_token, agentRunId),
          },
        );
      }),
    ),
    /** running -> failed: the lease lapsed and no attempts remain. */
    failLapsed: assign(
      on('RECOVER', (context, event) =>
        withRun(
          finished(context, 'failed', event.at, 'the lease lapsed and no attempts remain'),
          {},
          closing(context, 'interrupted', event.at, 'the lease lapsed: its worker stopped'),
        ),
      ),
    ),
    /** retrying -> queued. */
    requeueForRetry: assign(on('RETRY_DUE', (context, event) => withRun(context, { status: 'queued', queued_at: event.at }, { retry_at: null }))),
    /** retrying -> cancelled. */
    cancelRetrying: assign(
      on('CANCEL', (context, event) => finished(context, 'cancelled', event.at, 'cancelled while waiting to retry', { cancel_requested_at: event.at })),
    ),
    /** awaiting -> queued: a person decided. */
    requeueResumed: assign(on('RESUME', (context, event) => withRun(context, { status: 'queued', queued_at: event.at }))),
    /** awaiting -> cancelled. */
    cancelAwaiting: assign(
      on('CANCEL', (context, event) =>
        withRun(
          finished(context, 'cancelled', event.at, 'cancelled while waiting for a person', { cancel_requested_at: event.at }),
          {},
          closing(context, 'cancelled', event.at, 'cancelled while waiting for a person'),
        ),
      ),
    ),
  },
  guards: {
    continuesAgent: ({ context }) => context.internal.continue_agent && context.internal.agent_run_id !== null,
    staleAgent: ({ context, event }) => (event as Ev<'AGENT_DONE'>).agent_run_id !== context.internal.agent_run_id,
    outcomeIs: ({ event }, outcome: AgentOutcome) => (event as Ev<'AGENT_DONE'>).outcome === outcome,
    parked: ({ event }) => {
      const o = (event as Ev<'AGENT_DONE'>).outcome;
      return o === 'awaiting_approval' || o === 'awaiting_budget';
    },
    canRetry: ({ context, event }) => {
      const e = event as Ev<'AGENT_DONE'>;
      if (e.outcome !== 'failed' && e.outcome !== 'timeout') return false;
      // A cancel request that raced the failure wins: nobody wants a retry of a cancelled run.
      if (!e.retryable || context.run.cancel_requested_at !== null) return false;
      return retryOf(context, e).retry;
    },
    attemptsRemain: ({ context }) => context.run.attempt < context.run.max_attempts,
  },
}).createMachine({
  id: 'backgroundRun',
  context: ({ input }) => input,
  initial: 'queued',
  states: {
    queued: {
      on: {
        CLAIM: {
          target: 'claimed',
          actions: ['applyClaim', { type: 'record', params: () => rec([{ type: 'background_run_claimed' }]) }],
        },
        SKIP: {
          target: 'skipped',
          actions: ['applySkip', { type: 'record', params: ({ event }) => rec([{ type: 'background_run_skipped', data: { reason: event.reason } }]) }],
        },
        CANCEL: {
          target: 'cancelled',
          actions: [
            'cancelBeforeStart',
            { type: 'record', params: ({ event }) => rec([{ type: 'background_run_cancelled', data: { reason: event.reason ?? null, from: 'queued' } }]) },
          ],
        },
      },
    },
    claimed: {
      on: {
        START: [
          {
            guard: 'continuesAgent',
            target: 'running',
            actions: [
              'continueAttempt',
              {
                type: 'record',
                params: ({ context }) =>
                  rec(
                    [{ type: 'background_run_started', data: { continued: true, agent_run_id: context.internal.agent_run_id } }],
                    context.internal.current_attempt ? [context.internal.current_attempt] : [],
                  ),
              },
              {
                type: 'startAgent',
                params: ({ context }) => ({ mode: 'continue' as const, agent_run_id: context.internal.agent_run_id!, attempt: context.run.attempt }),
              },
            ],
          },
          {
            target: 'running',
            actions: [
              'startAttempt',
              {
                type: 'record',
                params: ({ context }) =>
                  rec(
                    [
                      {
                        type: 'background_run_started',
                        data: { agent_run_id: context.internal.agent_run_id, reason: context.internal.current_attempt?.reason ?? null },
                      },
                    ],
                    context.internal.current_attempt ? [context.internal.current_attempt] : [],
                  ),
              },
              {
                type: 'startAgent',
                params: ({ context }) => ({ mode: 'fresh' as const, agent_run_id: context.internal.agent_run_id!, attempt: context.run.attempt }),
              },
            ],
          },
        ],
        HEARTBEAT: {
          actions: ['applyHeartbeat', { type: 'record', params: () => rec([{ type: 'background_run_heartbeat' }]) }],
        },
        // The claim lapsed before the agent started: back in the queue; nothing ran.
        RECOVER: {
          target: 'queued',
          actions: [
            'requeueLapsedClaim',
            {
              type: 'record',
              params: ({ event }) =>
                rec([{ type: 'background_run_recovered', data: { from: 'claimed', requeued: true, previous_owner: event.previous_owner ?? null } }]),
            },
          ],
        },
        CANCEL: {
          target: 'cancelled',
          actions: [
            'cancelBeforeStart',
            { type: 'record', params: ({ event }) => rec([{ type: 'background_run_cancelled', data: { reason: event.reason ?? null, from: 'claimed' } }]) },
          ],
        },
      },
    },
    running: {
      on: {
        HEARTBEAT: {
          actions: ['applyHeartbeat', { type: 'record', params: () => rec([{ type: 'background_run_heartbeat' }]) }],
        },
        AGENT_DONE: [
          // A late answer of an earlier attempt's agent run changes nothing.
          { guard: 'staleAgent' },
          {
            guard: { type: 'outcomeIs', params: 'completed' },
            target: 'completed',
            actions: [
              'complete',
              {
                type: 'record',
                params: ({ context }) => rec([{ type: 'background_run_completed', data: { result_preview: context.run.result_preview } }], closedOnly(context)),
              },
            ],
          },
          {
            guard: 'parked',
            target: 'awaiting',
            actions: [
              'park',
              // No lifecycle event names a pause for a person; the row (and run.json) still change.
              { type: 'record', params: () => rec([]) },
            ],
          },
          {
            guard: { type: 'outcomeIs', params: 'cancelled' },
            target: 'cancelled',
            actions: [
              'finishCancelled',
              { type: 'record', params: ({ context }) => rec([{ type: 'background_run_cancelled', data: { from: 'running' } }], closedOnly(context)) },
            ],
          },
          {
            guard: 'canRetry',
            target: 'retrying',
            actions: [
              'scheduleRetry',
              {
                type: 'record',
                params: ({ context, event }) =>
                  rec(
                    [
                      // timeout_seconds stopped the attempt: background_run_timeout says so even when a retry follows.
                      ...(event.outcome === 'timeout' ? [{ type: 'background_run_timeout' as const, data: { will_retry: true, error: event.error } }] : []),
                      {
                        type: 'background_run_retrying' as const,
                        data: {
                          error: event.error,
                          error_kind: event.outcome === 'timeout' ? 'timeout' : 'exception',
                          failed_attempt: context.run.attempt,
                          next_attempt: context.run.attempt + 1,
                          retry_delay_seconds: context.internal.last_closed_attempt?.retry_delay_seconds ?? 0,
                          retry_at: context.internal.retry_at,
                        },
                      },
                    ],
                    closedOnly(context),
                  ),
              },
            ],
          },
          {
            guard: { type: 'outcomeIs', params: 'timeout' },
            target: 'timeout',
            actions: [
              'finishTimeout',
              {
                type: 'record',
                params: ({ context, event }) =>
                  rec(
                    [{ type: 'background_run_timeout', data: { will_retry: false, error: event.error, side_effects: event.side_effects } }],
                    closedOnly(context),
                  ),
              },
            ],
          },
          {
            target: 'failed',
            actions: [
              'finishFailed',
              {
                type: 'record',
                params: ({ context, event }) =>
                  rec(
                    [
                      {
                        type: 'background_run_failed',
                        data: {
                          error: context.run.error,
                          side_effects: event.side_effects,
                          not_retried_because_of_side_effects: event.side_effects.length > 0,
                        },
                      },
                    ],
                    closedOnly(context),
                  ),
              },
            ],
          },
        ],
        // Cancelling a running run goes through its agent run, whose end (AGENT_DONE cancelled) finishes this one.
        CANCEL: {
          actions: [
            'requestCancel',
            { type: 'record', params: () => rec([]) },
            { type: 'cancelAgent', params: ({ context }) => ({ agent_run_id: context.internal.agent_run_id }) },
          ],
        },
        RECOVER: [
          {
            guard: 'attemptsRemain',
            actions: [
              'recoverAttempt',
              {
                type: 'record',
                params: ({ context, event }) =>
                  rec(
                    [
                      {
                        type: 'background_run_recovered',
                        data: {
                          from: 'running',
                          previous_owner: event.previous_owner ?? null,
                          interrupted_attempt: context.run.attempt - 1,
                          continues_agent_run: context.internal.agent_run_id,
                        },
                      },
                      { type: 'background_run_started', data: { agent_run_id: context.internal.agent_run_id, reason: 'recovery' } },
                    ],
                    [...closedOnly(context), context.internal.current_attempt!],
                  ),
              },
              {
                type: 'startAgent',
                params: ({ context }) => ({ mode: 'continue' as const, agent_run_id: context.internal.agent_run_id!, attempt: context.run.attempt }),
              },
            ],
          },
          {
            target: 'failed',
            actions: [
              'failLapsed',
              {
                type: 'record',
                params: ({ context, event }) =>
                  rec(
                    [
                      { type: 'background_run_recovered', data: { from: 'running', previous_owner: event.previous_owner ?? null, attempts_exhausted: true } },
                      { type: 'background_run_failed', data: { error: context.run.error } },
                    ],
                    closedOnly(context),
                  ),
              },
            ],
          },
        ],
      },
    },
    retrying: {
      on: {
        RETRY_DUE: {
          target: 'queued',
          actions: [
            'requeueForRetry',
            {
              type: 'record',
              params: ({ context }) => rec([{ type: 'background_run_queued', data: { reason: 'retry', next_attempt: context.run.attempt + 1 } }]),
            },
          ],
        },
        CANCEL: {
          target: 'cancelled',
          actions: [
            'cancelRetrying',
            { type: 'record', params: ({ event }) => rec([{ type: 'background_run_cancelled', data: { reason: event.reason ?? null, from: 'retrying' } }]) },
          ],
        },
      },
    },
    // awaiting_approval and awaiting_budget differ only in the status value kept in context.run.status.
    awaiting: {
      on: {
        RESUME: {
          target: 'queued',
          actions: [
            'requeueResumed',
            {
              type: 'record',
              params: ({ context }) => rec([{ type: 'background_run_queued', data: { reason: 'resumed', agent_run_id: context.internal.agent_run_id } }]),
            },
          ],
        },
        CANCEL: {
          target: 'cancelled',
          actions: [
            'cancelAwaiting',
            {
              type: 'record',
              params: ({ context, event }) =>
                rec([{ type: 'background_run_cancelled', data: { reason: event.reason ?? null, from: 'awaiting' } }], closedOnly(context)),
            },
            { type: 'cancelAgent', params: ({ context }) => ({ agent_run_id: context.internal.agent_run_id }) },
          ],
        },
      },
    },
    completed: { type: 'final' },
    failed: { type: 'final' },
    timeout: { type: 'final' },
    cancelled: { type: 'final' },
    skipped: { type: 'final' },
  },
});

/** Machine state for a stored status (the two awaiting statuses share one state). */
export function stateOfStatus(status: BackgroundRunStatus): string {
  return status === 'awaiting_approval' || status === 'awaiting_budget' ? 'awaiting' : status;
}

/**
 * A persisted snapshot for a stored row, so an actor can be restored from the row alone (the row's
 * status is the state). Built by xstate itself (`resolveState`, then `getPersistedSnapshot`), not
 * by hand, so its shape is whatever the installed xstate restores. Restoring runs no entry action
 * (architecture fact 1).
 */
export function persistedSnapshotOf(context: BackgroundRunContext): Snapshot<unknown> {
  return backgroundRunMachine.getPersistedSnapshot(backgroundRunMachine.resolveState({ value: stateOfStatus(context.run.status), context }));
}
