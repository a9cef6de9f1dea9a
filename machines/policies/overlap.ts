// Overlap policy (docs/contract.md §7): what a new run of a task does when others of the same task are
// in flight. "In flight" means active (claimed, running, retrying, awaiting_*) or queued: counting
// queued runs too keeps a burst of dispatches (queue_all after an outage, manual clicks) from
// piling up behind skip_if_running.

export type OverlapPolicy = 'skip_if_running' | 'queue_next' | 'cancel_previous' | 'allow_parallel';
export const DEFAULT_OVERLAP_POLICY: OverlapPolicy = 'skip_if_running';

/**
 * start: store the run queued, claimable now. skip: store it `skipped` (background_run_skipped).
 * queue: store it queued; it is claimed only when canClaim allows (FIFO behind the others).
 * cancel_then_queue: cancel the runs in `cancel`, then store it queued (claimable once they stop).
 */
export type OverlapAction = 'start' | 'skip' | 'queue' | 'cancel_then_queue';

export interface OverlapDecision {
  action: OverlapAction;
  /** Runs to cancel, oldest first; empty unless action is cancel_then_queue. */
  cancel: string[];
}

export interface TaskRunsInFlight {
  /** Claimed, running, retrying or awaiting runs of the task, oldest first. */
  activeRunIds: readonly string[];
  /** Queued (unclaimed) runs of the task, oldest first. */
  queuedRunIds: readonly string[];
}

export function decideOverlap(policy: OverlapPolicy | null | undefined, runs: TaskRunsInFlight): OverlapDecision {
  const busy = runs.activeRunIds.length > 0 || runs.queuedRunIds.length > 0;
  if (!busy) return { action: 'start', cancel: [] };
  switch (policy ?? DEFAULT_OVERLAP_POLICY) {
    case 'skip_if_running':
      return { action: 'skip', cancel: [] };
    case 'queue_next':
      return { action: 'queue', cancel: [] };
    case 'cancel_previous':
      // Queued ones are superseded too, or they would run after the newer one.
      return { action: 'cancel_then_queue', cancel: [...runs.activeRunIds, ...runs.queuedRunIds] };
    case 'allow_parallel':
      return { action: 'start', cancel: [] };
  }
}

/**
 * May a worker claim this queued run now? queue_next: only the task's oldest queued run, and only
 * when none of the task's runs is active (strict FIFO, one at a time). cancel_previous: only once
 * the cancelled runs have stopped. Other policies: always.
 */
export function canClaim(policy: OverlapPolicy | null | undefined, taskActiveCount: number, isOldestQueued: boolean): boolean {
  switch (policy ?? DEFAULT_OVERLAP_POLICY) {
    case 'queue_next':
      return taskActiveCount === 0 && isOldestQueued;
    case 'cancel_previous':
      return taskActiveCount === 0;
    case 'skip_if_running':
    case 'allow_parallel':
      return true;
  }
}
