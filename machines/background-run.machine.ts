// One background run as a pure statechart (docs/contract.md §7); its domain types and pure reducers
// are in background-run-model.ts. Its states are the RunStatus values,
// so the stored row's `status` IS the state and a row restores the actor without a separate
// snapshot format. Every transition computes the whole next row (public BackgroundRun + the
// internal bookkeeping) from the event alone: ids, timestamps and leases arrive inside events,
// never from a clock or a random source here.
//
// Effects are named, not performed: `record` (write the row CAS-fenced, with its attempts, then
// emit the lifecycle events in order) and `cancelAgent` (stop an agent run this actor has no
// child for: a parked one, or one held by another copy). The agent run of an attempt is this
// actor's child: `running` invokes `agentRun` (start or continue it), tells it CANCEL and TIMEOUT,
// and takes its end as AGENT_DONE; leaving `running` stops it. The background manager binds the
// effects and the child's logic with `.provide()` (src/background/agent-bridge.ts).
//
// Lease expiry and retry-at are fields of the row that a ticker turns into RECOVER / RETRY_DUE
// events (architecture fact 2): nothing here uses `after`.
import { assign, enqueueActions, fromCallback, setup, type Snapshot } from 'xstate';
import type { BackgroundRunStatus } from './background-types.js';
import {
  type Ctx,
  type Ev,
  withRun,
  noLease,
  closing,
  closedOnly,
  claimed,
  startedFresh,
  startedContinue,
  heartbeat,
  finished,
  sideEffectsMeta,
  retryOf,
  agentRunInput,
  settledEvents,
  firstQueuedAt,
  requeuedLapsedClaim,
  completedBy,
  cancelledBy,
  retryScheduled,
  recoveredAttempt,
  type AgentRunChildEvent,
  type BackgroundRunContext,
  type AgentOutcome,
  type BackgroundRunEvent,
  type RecordParams,
  type StartAgentParams,
} from './background-run-model.js';
import {
  rec,
  startedContinueRecord,
  startedFreshRecord,
  retryingRecord,
  timeoutRecord,
  failedRecord,
  recoveredRecord,
  lapsedFailedRecord,
} from './background-run-records.js';

export type {
  BackgroundLifecycleEventType,
  LifecycleEvent,
  SideEffectInfo,
  AttemptRecord,
  BackgroundRunContext,
  AgentOutcome,
  BackgroundRunEvent,
  RecordParams,
  StartAgentParams,
  AgentRunChildEvent,
  AgentSettled,
} from './background-run-model.js';
export { agentRunIdFor, backgroundRunIdOf } from './background-run-model.js';

export const BACKGROUND_RUN_MACHINE_VERSION = 1;

// ---------------------------------------------------------------- the machine

/**
 * A context update for events of type `T`, to be named in setup's actions (setup types their
 * event as the machine's whole event union; the transition that names it takes only `T`).
 */
function on<T extends BackgroundRunEvent['type']>(_type: T, reduce: (context: Ctx, event: Ev<T>) => Ctx) {
  return ({ context, event }: { context: Ctx; event: BackgroundRunEvent }): Ctx => reduce(context, event as Ev<T>);
}

/** The id of the agent run child `running` invokes. */
const AGENT = 'agent';

export const backgroundRunMachine = setup({
  types: {
    context: {} as BackgroundRunContext,
    events: {} as BackgroundRunEvent,
    input: {} as BackgroundRunContext,
  },
  actors: {
    /**
     * The agent run of the current attempt, as a child: started (fresh) or continued from its
     * input, stopped on CANCEL / TIMEOUT, its end or park sent back as AGENT_DONE. Bound by the
     * background manager (src/background/agent-bridge.ts); this default does nothing.
     */
    agentRun: fromCallback<AgentRunChildEvent, StartAgentParams>(() => {}),
  },
  actions: {
    /** Named effect: write the row (+ attempts) fenced by its version, then emit `events` in order. */
    record: (_args, _params: RecordParams) => {},
    /** Named effect: stop an agent run that is not this actor's child (parked, or held by another copy). */
    cancelAgent: (_args, _params: { agent_run_id: string | null }) => {},
    /**
     * Tells the agent run child `params`. An actor restored from its row into `running` (a copy
     * that does not hold the run: a cancel on another instance) has no child: `cancelAgent` stops
     * the agent run instead (a timeout only ever comes from the holder's timer).
     */
    tellAgent: enqueueActions(({ context, enqueue, self }, params: AgentRunChildEvent) => {
      if ((self.getSnapshot() as { children: Record<string, unknown> }).children[AGENT]) enqueue.sendTo(AGENT, params);
      // (A named action of this same setup: enqueue's type knows only the built-in ones.)
      else if (params.type === 'CANCEL') enqueue({ type: 'cancelAgent', params: { agent_run_id: context.internal.agent_run_id } } as never);
    }),
    /**
     * running, lease lapsed, its agent run already ended or parked (RECOVER.agent): the run takes
     * that end as AGENT_DONE (and a decided park's RESUME) in this same step, one row write.
     */
    settleFromAgent: enqueueActions(({ context, event, enqueue }) => {
      for (const e of settledEvents(context, event as Ev<'RECOVER'>)) enqueue.raise(e);
    }),
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
    requeueLapsedClaim: assign(on('RECOVER', requeuedLapsedClaim)),
    /** running -> completed. */
    complete: assign(on('AGENT_DONE', completedBy)),
    /** running -> awaiting (approval or budget). */
    park: assign(
      on('AGENT_DONE', (context, event) => withRun(context, { status: event.outcome as BackgroundRunStatus, ...noLease }, { continue_agent: true })),
    ),
    /** running -> cancelled: the agent run ended cancelled. */
    finishCancelled: assign(on('AGENT_DONE', cancelledBy)),
    /** running -> retrying: the attempt failed and a retry is allowed. */
    scheduleRetry: assign(on('AGENT_DONE', retryScheduled)),
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
    recoverAttempt: assign(on('RECOVER', recoveredAttempt)),
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
    requeueForRetry: assign(
      on('RETRY_DUE', (context, event) => withRun(context, { status: 'queued', queued_at: firstQueuedAt(context, event.at) }, { retry_at: null })),
    ),
    /** retrying -> cancelled. */
    cancelRetrying: assign(
      on('CANCEL', (context, event) => finished(context, 'cancelled', event.at, 'cancelled while waiting to retry', { cancel_requested_at: event.at })),
    ),
    /** awaiting -> queued: a person decided. */
    requeueResumed: assign(on('RESUME', (context, event) => withRun(context, { status: 'queued', queued_at: firstQueuedAt(context, event.at) }))),
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
    staleAgent: ({ context, event }) => (event as Ev<'AGENT_DONE' | 'TIMEOUT'>).agent_run_id !== context.internal.agent_run_id,
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
    agentSettled: ({ context, event }) => (event as Ev<'RECOVER'>).agent != null && context.internal.agent_run_id !== null,
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
                params: ({ context }) => startedContinueRecord(context),
              },
            ],
          },
          {
            target: 'running',
            actions: [
              'startAttempt',
              {
                type: 'record',
                params: ({ context }) => startedFreshRecord(context),
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
      // The attempt's agent run: started or continued on entry (START, or RECOVER re-entering),
      // stopped when the run leaves `running`. Its end comes back as AGENT_DONE.
      invoke: { id: AGENT, src: 'agentRun', input: ({ context, event }) => agentRunInput(context, event as BackgroundRunEvent) },
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
                params: ({ context, event }) => retryingRecord(context, event),
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
                params: ({ context, event }) => timeoutRecord(context, event),
              },
            ],
          },
          {
            target: 'failed',
            actions: [
              'finishFailed',
              {
                type: 'record',
                params: ({ context, event }) => failedRecord(context, event),
              },
            ],
          },
        ],
        // Cancelling a running run goes through its agent run, whose end (AGENT_DONE cancelled) finishes this one.
        CANCEL: {
          actions: ['requestCancel', { type: 'record', params: () => rec([]) }, { type: 'tellAgent', params: { type: 'CANCEL' } }],
        },
        // timeout_seconds reached: the agent run stops, and its end (AGENT_DONE timeout) decides.
        TIMEOUT: [{ guard: 'staleAgent' }, { actions: { type: 'tellAgent', params: { type: 'TIMEOUT' } } }],
        RECOVER: [
          // Its agent run ended or parked before the lapsed owner recorded it: settle from that.
          { guard: 'agentSettled', actions: 'settleFromAgent' },
          {
            guard: 'attemptsRemain',
            // Re-entered: the next attempt's child continues the same agent run.
            target: 'running',
            reenter: true,
            actions: [
              'recoverAttempt',
              {
                type: 'record',
                params: ({ context, event }) => recoveredRecord(context, event),
              },
            ],
          },
          {
            target: 'failed',
            actions: [
              'failLapsed',
              {
                type: 'record',
                params: ({ context, event }) => lapsedFailedRecord(context, event),
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

/** Per state: the persisted snapshot xstate builds for it, less its context (see persistedSnapshotOf). */
const persistedByState = new Map<string, Snapshot<unknown>>();

/**
 * A persisted snapshot for a stored row, so an actor can be restored from the row alone (the row's
 * status is the state). Built by xstate itself (`resolveState`, then `getPersistedSnapshot`), not
 * by hand, so its shape is whatever the installed xstate restores. Restoring runs no entry action
 * (architecture fact 1). Only the context differs between rows in one state, and a row's context
 * is plain JSON, which `getPersistedSnapshot` keeps as it is: so the state's snapshot is built once
 * and each row's context put in it (every claim restores an actor; building it each time walked
 * the state nodes and the whole row twice). test/background/machines.test.ts checks it against
 * xstate's own for every status.
 */
export function persistedSnapshotOf(context: BackgroundRunContext): Snapshot<unknown> {
  const value = stateOfStatus(context.run.status);
  let shape = persistedByState.get(value);
  if (!shape) {
    shape = backgroundRunMachine.getPersistedSnapshot(backgroundRunMachine.resolveState({ value, context: {} as BackgroundRunContext }));
    persistedByState.set(value, shape);
  }
  // A copy: restoring reads the snapshot and builds its own (children, history), never writes it.
  return { ...shape, context } as unknown as Snapshot<unknown>;
}
