// Callers waiting for a background run to settle (end, or wait for a person): a manual run with
// `wait` (POST /background/tasks/{id}/run). They hear of it only once its events and files are
// written.
import type { BackgroundRun } from '../schemas/background.js';
import type { Versioned } from '../store/store.js';
import { TERMINAL, WAITING, type BgRunRow } from './types.js';

export class SettleWaiters {
  private readonly waiting = new Map<string, Set<(run: BackgroundRun) => void>>();

  constructor(
    private readonly deps: {
      getRow(runId: string): Promise<Versioned<BgRunRow> | null>;
      /** The run's events and workspace files still on their way, if any. */
      flushed(runId: string): Promise<void> | undefined;
    },
  ) {}

  /** Someone waits for this run. */
  has(runId: string): boolean {
    return this.waiting.has(runId);
  }

  /** Resolves with the run once it ends or waits for a person, or with null after `ms`. */
  async waitSettled(runId: string, ms: number): Promise<BackgroundRun | null> {
    return new Promise<BackgroundRun | null>((resolve) => {
      let done = false;
      const finish = (run: BackgroundRun | null) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        set.delete(onRun);
        if (set.size === 0 && this.waiting.get(runId) === set) this.waiting.delete(runId);
        resolve(run);
      };
      const onRun = (run: BackgroundRun) => finish(run);
      const set = this.waiting.get(runId) ?? new Set<(run: BackgroundRun) => void>();
      this.waiting.set(runId, set);
      set.add(onRun);
      const timer = setTimeout(() => finish(null), ms);
      // It may have settled before the waiter was registered.
      void this.deps.getRow(runId).then(async (row) => {
        const s = row?.value.run.status;
        if (!row || !s || !(TERMINAL.has(s) || WAITING.has(s))) return;
        await this.deps.flushed(runId); // its events and files are written before the caller hears of the end
        finish(row.value.run);
      });
    });
  }

  /** The run ended or waits for a person: every caller waiting for it hears of it. */
  resolve(run: BackgroundRun): void {
    const set = this.waiting.get(run.run_id);
    if (!set) return;
    this.waiting.delete(run.run_id);
    for (const w of set) w(run);
  }
}
