// Background runs end to end: creation, claims under a fenced lease, heartbeats, the agent run of
// each attempt, retries, timeouts, cancellation, recovery of lapsed leases, lifecycle events and
// the run workspace files. Every status change goes through the background-run machine
// (machines/background-run.machine.ts). RunEngine is the wiring and the run reads; the parts,
// which share their types through host-types.ts and never import engine.ts: run-host.ts (live
// runs: actor, row, write chain, the `record` effect), outbox.ts (lifecycle events),
// run-workspace.ts (workspace files), attempt-timers.ts (heartbeat, timeout, retry),
// agent-bridge.ts (the agent run of an attempt), prepare-run.ts (a new run's row and events).
// Callers talk to the part that owns the decision, which the engine exposes (readonly):
// `creation` (run-creation.ts: new runs), `claimer` (claimer.ts: claims, recovery), `operator`
// (operator-actions.ts: cancel, resume from the API), `retention` (retention.ts: deleting runs),
// `inflight` (inflight.ts: the overlap cache), `waiters` (waiters.ts: callers waiting for a run
// to settle).
// An actor `bgrun:<id>` lives while this process holds the run (claimed, running) or while an
// event is being applied to it; a resting run (queued, retrying, awaiting a person, terminal) is
// only a row. Every row write is a compare-and-swap on the version this process last wrote: a
// process whose lease was taken over is refused (fenced) and drops its copy. Per run, what costs
// is store commits and file creations: transitions taken before the previous write started
// share its commit, lifecycle events ride in the row's commit (or its outbox on PostgreSQL), and
// the workspace mirror merges the steps of a fast run (docs/background.md).
import type { BackgroundRunContext, BackgroundRunEvent } from '../../machines/background-run.machine.js';
import { notFound } from '../errors.js';
import type { BackgroundRun, BackgroundRunStatus } from '../schemas/background.js';
import type { Versioned } from '../store/store.js';
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
import type { BackgroundDeps, Handle, SendResult } from './host-types.js';
import { RunCreation } from './run-creation.js';
import { SettleWaiters } from './waiters.js';
import { OperatorActions } from './operator-actions.js';

const iso = (ms: number) => new Date(ms).toISOString();

export class RunEngine {
  private readonly handles = new Map<string, Handle>();
  /** Lifecycle events on their way to the event log and the workspace (outbox.ts). */
  private readonly outbox: EventOutbox;
  /** Completions waiting to share the next row write's store round (write-join.ts). */
  private readonly join = new WriteJoin(() => this.claimer.passing);
  /** The run workspace files: mirror, repair, removal (run-workspace.ts). */
  private readonly workspaces: RunWorkspaces;
  /** In-flight runs per task for overlap decisions (inflight.ts): `inFlight`, `inFlightNow`. */
  readonly inflight: InFlightCache;
  /** The claim loop and recovery (claimer.ts): `kick`, `claimPass`, `maintenance`, `stop`. */
  readonly claimer: Claimer;
  /** Concurrency keys of tasks, taken where runs are claimed (task-keys.ts). */
  private readonly keys: TaskKeySlots;
  /** Deleting runs (retention.ts): `deleteRunsOfTask`, `sweepRetention`, `countAtNextSweep`. */
  readonly retention: RunRetention;
  /** Heartbeat, attempt timeout and retry timers (attempt-timers.ts). */
  private readonly timers: AttemptTimers;
  /** The agent run of each attempt (agent-bridge.ts). */
  private readonly agent: AgentBridge;
  /** Callers waiting for a run to end or wait for a person (waiters.ts): `waitSettled`. */
  readonly waiters: SettleWaiters;
  /** The live runs of this process: actor, row, write chain (run-host.ts). */
  private readonly hosts: RunHosts;
  /** Cancel and resume from the API (operator-actions.ts), and the cluster link's `remoteCancel`. */
  readonly operator: OperatorActions;
  /** New runs: prepare, commit, report created (run-creation.ts). */
  readonly creation: RunCreation;
  private closed = false;

  constructor(private readonly deps: BackgroundDeps) {
    this.waiters = new SettleWaiters({
      getRow: (runId) => this.getRow(runId),
      flushed: (runId) => this.outbox.flushed(runId),
      ...(isSharedStore(deps.store)
        ? {
            sharedPollMs: deps.config.background.poll_interval_ms,
            mirrored: (row) => this.workspaces.shows(row),
            hurry: (row) => this.workspaces.hurryRun(row.run),
          }
        : {}),
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
          this.inflight.forgetTask(ctx.run.task_id);
          this.hosts.release(h, true);
        }
      },
    });
    this.workspaces = new RunWorkspaces({
      config: deps.config,
      logger: deps.logger,
      storedLifecycle: (runId) => this.storedLifecycle(runId),
      onMirrorRoom: () => this.claimer.kick(),
      ...(isSharedStore(deps.store) ? { shared: { row: async (runId: string) => (await this.getRow(runId))?.value ?? null, workerId: deps.workerId } } : {}),
    });
    this.agent = new AgentBridge(deps, {
      handleOf: (runId) => this.handles.get(runId),
      handle: (runId) => this.hosts.handle(runId),
      maybeRelease: (h) => this.hosts.maybeRelease(h),
      contextOf: (h) => this.hosts.contextOf(h),
      enqueue: (h, job, onError) => this.hosts.enqueue(h, job, onError),
      whenIssued: (h, fn) => this.hosts.whenIssued(h, fn),
      ownsStore: () => !isSharedStore(deps.store),
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
      ownsStore: () => !isSharedStore(deps.store),
      whenIssued: (h, fn) => this.hosts.whenIssued(h, fn),
      retakeKey: (run) => this.keys.retake(run),
    });
    this.hosts = new RunHosts(deps, {
      handles: this.handles,
      outbox: this.outbox,
      join: this.join,
      isDeleted: (runId) => this.workspaces.isDeleted(runId),
      noteRun: (taskId, runId, status) => this.inflight.noteRun(taskId, runId, status),
      forgetTask: (taskId) => this.inflight.forgetTask(taskId),
      kick: () => this.claimer.kick(),
      afterWrite: (h, ctx, prevStatus, flushed) => this.afterWrite(h, ctx, prevStatus, flushed),
      clearTimers: (h) => this.timers.clearHandle(h),
      hasWaiter: (runId) => this.waiters.has(runId),
      agentRun: this.agent.logic(),
      cancelAgent: (runId, agentRunId) => this.agent.onCancelAgent(runId, agentRunId),
      closed: () => this.closed,
    });
    this.operator = new OperatorActions(deps, {
      handleOf: (runId) => this.handles.get(runId),
      getRow: (runId) => this.getRow(runId),
      send: (runId, event, opts) => this.send(runId, event, opts),
    });
    this.retention = new RunRetention(deps, {
      handles: this.handles,
      release: (h, dead) => this.hosts.release(h, dead),
      contextOf: (h) => this.hosts.contextOf(h),
      forgetTask: (taskId) => this.inflight.forgetTask(taskId),
      clearRunTimers: (runId) => this.clearRunTimers(runId),
      forgetRun: (runId) => this.outbox.forget(runId),
      workspaces: this.workspaces,
    });
    this.creation = new RunCreation(deps, {
      outbox: this.outbox,
      workspaces: this.workspaces,
      hosts: this.hosts,
      inflight: this.inflight,
      join: this.join,
      retention: this.retention,
      waiters: this.waiters,
      claimer: this.claimer,
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
    this.deps.runs.cancelRunning((agentRunId) => (this.closed ? Promise.resolve(false) : this.operator.cancelOfAgentRun(agentRunId)));
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

  async close(): Promise<void> {
    this.claimer.stop();
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
    // Queued runs held ahead of the workers (Claimer, claim ahead) are free for other instances again.
    await this.claimer.released();
  }

  /** Run folders waiting for the workspace mirror (the agentd_background_workspace_backlog gauge). */
  get workspaceBacklog(): number {
    return this.workspaces.mirrorBacklog;
  }

  private get heldCount(): number {
    let n = this.claimer.claimingNow;
    for (const h of this.handles.values()) if (!h.dead && HELD.has(this.hosts.statusOf(h))) n++;
    return n;
  }

  /** The absolute folder of a run's workspace (throws when a stored path would leave the root). */
  dirOf(run: BackgroundRun): string {
    return this.workspaces.dirOf(run);
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

  private async countActive(taskId?: string): Promise<number> {
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
  private storedLifecycle(runId: string): Promise<Array<{ sequence: number; event: Record<string, unknown> }>> {
    return this.outbox.storedLifecycle(runId);
  }

  // ---------------------------------------------------------------- sending events to a run (run-host.ts)

  /**
   * Applies one event to a run through its actor (spawned from the row when none is live).
   * `accepted` is false when the run's state does not take the event (e.g. cancel of an ended run).
   * With `durable`, resolves only after the effects of the event were written.
   */
  private send(runId: string, event: BackgroundRunEvent, opts: { durable?: boolean; known?: Versioned<BgRunRow> } = {}): Promise<SendResult> {
    return this.hosts.send(runId, event, opts);
  }

  private afterWrite(h: Handle, ctx: BackgroundRunContext, prevStatus: BackgroundRunStatus, flushed: Promise<unknown>): void {
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
    // Out of the queue by this process's write (a cancel): a row held ahead for a claim is not claimed.
    if (prevStatus === 'queued' && status !== 'queued') this.claimer.left(runId);
    if (!HELD.has(status) || status === 'queued') this.claimer.kick();
  }

  private clearRunTimers(runId: string): void {
    this.timers.clearRetry(runId);
    this.outbox.forget(runId);
  }
}
