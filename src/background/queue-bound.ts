// The bound on queued background runs: POST /background/tasks/{id}/run is refused (503
// ServerBusy, Retry-After) while background.max_queued_runs runs wait to be claimed. Without it a
// caller could queue runs faster than the workers drain them, each one a row, lifecycle events and
// (for 5 s) a workspace step held in memory, with nothing to stop the growth.
import { domainError } from '../errors.js';

/**
 * How old the queued count may be. Counting is one store read (a counter on the embedded store,
 * an index count on PostgreSQL), so it is read at most this often; requests admitted since the
 * read are added to it.
 */
export const QUEUED_COUNT_MAX_AGE_MS = 500;

/** Seconds a refused caller is told to wait (Retry-After). */
const RETRY_AFTER_S = 5;

export class QueuedRunBound {
  private counted = 0;
  private countedAt = -Infinity;
  private admittedSince = 0;
  private reading: Promise<void> | null = null;

  constructor(
    private readonly max: () => number,
    /** Runs queued in the store (every instance's, on a shared store). */
    private readonly countQueued: () => Promise<number>,
    private readonly nowMs: () => number = () => performance.now(),
  ) {}

  /** Resolves when `n` more runs may be queued (and counts them); throws 503 ServerBusy when they would pass the bound. */
  async admit(n = 1): Promise<void> {
    if (this.nowMs() - this.countedAt > QUEUED_COUNT_MAX_AGE_MS) {
      this.reading ??= this.countQueued()
        .then((n) => {
          this.counted = n;
          this.countedAt = this.nowMs();
          this.admittedSince = 0;
        })
        .finally(() => (this.reading = null));
      await this.reading;
    }
    const queued = this.counted + this.admittedSince;
    const max = this.max();
    if (queued + n > max) {
      throw domainError(
        'AGT_ERR_SERVER_BUSY',
        [`${queued} background runs are queued, the most background.max_queued_runs allows (${max}); retry once the workers have drained some`],
        { headers: { 'retry-after': String(RETRY_AFTER_S) } },
      );
    }
    this.admittedSince += n;
  }
}
