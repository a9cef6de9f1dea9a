// Live machine states for watchers (GET /machines/live, the dashboard's machine view): the actor
// system's own inspection events, filtered to the actors someone watches.
//
// Why an inspection observer attached only while someone watches: xstate builds an inspection
// event for every event, transition and snapshot of every actor once an observer exists, which
// is work on every run's hot path that nobody needs when no one is looking. With no watcher the
// system has no observer from us at all (`--inspect` adds its own, independently).
import type { InspectionEvent, Subscription } from 'xstate';
import type { ActorSystem } from './system.js';
import { reportSwallowed } from '../telemetry/swallowed.js';

/** One state of one actor, as a watcher sees it. */
export interface LiveState {
  /** The actor's systemId: `run:<id>`, `bgrun:<id>`, `task:<id>`, `session:<id>`. */
  actor: string;
  /** XState's state value: a state name, or an object for nested states. */
  value: unknown;
  /** XState's actor status: active, done, error, stopped. */
  status: string;
  /** The event that led here; null for the first frame of a watch. */
  event: string | null;
}

export type LiveStateListener = (state: LiveState) => void;

/** Most watchers at once (each is an open stream); more are refused by the route. */
export const MAX_WATCHERS = 1000;

export class LiveStates {
  private readonly watchers = new Map<string, Set<LiveStateListener>>();
  private count = 0;
  private observer: Subscription | null = null;

  constructor(private readonly system: ActorSystem) {}

  get size(): number {
    return this.count;
  }

  /** The actor's current state if it is live in this process (a paused or ended run is not). */
  current(actor: string): LiveState | null {
    const ref = this.system.get(actor);
    return ref ? stateOf(actor, ref.getSnapshot(), null) : null;
  }

  /** Calls `fn` with every new state of `actor` until the returned function is called. */
  watch(actor: string, fn: LiveStateListener): () => void {
    let set = this.watchers.get(actor);
    if (!set) this.watchers.set(actor, (set = new Set()));
    set.add(fn);
    this.count++;
    this.observer ??= this.system.root.system.inspect((ev: InspectionEvent) => this.onInspection(ev));
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const s = this.watchers.get(actor);
      s?.delete(fn);
      if (s && s.size === 0) this.watchers.delete(actor);
      this.count--;
      if (this.count === 0 && this.observer) {
        this.observer.unsubscribe();
        this.observer = null;
      }
    };
  }

  private onInspection(ev: InspectionEvent): void {
    if (ev.type !== '@xstate.snapshot') return;
    const actor = (ev.actorRef as { systemId?: string }).systemId;
    if (!actor) return;
    const set = this.watchers.get(actor);
    if (!set) return;
    const state = stateOf(actor, ev.snapshot, ev.event?.type ?? null);
    for (const fn of set) {
      try {
        fn(state);
      } catch (err) {
        // A watcher's failure is its own; the actor system must not see it.
        reportSwallowed('live_states.watcher', err);
      }
    }
  }
}

function stateOf(actor: string, snapshot: unknown, event: string | null): LiveState {
  const s = snapshot as { value?: unknown; status?: string };
  return { actor, value: s.value ?? null, status: s.status ?? 'active', event };
}
