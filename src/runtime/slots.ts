import { AppError } from '../errors.js';

/**
 * Admission control (decisions.md §9): at most `capacity` live runs per process. A request waits
 * up to `waitMs` for a slot, then gets 503 ServerBusy with Retry-After. Waiters are served FIFO.
 */
export class Slots {
  private used = 0;
  private readonly waiters: Array<{ grant: () => void; timer: NodeJS.Timeout }> = [];

  constructor(readonly capacity: number, private readonly waitMs = 5000) {}

  get inUse(): number {
    return this.used;
  }

  async acquire(): Promise<() => void> {
    if (this.used < this.capacity) {
      this.used += 1;
      return this.releaser();
    }
    return new Promise((resolve, reject) => {
      const waiter = {
        grant: () => {
          clearTimeout(waiter.timer);
          this.used += 1;
          resolve(this.releaser());
        },
        timer: setTimeout(() => {
          const i = this.waiters.indexOf(waiter);
          if (i >= 0) this.waiters.splice(i, 1);
          reject(new AppError('ServerBusy', `all ${this.capacity} run slots are busy; retry later`, null, { 'retry-after': '1' }));
        }, this.waitMs),
      };
      this.waiters.push(waiter);
    });
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.used -= 1;
      const next = this.waiters.shift();
      if (next) next.grant();
    };
  }
}
