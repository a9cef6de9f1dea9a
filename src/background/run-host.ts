// The per-run host: what this process holds for one live background run (its actor, the row as
// last written, the serial chain of its effects, its attempt timers), and RunHosts, which spawns
// them from rows, applies events, and binds the machine's `record` effect: every row write is a
// compare-and-swap on the version this process last wrote, and transitions taken before the
// previous write started share its commit.
import { bgIdOf, bgSessionKey, tenantField } from './tenancy.js';
import type { AnyActorRef, CallbackActorLogic } from 'xstate';
import {
  BACKGROUND_RUN_MACHINE_VERSION,
  backgroundRunMachine,
  persistedSnapshotOf,
  type BackgroundRunContext,
  type BackgroundRunEvent,
  type AgentRunChildEvent,
  type RecordParams,
  type StartAgentParams,
} from '../../machines/background-run.machine.js';
import type { BackgroundRunStatus } from '../schemas/background.js';
import { isStoreError, StoreError, type StoredEvent, type Versioned, type WriteOp } from '../store/store.js';
import { repos } from '../store/repos/index.js';
import { isSharedStore } from '../store/changes.js';
import { HELD, TERMINAL, attemptRecordId, runRowIndexes, type BgRunRow, type LifecycleRecord } from './types.js';
import type { BackgroundDeps, Handle, RunActor, SendResult, WriteJob } from './host-types.js';
import type { EventOutbox } from './outbox.js';
import type { WriteJoin } from './write-join.js';
import type { SupervisorGroup } from '../runtime/system.js';
import type { CarriedWrite } from '../runtime/persistence.js';
import type { TraceRecord, TraceStatus } from '../telemetry/traces.js';
import { reportSwallowed } from '../telemetry/swallowed.js';
import type { AppLogger } from '../telemetry/logger.js';

/** The agent run child of a running background run (src/background/agent-bridge.ts). */
export type AgentRunLogic = CallbackActorLogic<AgentRunChildEvent, StartAgentParams>;

const iso = (ms: number) => new Date(ms).toISOString();

/** A handle holding nothing yet but its row (exported for tests of the parts that take a handle). */
export function newHandle(id: string, row: Versioned<BgRunRow>): Handle {
  return {
    id,
    actor: null,
    row,
    chain: Promise.resolve(),
    pending: 0,
    sends: 0,
    dead: false,
    heartbeat: null,
    timeout: null,
    timeoutAttempt: 0,
    timedOut: null,
    tailWrite: null,
    ahead: null,
    gate: null,
    log: null,
  };
}

/** A background run's lines: the process's logger with the run's and its task's ids bound. */
export function bgRunLogger(logger: AppLogger, run: { run_id: string; task_id: string }): AppLogger {
  return logger.child({ bg_run_id: run.run_id, task_id: run.task_id });
}

/** What the live runs need of the engine around them. */
export interface RunHostHooks {
  /** The live runs by id (shared with the engine). */
  handles: Map<string, Handle>;
  outbox: EventOutbox;
  /** Completions waiting to share the next row write's store round. */
  join: WriteJoin;
  /** Deleted by this process: not loaded again. */
  isDeleted(runId: string): boolean;
  /** Every bg_runs write reports the run's status (the overlap cache). */
  noteRun(taskId: string, runId: string, status: BackgroundRunStatus | null): void;
  /** This process no longer knows the task's runs' true status. */
  forgetTask(taskId: string): void;
  /** Asks for a claim pass. */
  kick(): void;
  /** After a row write and the queueing of its events: timers, watches, metrics, waiters, claims. */
  afterWrite(h: Handle, ctx: BackgroundRunContext, prevStatus: BackgroundRunStatus, flushed: Promise<unknown>): void;
  /** Somebody waits for the run to settle (their answer must not wait for another write). */
  hasWaiter(runId: string): boolean;
  /** A released run's heartbeat and attempt timeout stop. */
  clearTimers(h: Handle): void;
  /** The agent run child's logic and the machine's cancelAgent effect (the agent bridge). */
  agentRun: AgentRunLogic;
  cancelAgent(runId: string, agentRunId: string | null): void;
  closed(): boolean;
}

export class RunHosts {
  private readonly handles: Map<string, Handle>;
  private readonly loading = new Map<string, Promise<Handle | Versioned<BgRunRow> | null>>();
  private readonly logic;
  /**
   * The live runs' actors sit under their own supervisor (`group:bgruns`), not the root: xstate
   * copies a parent's children map on every spawn and stop, so under the root each claim and each
   * release cost O(every live agent run, session and run actor) instead of O(live background runs).
   */
  private readonly actors: SupervisorGroup;
  /** Set while foldInto applies its event: the `record` effect lands in this job. */
  private folding: { h: Handle; job: WriteJob } | null = null;

  constructor(
    private readonly deps: BackgroundDeps,
    private readonly hooks: RunHostHooks,
  ) {
    this.handles = hooks.handles;
    this.actors = deps.system.group('bgruns');
    this.logic = backgroundRunMachine.provide({
      actors: { agentRun: hooks.agentRun },
      actions: {
        record: ({ context }, params) => this.onRecord(context, params),
        cancelAgent: ({ context }, params) => this.hooks.cancelAgent(context.run.run_id, params.agent_run_id),
      },
    });
  }

  /** A live run's logger: every line carries its bg_run_id and task_id. */
  logOf(h: Handle): AppLogger {
    return (h.log ??= bgRunLogger(this.deps.logger, h.row.value.run));
  }

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

  statusOf(h: Handle): BackgroundRunStatus {
    return h.actor ? h.actor.getSnapshot().context.run.status : h.row.value.run.status;
  }

  contextOf(h: Handle): BackgroundRunContext {
    return h.actor ? h.actor.getSnapshot().context : h.row.value;
  }

  /** The live handle, or a fresh one restored from the row; a terminal row comes back as the row. */
  async handle(runId: string, known?: Versioned<BgRunRow>): Promise<Handle | Versioned<BgRunRow> | null> {
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
    const appending = this.hooks.outbox.appending(runId);
    if (appending) await appending;
    // A row the caller just read (a claim pass) saves a read; a stale one fails its first write
    // (CAS). One deleted meanwhile must not be repaired (that would make its folder again).
    if (this.hooks.isDeleted(runId)) return null;
    const row = known ?? (await repos(this.deps.store).bgRuns.get(runId));
    if (!row) return null;
    const version = row.value.machine_version ?? 1;
    if (version > BACKGROUND_RUN_MACHINE_VERSION) return TERMINAL.has(row.value.run.status) ? row : this.failNewer(row, version);
    await this.hooks.outbox.repairOutbox(row.value);
    if (TERMINAL.has(row.value.run.status)) return row;
    const h = newHandle(runId, row);
    this.handles.set(runId, h);
    const { machine_version: _v, event_seq: _s, outbox: _o, ...ctx } = row.value;
    const ref = this.actors.spawn(`bgrun:${runId}`, this.logic, { snapshot: persistedSnapshotOf(ctx) as never }) as AnyActorRef;
    h.actor = ref as unknown as RunActor;
    return h;
  }

  /**
   * A row written by a newer background-run machine than this server knows: restoring it could
   * misread its state, so the run fails with an error that says why, in one CAS write on the row
   * as read (its lifecycle event, trace and waiters as for any end). Its outbox is not replayed
   * (a newer format too). A run that ended already is only read.
   */
  private async failNewer(row: Versioned<BgRunRow>, version: number): Promise<Versioned<BgRunRow>> {
    const { machine_version: _v, event_seq: _s, outbox: _o, ...saved } = row.value;
    const runId = saved.run.run_id;
    const error = `background run ${runId} was saved by a newer agentd (background-run machine v${version}; this server knows up to v${BACKGROUND_RUN_MACHINE_VERSION}): failed instead of restored`;
    const log = bgRunLogger(this.deps.logger, saved.run);
    log.error({ machine_version: version }, 'background run saved by a newer machine version; failing it');
    const at = iso(this.deps.clock.now());
    const ctx: BackgroundRunContext = {
      run: { ...saved.run, status: 'failed', error, finished_at: at, lease_owner: null, lease_token: null, lease_expires_at: null },
      internal: { ...saved.internal, current_attempt: null, retry_at: null, not_before: null },
    };
    // Not registered among the live handles: nothing else may act on this run meanwhile.
    const h = newHandle(runId, row);
    h.dead = true;
    try {
      await this.writeRecord(h, [{ ctx, params: { events: [{ type: 'background_run_failed', data: { error, machine_version: version } }], attempts: [] } }]);
    } catch (err) {
      // Someone else wrote the row first (or the store failed): left as it is, read again next time.
      log.warn({ err: String(err) }, 'could not fail a background run of a newer machine version');
      return row;
    }
    return h.row;
  }

  maybeRelease(h: Handle): void {
    if (h.dead || h.sends > 0 || h.pending > 0) return;
    if (HELD.has(this.statusOf(h)) && !this.hooks.closed()) return;
    this.release(h, false);
  }

  release(h: Handle, dead: boolean): void {
    if (dead) h.dead = true;
    this.hooks.clearTimers(h);
    this.actors.stop(`bgrun:${h.id}`);
    if (this.handles.get(h.id) === h) this.handles.delete(h.id);
  }

  enqueue(h: Handle, job: () => Promise<void>, onError: (err: unknown) => void): void {
    h.tailWrite = null; // a later transition must not be written before this job runs
    h.pending++;
    h.chain = this.afterChain(h, h.chain, job, onError);
  }

  /** A job of a run's chain, after those before it (`prev` never rejects): one async function, not then/catch/finally (fewer promises per job). */
  private async afterChain(h: Handle, prev: Promise<void>, job: () => Promise<void>, onError: (err: unknown) => void): Promise<void> {
    try {
      await prev;
      if (!h.dead) await job();
    } catch (err) {
      try {
        onError(err);
      } catch (handlerErr) {
        // never let a handler break the chain
        reportSwallowed('background.chain_handler', handlerErr, { run_id: h.id });
      }
    } finally {
      h.pending--;
      this.maybeRelease(h);
    }
  }

  // ---------------------------------------------------------------- the `record` effect

  private onRecord(ctx: BackgroundRunContext, params: RecordParams): void {
    const h = this.handles.get(ctx.run.run_id);
    if (!h) {
      bgRunLogger(this.deps.logger, ctx.run).error('background run effect without a live handle');
      return;
    }
    // A transition folded into another writer's commit (foldInto) is written there.
    if (this.folding?.h === h) {
      this.folding.job.steps.push({ ctx, params });
      return;
    }
    // Transitions taken before the previous one's write started are written together with it:
    // a claim and the start of its attempt are one commit, the same CAS on the queued version.
    if (h.tailWrite) {
      h.tailWrite.steps.push({ ctx, params });
      return;
    }
    const job: WriteJob = { steps: [{ ctx, params }] };
    this.enqueue(
      h,
      () => {
        if (h.tailWrite === job) h.tailWrite = null;
        return this.writeRecord(h, job.steps, job.issued);
      },
      (err) => this.writeFailed(h, err),
    );
    h.tailWrite = job;
  }

  /** Fenced or the store failed: this copy no longer knows the truth; drop it (the row is reloaded on next use). */
  private writeFailed(h: Handle, err: unknown): void {
    const refused = isStoreError(err, 'stale_version') || (err as Error)?.name === 'FencedError';
    this.logOf(h)[refused ? 'warn' : 'error']({ err: String(err) }, 'background run write refused; dropping this copy');
    if (refused) this.deps.metrics.leaseLost('background');
    this.hooks.forgetTask(h.row.value.run.task_id);
    this.release(h, true);
    this.hooks.kick();
  }

  /**
   * Calls `fn` with the commit once the run's queued row write (a claim's) is handed to the store,
   * before it lands; false when no row write is queued and not started (nothing to call back on).
   */
  whenIssued(h: Handle, fn: (landed: Promise<unknown>) => void): boolean {
    if (!h.tailWrite) return false;
    (h.tailWrite.issued ??= []).push(fn);
    return true;
  }

  private async writeRecord(h: Handle, steps: WriteJob['steps'], issued?: WriteJob['issued']): Promise<void> {
    // A held run's end with nobody waiting on it: its worker is free now (the actor no longer
    // counts as held), and its commit waits for the next row write, the next run's claim, to
    // share that store round (see write-join.ts for why a crash meanwhile is safe).
    if (TERMINAL.has(steps[steps.length - 1].ctx.run.status) && HELD.has(h.row.value.run.status) && !this.hooks.hasWaiter(h.id) && !this.hooks.closed()) {
      this.hooks.kick();
      await this.hooks.join.next();
    }
    const w = this.rowWrite(h, steps);
    const { ctx, gate, ops, lifecycle } = w;
    let written: Versioned<unknown> | null;
    const stored = this.deps.store.capabilities.atomicCommitEvents === true;
    try {
      // On a store that writes them atomically, the lifecycle events ride in the row's commit:
      // stored only if its CAS holds, in the same store round (see Store.commitWithEvents).
      // Elsewhere (PostgreSQL) they are appended behind the commit on the run's outbox chain, so
      // the run's next step does not wait for a second round.
      const commit = stored ? this.deps.telemetry.commitWithEvents(ops, this.hooks.outbox.eventsOf(ctx, lifecycle)) : this.deps.store.commit(ops);
      // Completions waiting for a write go into this one's store round.
      this.hooks.join.release();
      h.ahead = { ...h.row, version: h.row.version + 1, value: w.next };
      for (const fn of issued ?? []) fn(commit);
      try {
        [written] = await commit;
      } finally {
        h.ahead = null;
      }
    } catch (err) {
      // Another instance claimed a run of this one-at-a-time task first (the gate moved): this
      // claim is refused like a fenced write, and the run stays queued for a later pass.
      if (gate && isStoreError(err, 'conflict')) throw new StoreError('stale_version', `task ${ctx.run.task_id}: another instance claimed first`);
      throw err;
    }
    this.afterRowWrite(h, w, written as Versioned<BgRunRow>, stored);
  }

  /** One row write of these transitions: the row, its attempts, gate and trace ops, its lifecycle records. Writes nothing. */
  private rowWrite(h: Handle, steps: WriteJob['steps'], base: Versioned<BgRunRow> = h.row) {
    const prev = base.value;
    const at = iso(this.deps.clock.now());
    const lifecycle: LifecycleRecord[] = [];
    const attempts = new Map<number, RecordParams['attempts'][number]>();
    let seq = prev.event_seq;
    let runJson = false;
    for (const { ctx: c, params } of steps) {
      for (const e of params.events) lifecycle.push(this.hooks.outbox.lifecycleOf(c, e, ++seq, at));
      for (const a of params.attempts) attempts.set(a.attempt_number, a);
      // run.json follows every lifecycle event except heartbeats (and a change with no event).
      if (params.events.length === 0 || params.events.some((e) => e.type !== 'background_run_heartbeat')) runJson = true;
    }
    const ctx = steps[steps.length - 1].ctx;
    const unacked = this.hooks.outbox.unacked(h.id);
    // The outbox is for a store that appends the events behind the commit (a crash in between
    // leaves them only here). Where the commit carries them atomically (writeRecord, foldInto)
    // it would be a second copy of each event, written and parsed with every row write.
    const atomic = this.deps.store.capabilities.atomicCommitEvents === true;
    const next: BgRunRow = {
      ...ctx,
      machine_version: BACKGROUND_RUN_MACHINE_VERSION,
      event_seq: seq,
      outbox: atomic ? [] : unacked.length > 0 ? [...unacked, ...lifecycle] : lifecycle,
    };
    const r = repos(this.deps.store);
    const ops: WriteOp[] = [
      r.bgRuns.updateOp(h.id, next, base.version, runRowIndexes(next)),
      // Attempts ride in the same atomic write: the run row's CAS fences them too.
      ...[...attempts.values()].map((a) => r.bgAttempts.updateOp(attemptRecordId(h.id, a.attempt_number), a, null, { run_id: h.id })),
    ];
    const status = ctx.run.status;
    const gate = h.gate;
    h.gate = null;
    if (gate && prev.run.status === 'queued' && HELD.has(status)) {
      const value = { task_id: ctx.run.task_id, claimed_run: h.id, at };
      ops.push(gate.version === null ? r.meta.createOp(gate.id, value) : r.meta.updateOp(gate.id, value, gate.version));
    }
    if (TERMINAL.has(status) && !TERMINAL.has(prev.run.status)) {
      ops.push(
        r.traces.updateOp(ctx.internal.trace_id, this.traceValue(ctx, status), null, {
          run_id: h.id,
          session_id: bgSessionKey(ctx.run),
          task_id: ctx.run.task_id,
        }),
      );
    }
    return { ctx, prevStatus: prev.run.status, next, ops, lifecycle, runJson, gate };
  }

  /** The row write landed (`written`): this copy, the overlap cache, the events' mirror, timers, waiters. */
  private afterRowWrite(h: Handle, w: ReturnType<RunHosts['rowWrite']>, written: Versioned<BgRunRow>, stored: boolean): void {
    h.row = written;
    this.hooks.noteRun(w.ctx.run.task_id, h.id, w.ctx.run.status);
    const flushed = this.hooks.outbox.queueEmit(w.ctx, w.lifecycle, { runJson: w.runJson, mirror: true, stored });
    this.hooks.afterWrite(h, w.ctx, w.prevStatus, flushed);
  }

  /**
   * Applies `event` to a live run and, instead of writing it, hands the row write to the caller,
   * whose commit carries it; the transition is the machine's own (the actor takes the event; its
   * `record` effect lands here). Two callers:
   * - an agent run's end or park (AGENT_DONE; RunService.foldFinal): the agent run's final commit
   *   carries it, so both are one atomic write and a crash leaves both or neither. On a store
   *   other instances share (PostgreSQL) the row's CAS may be refused there (another instance
   *   took the run over: its lease lapsed, say): the carried write is then `optional`, and the
   *   agent run's end is written alone right after (RecordWriter.retryWithout), as it was before
   *   the fold, when it went first: the instance that holds the run now settles it from that end
   *   (AgentBridge.agentSettledOf, continueAgent), and this copy is dropped (writeFailed);
   * - a person's decision (RESUME; AgentBridge.decided): the decision's commit carries it, on any
   *   store (`decision`): a refused CAS fails the decision, which is read and tried again.
   * Null when the run is not live here, has a write of its own queued or under way (its row
   * version is not settled), or does not take the event. One exception: the first case may fold
   * while the run's claim (or another row write) is still in flight, its commit handed to the
   * store (its agent run started as the claim was issued, AgentBridge.logic): the carrying commit
   * CASes on the version that write leaves (`h.ahead`) and lands after it. On a store this process
   * alone writes, because it takes commits first in, first out (a refused claim makes the carrying
   * commit refused too: the agent run is fenced); on one other instances share, because an agent
   * run started before its claim landed writes nothing before it did (StartOptions.after: a
   * refused claim fences the agent run off before its first write); there only behind the claim.
   */
  foldInto(runId: string, event: BackgroundRunEvent, published: (stored: StoredEvent[]) => void, opts: { decision?: boolean } = {}): CarriedWrite | null {
    const atomic = this.deps.store.capabilities.atomicCommitEvents === true;
    if (this.hooks.closed() || !atomic) return null;
    const shared = isSharedStore(this.deps.store);
    const h = this.handles.get(runId);
    if (!h || h.dead || !h.actor || h.tailWrite) return null;
    // Behind a write in flight (`h.ahead`): on a shared store only the claim (the row as last written is still queued).
    const behind = h.pending === 1 && h.ahead && !opts.decision && (!shared || h.row.value.run.status === 'queued');
    const base = h.pending === 0 ? h.row : behind ? h.ahead : null;
    if (!base) return null;
    if (h.actor.getSnapshot().status !== 'active') return null;
    const job: WriteJob = { steps: [] };
    this.folding = { h, job };
    try {
      h.actor.send(event);
    } finally {
      this.folding = null;
    }
    // Nothing to write: the state does not take the event (no `can()` asked first: that would
    // work out the transition, guards and all, twice), or took it without a durable change (every
    // transition that changes the row records).
    if (job.steps.length === 0) return null;
    const w = this.rowWrite(h, job.steps, base);
    let settle!: { resolve: () => void; reject: (err: unknown) => void };
    const landed = new Promise<void>((resolve, reject) => (settle = { resolve, reject }));
    landed.catch(() => undefined); // heard by the chain job below (or nobody, once this copy is dropped)
    // The run's chain waits for the carrying commit: nothing else writes its row meanwhile.
    this.enqueue(
      h,
      async () => {
        await landed;
        // The row's CAS held (the commit applied): its version is the next one.
        this.afterRowWrite(h, w, { ...h.row, version: h.row.version + 1, value: w.next }, true);
      },
      (err) => this.writeFailed(h, err),
    );
    // Its worker is free now (the actor no longer counts as held): the next claim may share the
    // carrying commit's store round.
    this.hooks.kick();
    const records = this.deps.telemetry.recordsOf(this.hooks.outbox.eventsOf(w.ctx, w.lifecycle));
    // Nobody waits for this run: as writeRecord does, its commit (here, the agent run's final
    // one, not handed to the store yet) waits for the next row write to share its round.
    const mayWait = HELD.has(w.prevStatus) && !this.hooks.hasWaiter(h.id) && !this.hooks.closed();
    return {
      ops: w.ops,
      events: records,
      optional: shared && !opts.decision,
      stored: (stored) => {
        published(stored);
        settle.resolve();
      },
      failed: (err) => settle.reject(err ?? new StoreError('stale_version', `background run ${runId}: the commit carrying its write was not written`)),
      // A new final write is held on a shared store only: on one this process alone writes, the
      // next claim's agent run starts as the claim is issued (AgentBridge.logic), and a final write
      // that is not the creating one goes at once, as it did before the fold reached PostgreSQL.
      hold: (write) => (mayWait && (shared || write === 'creating') ? this.hooks.join.next() : null),
    };
  }

  /** Called with 'running' or a terminal status: each is a trace status but 'skipped' (its trace is cancelled). */
  traceValue(ctx: BackgroundRunContext, status: string): TraceRecord & { kind: 'background' } {
    const traceStatus = (status === 'skipped' ? 'cancelled' : status) as TraceStatus;
    return {
      trace_id: ctx.internal.trace_id,
      parent_trace_id: null,
      run_id: ctx.run.run_id,
      session_id: ctx.run.session_id,
      // The client's ids (tenancy.ts): the trace's indexes hold the keys.
      task_id: bgIdOf(ctx.run.task_id),
      agent_id: bgIdOf(ctx.run.agent_id),
      kind: 'background',
      // The run's tenant (its task key's, tenancy.ts): trace reads of a tenant filter on it.
      ...tenantField(ctx.run.task_id),
      status: traceStatus,
      started_at: ctx.run.triggered_at,
      ended_at: status === 'running' ? null : (ctx.run.finished_at ?? iso(this.deps.clock.now())),
    };
  }
}
