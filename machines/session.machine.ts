// Serialises the runs of one session in arrival order (docs/contract.md §3.3), so a conversation's
// history is read and appended by one run at a time. A run that pauses for a person releases the
// session: its answer joins the history when it finishes, and a wait of hours must not block
// the conversation.
import { assign, enqueueActions, setup } from 'xstate';

export const SESSION_MACHINE_VERSION = 1;

export type SessionEvent = { type: 'ENQUEUE'; run_id: string } | { type: 'RELEASE'; run_id: string };

export interface SessionContext {
  session_id: string;
  active: string | null;
  queue: string[];
}

export const sessionMachine = setup({
  types: { context: {} as SessionContext, events: {} as SessionEvent, input: {} as { session_id: string } },
  actions: {
    /** Named effect: the runtime lets the run with this id start. */
    admit: (_args, _params: { run_id: string }) => {},
    /** idle -> busy: the arriving run is the session's active one. */
    activate: assign({ active: ({ event }) => event.run_id }),
    /** busy: the arriving run waits its turn. */
    enqueueRun: assign({ queue: ({ context, event }) => [...context.queue, event.run_id] }),
    /** A queued run that gave up (client went away) leaves the queue. */
    dropQueued: assign({ queue: ({ context, event }) => context.queue.filter((id) => id !== event.run_id) }),
    /** releasing -> idle: nothing waits. */
    clearActive: assign({ active: null }),
    admitNext: enqueueActions(({ context, enqueue }) => {
      const [next, ...rest] = context.queue;
      enqueue.assign({ active: next, queue: rest });
      enqueue({ type: 'admit', params: { run_id: next } } as never);
    }),
  },
  guards: {
    hasQueued: ({ context }) => context.queue.length > 0,
    isActive: ({ context, event }) => event.run_id === context.active,
  },
}).createMachine({
  id: 'session',
  context: ({ input }) => ({ session_id: input.session_id, active: null, queue: [] }),
  initial: 'idle',
  states: {
    idle: {
      on: {
        ENQUEUE: {
          target: 'busy',
          actions: ['activate', { type: 'admit', params: ({ event }) => ({ run_id: event.run_id }) }],
        },
      },
    },
    busy: {
      on: {
        ENQUEUE: { actions: 'enqueueRun' },
        RELEASE: [
          // A queued run that gave up (client went away) leaves the queue.
          { guard: 'isActive', target: 'releasing' },
          { actions: 'dropQueued' },
        ],
      },
    },
    releasing: {
      always: [
        { guard: 'hasQueued', target: 'busy', actions: 'admitNext' },
        { target: 'idle', actions: 'clearActive' },
      ],
    },
  },
});
