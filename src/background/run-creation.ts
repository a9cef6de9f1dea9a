// Creating background runs: a run's row, its creation events and its first offer to the workers.
// The scheduler (scheduler.ts) prepares the runs of a tick, tracks them, commits them with the
// schedule row and reports them created; a manual trigger (createRun) does the same for one run.
// Part of the run engine (engine.ts wires it; it never imports engine.ts).
import type { BackgroundRun } from '../schemas/background.js';
import { isStoreError, type Versioned, type WriteOp } from '../store/store.js';
import { repos } from '../store/repos/index.js';
import { TERMINAL } from './types.js';
import type { BackgroundDeps, CreateRunInput, PreparedRun } from './host-types.js';
import { prepareRun } from './prepare-run.js';
import type { EventOutbox } from './outbox.js';
import type { RunWorkspaces } from './run-workspace.js';
import type { RunHosts } from './run-host.js';
import type { InFlightCache } from './inflight.js';
import type { WriteJoin } from './write-join.js';
import type { RunRetention } from './retention.js';
import type { SettleWaiters } from './waiters.js';
import type { Claimer } from './claimer.js';

/** The engine's parts a new run touches. */
export interface CreationParts {
  outbox: EventOutbox;
  workspaces: RunWorkspaces;
  hosts: RunHosts;
  inflight: InFlightCache;
  join: WriteJoin;
  retention: RunRetention;
  waiters: SettleWaiters;
  claimer: Claimer;
}

export class RunCreation {
  constructor(
    private readonly deps: BackgroundDeps,
    private readonly parts: CreationParts,
  ) {}

  /**
   * Creates a run (queued, or skipped when `skip` is given). A scheduled one is written in the same
   * atomic commit as its occurrence record: null means that occurrence was already dispatched.
   * Resolves once the row is durable; its lifecycle events follow (see AppendState).
   */
  async createRun(input: CreateRunInput): Promise<BackgroundRun | null> {
    const p = this.prepareRun(input);
    this.track(p);
    try {
      const commit = this.commitCreating(input.extra_ops ? [...p.ops, ...input.extra_ops] : p.ops, [p]);
      this.parts.join.release();
      await commit;
    } catch (err) {
      this.untrack(p);
      if (isStoreError(err, 'conflict')) return null;
      throw err;
    }
    this.created(p, this.eventsInCommits);
    return p.ctx.run;
  }

  /**
   * Builds a run, its creation events and its write ops, without writing anything: the scheduler
   * puts the ops of every occurrence of a tick, with the schedule row, into one commit per task.
   */
  prepareRun(input: CreateRunInput, nowMs = this.deps.clock.now()): PreparedRun {
    const { workspaces, outbox, hosts } = this.parts;
    return prepareRun(input, nowMs, {
      workspaceFor: (task, runId) => workspaces.workspaceFor(task, runId),
      lifecycleOf: (ctx, e, sequence, at) => outbox.lifecycleOf(ctx, e, sequence, at),
      traceValue: (ctx, status) => hosts.traceValue(ctx, status),
      repos: repos(this.deps.store),
      prefetch: this.deps.store.prefetch?.bind(this.deps.store),
      eventsInCommits: this.eventsInCommits,
    });
  }

  /**
   * A prepared run whose commit is under way: it counts as in flight for its task from now on, so
   * the next overlap decision sees it before the write is acknowledged. untrack() if it failed.
   */
  track(p: PreparedRun): void {
    this.parts.inflight.noteRun(p.ctx.run.task_id, p.ctx.run.run_id, p.ctx.run.status);
  }

  untrack(p: PreparedRun): void {
    this.parts.inflight.noteRun(p.ctx.run.task_id, p.ctx.run.run_id, null);
  }

  /**
   * Commits `ops` (which create these prepared runs) with the runs' creation events: stored only
   * with the rows, in the same store round (Store.commitWithEvents), where the store writes them
   * atomically. Then call created(p, this.eventsInCommits).
   */
  commitCreating(ops: WriteOp[], prepared: PreparedRun[]): Promise<Array<Versioned<unknown> | null>> {
    if (!this.eventsInCommits) return this.deps.store.commit(ops);
    const events = prepared.flatMap((p) => this.parts.outbox.eventsOf(p.ctx, p.lifecycle));
    return this.deps.telemetry.commitWithEvents(ops, events);
  }

  /** Row writes carry their lifecycle events (a store whose commitWithEvents is atomic); else they are appended behind them. */
  get eventsInCommits(): boolean {
    return this.deps.store.capabilities.atomicCommitEvents === true;
  }

  /** After the commit of a prepared run: its events go out (`eventsStored`: they went with it), and a queued run is offered to the workers. */
  created(p: PreparedRun, eventsStored = false): void {
    const { ctx } = p;
    // Again on the acknowledgement: a first read of the task's in-flight runs that began after
    // track() but before this write was visible would otherwise miss it.
    this.track(p);
    const terminal = TERMINAL.has(ctx.run.status);
    // A run created skipped never ran: no workspace folder for it (1,000 one-second tasks would
    // otherwise make 1,000 folders a second holding only these two bookkeeping events).
    const flushed = this.parts.outbox.queueEmit(ctx, p.lifecycle, { runJson: true, mirror: !terminal, stored: eventsStored });
    if (terminal) {
      this.deps.metrics.backgroundRuns.inc({ status: ctx.run.status });
      this.parts.retention.runEnded(ctx.run.task_id);
      if (this.parts.waiters.has(ctx.run.run_id)) void flushed.then(() => this.parts.waiters.resolve(ctx.run));
    } else {
      this.parts.claimer.arrived(ctx.run, ctx.internal.not_before ? Date.parse(ctx.internal.not_before) : undefined);
    }
  }

  /** Resolves once every lifecycle event this process has queued for the run is stored. */
  appended(runId: string): Promise<void> {
    return this.parts.outbox.appended(runId);
  }
}
