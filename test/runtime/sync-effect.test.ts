// fromSync (src/runtime/sync-effect.ts): an invoked effect that answers within the step that
// invokes it, through the machine's onDone / onError as a promise effect does, and that restores
// from a snapshot saved while a promise effect of the same name was active.
import { describe, expect, it } from 'vitest';
import { assign, createActor, fromPromise, setup } from 'xstate';
import { fromSync } from '../../src/runtime/sync-effect.js';

const machine = setup({
  types: { context: {} as { out: number | null; err: string | null } },
  actors: { work: fromPromise<number, { n: number }>(() => new Promise<number>(() => {})) },
}).createMachine({
  context: { out: null, err: null },
  initial: 'working',
  states: {
    working: {
      invoke: {
        src: 'work',
        input: () => ({ n: 20 }),
        onDone: { target: 'done', actions: assign({ out: ({ event }) => event.output }) },
        onError: { target: 'failed', actions: assign({ err: ({ event }) => String((event.error as Error).message) }) },
      },
    },
    done: { type: 'final' },
    failed: { type: 'final' },
  },
});

describe('fromSync', () => {
  it('answers within the step that invokes it: the machine is past the effect when start() returns', () => {
    const seen: string[] = [];
    const actor = createActor(machine.provide({ actors: { work: fromSync((i: { n: number }) => i.n + 1) } }), {
      inspect: (ev) => {
        if (ev.type === '@xstate.event') seen.push(ev.event.type);
      },
    });
    actor.start();
    expect(actor.getSnapshot().value).toBe('done');
    expect(actor.getSnapshot().context.out).toBe(21);
    // No promise: the effect takes no event of its own (a promise effect takes xstate.promise.resolve).
    expect(seen).toEqual(['xstate.init', 'xstate.init', 'xstate.done.actor.0.(machine).working']);
  });

  it('a throw is the machine onError, as a rejected promise is', () => {
    const actor = createActor(
      machine.provide({
        actors: {
          work: fromSync<number, { n: number }>(() => {
            throw new Error('no');
          }),
        },
      }),
    ).start();
    expect(actor.getSnapshot().value).toBe('failed');
    expect(actor.getSnapshot().context.err).toBe('no');
  });

  it('restores from a snapshot saved while a promise effect was active, and answers on start', () => {
    const waiting = createActor(machine).start();
    const saved = waiting.getPersistedSnapshot();
    waiting.stop();
    const restored = createActor(machine.provide({ actors: { work: fromSync((i: { n: number }) => i.n * 2) } }), { snapshot: saved });
    expect(restored.getSnapshot().value).toBe('working');
    restored.start();
    expect(restored.getSnapshot().value).toBe('done');
    expect(restored.getSnapshot().context.out).toBe(40);
  });
});
