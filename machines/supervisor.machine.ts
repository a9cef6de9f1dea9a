// The root of the actor system, of the supervisor groups under it (`group:live`, `group:tasks`,
// `group:bgruns`) and of their shards (`group:live#<k>`; src/runtime/system.ts). Every run,
// background task and background run is created under one of them with a systemId (`run:<id>`,
// `task:<id>`, `bgrun:<id>`), so a supervisor sees every child's end. Those are created with the
// supervisor as their parent directly, not by a SPAWN step (system.ts spawn); SPAWN makes the
// groups and shards themselves, which stopping the root then stops:
// a child that errors becomes a `childFailed` effect (the runtime writes a failed record) instead
// of an unhandled error that would crash the process (xstate fact 4).
//
// A child that ended (done or errored) is stopped in the same step that hears of it: xstate has
// already stopped it and taken it out of the system registry, so all that is left is its place
// among this supervisor's children. Dropping it there, rather than on a later STOP from its owner,
// saves a step per actor per run (a drained background run ends two: its own and its agent run's),
// and the owner's stop() of an ended child then sends nothing (src/runtime/system.ts).
import { assign, setup, stopChild, type AnyActorLogic, type AnyActorRef } from 'xstate';

export const SUPERVISOR_MACHINE_VERSION = 1;

/**
 * `id` is the child's slot id, recycled after the child stops; `systemId` is its unique name.
 * Recycling matters: the parent receives `xstate.done.actor.<id>` from every child, and xstate
 * memoises transition candidates per event type for the machine's lifetime, so unique ids would
 * grow that memo by one entry per run for ever.
 */
export type SupervisorEvent =
  | { type: 'SPAWN'; id: string; systemId: string; logic: AnyActorLogic; input?: unknown }
  // `ref`: a child created directly under the supervisor (src/runtime/system.ts spawn), which is
  // not among its machine's children, so its slot id would not find it.
  | { type: 'STOP'; id: string; ref?: AnyActorRef };

/** `xstate.done.actor.<id>` / `xstate.error.actor.<id>`: the slot id of the child that ended. */
const DONE = 'xstate.done.actor.';
const ERROR = 'xstate.error.actor.';
const endedSlot = (event: { type: string }) => event.type.slice(event.type.startsWith(DONE) ? DONE.length : ERROR.length);

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
    stopRequested: stopChild(({ event }) => {
      const e = event as Extract<SupervisorEvent, { type: 'STOP' }>;
      return e.ref ?? e.id;
    }),
    /** A child that ended leaves this supervisor's children in the step that reports its end. */
    dropEnded: stopChild(({ event }) => endedSlot(event as { type: string })),
  },
}).createMachine({
  id: 'supervisor',
  on: {
    SPAWN: { actions: 'spawnRequested' },
    STOP: { actions: 'stopRequested' },
    'xstate.done.actor.*': {
      actions: [
        {
          type: 'childDone',
          params: ({ event }: { event: { type: string; output?: unknown } }) => ({ id: endedSlot(event), output: event.output }),
        },
        'dropEnded',
      ],
    },
    'xstate.error.actor.*': {
      actions: [
        {
          type: 'childFailed',
          params: ({ event }: { event: { type: string; error?: unknown } }) => ({ id: endedSlot(event), error: event.error }),
        },
        'dropEnded',
      ],
    },
  },
});
