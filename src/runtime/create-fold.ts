// How long a new run's creating write (and its first events) wait to fold with what follows
// before they are handed to the store (RunHost, src/runtime/run-host.ts), or whether they go at once.
import { isSharedStore } from '../store/changes.js';
import type { Store } from '../store/store.js';
import type { StartOptions } from './run-types.js';

/**
 * A new run's creating write (and its first events) wait this long for the run to go on before
 * they are handed to the store: a run that ends or parks meanwhile (a short answer, a tool and an
 * answer) is created already ended, in one store round instead of two. Bounded, so a long run is
 * durable after this long; anything that must be durable sooner (an end, a pause, a non-idempotent
 * tool) hands it over at once.
 */
const CREATE_FOLD_MS = 10;
/**
 * A background run's agent run (kind `background`) waits longer: its durable claim already records
 * the attempt, and a crash before the creating write takes it up again with nothing of the agent
 * run stored, as in the first 10 ms (docs/reliability.md). A drain's claim pass starts its agent
 * runs in bursts whose answers often miss 10 ms; each miss cost a commit, a second record and
 * snapshot write and an append of its own (docs/background.md "What one run costs").
 */
const BACKGROUND_CREATE_FOLD_MS = 200;

/**
 * The fold window of a new run's creating write, or null when it goes at once: on a store other
 * processes share, they must be able to read a run as soon as its id is out, except a background
 * run's agent run, whose id its claimed row named before it was made, and whose recovery needs
 * nothing of it stored (AgentBridge.continueAgent starts an absent one afresh, with the same id).
 */
export function createFoldMs(store: Store, kind: 'sync' | 'background', opts: Pick<StartOptions, 'takeSlotInCreate'>, configured?: number): number | null {
  if (isSharedStore(store) && (kind !== 'background' || opts.takeSlotInCreate)) return null;
  return configured ?? (kind === 'background' ? BACKGROUND_CREATE_FOLD_MS : CREATE_FOLD_MS);
}

/**
 * The fold window of the first write after a creating commit that took a concurrency key's slot on
 * a shared store (StartOptions.takeSlotInCreate): the run sends nothing before that commit is
 * stored, so nothing of it folds there, and a short run would cost a commit for its start and one
 * for its end; its next write waits as a new run's creating write does on an embedded store.
 */
export function takeFoldMs(configured?: number): number {
  return configured ?? CREATE_FOLD_MS;
}
