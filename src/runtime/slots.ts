import { domainError } from '../errors.js';

/**
 * Admission control (docs/contract.md §9): at most `capacity` live runs per process, in two lanes.
 *
 * - New work (`acquire`: POST /run, /run/sync, explicit resumes, decisions, background runs that
 *   count here) waits up to `waitMs` for a slot, then gets 503 ServerBusy with Retry-After.
 * - Recovery (`acquireRecovery`: runs the orphan sweep resumes, at start-up or later) holds at most
 *   `recoveryCap` slots at once and waits as long as it takes, without a deadline.
 *
 * A freed slot goes to the oldest waiting new run first, then to recovery if it is under its cap.
 * With `recoveryCap` below `capacity`, new work always has `capacity - recoveryCap` slots that
 * recovery can never take: after a crash with many orphaned runs, the recovered ones drain a few
 * at a time and new runs start at once (recovered runs used to take all 64
 * slots, and every new run waited 5 s for a 503).
 */
export class Slots {
  private used = 0;
  private recovering = 0;
  /** Waiting new work in admission order: higher `priority` first, then arrival (docs/contract.md §3.4). */
  private readonly waiters: Array<{ grant: () => void; timer: NodeJS.Timeout | null; priority: number }> = [];
  private readonly recoveryWaiters: Array<{ grant: () => void; reject: (err: Error) => void }> = [];

  constructor(
    readonly capacity: number,
    private readonly waitMs = 5000,
    readonly recoveryCap = capacity,
  ) {}

  get inUse(): number {
    return this.used;
  }

  /** Slots held by recovered runs. */
  get recoveryInUse(): number {
    return this.recovering;
  }

  /**
   * A slot for new work. `priority` orders the waiters (higher first, equal FIFO); `deadline`
   * false waits as long as it takes (a run that waited `queued` for its concurrency key was
   * accepted already: it never fails for want of a slot, docs/contract.md §3.4).
   */
  async acquire(opts: { priority?: number; deadline?: boolean } = {}): Promise<() => void> {
    // Waiting new work goes first: a free slot is handed over in release(), never raced for.
    if (this.used < this.capacity && this.waiters.length === 0) {
      this.used += 1;
      return this.releaser(false);
    }
    const priority = opts.priority ?? 0;
    return new Promise((resolve, reject) => {
      const waiter = {
        priority,
        grant: () => {
          if (waiter.timer) clearTimeout(waiter.timer);
          this.used += 1;
          resolve(this.releaser(false));
        },
        timer:
          opts.deadline === false
            ? null
            : setTimeout(() => {
                const i = this.waiters.indexOf(waiter);
                if (i >= 0) this.waiters.splice(i, 1);
                reject(domainError('AGT_ERR_RUN_SLOTS_BUSY', [this.capacity], { headers: { 'retry-after': '1' } }));
              }, this.waitMs),
      };
      // After every waiter of the same or a higher priority.
      let at = this.waiters.length;
      while (at > 0 && this.waiters[at - 1]!.priority < priority) at--;
      this.waiters.splice(at, 0, waiter);
    });
  }

  /**
   * A slot for a recovered run: granted when recovery is under its cap and no new run is waiting.
   * Waits without a deadline (the sweep's queue is bounded); `cancelRecovery` rejects the waiters.
   */
  acquireRecovery(): Promise<() => void> {
    if (this.recoveryFree()) {
      this.used += 1;
      this.recovering += 1;
      return Promise.resolve(this.releaser(true));
    }
    return new Promise((resolve, reject) => {
      this.recoveryWaiters.push({
        grant: () => {
          this.used += 1;
          this.recovering += 1;
          resolve(this.releaser(true));
        },
        reject,
      });
    });
  }

  /** Rejects every waiting recovery (shutdown): those runs stay stored for the next start. */
  cancelRecovery(reason: Error): void {
    for (const w of this.recoveryWaiters.splice(0)) w.reject(reason);
  }

  private recoveryFree(): boolean {
    return this.used < this.capacity && this.recovering < this.recoveryCap && this.waiters.length === 0;
  }

  private releaser(recovery: boolean): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.used -= 1;
      if (recovery) this.recovering -= 1;
      this.dispatch();
    };
  }

  private dispatch(): void {
    while (this.used < this.capacity) {
      const next = this.waiters.shift();
      if (next) {
        next.grant();
        continue;
      }
      if (this.recovering < this.recoveryCap && this.recoveryWaiters.length > 0) {
        this.recoveryWaiters.shift()!.grant();
        continue;
      }
      return;
    }
  }
}
