// Callers waiting for a background run to settle (end, or wait for a person): a manual run with
// `wait` (POST /background/tasks/{id}/run). They hear of it only once its events and files are
// written. On a shared store another instance may claim and finish the run, and nothing tells this
// one (the cluster link relays only cancels, src/runtime/cluster.ts), so a waiter there also reads
// the run's row every `sharedPollMs` until it settles, and then until the run's workspace files
// show it (the instance that ran it writes them after its commit; `mirrored`).
import type { BackgroundRun } from '../schemas/background.js';
import type { Versioned } from '../store/store.js';
import { TERMINAL, WAITING, type BgRunRow } from './types.js';

/**
 * How many polls a waiter on a shared store waits, once the row has settled, for the workspace
 * files to show it: a mirror that cannot write (a full disk) or an instance that died before
 * writing must not turn the wait into a 504. The files are a mirror; the row is the truth.
 */
export const MIRROR_WAIT_POLLS = 8;

export class SettleWaiters {
  private readonly waiting = new Map<string, Set<(run: BackgroundRun) => void>>();

  constructor(
    private readonly deps: {
      getRow(runId: string): Promise<Versioned<BgRunRow> | null>;
      /** The run's events and workspace files still on their way, if any. */
      flushed(runId: string): Promise<unknown> | undefined;
      /** Set on a shared store: how often a waiter reads the row of a run another instance may run. */
      sharedPollMs?: number;
      /** Set on a shared store: the run's workspace files show the settled row (RunWorkspaces.shows). */
      mirrored?(row: BgRunRow): Promise<boolean>;
      /** Set on a shared store: this process's own mirror steps of the run are written now (its queued step waits seconds). */
      hurry?(row: BgRunRow): void;
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
        if (poll) clearInterval(poll);
        set.delete(onRun);
        if (set.size === 0 && this.waiting.get(runId) === set) this.waiting.delete(runId);
        resolve(run);
      };
      const onRun = (run: BackgroundRun) => finish(run);
      const set = this.waiting.get(runId) ?? new Set<(run: BackgroundRun) => void>();
      this.waiting.set(runId, set);
      set.add(onRun);
      const timer = setTimeout(() => finish(null), ms);
      let unshown = 0;
      const check = () =>
        this.deps.getRow(runId).then(
          async (row) => {
            const s = row?.value.run.status;
            if (done || !row || !s || !(TERMINAL.has(s) || WAITING.has(s))) return;
            this.deps.hurry?.(row.value);
            await this.deps.flushed(runId); // its events and files are written before the caller hears of the end
            // Ended by another instance: its files are written after its commit (the poll may see the row first).
            if (this.deps.mirrored && !(await this.deps.mirrored(row.value)) && ++unshown < MIRROR_WAIT_POLLS) return;
            finish(row.value.run);
          },
          () => {}, // a failed read is tried again at the next poll, or the wait times out
        );
      const poll = this.deps.sharedPollMs ? setInterval(() => void check(), this.deps.sharedPollMs) : null;
      // It may have settled before the waiter was registered.
      void check();
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
