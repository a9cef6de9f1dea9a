// Background runs end to end: creation, claims under a fenced lease, heartbeats, the agent run of
// each attempt, retries, timeouts, cancellation, recovery of lapsed leases, lifecycle events and
// the run workspace files. Every status change goes through the background-run machine
// (machines/background-run.machine.ts); this class binds its effects and owns the timers.
//
// An actor `bgrun:<id>` lives while this process holds the run (claimed, running) or while an
// event is being applied to it; a resting run (queued, retrying, awaiting a person, terminal) is
// only a row, so 10,000 queued runs cost storage, not actors. Every effect of a run goes through
// one serial chain, and every row write is a compare-and-swap on the version this process last
// wrote: a process whose lease was taken over is refused (fenced) and drops its copy.
//
// Per run, what costs is counted in store commits and file creations, so: transitions taken
// before the previous write started share its commit (a claim and its start are one write); the
// lifecycle events of a write are appended behind it on a per-run chain that does not hold up the
// next write (the row's outbox covers the gap); and the workspace mirror is a low-priority lane
// that merges the steps of a fast run (docs/background.md).
import { randomUUID } from 'node:crypto';
import { sep } from 'node:path';
import { type Actor, type AnyActorRef } from 'xstate';
import {
  BACKGROUND_RUN_MACHINE_VERSION,
  backgroundRunIdOf,
  backgroundRunMachine,
  persistedSnapshotOf,
  type AgentOutcome,
  type BackgroundRunContext,
  type BackgroundRunEvent,
  type LifecycleEvent,
  type RecordParams,
  type SideEffectInfo,
  type StartAgentParams,
} from '../../machines/background-run.machine.js';
import { canClaim, type TaskRunsInFlight } from '../../machines/policies/overlap.js';
import { maxAttempts } from '../../machines/policies/retry.js';
import type { TaskOccurrence } from '../../machines/task.machine.js';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { AppError, notFound } from '../errors.js';
import { newId } from '../ids.js';
import type { TelemetryEmitter } from '../runtime/emitter.js';
import type { Metrics } from '../runtime/metrics.js';
import { sideEffectsOf, TERMINAL_RUN_STATUSES, type RunRecord } from '../runtime/run-record.js';
import { AgentUnavailableError, type AgentRegistry } from '../runtime/agent-registry.js';
import type { RunService } from '../runtime/runs.js';
import type { ActorSystem } from '../runtime/system.js';
import type { BackgroundRun, BackgroundRunStatus, TriggerType } from '../schemas/background.js';
import { isStoreError, StoreError, type Store, type Versioned, type WriteOp } from '../store/store.js';
import { isSharedStore } from '../store/changes.js';
import { BACKGROUND_EVENT_TYPES, type EventRecordInput } from '../telemetry/record.js';
import {
  ACTIVE,
  HELD,
  TERMINAL,
  WAITING,
  attemptRecordId,
  occurrenceRecordId,
  runRowIndexes,
  taskStatusKey,
  type BgRunRow,
  type LifecycleRecord,
  type TaskRow,
} from './types.js';
import { pureStepper } from './transition.js';
import { InFlightCache } from './inflight.js';
import { AgentBridge } from './agent-bridge.js';
import { RunWorkspaces } from './run-workspace.js';
import { EventOutbox } from './outbox.js';
import { AttemptTimers, nodeTimers, type Timers } from './attempt-timers.js';
import type { Handle, RunActor, WriteJob } from './run-host.js';
import { DEFAULT_NAMESPACE_TEMPLATE } from '../schemas/background.js';
import { MirrorQueue, absoluteWorkspace, isInside, lastMirroredSequence, mirrorRun, relativeWorkspace, FolderRemover, taskNamespace, workspaceOf } from './workspace.js';

export type Log = (level: 'info' | 'warn' | 'error', msg: string, extra?: Record<string, unknown>) => void;

export interface BackgroundDeps {
  store: Store;
  clock: Clock;
  telemetry: TelemetryEmitter;
  metrics: Metrics;
  config: Config;
  system: ActorSystem;
  workerId: string;
  runs: RunService;
  /** Registered agents (src/runtime/agent-registry.ts): a spec is built at registration, refused when it cannot be. */
  agents?: AgentRegistry;
  log?: Log;
  /** Timers of heartbeats, attempt timeouts and retries (default: Node's, unref'd). */
  timers?: Timers;
}

/** A run built and validated in memory, not yet written: its ops go into some commit. */
export interface PreparedRun {
  ctx: BackgroundRunContext;
  row: BgRunRow;
  lifecycle: LifecycleRecord[];
  ops: WriteOp[];
}

export interface CreateRunInput {
  task: TaskRow;
  trigger_type: TriggerType;
  occurrence: TaskOccurrence | null;
  query: string | null;
  /** Store the run `skipped` with this reason (the overlap policy said so). */
  skip: string | null;
  /** A caller-chosen id (a manual run with an Idempotency-Key reserved it); default a new one. */
  run_id?: string;
}

export interface SendResult {
  accepted: boolean;
  status: BackgroundRunStatus | null;
}

const iso = (ms: number) => new Date(ms).toISOString();
const stepRun = pureStepper(backgroundRunMachine);
/** How long run.json / events.jsonl may trail a run that goes on (one that ends or pauses is written at once). */
const MIRROR_DELAY_MS = 200;

export class RunEngine {
  private readonly handles = new Map<string, Handle>();
  private readonly loading = new Map<string, Promise<Handle | Versioned<BgRunRow> | null>>();
  /** Lifecycle events on their way to the event log and the workspace (outbox.ts). */
  private readonly outbox: EventOutbox;
  /** The run workspace files: mirror, repair, removal (run-workspace.ts). */
  private readonly workspaces: RunWorkspaces;
  /** In-flight runs per task for overlap decisions (inflight.ts). */
  private readonly inflight: InFlightCache;
  /** Heartbeat, attempt timeout and retry timers (attempt-timers.ts). */
  private readonly timers: AttemptTimers;
  /** The agent run of each attempt (agent-bridge.ts). */
  private readonly agent: AgentBridge;
  private readonly waiters = new Map<string, Set<(run: BackgroundRun) => void>>();
  private readonly logic;
  private claimingNow = 0;
  private claimPassRunning = false;
  private claimAgain = false;
  private kickPending = false;
  private wakeTimer: NodeJS.Timeout | null = null;
  private wakeAt = Infinity;
  private accepting = false;
  private closed = false;
  private unsubscribeSettled: (() => void) | null = null;

  constructor(private readonly deps: BackgroundDeps) {
    this.inflight = new InFlightCache({ store: deps.store, clock: deps.clock, pollIntervalMs: deps.config.background.poll_interval_ms });
    this.outbox = new EventOutbox({
      store: deps.store,
      telemetry: deps.telemetry,
      workerId: deps.workerId,
      workspaces: () => this.workspaces,
      log: (level, msg, extra) => this.log(level, msg, extra),
      onAppendFailed: (ctx) => {
        const h = this.handles.get(ctx.run.run_id);
        if (h) {
          this.forgetTask(ctx.run.task_id);
          this.release(h, true);
        }
      },
    });
    this.workspaces = new RunWorkspaces({ config: deps.config, log: (level, msg, extra) => this.log(level, msg, extra), storedLifecycle: (runId) => this.storedLifecycle(runId) });
    this.agent = new AgentBridge(deps, {
      handleOf: (runId) => this.handles.get(runId),
      contextOf: (h) => this.contextOf(h),
      enqueue: (h, job, onError) => this.enqueue(h, job, onError),
      send: (runId, event, opts) => this.send(runId, event, opts),
      dirOf: (run) => this.dirOf(run),
      closed: () => this.closed,
    });
    const leaseMs = () => this.leaseMs;
    this.timers = new AttemptTimers({
      clock: deps.clock,
      timers: deps.timers ?? nodeTimers,
      get leaseMs() {
        return leaseMs();
      },
      send: (runId, event) => this.send(runId, event),
      onTimeout: (h, agentRunId) => void this.agent.timeoutAgent(h, agentRunId),
      closed: () => this.closed,
    });
    this.logic = backgroundRunMachine.provide({
      actions: {
        record: ({ context }, params) => this.onRecord(context, params),
        startAgent: ({ context }, params) => this.agent.onStartAgent(context.run.run_id, params),
        cancelAgent: ({ context }, params) => this.agent.onCancelAgent(context.run.run_id, params.agent_run_id),
      },
    });
  }

  private get leaseMs(): number {
    return this.deps.config.background.lease_seconds * 1000;
  }

  private log(level: 'info' | 'warn' | 'error', msg: string, extra?: Record<string, unknown>): void {
    this.deps.log?.(level, msg, extra);
  }

  // ---------------------------------------------------------------- lifecycle of the engine

  /** Follows agent runs; with `claim`, this process also claims and recovers runs. */
  async start(opts: { claim: boolean }): Promise<void> {
    this.unsubscribeSettled = this.deps.runs.onSettled((rec) => this.agent.onAgentSettled(rec));
    this.workspaces.sweepTrash();
    if (!opts.claim) return;
    this.accepting = true;
    // With the embedded store only this process can open the data dir: every held run has a dead
    // owner. A shared store's other instances are alive until their leases lapse.
    await this.maintenance({ ownersDead: !isSharedStore(this.deps.store), parked: true });
    this.kick();
  }

  /** Stop claiming; runs in hand go on (a graceful shutdown lets them finish within its grace). */
  stopClaiming(): void {
    this.accepting = false;
    if (this.wakeTimer) clearTimeout(this.wakeTimer);
    this.wakeTimer = null;
    this.wakeAt = Infinity;
  }

  async close(): Promise<void> {
    this.stopClaiming();
    this.closed = true;
    this.unsubscribeSettled?.();
    this.timers.close();
    this.agent.close();
    const handles = [...this.handles.values()];
    await Promise.all(handles.map((h) => h.chain.catch(() => undefined)));
    for (const h of handles) this.release(h, true);
    // Events and workspace files still on their way (the store closes after this).
    await this.outbox.flushAll();
    await this.workspaces.drain();
  }

  get heldCount(): number {
    let n = this.claimingNow;
    for (const h of this.handles.values()) if (!h.dead && HELD.has(this.statusOf(h))) n++;
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
      await this.deps.store.commit(p.ops);
    } catch (err) {
      this.untrack(p);
      if (isStoreError(err, 'conflict')) return null;
      throw err;
    }
    this.created(p);
    return p.ctx.run;
  }

  /**
   * Builds a run, its creation events and its write ops, without writing anything: the scheduler
   * puts the ops of every occurrence of a tick, with the schedule row, into one commit per task.
   */
  prepareRun(input: CreateRunInput, nowMs = this.deps.clock.now()): PreparedRun {
    const { task } = input;
    const at = iso(nowMs);
    const run_id = input.run_id ?? newId('bgrun');
    const sp = task.session_policy;
    const session_id = sp.mode === 'fixed' && sp.session_id
      ? sp.session_id
      : sp.mode === 'run' ? `background:${task.agent_id}:${task.task_id}:${run_id}` : `background:${task.agent_id}:${task.task_id}`;
    const workspace_path = this.workspaces.workspaceFor(task, run_id);
    const occ = input.occurrence;
    const run: BackgroundRun = {
      run_id, task_id: task.task_id, agent_id: task.agent_id, query_snapshot: input.query ?? task.query,
      trigger_type: input.trigger_type, session_id, workspace_path, status: 'queued', attempt: 0,
      max_attempts: maxAttempts(task.retry_policy), lease_generation: 0, lease_owner: null, lease_token: null,
      occurrence_id: occ?.occurrence_id ?? null, error: null, result_preview: null, triggered_at: at, queued_at: at,
      claimed_at: null, started_at: null, heartbeat_at: null, lease_expires_at: null, finished_at: null,
      cancel_requested_at: null, due_at: occ?.due_at ?? null, metadata: { ...task.metadata },
      trigger_metadata: occ
        ? { occurrence_id: occ.occurrence_id, due_at: occ.due_at, run_at: occ.run_at, missed: occ.missed }
        : { query_override: input.query !== null },
    };
    let ctx: BackgroundRunContext = {
      run,
      internal: {
        trace_id: newId('trace'), span_id: newId('span'), agent_run_id: null, continue_agent: false, next_reason: null,
        retry_at: null, not_before: occ && occ.run_at > occ.due_at ? occ.run_at : null, retry_policy: task.retry_policy,
        timeout_seconds: task.timeout_seconds ?? null, overlap_policy: task.overlap_policy,
        write_events_jsonl: task.workspace_policy.write_events_jsonl, write_run_json: task.workspace_policy.write_run_json,
        current_attempt: null, last_closed_attempt: null,
      },
    };
    const lifecycle: LifecycleRecord[] = [];
    if (occ) {
      lifecycle.push(this.outbox.lifecycleOf(ctx, { type: 'background_task_scheduled', data: { occurrence_id: occ.occurrence_id, trigger_type: occ.trigger_type, due_at: occ.due_at, run_at: occ.run_at, missed: occ.missed } }, 1, at));
    }
    if (input.skip !== null) {
      // queued -> skipped, computed by the machine without running its effects.
      const snap = backgroundRunMachine.resolveState({ value: 'queued', context: ctx });
      const [next, actions] = stepRun(snap, { type: 'SKIP', at, reason: input.skip });
      ctx = next.context;
      for (const a of actions) {
        if (a.type !== 'record') continue;
        for (const e of (a.params as RecordParams).events) lifecycle.push(this.outbox.lifecycleOf(ctx, e, lifecycle.length + 1, at));
      }
    } else {
      lifecycle.push(this.outbox.lifecycleOf(ctx, { type: 'background_run_queued', data: { trigger_type: input.trigger_type } }, lifecycle.length + 1, at));
    }
    const row: BgRunRow = { ...ctx, machine_version: BACKGROUND_RUN_MACHINE_VERSION, event_seq: lifecycle.length, outbox: lifecycle };
    const ops: WriteOp[] = [];
    if (occ) {
      ops.push({
        op: 'create', kind: 'bg_occurrences', id: occurrenceRecordId(task.task_id, occ.occurrence_id),
        value: { task_id: task.task_id, occurrence_id: occ.occurrence_id, run_id, dispatched_at: at },
      });
    }
    ops.push({ op: 'create', kind: 'bg_runs', id: run_id, value: row, indexes: runRowIndexes(row) });
    ops.push({
      op: 'create', kind: 'traces', id: ctx.internal.trace_id,
      value: this.traceValue(ctx, TERMINAL.has(ctx.run.status) ? ctx.run.status : 'running'),
      indexes: { run_id, session_id, task_id: task.task_id },
    });
    return { ctx, row, lifecycle, ops };
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

  /** After the commit of a prepared run: its events go out, and a queued run is offered to the workers. */
  created(p: PreparedRun): void {
    const { ctx } = p;
    // Again on the acknowledgement: a first read of the task's in-flight runs that began after
    // track() but before this write was visible would otherwise miss it.
    this.track(p);
    const terminal = TERMINAL.has(ctx.run.status);
    // A run created skipped never ran: no workspace folder for it (1,000 one-second tasks would
    // otherwise make 1,000 folders a second holding only these two bookkeeping events).
    const flushed = this.outbox.queueEmit(ctx, p.lifecycle, { runJson: true, mirror: !terminal });
    if (terminal) {
      this.deps.metrics.backgroundRuns.inc({ status: ctx.run.status });
      if (this.waiters.has(ctx.run.run_id)) void flushed.then(() => this.resolveWaiters(ctx.run));
    } else {
      this.kick(ctx.internal.not_before ? Date.parse(ctx.internal.not_before) : undefined);
    }
  }

  /** Resolves once every lifecycle event this process has queued for the run is stored. */
  async appended(runId: string): Promise<void> {
    await this.outbox.appended(runId);
  }

  // ---------------------------------------------------------------- reads

  async getRow(runId: string): Promise<Versioned<BgRunRow> | null> {
    return this.deps.store.getRecord<BgRunRow>('bg_runs', runId);
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
    const counts = await Promise.all(ACTIVE.map((s) => this.deps.store.countRecords('bg_runs', taskId
      ? { name: 'task_status', value: taskStatusKey(taskId, s) }
      : { name: 'status', value: s })));
    return counts.reduce((a, b) => a + b, 0);
  }

  // ---------------------------------------------------------------- sending events to a run

  /**
   * Applies one event to a run through its actor (spawned from the row when none is live).
   * `accepted` is false when the run's state does not take the event (e.g. cancel of an ended run).
   * With `durable`, resolves only after the effects of the event were written.
   */
  async send(runId: string, event: BackgroundRunEvent, opts: { durable?: boolean; known?: Versioned<BgRunRow> } = {}): Promise<SendResult> {
    const loaded = await this.handle(runId, opts.known);
    if (loaded === null) return { accepted: false, status: null };
    if (!('actor' in loaded)) return { accepted: false, status: loaded.value.run.status };
    const h = loaded;
    h.sends++;
    try {
      const snap = h.actor!.getSnapshot();
      if (snap.status !== 'active' || !snap.can(event)) return { accepted: false, status: snap.context.run.status };
      h.actor!.send(event);
      if (opts.durable) await h.chain;
      return { accepted: !h.dead, status: h.dead ? null : this.statusOf(h) };
    } finally {
      h.sends--;
      this.maybeRelease(h);
    }
  }

  private statusOf(h: Handle): BackgroundRunStatus {
    return h.actor ? h.actor.getSnapshot().context.run.status : h.row.value.run.status;
  }

  private contextOf(h: Handle): BackgroundRunContext {
    return h.actor ? h.actor.getSnapshot().context : h.row.value;
  }

  /** The live handle, or a fresh one restored from the row; a terminal row comes back as the row. */
  private async handle(runId: string, known?: Versioned<BgRunRow>): Promise<Handle | Versioned<BgRunRow> | null> {
    const live = this.handles.get(runId);
    if (live && !live.dead) return live;
    let p = this.loading.get(runId);
    if (!p) {
      p = this.load(runId, known).finally(() => this.loading.delete(runId));
      this.loading.set(runId, p);
    }
    return p;
  }

  private async load(runId: string, known?: Versioned<BgRunRow>): Promise<Handle | Versioned<BgRunRow> | null> {
    const appending = this.outbox.appending(runId);
    if (appending) await appending;
    // A row the caller just read (a claim pass) saves a read; a stale one fails its first write
    // (CAS). One deleted meanwhile must not be repaired (that would make its folder again).
    if (this.workspaces.isDeleted(runId)) return null;
    const row = known ?? (await this.getRow(runId));
    if (!row) return null;
    await this.outbox.repairOutbox(row.value);
    if (TERMINAL.has(row.value.run.status)) return row;
    const h: Handle = {
      id: runId, actor: null, row, chain: Promise.resolve(), pending: 0, sends: 0, dead: false,
      heartbeat: null, timeout: null, timeoutAttempt: 0, timedOut: null, tailWrite: null, gate: null,
    };
    this.handles.set(runId, h);
    const { machine_version: _v, event_seq: _s, outbox: _o, ...ctx } = row.value;
    const ref = this.deps.system.spawn(`bgrun:${runId}`, this.logic, { snapshot: persistedSnapshotOf(ctx) as never }) as AnyActorRef;
    h.actor = ref as unknown as RunActor;
    return h;
  }

  private maybeRelease(h: Handle): void {
    if (h.dead || h.sends > 0 || h.pending > 0) return;
    if (HELD.has(this.statusOf(h)) && !this.closed) return;
    this.release(h, false);
  }

  private release(h: Handle, dead: boolean): void {
    if (dead) h.dead = true;
    this.timers.clearHandle(h);
    this.deps.system.stop(`bgrun:${h.id}`);
    if (this.handles.get(h.id) === h) this.handles.delete(h.id);
  }

  private enqueue(h: Handle, job: () => Promise<void>, onError: (err: unknown) => void): void {
    h.tailWrite = null; // a later transition must not be written before this job runs
    h.pending++;
    h.chain = h.chain
      .then(async () => {
        if (!h.dead) await job();
      })
      .catch((err) => {
        try {
          onError(err);
        } catch {
          // never let a handler break the chain
        }
      })
      .finally(() => {
        h.pending--;
        this.maybeRelease(h);
      });
  }

  // ---------------------------------------------------------------- the `record` effect

  private onRecord(ctx: BackgroundRunContext, params: RecordParams): void {
    const h = this.handles.get(ctx.run.run_id);
    if (!h) {
      this.log('error', 'background run effect without a live handle', { run_id: ctx.run.run_id });
      return;
    }
    // Transitions taken before the previous one's write started are written together with it:
    // a claim and the start of its attempt are one commit, the same CAS on the queued version.
    if (h.tailWrite) {
      h.tailWrite.steps.push({ ctx, params });
      return;
    }
    const job: WriteJob = { steps: [{ ctx, params }] };
    this.enqueue(h, () => {
      if (h.tailWrite === job) h.tailWrite = null;
      return this.writeRecord(h, job.steps);
    }, (err) => {
      // Fenced or the store failed: this copy no longer knows the truth; drop it (the row is reloaded on next use).
      this.log(isStoreError(err, 'stale_version') ? 'warn' : 'error', 'background run write refused; dropping this copy', { run_id: h.id, err: String(err) });
      if (isStoreError(err, 'stale_version')) this.deps.metrics.leaseLost('background');
      this.forgetTask(h.row.value.run.task_id);
      this.release(h, true);
      this.kick();
    });
    h.tailWrite = job;
  }

  private async writeRecord(h: Handle, steps: WriteJob['steps']): Promise<void> {
    const prev = h.row.value;
    const at = iso(this.deps.clock.now());
    const lifecycle: LifecycleRecord[] = [];
    const attempts = new Map<number, RecordParams['attempts'][number]>();
    let seq = prev.event_seq;
    let runJson = false;
    for (const { ctx: c, params } of steps) {
      for (const e of params.events) lifecycle.push(this.outbox.lifecycleOf(c, e, ++seq, at));
      for (const a of params.attempts) attempts.set(a.attempt_number, a);
      // run.json follows every lifecycle event except heartbeats (and a change with no event).
      if (params.events.length === 0 || params.events.some((e) => e.type !== 'background_run_heartbeat')) runJson = true;
    }
    const ctx = steps[steps.length - 1].ctx;
    const unacked = this.outbox.unacked(h.id);
    const next: BgRunRow = {
      ...ctx,
      machine_version: BACKGROUND_RUN_MACHINE_VERSION,
      event_seq: seq,
      outbox: unacked.length > 0 ? [...unacked, ...lifecycle] : lifecycle,
    };
    const ops: WriteOp[] = [
      { op: 'update', kind: 'bg_runs', id: h.id, value: next, expectedVersion: h.row.version, indexes: runRowIndexes(next) },
      // Attempts ride in the same atomic write: the run row's CAS fences them too.
      ...[...attempts.values()].map((a): WriteOp => ({
        op: 'update', kind: 'bg_attempts', id: attemptRecordId(h.id, a.attempt_number), value: a, expectedVersion: null, indexes: { run_id: h.id },
      })),
    ];
    const status = ctx.run.status;
    const gate = h.gate;
    h.gate = null;
    if (gate && prev.run.status === 'queued' && HELD.has(status)) {
      const value = { task_id: ctx.run.task_id, claimed_run: h.id, at };
      ops.push(gate.version === null
        ? { op: 'create', kind: 'meta', id: gate.id, value }
        : { op: 'update', kind: 'meta', id: gate.id, value, expectedVersion: gate.version });
    }
    if (TERMINAL.has(status) && !TERMINAL.has(prev.run.status)) {
      ops.push({ op: 'update', kind: 'traces', id: ctx.internal.trace_id, value: this.traceValue(ctx, status), expectedVersion: null, indexes: { run_id: h.id, session_id: ctx.run.session_id, task_id: ctx.run.task_id } });
    }
    let written: Versioned<unknown> | null;
    try {
      [written] = await this.deps.store.commit(ops);
    } catch (err) {
      // Another instance claimed a run of this one-at-a-time task first (the gate moved): this
      // claim is refused like a fenced write, and the run stays queued for a later pass.
      if (gate && isStoreError(err, 'conflict')) throw new StoreError('stale_version', `task ${ctx.run.task_id}: another instance claimed first`);
      throw err;
    }
    h.row = written as Versioned<BgRunRow>;
    this.noteRun(ctx.run.task_id, h.id, status);
    const flushed = this.outbox.queueEmit(ctx, lifecycle, { runJson, mirror: true });
    this.afterRecord(h, ctx, prev.run.status, flushed);
  }

  private afterRecord(h: Handle, ctx: BackgroundRunContext, prevStatus: BackgroundRunStatus, flushed: Promise<void>): void {
    const status = ctx.run.status;
    const runId = h.id;
    this.timers.afterWrite(h, ctx, HELD.has(status));
    if (WAITING.has(status)) this.agent.watchResume(runId, ctx.internal.agent_run_id);
    else this.agent.unwatchResume(runId);
    if (TERMINAL.has(status) && !TERMINAL.has(prevStatus)) this.deps.metrics.backgroundRuns.inc({ status });
    // A caller told "ended" (wait) must find every event of the run stored, and its files written.
    if ((TERMINAL.has(status) || WAITING.has(status)) && this.waiters.has(runId)) void flushed.then(() => this.resolveWaiters(ctx.run));
    if (!HELD.has(status) || status === 'queued') this.kick();
  }

  /** GET /background/runs/{id}/events: the replay, repaired first if a crash cut it short. */
  async events(runId: string): Promise<Array<Record<string, unknown>>> {
    await this.outbox.appended(runId);
    const row = await this.getRow(runId);
    if (!row) throw notFound('background run', runId);
    if (!this.handles.has(runId) && !this.outbox.has(runId)) await this.outbox.repairOutbox(row.value);
    return this.outbox.replay(runId);
  }

  private traceValue(ctx: BackgroundRunContext, status: string) {
    const traceStatus = status === 'skipped' ? 'cancelled' : status;
    return {
      trace_id: ctx.internal.trace_id, parent_trace_id: null, run_id: ctx.run.run_id, session_id: ctx.run.session_id,
      task_id: ctx.run.task_id, agent_id: ctx.run.agent_id, kind: 'background', status: traceStatus,
      started_at: ctx.run.triggered_at, ended_at: status === 'running' ? null : ctx.run.finished_at ?? iso(this.deps.clock.now()),
    };
  }

  /** Lifecycle events of a run as stored in telemetry, oldest first. */
  storedLifecycle(runId: string): Promise<Array<{ sequence: number; event: Record<string, unknown> }>> {
    return this.outbox.storedLifecycle(runId);
  }

  // ---------------------------------------------------------------- operator actions

  async cancel(runId: string, reason: string | null = null): Promise<{ status: 'cancel_requested' }> {
    const row = await this.getRow(runId);
    if (!row) throw notFound('background run', runId);
    if (TERMINAL.has(row.value.run.status)) throw new AppError('Conflict', `background run ${runId} already ended (${row.value.run.status})`);
    const run = row.value.run;
    const h = this.handles.get(runId);
    // Held by another live instance of a shared store: its owner cancels it (through its own
    // chain of writes). Writing the row from here would only fence the owner off, and its agent
    // run would go on until its lease lapsed.
    if (this.remoteCancel && (!h || h.dead) && HELD.has(run.status) && run.lease_owner && run.lease_owner !== this.deps.workerId
      && run.lease_expires_at && Date.parse(run.lease_expires_at) > this.deps.clock.now()) {
      await this.remoteCancel(runId, reason);
      return { status: 'cancel_requested' };
    }
    const r = await this.send(runId, { type: 'CANCEL', at: iso(this.deps.clock.now()), reason }, { durable: true });
    if (!r.accepted && r.status && TERMINAL.has(r.status)) throw new AppError('Conflict', `background run ${runId} already ended (${r.status})`);
    return { status: 'cancel_requested' };
  }

  /** Set by the cluster link on a shared store: asks the instance holding a run to cancel it. */
  remoteCancel: ((runId: string, reason: string | null) => Promise<void>) | null = null;

  /** A cancel another instance relayed here: only a run this process holds is touched. */
  cancelIfHeld(runId: string, reason: string | null): void {
    const h = this.handles.get(runId);
    if (!h || h.dead) return;
    void this.cancel(runId, reason).catch((err) => this.log('warn', 'relayed cancel failed', { run_id: runId, err: String(err) }));
  }

  /** POST /background/runs/{id}/resume: a run paused for a person continues once its decision is in. */
  async resume(runId: string): Promise<{ status: 'resumed' }> {
    const row = await this.getRow(runId);
    if (!row) throw notFound('background run', runId);
    const run = row.value.run;
    if (!WAITING.has(run.status)) throw new AppError('Conflict', `background run ${runId} is not waiting for a person (${run.status})`);
    const agentId = row.value.internal.agent_run_id;
    if (agentId && !this.deps.runs.isLive(agentId)) {
      const rec = await this.deps.runs.get(agentId).catch(() => null);
      if (rec && (rec.status === 'awaiting_approval' || rec.status === 'awaiting_budget') && !rec.decided_at) {
        throw new AppError('Conflict', `background run ${runId} still waits for a decision on its agent run ${agentId} (${rec.status})`, 'decide it through POST /runs/{run_id}/approvals/{approval_id} or /runs/{run_id}/budget');
      }
    }
    const r = await this.send(runId, { type: 'RESUME', at: iso(this.deps.clock.now()) }, { durable: true });
    if (!r.accepted && r.status && !(r.status === 'queued' || HELD.has(r.status))) {
      throw new AppError('Conflict', `background run ${runId} is not waiting for a person (${r.status})`);
    }
    return { status: 'resumed' };
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
        if (set.size === 0 && this.waiters.get(runId) === set) this.waiters.delete(runId);
        resolve(run);
      };
      const onRun = (run: BackgroundRun) => finish(run);
      const set = this.waiters.get(runId) ?? new Set<(run: BackgroundRun) => void>();
      this.waiters.set(runId, set);
      set.add(onRun);
      const timer = setTimeout(() => finish(null), ms);
      // It may have settled before the waiter was registered.
      void this.getRow(runId).then(async (row) => {
        const s = row?.value.run.status;
        if (!row || !s || !(TERMINAL.has(s) || WAITING.has(s))) return;
        await this.outbox.flushed(runId); // its events and files are written before the caller hears of the end
        finish(row.value.run);
      });
    });
  }

  private resolveWaiters(run: BackgroundRun): void {
    const set = this.waiters.get(run.run_id);
    if (!set) return;
    this.waiters.delete(run.run_id);
    for (const w of set) w(run);
  }

  /**
   * Deletes a task's runs (DELETE /background/tasks/{id}?delete_runs=true), cancelling live ones
   * first, then its workspace folders: the task's namespace background/<agent_id>/<task_id> in one
   * `rm -r`, plus the run folders of runs a shared template put elsewhere. Runs go in batches (one
   * commit per page of rows, their attempts and occurrence records included), not a commit each.
   */
  async deleteRunsOfTask(taskId: string, agentId: string | null, first?: { ops: WriteOp[]; then: () => void }): Promise<number> {
    let deleted = 0;
    // The caller's ops (the task's own delete) go into the first commit; on their own when there are no runs.
    let pending = first ?? null;
    const firstDone = () => {
      pending?.then();
      pending = null;
    };
    let idle = 0;
    const dirs = new Set<string>();
    this.forgetTask(taskId);
    for (;;) {
      const page = await this.deps.store.listRecords<BgRunRow>('bg_runs', { index: { name: 'task_id', value: taskId }, limit: 500 });
      if (page.items.length === 0) {
        if (pending) {
          await this.deps.store.commit(pending.ops);
          firstDone();
        }
        break;
      }
      await Promise.all(page.items.map(async (item) => {
        const h = this.handles.get(item.id);
        if (h) {
          await h.chain.catch(() => undefined);
          this.release(h, true);
        }
        const { run, internal } = item.value;
        // The run row goes away with its events; its agent run must not go on working unseen.
        if ((run.status === 'running' || WAITING.has(run.status)) && internal.agent_run_id) {
          await this.deps.runs.cancel(internal.agent_run_id).catch(() => undefined);
        }
        this.clearRunTimers(item.id);
      }));
      // The task is gone (its schedule row a tombstone): its occurrence records can never be
      // replayed. No CAS: a heartbeat or a claim that wrote since the page was read must not
      // keep its run alive (the handles were released above; a later write finds no row).
      const removed = await this.deleteRows(page.items, () => true, { fenced: false, extra: pending?.ops ?? [] });
      firstDone();
      deleted += removed.length;
      for (const r of removed) {
        const own = this.workspaces.ownFolderOf(r);
        if (own) dirs.add(own);
        // Claimed between the page read and the delete: its row is gone, its agent run must stop too.
        const late = this.handles.get(r.run_id);
        if (late) {
          const agentRunId = this.contextOf(late).internal.agent_run_id;
          this.release(late, true);
          if (agentRunId) void this.deps.runs.cancel(agentRunId).catch(() => undefined);
        }
      }
      this.forgetTask(taskId);
      // The caller holds the task's job (dispatch and manual runs go through it) and the task is
      // deleted with the first page: no run of it can appear behind this page.
      if (page.items.length < 500 && removed.length === page.items.length) break;
      if (removed.length === 0 && ++idle >= 5) {
        this.log('warn', 'could not delete every run of a deleted task', { task_id: taskId });
        break;
      }
    }
    const root = this.deps.config.background.workspace_root;
    const ns = agentId ? absoluteWorkspace(root, taskNamespace({ agent_id: agentId, task_id: taskId })) : null;
    if (ns) await this.workspaces.removeFolder(ns);
    for (const d of dirs) if (!ns || !isInside(ns, d)) await this.workspaces.removeFolder(d);
    return deleted;
  }

  /**
   * Deletes runs in batches: rows (with `fenced`, a CAS on the version read), their attempts and, when
   * `occurrenceDone` says the schedule consumed it, their occurrence record. Returns the rows
   * deleted. A batch refused because one row changed or vanished meanwhile is retried row by row.
   */
  private async deleteRows(
    rows: Versioned<BgRunRow>[],
    occurrenceDone: (run: BackgroundRun) => boolean,
    opts: { fenced: boolean; extra?: WriteOp[] } = { fenced: true },
  ): Promise<BackgroundRun[]> {
    const { store } = this.deps;
    const attemptIds: string[] = [];
    const occIds: string[] = [];
    for (const r of rows) {
      const { run } = r.value;
      for (let n = 1; n <= run.attempt; n++) attemptIds.push(attemptRecordId(run.run_id, n));
      if (run.occurrence_id && occurrenceDone(run)) occIds.push(occurrenceRecordId(run.task_id, run.occurrence_id));
    }
    const [attempts, occs] = await Promise.all([
      attemptIds.length ? store.getRecords('bg_attempts', attemptIds) : Promise.resolve([]),
      occIds.length ? store.getRecords('bg_occurrences', occIds) : Promise.resolve([]),
    ]);
    const existingAttempts = new Set(attemptIds.filter((_, i) => attempts[i]));
    const existingOccs = new Set(occIds.filter((_, i) => occs[i]));
    const opsOf = (r: Versioned<BgRunRow>): WriteOp[] => {
      const { run } = r.value;
      const ops: WriteOp[] = [opts.fenced ? { op: 'delete', kind: 'bg_runs', id: r.id, expectedVersion: r.version } : { op: 'delete', kind: 'bg_runs', id: r.id }];
      for (let n = 1; n <= run.attempt; n++) {
        const id = attemptRecordId(run.run_id, n);
        if (existingAttempts.has(id)) ops.push({ op: 'delete', kind: 'bg_attempts', id });
      }
      const occ = run.occurrence_id ? occurrenceRecordId(run.task_id, run.occurrence_id) : null;
      if (occ && existingOccs.has(occ)) ops.push({ op: 'delete', kind: 'bg_occurrences', id: occ });
      return ops;
    };
    const gone = (r: Versioned<BgRunRow>) => {
      this.outbox.forget(r.id);
      this.workspaces.deleted(r.id);
    };
    const extra = opts.extra ?? [];
    try {
      await store.commit([...extra, ...rows.flatMap(opsOf)]);
      rows.forEach(gone);
      return rows.map((r) => r.value.run);
    } catch (err) {
      if (!isStoreError(err, 'not_found') && !isStoreError(err, 'stale_version')) throw err;
    }
    // `extra` must not be lost with a refused batch (nor mistaken for the reason): on its own first.
    if (extra.length > 0) await store.commit(extra);
    const out: BackgroundRun[] = [];
    for (const r of rows) {
      try {
        await store.commit(opsOf(r));
        gone(r);
        out.push(r.value.run);
      } catch (err) {
        if (!isStoreError(err, 'not_found') && !isStoreError(err, 'stale_version')) throw err;
      }
    }
    return out;
  }

  /**
   * background.run_retention: deletes ended runs finished before `maxAgeMs` ago, and the oldest
   * ended runs of each task beyond `maxPerTask`, with their attempts, occurrence records (once the
   * schedule consumed them) and own workspace folders. Cheap enough to run every minute: the age
   * pass walks each ended status oldest first and stops at the first run created after the
   * cutoff; the count pass reads each task's per-status counters (one get each) and lists runs
   * only for a task over its limit. At most `budget` runs per sweep; the next one goes on.
   */
  async sweepRetention(opts: {
    maxAgeMs: number;
    maxPerTask: number;
    tasks: Iterable<string>;
    occurrenceDone: (run: BackgroundRun) => boolean;
    budget?: number;
  }): Promise<number> {
    const { store } = this.deps;
    let budget = opts.budget ?? 5000;
    let deleted = 0;
    const cutoff = this.deps.clock.now() - opts.maxAgeMs;
    const drop = async (rows: Versioned<BgRunRow>[]) => {
      if (rows.length === 0) return;
      const removed = await this.deleteRows(rows, opts.occurrenceDone);
      deleted += removed.length;
      budget -= rows.length;
      for (const r of removed) {
        const own = this.workspaces.ownFolderOf(r);
        if (own) await this.workspaces.removeFolder(own);
      }
    };
    const endedAt = (run: BackgroundRun) => Date.parse(run.finished_at ?? run.triggered_at);
    for (const status of TERMINAL) {
      let cursor: string | null = null;
      scan: do {
        const page: { items: Versioned<BgRunRow>[]; next_cursor: string | null } = await store.listRecords<BgRunRow>('bg_runs', { index: { name: 'status', value: status }, cursor, limit: 200 });
        const old: Versioned<BgRunRow>[] = [];
        let stop = false;
        for (const item of page.items) {
          const { run } = item.value;
          // Creation order: a run created after the cutoff ended after it, and so did every later one.
          if (Date.parse(run.triggered_at) >= cutoff) {
            stop = true;
            break;
          }
          if (endedAt(run) < cutoff) old.push(item);
          if (old.length >= budget) break;
        }
        await drop(old);
        if (stop || budget <= 0) break scan;
        cursor = page.next_cursor;
      } while (cursor);
      if (budget <= 0) return deleted;
    }
    for (const taskId of opts.tasks) {
      if (budget <= 0) break;
      const counts = await Promise.all([...TERMINAL].map((st) => store.countRecords('bg_runs', { name: 'task_status', value: taskStatusKey(taskId, st) })));
      let excess = counts.reduce((a, b) => a + b, 0) - opts.maxPerTask;
      let cursor: string | null = null;
      while (excess > 0 && budget > 0) {
        const page: { items: Versioned<BgRunRow>[]; next_cursor: string | null } = await store.listRecords<BgRunRow>('bg_runs', { index: { name: 'task_id', value: taskId }, cursor, limit: Math.min(500, Math.max(50, excess)) });
        const old = page.items.filter((i) => TERMINAL.has(i.value.run.status) && !this.handles.has(i.id)).slice(0, Math.min(excess, budget));
        await drop(old);
        excess -= old.length;
        if (!page.next_cursor) break;
        cursor = page.next_cursor;
      }
    }
    return deleted;
  }

  private clearRunTimers(runId: string): void {
    this.timers.clearRetry(runId);
    this.agent.unwatchResume(runId);
    this.outbox.forget(runId);
  }

  // ---------------------------------------------------------------- claiming

  /** Asks for a claim pass soon (coalesced); with `atMs`, also at that instant (jitter, retry). */
  kick(atMs?: number): void {
    if (!this.accepting) return;
    if (atMs !== undefined && atMs > this.deps.clock.now()) {
      this.wakeAtLatest(atMs);
      return;
    }
    if (this.kickPending) return;
    this.kickPending = true;
    setImmediate(() => {
      this.kickPending = false;
      void this.claimPass();
    });
  }

  private wakeAtLatest(atMs: number): void {
    if (atMs >= this.wakeAt && this.wakeTimer) return;
    if (this.wakeTimer) clearTimeout(this.wakeTimer);
    this.wakeAt = atMs;
    this.wakeTimer = setTimeout(() => {
      this.wakeTimer = null;
      this.wakeAt = Infinity;
      this.kick();
    }, Math.max(0, atMs - this.deps.clock.now()));
    this.wakeTimer.unref();
  }

  /**
   * Claims queued runs, oldest first, while this process has free workers
   * (background.concurrency). queue_next and cancel_previous runs wait for their task per canClaim.
   */
  async claimPass(): Promise<void> {
    if (!this.accepting) return;
    if (this.claimPassRunning) {
      this.claimAgain = true;
      return;
    }
    this.claimPassRunning = true;
    try {
      do {
        this.claimAgain = false;
        await this.claimOnce();
      } while (this.claimAgain && this.accepting);
    } catch (err) {
      this.log('error', 'claim pass failed', { err: String(err) });
    } finally {
      this.claimPassRunning = false;
    }
  }

  private async claimOnce(): Promise<void> {
    const concurrency = this.deps.config.background.concurrency;
    if (this.heldCount >= concurrency) return;
    const now = this.deps.clock.now();
    let cursor: string | null = null;
    let scanned = 0;
    let earliest = Infinity;
    const blockedTasks = new Set<string>();
    // Claims of one pass are written concurrently (they share a store round), not one round each:
    // claim() counts itself in heldCount at once, so the pass stops at the free worker count.
    const claims: Array<Promise<boolean>> = [];
    scan: do {
      // Rows are parsed whole, so a pass with few free workers reads a small page first.
      const free = concurrency - this.heldCount;
      const limit = Math.min(100, Math.max(16, free * 4));
      const page: { items: Versioned<BgRunRow>[]; next_cursor: string | null } = await this.deps.store.listRecords<BgRunRow>('bg_runs', { index: { name: 'status', value: 'queued' }, cursor, limit });
      for (const item of page.items) {
        scanned++;
        const { run, internal } = item.value;
        if (this.handles.has(run.run_id)) continue;
        if (internal.not_before && Date.parse(internal.not_before) > now) {
          earliest = Math.min(earliest, Date.parse(internal.not_before));
          continue;
        }
        const policy = internal.overlap_policy;
        let gate: Handle['gate'] = null;
        if (policy === 'queue_next' || policy === 'cancel_previous') {
          if (blockedTasks.has(run.task_id)) continue;
          // Shared store: the gate is read BEFORE the count, and the claim CASes it; a claim that
          // committed after this read moves the gate (and this claim fails), one that committed
          // before it is in the count.
          if (isSharedStore(this.deps.store)) {
            const id = taskGateId(run.task_id);
            const g = await this.deps.store.getRecord('meta', id);
            gate = { id, version: g ? g.version : null };
          }
          const active = await this.countActive(run.task_id);
          let oldest = true;
          if (policy === 'queue_next') {
            const first = await this.deps.store.listRecords<BgRunRow>('bg_runs', { index: { name: 'task_status', value: taskStatusKey(run.task_id, 'queued') }, limit: 1 });
            oldest = first.items[0]?.id === run.run_id;
          }
          // One claim per such task per pass: after it the task is busy anyway.
          blockedTasks.add(run.task_id);
          if (!canClaim(policy, active, oldest)) continue;
        }
        claims.push(this.claim(run.run_id, item, gate).catch((err: unknown) => {
          this.log('warn', 'could not claim a background run', { run_id: run.run_id, err: String(err) });
          return false;
        }));
        if (this.heldCount >= concurrency || !this.accepting) break scan;
      }
      cursor = page.next_cursor;
    } while (cursor && scanned < 2000);
    await Promise.all(claims);
    if (earliest < Infinity) this.wakeAtLatest(earliest);
  }

  /**
   * CLAIM then START, written as ONE row write: a CAS on the queued version, so of two workers
   * exactly one wins, and the agent run starts only after the write (startAgent is queued behind
   * it). `known` is the row the claim pass just read (saves a read; a stale one loses the CAS).
   */
  async claim(runId: string, known?: Versioned<BgRunRow>, gate: Handle['gate'] = null): Promise<boolean> {
    this.claimingNow++;
    try {
      const loaded = await this.handle(runId, known);
      if (loaded === null || !('actor' in loaded)) return false;
      const h = loaded;
      h.gate = gate;
      h.sends++;
      try {
        const actor = h.actor!;
        const now = this.deps.clock.now();
        const claimEv: BackgroundRunEvent = {
          type: 'CLAIM', at: iso(now), worker_id: this.deps.workerId, lease_token: `lease_${randomUUID()}`, lease_expires_at: iso(now + this.leaseMs),
        };
        if (!this.accepting || actor.getSnapshot().status !== 'active' || !actor.getSnapshot().can(claimEv)) return false;
        actor.send(claimEv);
        actor.send({ type: 'START', at: iso(now), attempt_id: newId('attempt') });
        await h.chain;
        return !h.dead && this.statusOf(h) === 'running';
      } finally {
        h.sends--;
        this.maybeRelease(h);
      }
    } finally {
      this.claimingNow--;
    }
  }

  // ---------------------------------------------------------------- recovery and due retries

  /**
   * Finds runs whose lease lapsed (or, with `ownersDead`, every held run not in this process) and
   * recovers them (claimed -> queued; running -> the next attempt continues the same agent run),
   * and requeues retries whose time came. With `parked`, also moves on runs waiting for a person
   * whose agent run was decided or ended without this process noticing (RunService's own sweep
   * leaves background runs to this manager). Cheap: only claimed/running/retrying rows are read
   * on every pass.
   */
  async maintenance(opts: { ownersDead?: boolean; parked?: boolean } = {}): Promise<void> {
    const now = this.deps.clock.now();
    for (const status of ['claimed', 'running'] as const) {
      await this.forEachRow(status, async (row) => {
        const { run } = row.value;
        const h = this.handles.get(run.run_id);
        if (h && !h.dead) return; // held by this process and alive
        const lapsed = !run.lease_expires_at || Date.parse(run.lease_expires_at) <= now;
        if (!lapsed && !opts.ownersDead) return;
        if (!this.accepting) return;
        // The agent run may have ended (or parked) before the owner could record it: no recovery needed.
        if (status === 'running' && (await this.agent.settleFromAgent(row.value))) return;
        const t = this.deps.clock.now();
        this.claimingNow++;
        try {
          const recovered = await this.send(run.run_id, {
            type: 'RECOVER', at: iso(t), worker_id: this.deps.workerId, lease_token: `lease_${randomUUID()}`,
            lease_expires_at: iso(t + this.leaseMs), attempt_id: newId('attempt'), previous_owner: run.lease_owner,
          }, { durable: true });
          if (recovered.accepted) this.deps.metrics.recovered('background', lapsed ? 'lapsed_lease' : 'owner_dead');
        } finally {
          this.claimingNow--;
        }
      });
    }
    await this.forEachRow('retrying', async (row) => {
      const at = row.value.internal.retry_at ? Date.parse(row.value.internal.retry_at) : now;
      if (!this.timers.hasRetry(row.id)) this.timers.armRetry(row.id, at);
    });
    if (opts.parked) {
      for (const status of ['awaiting_approval', 'awaiting_budget'] as const) {
        await this.forEachRow(status, (row) => this.agent.checkParked(row.value));
      }
    }
  }

  private async forEachRow(status: BackgroundRunStatus, fn: (row: Versioned<BgRunRow>) => Promise<void>): Promise<void> {
    let cursor: string | null = null;
    do {
      const page: { items: Versioned<BgRunRow>[]; next_cursor: string | null } = await this.deps.store.listRecords<BgRunRow>('bg_runs', { index: { name: 'status', value: status }, cursor, limit: 200 });
      for (const row of page.items) {
        try {
          await fn(row);
        } catch (err) {
          this.log('warn', 'background maintenance step failed', { run_id: row.id, err: String(err) });
        }
      }
      cursor = page.next_cursor;
    } while (cursor);
  }
}

/** The record a one-at-a-time task's claims CAS on a shared store (kind `meta`). */
function taskGateId(taskId: string): string {
  return `bg_task_gate|${taskId}`;
}
