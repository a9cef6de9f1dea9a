// Concurrency keys of background tasks (docs/flow-control.md): a task may name a key (templated
// from its metadata, rendered into each run when it is queued: prepare-run.ts), and its runs are
// then admitted where they are claimed. The claimer takes one of the key's slots before it claims
// the run; over the limit, the run stays queued (durable as it is, in its place) and a later pass
// tries again, so a key's backlog never holds a background worker. The slots are the very ones of
// POST /run (RunService.takeKeySlot: one limit per key, across instances on PostgreSQL), and a
// run lets go of its slot with any write that leaves it neither claimed nor running.
import type { RunService } from '../runtime/runs.js';
import { bgTenantOf } from '../runtime/tenancy.js';
import type { BackgroundRun } from '../schemas/background.js';
import { reportSwallowed } from '../telemetry/swallowed.js';

export class TaskKeySlots {
  constructor(
    private readonly runs: RunService,
    /** A slot was given back: queued runs of its key may be claimable now. */
    private readonly onFreed: () => void,
  ) {}

  /** A slot of the run's key (true), or none free now (false). A run without a key: true. */
  take(run: BackgroundRun): Promise<boolean> {
    if (!run.concurrency) return Promise.resolve(true);
    return this.runs.takeKeySlot(run.concurrency, run.run_id, bgTenantOf(run.task_id));
  }

  /** A run recovered running (its process died holding the slot): its slot again, whatever the limit. */
  async retake(run: BackgroundRun): Promise<void> {
    if (run.concurrency) await this.runs.retakeKeySlot(run.concurrency, run.run_id, bgTenantOf(run.task_id));
  }

  /** Lets go of the run's slot (nothing when it holds none). */
  release(run: BackgroundRun): void {
    if (!run.concurrency) return;
    void this.runs
      .releaseKeySlot(run.concurrency.key, run.run_id, bgTenantOf(run.task_id))
      .then(() => this.onFreed())
      .catch((err) => reportSwallowed('background.release_key', err, { run_id: run.run_id }));
  }

  /** After a write of the run: holding a slot is for claimed and running runs only. */
  afterWrite(run: BackgroundRun): void {
    if (run.concurrency && run.status !== 'claimed' && run.status !== 'running') this.release(run);
  }
}
