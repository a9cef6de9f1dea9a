// Background runs end to end: creation, claims under a fenced lease, heartbeats, the agent run of
// each attempt, retries, timeouts, cancellation, recovery of lapsed leases, lifecycle events and
// the run workspace files. Every status change goes through the background-run machine
// (machines/background-run.machine.ts). RunEngine is the public face and the wiring; the parts,
// which share their types through host-types.ts and never import engine.ts: run-host.ts (live
// runs: actor, row, write chain, the `record` effect), operator-actions.ts (cancel, resume from
// the API), outbox.ts (lifecycle events), run-workspace.ts (workspace files), claimer.ts (claims,
// recovery), attempt-timers.ts (heartbeat, timeout, retry), agent-bridge.ts (the agent run of an
// attempt), inflight.ts (overlap cache), retention.ts (deleting runs), prepare-run.ts (a new
// run's row and events), waiters.ts (callers waiting for a run to settle).
// An actor `bgrun:<id>` lives while this process holds the run (claimed, running) or while an
// event is being applied to it; a resting run (queued, retrying, awaiting a person, terminal) is
// only a row. Every row write is a compare-and-swap on the version this process last wrote: a
// process whose lease was taken over is refused (fenced) and drops its copy. Per run, what costs
// is store commits and file creations: transitions taken before the previous write started
// share its commit, lifecycle events ride in the row's commit (or its outbox on PostgreSQL), and
// the workspace mirror merges the steps of a fast run (docs/background.md).
import type { BackgroundRunContext, BackgroundRunEvent } from '../../machines/background-run.machine.js';
import type { TaskRunsInFlight } from '../../machines/policies/overlap.js';
import { notFound } from '../errors.js';
import type { BackgroundRun, BackgroundRunStatus } from '../schemas/background.js';
import { isStoreError, type Versioned, type WriteOp } from '../store/store.js';
import { isSharedStore } from '../store/changes.js';
import { repos } from '../store/repos/index.js';
import { ACTIVE, HELD, TERMINAL, WAITING, taskStatusKey, type BgRunRow } from './types.js';
import { InFlightCache } from './inflight.js';
import { AgentBridge } from './agent-bridge.js';
import { MIRROR_BACKLOG_MAX, RunWorkspaces } from './run-workspace.js';
import { WriteJoin } from './write-join.js';
import { EventOutbox } from './outbox.js';
import { Claimer } from './claimer.js';
import { TaskKeySlots } from './task-keys.js';
import { RunRetention } from './retention.js';
import { RunHosts } from './run-host.js';
import { AttemptTimers, nodeTimers } from './attempt-timers.js';
import type { BackgroundDeps, CreateRunInput, Handle, PreparedRun, SendResult } from './host-types.js';
import { prepareRun } from './prepare-run.js';
import { SettleWaiters } from './waiters.js';
import { OperatorActions } from './operator-actions.js';

const iso = (ms: number) => new Date(ms).toISOString();

export class RunEngine {
  private readonly handles = new Map<string, Handle>();
  /** Lifecycle events on their way to the event log and the workspace (outbox.ts). */
  private readonly outbox: EventOutbox;
  /** Completions waiting to share the next row write's store round (write-join.ts). */
  private readonly join = new WriteJoin();
  /** The run workspace files: mirror, repair, removal (run-workspace.ts). */
  private readonly workspaces: RunWorkspaces;
  /** In-flight runs per task for overlap decisions (inflight.ts). */
  private readonly inflight: InFlightCache;
  /** The claim loop and recovery (claimer.ts). */
  private readonly claimer: Claimer;
  /** Concurrency keys of tasks, taken where runs are claimed (task-keys.ts). */
  private readonly keys: TaskKeySlots;
  /** Deleting runs: a deleted task's, and by retention (retention.ts). */
  private readonly retention: RunRetention;
  /** Heartbeat, attempt timeout and retry timers (attempt-timers.ts). */
  private readonly timers: AttemptTimers;
  /** The agent run of each attempt (agent-bridge.ts). */
  private readonly agent: AgentBridge;
  /** Callers waiting for a run to end or wait for a person (waiters.ts). */
  private readonly waiters: SettleWaiters;
  /** The live runs of this process: actor, row, write chain (run-host.ts). */
  private readonly hosts: RunHosts;
  /** Cancel and resume from the API (operator-actions.ts). */
  private readonly actions: OperatorActions;
  private closed = false;

  constructor(private readonly deps: BackgroundDeps) {
    this.waiters = new SettleWaiters({
      getRow: (runId) => this.getRow(runId),
      flushed: (runId) => this.outbox.flushed(runId),
      ...(isSharedStore(deps.store) ? { sharedPollMs: deps.config.background.poll_interval_ms } : {}),
    });
    this.inflight = new InFlightCache({ store: deps.store, clock: deps.clock, pollIntervalMs: deps.config.background.poll_interval_ms });
    this.outbox = new EventOutbox({
      store: deps.store,
      telemetry: deps.telemetry,
      workerId: deps.workerId,
      workspaces: () => this.workspaces,
      logger: deps.logger,
      onAppendFailed: (ctx) => {
        const h = this.handles.get(ctx.run.run_id);
        if (h) {
          this.forgetTask(ctx.run.task_id);
          this.hosts.release(h, true);
        }
      },
    });
    this.workspaces = new RunWorkspaces({
      config: deps.config,
      logger: deps.logger,
      storedLifecycle: (runId) => this.storedLifecycle(runId),
      onMirrorRoom: () => this.claimer.kick(),
    });
    this.agent = new AgentBridge(deps, {
      handleOf: (runId) => this.handles.get(runId),
      handle: (runId) => this.hosts.handle(runId),
      maybeRelease: (h) => this.hosts.maybeRelease(h),
      contextOf: (h) => this.hosts.contextOf(h),
      enqueue: (h, job, onError) => this.hosts.enqueue(h, job, onError),
      send: (runId, event, opts) => this.send(runId, event, opts),
      foldInto: (runId, event, published, opts) => this.hosts.foldInto(runId, event, published, opts),
      dirOf: (run) => this.dirOf(run),
      closed: () => this.closed,
    });
    const leaseMs = () => this.leaseMs;
    this.timers = new AttemptTimers({
      clock: deps.clock,
      leases: deps.leases,
      timers: deps.timers ?? nodeTimers,
      get leaseMs() {
        return leaseMs();
      },
      send: (runId, event) => this.send(runId, event),
      // The attempt's agent run is the run's child: the run's actor tells it (TIMEOUT).
      onTimeout: (h, agentRunId) => void this.send(h.id, { type: 'TIMEOUT', at: iso(deps.clock.now()), agent_run_id: agentRunId }),
      closed: () => this.closed,
    });
    this.keys = new TaskKeySlots(deps.runs, () => this.claimer.kick());
    this.claimer = new Claimer(deps, {
      handles: this.handles,
      handle: (runId, known) => this.hosts.handle(runId, known),
      maybeRelease: (h) => this.hosts.maybeRelease(h),
      statusOf: (h) => this.hosts.statusOf(h),
      send: (runId, event, opts) => this.send(runId, event, opts),
      heldCount: () => this.heldCount,
      mirrorFull: () => this.workspaces.mirrorFull(),
      countActive: (taskId) => this.countActive(taskId),
      agentSettledOf: (row) => this.agent.agentSettledOf(row),
      timers: this.timers,
      leaseMs: () => this.leaseMs,
      takeKey: (run) => this.keys.take(run),
      releaseKey: (run) => this.keys.release(run),
      retakeKey: (run) => this.keys.retake(run),
    });
    this.hosts = new RunHosts(deps, {
      handles: this.handles,
      outbox: this.outbox,
      join: this.join,
      isDeleted: (runId) => this.workspaces.isDeleted(runId),
      noteRun: (taskId, runId, status) => this.noteRun(taskId, runId, status),
      forgetTask: (taskId) => this.forgetTask(taskId),
      kick: () => this.claimer.kick(),
      afterWrite: (h, ctx, prevStatus, flushed) => this.afterWrite(h, ctx, prevStatus, flushed),
      clearTimers: (h) => this.timers.clearHandle(h),
      hasWaiter: (runId) => this.waiters.has(runId),
      agentRun: this.agent.logic(),
      cancelAgent: (runId, agentRunId) => this.agent.onCancelAgent(runId, agentRunId),
      closed: () => this.closed,
    });
    this.actions = new OperatorActions(deps, {
      handleOf: (runId) => this.handles.get(runId),
      getRow: (runId) => this.getRow(runId),
      send: (runId, event, opts) => this.send(runId, event, opts),
      remoteCancel: () => this.remoteCancel,
    });
    this.retention = new RunRetention(deps, {
      handles: this.handles,
      release: (h, dead) => this.hosts.release(h, dead),
      contextOf: (h) => this.hosts.contextOf(h),
      forgetTask: (taskId) => this.forgetTask(taskId),
      clearRunTimers: (runId) => this.clearRunTimers(runId),
      forgetRun: (runId) => this.outbox.forget(runId),
      workspaces: this.workspaces,
    });
  }

  private get leaseMs(): number {
    return this.deps.config.background.lease_seconds * 1000;
  }

  // ---------------------------------------------------------------- lifecycle of the engine

  /** Carries background agent runs' ends and decisions; with `claim`, this process also claims and recovers runs. */
  async start(opts: { claim: boolean }): Promise<void> {
    this.deps.runs.foldFinal((rec) => this.agent.foldFinal(rec));
    this.deps.runs.resumeThrough((agentRunId) => this.agent.decided(agentRunId));
    this.deps.runs.cancelThrough((agentRunId) => this.agent.cancelled(agentRunId));
    this.deps.runs.cancelRunning((agentRunId) => (this.closed ? Promise.resolve(false) : this.actions.cancelOfAgentRun(agentRunId)));
    this.workspaces.sweepTrash();
    if (!opts.claim) return;
    this.claimer.accepting = true;
    // With the embedded store only this process can open the data dir: every held run has a dead
    // owner. A shared store's other instances are alive until their leases lapse.
    await this.claimer.maintenance({ ownersDead: !isSharedStore(this.deps.store) });
    this.claimer.kick();
    if (!isSharedStore(this.deps.store)) void this.repairRecentWorkspaces();
  }

  /**
   * The workspace mirror trails the runs by up to MIRROR_BACKLOG_MAX folders, so a process killed
   * under load leaves runs that ended with their last steps unwritten, and nothing loads an ended
   * run again unless asked. The newest ended runs of each status are checked once at start-up (a
   * read of events.jsonl each; the missing lines and run.json are written). Only on the embedded
   * store, where the previous process is surely gone; in the background, after the recovery.
   */
  private async repairRecentWorkspaces(): Promise<void> {
    const r = repos(this.deps.store);
    for (const status of ['completed', 'failed', 'timeout', 'cancelled'] as const) {
      if (this.closed) return;
      try {
        const page = await r.bgRuns.list({ index: { name: 'status', value: status }, reverse: true, limit: MIRROR_BACKLOG_MAX });
        for (const row of page.items) {
          if (this.closed) return;
          await this.workspaces.repairWorkspace(row.value);
        }
      } catch (err) {
        if (!this.closed) this.deps.logger.warn({ status, err: String(err) }, 'could not check the workspaces of recently ended background runs');
      }
    }
  }

  /** Stop claiming; runs in hand go on (a graceful shutdown lets them finish within its grace). */
  stopClaiming(): void {
    this.claimer.stop();
  }

  // ---------------------------------------------------------------- claiming and recovery (claimer.ts)

  /** Asks for a claim pass soon (coalesced); with `atMs`, also at that instant (jitter, retry). */
  kick(atMs?: number): void {
    this.claimer.kick(atMs);
  }

  /** Claims queued runs, oldest first, while this process has free workers. */
  claimPass(): Promise<void> {
    return this.claimer.claimPass();
  }

  /** Claims one run (CLAIM then START, one row write); true when this process now runs it. */
  claim(runId: string, known?: Versioned<BgRunRow>, gate: Handle['gate'] = null): Promise<boolean> {
    return this.claimer.claim(runId, known, gate);
  }

  /** Recovers runs whose lease lapsed (or whose owners are dead) and requeues due retries. */
  maintenance(opts: { ownersDead?: boolean } = {}): Promise<void> {
    return this.claimer.maintenance(opts);
  }

  async close(): Promise<void> {
    this.stopClaiming();
    this.closed = true;
    this.deps.runs.foldFinal(null);
    this.deps.runs.resumeThrough(null);
    this.deps.runs.cancelThrough(null);
    this.deps.runs.cancelRunning(null);
    this.timers.close();
    this.join.release();
    const handles = [...this.handles.values()];
    // The chains' own steps report their failures (enqueue's onError); this only waits for them.
    await Promise.all(handles.map((h) => h.chain.catch(() => undefined)));
    for (const h of handles) this.hosts.release(h, true);
    // Events and workspace files still on their way (the store closes after this).
    this.workspaces.hurryMirror();
    await this.outbox.flushAll();
    await this.workspaces.drain();
  }

  /** Run folders waiting for the workspace mirror (the agentd_background_workspace_backlog gauge). */
  get workspaceBacklog(): number {
    return this.workspaces.mirrorBacklog;
  }

  get heldCount(): number {
    let n = this.claimer.claimingNow;
    for (const h of this.handles.values()) if (!h.dead && HELD.has(this.hosts.statusOf(h))) n++;
    return n;
  }

  // ---------------------------------------------------------------- creating runs

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
      this.join.release();
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
    return prepareRun(input, nowMs, {
      workspaceFor: (task, runId) => this.workspaces.workspaceFor(task, runId),
      lifecycleOf: (ctx, e, sequence, at) => this.outbox.lifecycleOf(ctx, e, sequence, at),
      traceValue: (ctx, status) => this.hosts.traceValue(ctx, status),
      repos: repos(this.deps.store),
      prefetch: this.deps.store.prefetch?.bind(this.deps.store),
      eventsInCommits: this.eventsInCommits,
    });
  }

  /** The absolute folder of a run's workspace (throws when a stored path would leave the root). */
  dirOf(run: BackgroundRun): string {
    return this.workspaces.dirOf(run);
  }

  /**
   * A prepared run whose commit is under way: it counts as in flight for its task from now on, so
   * the next overlap decision sees it before the write is acknowledged. untrack() if it failed.
   */
  track(p: PreparedRun): void {
    this.noteRun(p.ctx.run.task_id, p.ctx.run.run_id, p.ctx.run.status);
  }

  untrack(p: PreparedRun): void {
    this.noteRun(p.ctx.run.task_id, p.ctx.run.run_id, null);
  }

  /**
   * Commits `ops` (which create these prepared runs) with the runs' creation events: stored only
   * with the rows, in the same store round (Store.commitWithEvents), where the store writes them
   * atomically. Then call created(p, this.eventsInCommits).
   */
  commitCreating(ops: WriteOp[], prepared: PreparedRun[]): Promise<Array<Versioned<unknown> | null>> {
    if (!this.eventsInCommits) return this.deps.store.commit(ops);
    const events = prepared.flatMap((p) => this.outbox.eventsOf(p.ctx, p.lifecycle));
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
    const flushed = this.outbox.queueEmit(ctx, p.lifecycle, { runJson: true, mirror: !terminal, stored: eventsStored });
    if (terminal) {
      this.deps.metrics.backgroundRuns.inc({ status: ctx.run.status });
      this.retention.runEnded(ctx.run.task_id);
      if (this.waiters.has(ctx.run.run_id)) void flushed.then(() => this.waiters.resolve(ctx.run));
    } else {
      this.claimer.arrived(ctx.run, ctx.internal.not_before ? Date.parse(ctx.internal.not_before) : undefined);
    }
  }

  /** Resolves once every lifecycle event this process has queued for the run is stored. */
  async appended(runId: string): Promise<void> {
    await this.outbox.appended(runId);
  }

  // ---------------------------------------------------------------- reads

  async getRow(runId: string): Promise<Versioned<BgRunRow> | null> {
    return repos(this.deps.store).bgRuns.get(runId);
  }

  async get(runId: string): Promise<BackgroundRun> {
    const row = await this.getRow(runId);
    if (!row) throw notFound('background run', runId);
    return row.value.run;
  }

  /** In-flight runs of a task for the overlap decision, oldest first (see InFlightCache). */
  inFlight(taskId: string): Promise<TaskRunsInFlight> {
    return this.inflight.inFlight(taskId);
  }

  /** The task's in-flight runs when its entry is loaded (no I/O), else null. */
  inFlightNow(taskId: string): TaskRunsInFlight | null {
    return this.inflight.inFlightNow(taskId);
  }

  private noteRun(taskId: string, runId: string, status: BackgroundRunStatus | null): void {
    this.inflight.noteRun(taskId, runId, status);
  }

  private forgetTask(taskId: string): void {
    this.inflight.forgetTask(taskId);
  }

  async countActive(taskId?: string): Promise<number> {
    const bgRuns = repos(this.deps.store).bgRuns;
    const counts = await Promise.all(
      ACTIVE.map((s) => bgRuns.count(taskId ? { name: 'task_status', value: taskStatusKey(taskId, s) } : { name: 'status', value: s })),
    );
    return counts.reduce((a, b) => a + b, 0);
  }

  /** GET /background/runs/{id}/events: the replay, repaired first if a crash cut it short. */
  async events(runId: string): Promise<Array<Record<string, unknown>>> {
    await this.outbox.appended(runId);
    const row = await this.getRow(runId);
    if (!row) throw notFound('background run', runId);
    if (!this.handles.has(runId) && !this.outbox.has(runId)) await this.outbox.repairOutbox(row.value);
    return this.outbox.replay(runId);
  }

  /** Lifecycle events of a run as stored in telemetry, oldest first. */
  storedLifecycle(runId: string): Promise<Array<{ sequence: number; event: Record<string, unknown> }>> {
    return this.outbox.storedLifecycle(runId);
  }

  // ---------------------------------------------------------------- sending events to a run (run-host.ts)

  /**
   * Applies one event to a run through its actor (spawned from the row when none is live).
   * `accepted` is false when the run's state does not take the event (e.g. cancel of an ended run).
   * With `durable`, resolves only after the effects of the event were written.
   */
  send(runId: string, event: BackgroundRunEvent, opts: { durable?: boolean; known?: Versioned<BgRunRow> } = {}): Promise<SendResult> {
    return this.hosts.send(runId, event, opts);
  }

  private afterWrite(h: Handle, ctx: BackgroundRunContext, prevStatus: BackgroundRunStatus, flushed: Promise<void>): void {
    const status = ctx.run.status;
    const runId = h.id;
    this.timers.afterWrite(h, ctx, HELD.has(status));
    this.keys.afterWrite(ctx.run);
    if (TERMINAL.has(status) && !TERMINAL.has(prevStatus)) {
      this.deps.metrics.backgroundRuns.inc({ status });
      this.retention.runEnded(ctx.run.task_id);
    }
    // A caller told "ended" (wait) must find every event of the run stored, and its files written.
    if ((TERMINAL.has(status) || WAITING.has(status)) && this.waiters.has(runId)) void flushed.then(() => this.waiters.resolve(ctx.run));
    // Back in the queue at its old place (the claimer's buffer of queued runs may hold rows after it).
    if (status === 'queued' && prevStatus !== 'queued') this.claimer.requeued();
    if (!HELD.has(status) || status === 'queued') this.claimer.kick();
  }

  // ---------------------------------------------------------------- operator actions (operator-actions.ts)

  /** POST /background/runs/{id}/cancel. */
  cancel(runId: string, reason: string | null = null): Promise<{ status: 'cancel_requested' }> {
    return this.actions.cancel(runId, reason);
  }

  /** Set by the cluster link on a shared store: asks the instance holding a run to cancel it. */
  remoteCancel: ((runId: string, reason: string | null) => Promise<void>) | null = null;

  /** A cancel another instance relayed here: only a run this process holds is touched. */
  cancelIfHeld(runId: string, reason: string | null): void {
    this.actions.cancelIfHeld(runId, reason);
  }

  /** POST /background/runs/{id}/resume: a run paused for a person continues once its decision is in. */
  resume(runId: string): Promise<{ status: 'resumed' }> {
    return this.actions.resume(runId);
  }

  /** Resolves with the run once it ends or waits for a person, or with null after `ms`. */
  waitSettled(runId: string, ms: number): Promise<BackgroundRun | null> {
    return this.waiters.waitSettled(runId, ms);
  }

  /**
   * Deletes a task's runs (DELETE /background/tasks/{id}?delete_runs=true), cancelling live ones
   * first, then its workspace folders (retention.ts).
   */
  deleteRunsOfTask(taskId: string, agentId: string | null, first?: { ops: WriteOp[]; then: () => void }): Promise<number> {
    return this.retention.deleteRunsOfTask(taskId, agentId, first);
  }

  /** background.run_retention: deletes old ended runs and those beyond a task's limit (retention.ts). */
  sweepRetention(opts: {
    maxAgeMs: number;
    maxPerTask: number;
    isTask: (taskId: string) => boolean;
    occurrenceDone: (run: BackgroundRun) => boolean;
    budget?: number;
  }): Promise<number> {
    return this.retention.sweepRetention(opts);
  }

  /** The next retention sweep counts these tasks' ended runs (on top of those with a run ended since the last one). */
  countAtNextSweep(taskIds: Iterable<string>): void {
    this.retention.countAtNextSweep(taskIds);
  }

  private clearRunTimers(runId: string): void {
    this.timers.clearRetry(runId);
    this.outbox.forget(runId);
  }
}
