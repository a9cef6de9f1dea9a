// The root of the actor system. Every run, background task and background run is spawned here
// under a systemId (`run:<id>`, `task:<id>`, `bgrun:<id>`), so one place sees every child's end:
// a child that errors becomes a `childFailed` effect (the runtime writes a failed record) instead
// of an unhandled error that would crash the process (xstate fact 4).
import { assign, setup, stopChild, type AnyActorLogic } from 'xstate';

export const SUPERVISOR_MACHINE_VERSION = 1;

export type SupervisorEvent =
  | { type: 'SPAWN'; systemId: string; logic: AnyActorLogic; input?: unknown }
  | { type: 'STOP'; systemId: string };

const CHILD_EVENT = /^xstate\.(error|done)\.actor\.(.+)$/;

export const supervisorMachine = setup({
  types: { events: {} as SupervisorEvent },
  actions: {
    childFailed: (_args, _params: { systemId: string; error: unknown }) => {},
    childDone: (_args, _params: { systemId: string; output: unknown }) => {},
  },
}).createMachine({
  id: 'supervisor',
  on: {
    SPAWN: {
      actions: assign(({ spawn, event }) => {
        spawn(event.logic, { id: event.systemId, systemId: event.systemId, input: event.input } as never);
        return {};
      }),
    },
    STOP: { actions: stopChild(({ event }) => event.systemId) },
    '*': {
      actions: [
        {
          type: 'childFailed',
          params: ({ event }) => {
            const m = CHILD_EVENT.exec((event as { type: string }).type);
            return { systemId: m?.[1] === 'error' ? m[2] : '', error: (event as { error?: unknown }).error };
          },
        },
        {
          type: 'childDone',
          params: ({ event }) => {
            const m = CHILD_EVENT.exec((event as { type: string }).type);
            return { systemId: m?.[1] === 'done' ? m[2] : '', output: (event as { output?: unknown }).output };
          },
        },
      ],
    },
  },
});
