// The root of the actor system, of the supervisor groups under it (`group:live`, `group:tasks`,
// `group:bgruns`) and of their shards (`group:live#<k>`; src/runtime/system.ts). Every run,
// background task and background run is spawned under one of them with a systemId (`run:<id>`,
// `task:<id>`, `bgrun:<id>`), so a supervisor sees every child's end:
// a child that errors becomes a `childFailed` effect (the runtime writes a failed record) instead
// of an unhandled error that would crash the process (xstate fact 4).
import { assign, setup, stopChild, type AnyActorLogic } from 'xstate';

export const SUPERVISOR_MACHINE_VERSION = 1;

/**
 * `id` is the child's slot id, recycled after the child stops; `systemId` is its unique name.
 * Recycling matters: the parent receives `xstate.done.actor.<id>` from every child, and xstate
 * memoises transition candidates per event type for the machine's lifetime, so unique ids would
 * grow that memo by one entry per run for ever.
 */
export type SupervisorEvent = { type: 'SPAWN'; id: string; systemId: string; logic: AnyActorLogic; input?: unknown } | { type: 'STOP'; id: string };

const CHILD_EVENT = /^xstate\.(error|done)\.actor\.(.+)$/;

export const supervisorMachine = setup({
  types: { events: {} as SupervisorEvent },
  actions: {
    /** `id` is the child's slot id; the runtime maps it back to the systemId. */
    childFailed: (_args, _params: { id: string; error: unknown }) => {},
    childDone: (_args, _params: { id: string; output: unknown }) => {},
    /** SPAWN: the child starts under its slot id, registered in the system as its systemId. */
    spawnRequested: assign(({ spawn, event }) => {
      const e = event as Extract<SupervisorEvent, { type: 'SPAWN' }>;
      spawn(e.logic, { id: e.id, systemId: e.systemId, input: e.input } as never);
      return {};
    }),
    /** STOP: the child in this slot stops (finished or not). */
    stopRequested: stopChild(({ event }) => (event as Extract<SupervisorEvent, { type: 'STOP' }>).id),
  },
}).createMachine({
  id: 'supervisor',
  on: {
    SPAWN: { actions: 'spawnRequested' },
    STOP: { actions: 'stopRequested' },
    '*': {
      actions: [
        {
          type: 'childFailed',
          params: ({ event }) => {
            const m = CHILD_EVENT.exec((event as { type: string }).type);
            return { id: m?.[1] === 'error' ? m[2] : '', error: (event as { error?: unknown }).error };
          },
        },
        {
          type: 'childDone',
          params: ({ event }) => {
            const m = CHILD_EVENT.exec((event as { type: string }).type);
            return { id: m?.[1] === 'done' ? m[2] : '', output: (event as { output?: unknown }).output };
          },
        },
      ],
    },
  },
});
