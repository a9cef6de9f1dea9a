// The run service's life in this process: start-up recovery, the periodic orphan sweep and a
// graceful shutdown (the composition root calls these; the work is RunRecovery's and RunFlow's).
import { reportSwallowed } from '../telemetry/swallowed.js';
import type { RunFlow } from './run-flow.js';
import type { RunKernel } from './run-kernel.js';
import type { RunRecovery } from './run-recovery.js';

export class RunLifecycle {
  constructor(
    private readonly kernel: RunKernel,
    private readonly recovery: RunRecovery,
    private readonly flow: RunFlow,
  ) {}

  /** One orphan sweep (RunRecovery.sweep); returns the ids it queued for recovery. */
  sweep(opts: { startup?: boolean } = {}): Promise<string[]> {
    // At start-up, runs left `queued` by the last process go back in the queue (run-flow.ts).
    if (opts.startup) void this.flow.recoverQueued(opts).catch((err) => reportSwallowed('flow.recover_queued', err));
    return this.recovery.sweep(opts);
  }

  startSweeper(): void {
    this.recovery.startSweeper();
    if (this.kernel.deps.settings.sweep.enabled) this.flow.startBeating(); // a shared store: queued runs of stopped instances are taken over
  }

  /** First step of a graceful shutdown, to call BEFORE the HTTP server closes its connections (RunRecovery.beginShutdown). */
  beginShutdown(): void {
    this.flow.queue.close(); // queued runs stay stored `queued`; the next start (or another instance) queues them again
    this.flow.stopBeating();
    this.recovery.beginShutdown();
  }

  /** Graceful shutdown: live runs get `graceMs` to end, the rest are saved `interrupted` (RunRecovery.shutdown). */
  async shutdown(graceMs: number): Promise<void> {
    await Promise.all([this.flow.markStopped(), this.recovery.shutdown(graceMs)]);
  }
}
