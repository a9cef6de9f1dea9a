// Misfire policy (docs/contract.md §7): what to run for occurrences whose due time passed while no
// scheduler was looking (an outage, a long pause of the process). Default run_once.

export type MisfirePolicy = 'skip_missed' | 'run_once' | 'queue_all';
export const DEFAULT_MISFIRE_POLICY: MisfirePolicy = 'run_once';
/** queue_all queues at most this many missed occurrences, oldest first; the rest are dropped. */
export const QUEUE_ALL_LIMIT = 1000;

export interface MisfireDecision {
  /** Nominal due times (ms) to dispatch, oldest first. */
  run: number[];
  /** True when queue_all dropped missed occurrences beyond QUEUE_ALL_LIMIT. */
  truncated: boolean;
}

/**
 * missedDueMs: missed nominal due times, ascending. The caller may list only the oldest
 * QUEUE_ALL_LIMIT + 1 and then the latest one: queue_all reads the head, run_once the tail.
 */
export function decideMisfire(policy: MisfirePolicy | null | undefined, missedDueMs: readonly number[]): MisfireDecision {
  if (missedDueMs.length === 0) return { run: [], truncated: false };
  switch (policy ?? DEFAULT_MISFIRE_POLICY) {
    case 'skip_missed':
      return { run: [], truncated: false };
    case 'run_once':
      // One run stands for all of them; it takes the latest missed occurrence's id.
      return { run: [missedDueMs[missedDueMs.length - 1]], truncated: false };
    case 'queue_all':
      return { run: missedDueMs.slice(0, QUEUE_ALL_LIMIT), truncated: missedDueMs.length > QUEUE_ALL_LIMIT };
  }
}
