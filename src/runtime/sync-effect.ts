// Actor logic for a run-machine effect whose answer needs no I/O (the input guardrails,
// run-effects.ts checkInput). The machine invokes it like any effect (its `onDone` / `onError`),
// but it answers at once instead of through a promise: no promise, no AbortController, no
// `xstate.promise.resolve` event of its own and no turn of the event loop before the machine
// goes on. A new run leaves `checking` within the step that entered it, so its first persisted
// snapshot is the model call's, and the `checking` one is neither built nor written (on a store
// other instances share, one commit fewer per run).
//
// Its snapshots have the promise logic's shape ({status, output, error, input}), so a snapshot
// persisted while a promise `checkInput` was active (by an earlier server) restores: a restored
// active one computes its answer when it starts.
import type { PromiseActorLogic, PromiseSnapshot } from 'xstate';

/** The event a restored (active) sync effect sends itself on start: compute now. */
const RUN = 'agentd.sync.run';

/** `compute` runs once, synchronously, when the effect's actor is created (or, restored, started). */
export function fromSync<TOutput, TInput>(compute: (input: TInput) => TOutput): PromiseActorLogic<TOutput, TInput> {
  const settle = (input: TInput): PromiseSnapshot<TOutput, TInput> => {
    try {
      return { status: 'done', output: compute(input), error: undefined, input };
    } catch (err) {
      // The machine's onError, as for a promise that rejected.
      return { status: 'error', output: undefined, error: err, input };
    }
  };
  return {
    config: compute,
    // Created done (or errored): the actor reports it to the machine as soon as it starts.
    getInitialSnapshot: (_scope, input) => settle(input),
    start: (snapshot, { self }) => {
      if (snapshot.status === 'active') self.send({ type: RUN });
    },
    transition: (snapshot, event) => {
      if (event.type === 'xstate.stop') return { status: 'stopped', output: undefined, error: undefined, input: undefined };
      if (event.type === RUN && snapshot.status === 'active') return settle(snapshot.input as TInput);
      return snapshot;
    },
    getPersistedSnapshot: (snapshot) => snapshot,
    restoreSnapshot: (snapshot) => snapshot as PromiseSnapshot<TOutput, TInput>,
  };
}
