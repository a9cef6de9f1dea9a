import { createActor, type ActorLogic, type AnyActorLogic, type AnyActorRef, type Snapshot } from 'xstate';
import { supervisorMachine } from '../../machines/supervisor.machine.js';
import { reportSwallowed } from '../telemetry/swallowed.js';

export interface SystemHooks {
  /** A child actor errored: the owner writes a failed record. Never throws. */
  onChildFailed?: (systemId: string, error: unknown) => void;
  /** Forwarded to createActor for `--inspect`. */
  inspect?: Parameters<typeof createActor>[1] extends infer O ? (O extends { inspect?: infer I } ? I : never) : never;
}

/**
 * A supervisor actor and a small API over it: children are spawned, looked up by systemId and
 * stopped only through here. systemIds are unique across the whole tree (one xstate system).
 */
export class Supervisor {
  // Children get recycled slot ids (see SupervisorEvent): systemId <-> slot, and free slots.
  private readonly slotOf = new Map<string, string>();
  private readonly systemIdOf = new Map<string, string>();
  private readonly freeSlots: string[] = [];
  private nextSlot = 0;
  /** Children created directly under this supervisor (see spawn), by slot: not in its machine's `children`. */
  private readonly direct = new Map<string, AnyActorRef>();

  /** `ref` is a running supervisor machine made with `supervisorLogic(this)`. */
  protected constructor(
    readonly ref: AnyActorRef,
    protected readonly hooks: SystemHooks,
  ) {}

  /** The supervisor machine reporting its children's failures through `owner`'s hooks. */
  protected static supervisorLogic(owner: () => Supervisor, hooks: SystemHooks) {
    return supervisorMachine.provide({
      actions: {
        childFailed: (_a, p) => {
          const systemId = owner().ended(p.id);
          if (systemId) safe(() => hooks.onChildFailed?.(systemId, p.error));
        },
        childDone: (_a, p) => void owner().ended(p.id),
      },
    });
  }

  /**
   * The child in `slot` ended (done or errored): the supervisor machine drops it in this same
   * step (machines/supervisor.machine.ts), so its slot is free now and a later stop() of its
   * systemId has nothing to send. Returns its systemId.
   */
  private ended(slot: string): string | undefined {
    const systemId = this.systemIdOf.get(slot);
    if (systemId === undefined) return undefined;
    this.systemIdOf.delete(slot);
    this.slotOf.delete(systemId);
    this.direct.delete(slot);
    this.freeSlots.push(slot);
    return systemId;
  }

  /**
   * Spawns `logic` under `systemId`. With `snapshot`, the child resumes from it (as createActor's
   * `snapshot` option does). Invoked promise actors that were active in the snapshot run again
   * (effects are idempotent for that).
   *
   * The child is created as this supervisor's child (`parent`: it joins the supervisor's system,
   * registered under `systemId`, and its end reaches the supervisor as `xstate.done.actor.<slot>`
   * / `xstate.error.actor.<slot>`, as an invoked or spawned child's does), not through a SPAWN step
   * of the supervisor machine: that step cost a whole macrostep and a copy of the supervisor's
   * children map per spawn (and another copy when the child left it), two of them per drained
   * background run (its actor and its agent run's; test/background/supervisor-steps.test.ts).
   * Such a child is not in the supervisor's `children` map, so stop() names it by its ref and
   * shutdown stops it first (stopChildren). Supervisors themselves (groups and their shards:
   * `supervised`) still spawn through SPAWN, so stopping the root stops them.
   */
  spawn<TLogic extends AnyActorLogic>(
    systemId: string,
    logic: TLogic,
    opts: { input?: unknown; snapshot?: Snapshot<unknown> } = {},
    supervised = false,
  ): AnyActorRef {
    // eslint-disable-next-line no-restricted-syntax -- an invariant: a run is spawned once its lease is taken (RUN_ALREADY_LIVE/RUN_TAKEN refuse a second)
    if (this.get(systemId)) throw new Error(`actor ${systemId} already exists`);
    // A child whose end is still queued for this supervisor (reported from inside one of its own
    // steps) holds its slot until then: free it first.
    if (this.slotOf.has(systemId)) this.stop(systemId);
    // A stopped supervisor (the system shut down) takes no child: nothing would hear its end or
    // stop it. (A SPAWN it never took was refused the same way, below.)
    // eslint-disable-next-line no-restricted-syntax -- an invariant: nothing is started after shutdown
    if (!supervised && this.ref.getSnapshot().status !== 'active') throw new Error(`actor ${systemId} did not start: its supervisor is stopped`);
    const slot = this.freeSlots.pop() ?? `c${this.nextSlot++}`;
    this.slotOf.set(systemId, slot);
    this.systemIdOf.set(slot, systemId);
    if (!supervised) {
      const child = createActor(logic, { id: slot, systemId, parent: this.ref, input: opts.input, snapshot: opts.snapshot } as never) as AnyActorRef;
      this.direct.set(slot, child);
      // A child that ends within start() (its first steps end it) reports it to this supervisor
      // (ended()) before start() returns: its slot is free again, and the ref is still the answer.
      child.start();
      return child;
    }
    const toSpawn: AnyActorLogic = opts.snapshot ? startingFrom(logic, opts.snapshot) : logic;
    this.ref.send({ type: 'SPAWN', id: slot, systemId, logic: toSpawn, input: opts.input });
    const ref = this.get(systemId);
    // eslint-disable-next-line no-restricted-syntax -- an invariant: SPAWN is handled synchronously by the system actor
    if (!ref) throw new Error(`actor ${systemId} did not start`);
    return ref;
  }

  get(systemId: string): AnyActorRef | undefined {
    return this.ref.system.get(systemId);
  }

  /**
   * Stops and forgets a running child and frees its slot id. A child that ended was dropped by the
   * step that reported its end (see ended()), so stopping it, or an unknown systemId, is a no-op.
   */
  stop(systemId: string): void {
    const slot = this.slotOf.get(systemId);
    if (!slot) return;
    const ref = this.direct.get(slot);
    this.ref.send(ref ? { type: 'STOP', id: slot, ref } : { type: 'STOP', id: slot });
    this.slotOf.delete(systemId);
    this.systemIdOf.delete(slot);
    this.direct.delete(slot);
    this.freeSlots.push(slot);
  }

  /** Stops every child created directly under this supervisor (stopping it would not: see spawn). */
  stopChildren(): void {
    for (const slot of [...this.direct.keys()]) {
      const systemId = this.systemIdOf.get(slot);
      if (systemId !== undefined) this.stop(systemId);
    }
  }

  /** Number of live children: paused runs are stopped, so they do not count. */
  size(): number {
    return this.slotOf.size;
  }
}

/**
 * A supervisor spawned as a child of another (`group:<name>`), holding a large, slowly changing
 * set of children. xstate copies a parent's children map on every spawn and stop, so 10,000 task
 * actors directly under the root made every run's spawn and stop cost O(tasks); under their own
 * supervisor they cost that only when a task is created or deleted.
 *
 * With `shards` > 1 the children are spread over that many supervisors under the group
 * (`group:<name>#<k>`, k from a hash of the systemId, made on first use): the copy xstate makes on
 * each spawn and stop is of one shard's children. Unsharded, starting 10,000 task actors (one per
 * enabled task, at start-up) and stopping them at shutdown each cost O(tasks^2): 27 s to start
 * and over 15 s to stop with 10,000 cron tasks (the copy is of an object in dictionary mode, ~1 ms
 * per copy at 3,000 children).
 */
export class SupervisorGroup extends Supervisor {
  private readonly shards: Array<Supervisor | undefined>;

  private constructor(
    ref: AnyActorRef,
    hooks: SystemHooks,
    private readonly name: string,
    shardCount: number,
  ) {
    super(ref, hooks);
    this.shards = shardCount > 1 ? new Array<Supervisor | undefined>(shardCount) : [];
  }

  static create(parent: Supervisor, name: string, hooks: SystemHooks, opts: { shards?: number } = {}): SupervisorGroup {
    let group!: SupervisorGroup;
    const ref = parent.spawn(
      `group:${name}`,
      Supervisor.supervisorLogic(() => group, hooks),
      {},
      true,
    );
    group = new SupervisorGroup(ref, hooks, name, opts.shards ?? 1);
    return group;
  }

  override spawn<TLogic extends AnyActorLogic>(systemId: string, logic: TLogic, opts: { input?: unknown; snapshot?: Snapshot<unknown> } = {}): AnyActorRef {
    return this.shards.length === 0 ? super.spawn(systemId, logic, opts) : this.shardOf(systemId).spawn(systemId, logic, opts);
  }

  override stopChildren(): void {
    super.stopChildren();
    for (const shard of this.shards) shard?.stopChildren();
  }

  override stop(systemId: string): void {
    if (this.shards.length === 0) super.stop(systemId);
    else this.shards[shardIndex(systemId, this.shards.length)]?.stop(systemId);
  }

  override size(): number {
    if (this.shards.length === 0) return super.size();
    let n = 0;
    for (const shard of this.shards) n += shard?.size() ?? 0;
    return n;
  }

  private shardOf(systemId: string): Supervisor {
    const k = shardIndex(systemId, this.shards.length);
    let shard = this.shards[k];
    if (!shard) {
      let made!: Supervisor;
      const ref = super.spawn(
        `group:${this.name}#${k}`,
        Supervisor.supervisorLogic(() => made, this.hooks),
        {},
        true,
      );
      made = new ShardSupervisor(ref, this.hooks);
      this.shards[k] = shard = made;
    }
    return shard;
  }
}

/** One shard of a SupervisorGroup: a plain supervisor. */
class ShardSupervisor extends Supervisor {
  constructor(ref: AnyActorRef, hooks: SystemHooks) {
    super(ref, hooks);
  }
}

/** FNV-1a of the systemId, modulo `n`: a child always lands in the same shard. */
function shardIndex(systemId: string, n: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < systemId.length; i++) {
    h ^= systemId.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % n;
}

/** Shards of `group:live` (see ActorSystem.spawn): 2,000 live runs and sessions leave ~8 per shard. */
const LIVE_SHARDS = 256;

/** The root supervisor of the process; every actor descends from it. */
export class ActorSystem extends Supervisor {
  private readonly groups = new Map<string, SupervisorGroup>();

  constructor(hooks: SystemHooks = {}) {
    let self!: ActorSystem;
    const root = createActor(
      Supervisor.supervisorLogic(() => self, hooks),
      { inspect: hooks.inspect },
    );
    super(root, hooks);
    self = this;
    // The root itself must never take the process down.
    root.subscribe({ error: (err) => safe(() => hooks.onChildFailed?.('supervisor', err)) });
    root.start();
  }

  get root(): AnyActorRef {
    return this.ref;
  }

  /**
   * Actors spawned on the system itself (runs `run:`, sessions `session:`, subagents) sit in the
   * sharded group `group:live`; only groups are the root's own children. With every live run and
   * its session directly under the root, each spawn and stop copied all of them: 0.6 ms per
   * spawn-and-stop at 1,000 live children, 1.2 ms at 2,000, against 0.03-0.05 ms in shards.
   */
  override spawn<TLogic extends AnyActorLogic>(systemId: string, logic: TLogic, opts: { input?: unknown; snapshot?: Snapshot<unknown> } = {}): AnyActorRef {
    return systemId.startsWith('group:') ? super.spawn(systemId, logic, opts, true) : this.live().spawn(systemId, logic, opts);
  }

  override stop(systemId: string): void {
    if (systemId.startsWith('group:')) super.stop(systemId);
    else this.live().stop(systemId);
  }

  /** Live actors spawned on the system (runs, sessions, subagents); groups' children not counted. */
  override size(): number {
    return this.live().size();
  }

  private live(): SupervisorGroup {
    return this.group('live', { shards: LIVE_SHARDS });
  }

  /** The child supervisor `group:<name>`, made on first use (`shards`: see SupervisorGroup). */
  group(name: string, opts: { shards?: number } = {}): SupervisorGroup {
    let g = this.groups.get(name);
    if (!g) {
      g = SupervisorGroup.create(this, name, this.hooks, opts);
      this.groups.set(name, g);
    }
    return g;
  }

  shutdown(): void {
    // The groups' direct children first: stopping the root reaches only the supervisors (see spawn).
    for (const g of this.groups.values()) g.stopChildren();
    this.ref.stop();
  }
}

/**
 * `logic` whose actors start from `snapshot` instead of from their input. xstate's `spawn` (the
 * only way a machine gets a child it can stop and hear from) has no snapshot option, unlike
 * `createActor(logic, { snapshot })`; this is actor logic in the public `ActorLogic` sense: every
 * method delegates to `logic`, and `getInitialSnapshot` (what an actor calls when it was given no
 * snapshot) restores `snapshot` with `logic.restoreSnapshot`, exactly what createActor does with
 * its `snapshot` option. Nothing of xstate's internals is touched.
 */
export function startingFrom<TLogic extends AnyActorLogic>(logic: TLogic, snapshot: Snapshot<unknown>): TLogic {
  const restore = logic.restoreSnapshot;
  // eslint-disable-next-line no-restricted-syntax -- an invariant: every logic we spawn from a snapshot is a machine
  if (!restore) throw new Error('this actor logic cannot restore a snapshot');
  const restoring: ActorLogic<any, any, any, any, any> = {
    config: logic.config,
    transition: (s, event, scope) => logic.transition(s, event, scope),
    getInitialSnapshot: (scope) => restore.call(logic, snapshot, scope),
    restoreSnapshot: (persisted, scope) => restore.call(logic, persisted, scope),
    start: logic.start ? (s, scope) => logic.start!(s, scope) : undefined,
    getPersistedSnapshot: (s, options) => logic.getPersistedSnapshot(s, options),
  };
  return restoring as TLogic;
}

function safe(fn: () => void): void {
  try {
    fn();
  } catch (err) {
    // A hook that throws must not break the supervisor.
    reportSwallowed('system.hook', err);
  }
}
