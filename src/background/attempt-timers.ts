// Attempt timers of background runs: the lease heartbeat and the attempt timeout of each run this
// process holds, and the wake-up of each run waiting to retry. Durable time is in the row
// (lease_expires_at, retry_at); these timers only act on it sooner, and a lost one is made good
// by the next maintenance pass. Time and timers are injected (tests drive them by hand).
import type { BackgroundRunContext, BackgroundRunEvent } from '../../machines/background-run.machine.js';
import type { Clock } from '../clock.js';
import type { LeaseClock } from '../lease-clock.js';
import type { Handle, TimerRef, Timers } from './host-types.js';
import { swallow } from '../telemetry/swallowed.js';

export const nodeTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: (t) => clearTimeout(t as NodeJS.Timeout),
  setInterval: (fn, ms) => setInterval(fn, ms).unref(),
  clearInterval: (t) => clearInterval(t as NodeJS.Timeout),
};

export interface AttemptTimersDeps {
  clock: Clock;
  leases: LeaseClock;
  timers: Timers;
  leaseMs: number;
  /** Applies an event to a run (the engine's send); failures are ignored here. */
  send(runId: string, event: BackgroundRunEvent): Promise<unknown>;
  /** timeout_seconds of an attempt reached (the agent bridge stops its agent run). */
  onTimeout(h: Handle, agentRunId: string): void;
  closed(): boolean;
}

const iso = (ms: number) => new Date(ms).toISOString();

export class AttemptTimers {
  private readonly retryTimers = new Map<string, TimerRef>();

  constructor(private readonly deps: AttemptTimersDeps) {}

  /** After a row write: the timers that the run's new status calls for. */
  afterWrite(h: Handle, ctx: BackgroundRunContext, held: boolean): void {
    const status = ctx.run.status;
    if (held) this.ensureHeartbeat(h);
    else this.clearHeartbeat(h);
    if (status === 'running') this.ensureAttemptTimeout(h, ctx);
    else this.clearAttemptTimeout(h);
    if (status === 'retrying' && ctx.internal.retry_at) this.armRetry(h.id, Date.parse(ctx.internal.retry_at));
  }

  ensureHeartbeat(h: Handle): void {
    if (h.heartbeat || this.deps.closed()) return;
    const { leaseMs } = this.deps;
    const every = Math.max(50, Math.floor(leaseMs / 4));
    h.heartbeat = this.deps.timers.setInterval(() => {
      if (h.dead || h.pending > 8) return; // a backed-up chain will not be helped by more writes
      const now = this.deps.clock.now();
      void this.deps
        .send(h.id, { type: 'HEARTBEAT', at: iso(now), lease_expires_at: this.deps.leases.expiresAt(leaseMs) })
        .catch(swallow('background.heartbeat', { run_id: h.id }));
    }, every);
  }

  clearHeartbeat(h: Handle): void {
    if (h.heartbeat) this.deps.timers.clearInterval(h.heartbeat);
    h.heartbeat = null;
  }

  ensureAttemptTimeout(h: Handle, ctx: BackgroundRunContext): void {
    const seconds = ctx.internal.timeout_seconds;
    if (!seconds || h.timeoutAttempt === ctx.run.attempt || this.deps.closed()) return;
    this.clearAttemptTimeout(h);
    h.timeoutAttempt = ctx.run.attempt;
    const agentRunId = ctx.internal.agent_run_id;
    h.timeout = this.deps.timers.setTimeout(() => {
      h.timeout = null;
      if (agentRunId) this.deps.onTimeout(h, agentRunId);
    }, seconds * 1000);
  }

  clearAttemptTimeout(h: Handle): void {
    if (h.timeout) this.deps.timers.clearTimeout(h.timeout);
    h.timeout = null;
    h.timeoutAttempt = 0;
  }

  /** A released run: its heartbeat and attempt timeout stop. */
  clearHandle(h: Handle): void {
    this.clearHeartbeat(h);
    this.clearAttemptTimeout(h);
  }

  /** RETRY_DUE at `atMs` (once per run; the row's retry_at is the durable copy). */
  armRetry(runId: string, atMs: number): void {
    if (this.retryTimers.has(runId) || this.deps.closed()) return;
    const t = this.deps.timers.setTimeout(
      () => {
        this.retryTimers.delete(runId);
        void this.deps.send(runId, { type: 'RETRY_DUE', at: iso(this.deps.clock.now()) }).catch(swallow('background.retry_due', { run_id: runId }));
      },
      Math.max(0, atMs - this.deps.clock.now()),
    );
    this.retryTimers.set(runId, t);
  }

  hasRetry(runId: string): boolean {
    return this.retryTimers.has(runId);
  }

  clearRetry(runId: string): void {
    const t = this.retryTimers.get(runId);
    if (t) this.deps.timers.clearTimeout(t);
    this.retryTimers.delete(runId);
  }

  /** A one-off timer on the same injected timers (the claimer's wake-up). */
  setTimer(fn: () => void, ms: number): TimerRef {
    return this.deps.timers.setTimeout(fn, ms);
  }

  clearTimer(t: TimerRef): void {
    this.deps.timers.clearTimeout(t);
  }

  close(): void {
    for (const t of this.retryTimers.values()) this.deps.timers.clearTimeout(t);
    this.retryTimers.clear();
  }
}
