// Pure steps of a machine (the effects come back as data, nothing runs), like xstate's
// `transition()` but with one actor scope reused for every step. `transition()` builds a fresh
// inert actor (and actor system) per call, which cost ~80 µs, more than the step itself: the
// scheduler takes one step per due occurrence, 1,000 a second for 1,000 one-second tasks.
import { createActor, type AnyStateMachine, type EventFromLogic, type ExecutableActionsFrom, type InputFrom, type SnapshotFrom } from 'xstate';

export type Step<M extends AnyStateMachine> = (snapshot: SnapshotFrom<M>, event: EventFromLogic<M>) => [SnapshotFrom<M>, ExecutableActionsFrom<M>[]];

export interface Stepper<M extends AnyStateMachine> extends Step<M> {
  /** The initial snapshot for `input` (eventless transitions taken), its entry effects dropped. */
  initial(input: InputFrom<M>): SnapshotFrom<M>;
}

/** A stepper for `machine`. Only for machines whose steps spawn no children (task, background run). */
export function pureStepper<M extends AnyStateMachine>(machine: M): Stepper<M> {
  // Never started: it only lends the scope a `self` and a system, as createInertActorScope does.
  const self = createActor(machine as AnyStateMachine);
  let collected: ExecutableActionsFrom<M>[] = [];
  const scope = {
    self,
    defer: () => {},
    id: '',
    logger: () => {},
    sessionId: '',
    stopChild: () => {},
    system: self.system,
    emit: () => {},
    actionExecutor: (action: ExecutableActionsFrom<M>) => {
      collected.push(action);
    },
  };
  const step = ((snapshot, event) => {
    collected = [];
    const next = machine.transition(snapshot as never, event as never, scope as never) as SnapshotFrom<M>;
    const actions = collected;
    collected = [];
    return [next, actions];
  }) as Stepper<M>;
  step.initial = (input) => {
    collected = [];
    const snap = machine.getInitialSnapshot(scope as never, input) as SnapshotFrom<M>;
    collected = [];
    return snap;
  };
  return step;
}
