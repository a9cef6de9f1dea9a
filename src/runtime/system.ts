import { createActor, type AnyActorLogic, type AnyActorRef, type Snapshot } from 'xstate';
import { supervisorMachine } from '../../machines/supervisor.machine.js';

export interface SystemHooks {
  /** A child actor errored: the owner writes a failed record. Never throws. */
  onChildFailed?: (systemId: string, error: unknown) => void;
  /** Forwarded to createActor for `--inspect`. */
  inspect?: Parameters<typeof createActor>[1] extends infer O ? (O extends { inspect?: infer I } ? I : never) : never;
}

/**
 * The root supervisor actor and a small API over it. Children are spawned, looked up by systemId
 * and stopped only through here.
 */
export class ActorSystem {
  readonly root;
  // Children get recycled slot ids (see SupervisorEvent): systemId <-> slot, and free slots.
  private readonly slotOf = new Map<string, string>();
  private readonly systemIdOf = new Map<string, string>();
  private readonly freeSlots: string[] = [];
  private nextSlot = 0;

  constructor(private readonly hooks: SystemHooks = {}) {
    this.root = createActor(
      supervisorMachine.provide({
        actions: {
          childFailed: (_a, p) => {
            const systemId = this.systemIdOf.get(p.id);
            if (systemId) this.safe(() => hooks.onChildFailed?.(systemId, p.error));
          },
          childDone: () => {},
        },
      }),
      { inspect: hooks.inspect },
    );
    // The root itself must never take the process down.
    this.root.subscribe({ error: (err) => this.safe(() => hooks.onChildFailed?.('supervisor', err)) });
    this.root.start();
  }

  /**
   * Spawns `logic` under `systemId`. With `snapshot`, the child resumes from it: xstate's spawn
   * has no snapshot option, so the logic is wrapped to start from the restored snapshot. Invoked
   * promise actors that were active in the snapshot run again (effects are idempotent for that).
   */
  spawn<TLogic extends AnyActorLogic>(systemId: string, logic: TLogic, opts: { input?: unknown; snapshot?: Snapshot<unknown> } = {}): AnyActorRef {
    if (this.get(systemId)) throw new Error(`actor ${systemId} already exists`);
    // A finished child that nobody stopped yet still holds its slot: free it first.
    if (this.slotOf.has(systemId)) this.stop(systemId);
    const slot = this.freeSlots.pop() ?? `c${this.nextSlot++}`;
    this.slotOf.set(systemId, slot);
    this.systemIdOf.set(slot, systemId);
    let toSpawn: AnyActorLogic = logic;
    if (opts.snapshot) {
      const restoring = Object.create(logic) as AnyActorLogic;
      const snapshot = opts.snapshot;
      restoring.getInitialSnapshot = (scope) => (logic as AnyActorLogic).restoreSnapshot!(snapshot, scope);
      toSpawn = restoring;
    }
    this.root.send({ type: 'SPAWN', id: slot, systemId, logic: toSpawn, input: opts.input });
    const ref = this.get(systemId);
    if (!ref) throw new Error(`actor ${systemId} did not start`);
    return ref;
  }

  get(systemId: string): AnyActorRef | undefined {
    return this.root.system.get(systemId);
  }

  /**
   * Stops and forgets a child, finished or not (a finished child is no longer in the system
   * registry but still sits among the supervisor's children), and frees its slot id. Stopping an
   * unknown systemId is a no-op.
   */
  stop(systemId: string): void {
    const slot = this.slotOf.get(systemId);
    if (!slot) return;
    this.root.send({ type: 'STOP', id: slot });
    this.slotOf.delete(systemId);
    this.systemIdOf.delete(slot);
    this.freeSlots.push(slot);
  }

  /** Number of live children: paused runs are stopped, so they do not count. */
  size(): number {
    return Object.keys(this.root.getSnapshot().children).length;
  }

  shutdown(): void {
    this.root.stop();
  }

  private safe(fn: () => void): void {
    try {
      fn();
    } catch {
      // A hook that throws must not break the supervisor.
    }
  }
}
