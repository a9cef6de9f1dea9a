// A background task's schedule as a pure statechart (docs/contract.md §7): enabled or not, paused or
// not; a due occurrence (or a manual trigger) plus what the task has in flight becomes one overlap
// decision and one named `dispatch` effect. Each enabled task is an actor of this machine
// (`task:<id>`, in the supervisor group `group:tasks`); the scheduler carries out the `dispatch` /
// `drop` effects it names.
//
// Due times are NOT timers here: next_due_at lives in the task's schedule row, which a ticker
// turns into DUE events (architecture fact 2: `after` timers do not survive a restore).
import { assign, enqueueActions, setup } from 'xstate';
import { decideOverlap, type OverlapDecision, type OverlapPolicy, type TaskRunsInFlight } from './policies/overlap.js';

export const TASK_MACHINE_VERSION = 1;

/** A scheduled occurrence as the scheduler computed it (src/calendar/schedule.ts DispatchOccurrence). */
export interface TaskOccurrence {
  occurrence_id: string;
  trigger_type: 'once' | 'interval' | 'cron';
  due_at: string;
  /** due_at plus deterministic jitter: the run is not claimable before this. */
  run_at: string;
  missed: boolean;
}

export interface TaskContext {
  task_id: string;
  overlap_policy: OverlapPolicy;
  enabled: boolean;
  paused: boolean;
  paused_reason: string | null;
}

export type TaskInput = Omit<TaskContext, 'paused_reason'> & { paused_reason?: string | null };

export type TaskEvent =
  | { type: 'DUE'; occurrence: TaskOccurrence; inFlight: TaskRunsInFlight }
  | { type: 'MANUAL'; query: string | null; inFlight: TaskRunsInFlight }
  | { type: 'PAUSE'; reason: string | null }
  | { type: 'RESUME' }
  | { type: 'ENABLE' }
  | { type: 'DISABLE' }
  | { type: 'UPDATE'; overlap_policy: OverlapPolicy };

export interface DispatchParams {
  task_id: string;
  trigger: 'schedule' | 'manual';
  occurrence: TaskOccurrence | null;
  query: string | null;
  decision: OverlapDecision;
}

export interface DropParams {
  task_id: string;
  occurrence: TaskOccurrence | null;
  reason: 'paused' | 'disabled';
}

export const taskMachine = setup({
  types: { context: {} as TaskContext, events: {} as TaskEvent, input: {} as TaskInput },
  actions: {
    /** Named effect: create the run the decision asks for (queued or skipped; cancel first when told). */
    dispatch: (_args, _params: DispatchParams) => {},
    /** A run by hand, in any state that allows it (active and paused): the same decision both ways. */
    dispatchManual: enqueueActions(({ context, event, enqueue }) => {
      const e = event as Extract<typeof event, { type: 'MANUAL' }>;
      enqueue({
        type: 'dispatch',
        params: { task_id: context.task_id, trigger: 'manual', occurrence: null, query: e.query, decision: decideOverlap(context.overlap_policy, e.inFlight) },
      } as never);
    }),
    /** Named effect: an occurrence arrived that this state does not run (it is consumed, not queued). */
    drop: (_args, _params: DropParams) => {},
    setOverlapPolicy: assign({ overlap_policy: ({ event }) => (event as Extract<TaskEvent, { type: 'UPDATE' }>).overlap_policy }),
    markPaused: assign({ paused: true, paused_reason: ({ event }) => (event as Extract<TaskEvent, { type: 'PAUSE' }>).reason }),
    markResumed: assign({ paused: false, paused_reason: null }),
    markEnabled: assign({ enabled: true }),
    markDisabled: assign({ enabled: false }),
  },
  guards: {
    isEnabled: ({ context }) => context.enabled,
    isDisabled: ({ context }) => !context.enabled,
    isPaused: ({ context }) => context.paused,
  },
}).createMachine({
  id: 'task',
  context: ({ input }) => ({ ...input, paused_reason: input.paused_reason ?? null }),
  initial: 'init',
  on: {
    UPDATE: { actions: 'setOverlapPolicy' },
  },
  states: {
    init: {
      always: [{ guard: 'isDisabled', target: 'disabled' }, { guard: 'isPaused', target: 'paused' }, { target: 'scheduling' }],
    },
    scheduling: {
      on: {
        DUE: {
          actions: {
            type: 'dispatch',
            params: ({ context, event }) => ({
              task_id: context.task_id,
              trigger: 'schedule' as const,
              occurrence: event.occurrence,
              query: null,
              decision: decideOverlap(context.overlap_policy, event.inFlight),
            }),
          },
        },
        MANUAL: { actions: 'dispatchManual' },
        PAUSE: { target: 'paused', actions: 'markPaused' },
        DISABLE: { target: 'disabled', actions: 'markDisabled' },
      },
    },
    // Paused stops the schedule only: an operator may still run the task by hand.
    paused: {
      on: {
        DUE: {
          actions: { type: 'drop', params: ({ context, event }) => ({ task_id: context.task_id, occurrence: event.occurrence, reason: 'paused' as const }) },
        },
        MANUAL: { actions: 'dispatchManual' },
        RESUME: { target: 'scheduling', actions: 'markResumed' },
        DISABLE: { target: 'disabled', actions: 'markDisabled' },
      },
    },
    disabled: {
      on: {
        DUE: {
          actions: { type: 'drop', params: ({ context, event }) => ({ task_id: context.task_id, occurrence: event.occurrence, reason: 'disabled' as const }) },
        },
        MANUAL: { actions: { type: 'drop', params: ({ context }) => ({ task_id: context.task_id, occurrence: null, reason: 'disabled' as const }) } },
        PAUSE: { actions: 'markPaused' },
        RESUME: { actions: 'markResumed' },
        ENABLE: [
          { guard: 'isPaused', target: 'paused', actions: 'markEnabled' },
          { target: 'scheduling', actions: 'markEnabled' },
        ],
      },
    },
  },
});
