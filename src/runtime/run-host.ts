// One object per run live in this process: its serial record writer, its actor, its timeout timer
// and heartbeat (none for a background run's agent run), and its telemetry chain. After every
// transition it persists the record and snapshot (as recordFromSnapshot projects it); it lets go
// of the run when it ends, parks, stops at a boundary, fails outside its machine or is fenced off.
import { bgIdOf, sessionKeyOf } from './tenancy.js';
import type { AnyActorRef, Snapshot } from 'xstate';
import { RUN_MACHINE_VERSION, type RunContext, type RunEvent, type RunStateValue } from '../../machines/run.machine.js';
import type { ChatMessage } from '../agent/model/types.js';
import { newId } from '../ids.js';
import { keyReleaseOp } from '../flow/key-slots.js';
import { isSharedStore } from '../store/changes.js';
import type { Versioned, WriteOp } from '../store/store.js';
import type { EventRecordInput } from '../telemetry/record.js';
import type { AgentLease, AgentProfile } from '../agent/agent-profile.js';
import { FencedError, RecordWriter, type CarriedWrite } from './persistence.js';
import { RunEventChain } from './run-events.js';
import { phaseOf, recordFromSnapshot } from './run-projection.js';
import { nextCheckpoints, type Checkpoint } from '../../machines/policies/checkpoints.js';
import type { RunOrigin } from './debug/origin.js';
import type { HostKernel } from './host-kernel.js';
import { TERMINAL_RUN_STATUSES, runIndexes, type RunRecord, type RunRecordStatus } from './run-record.js';
import { iso, traceStatusOf, type SessionValue, type SnapshotValue, type StartOptions, type TraceValue } from './run-types.js';
import { repos } from '../store/repos/index.js';
import { swallow } from '../telemetry/swallowed.js';
import { createFoldMs } from './create-fold.js';
import type { AppLogger } from '../telemetry/logger.js';

/** A telemetry event as a run's parts emit it (the host adds trace id, sequence and run metadata). */
export type RunEventInput = Omit<EventRecordInput, 'trace_id' | 'metadata'> & { metadata?: Record<string, unknown> };

type RunSnapshot = { value: RunStateValue; context: RunContext; status: string };

export class RunHost {
  readonly run_id: string;
  readonly session_id: string;
  /** The store key of the session: its id in the run's tenant (src/runtime/tenancy.ts). */
  readonly session_key: string;
  readonly tenant: string | null;
  /** The run request's metadata (policy conditions' `metadata`, src/runtime/run-effects.ts). */
  readonly metadata: Record<string, unknown>;
  readonly writer: RecordWriter<RunRecord>;
  ref: AnyActorRef | null = null;
  readonly abort = new AbortController();
  readonly rootSpan = newId('span');
  stepSpan: string | null = null;
  /** The run's telemetry events, stored in order (run-events.ts); `events.done` once all emitted so far are. */
  readonly events: RunEventChain;
  /**
   * The session record as this run found it once its turn came (null: a new session), so the
   * completed run's history is written in the same store round as its final record. Undefined
   * for a resumed run, which did not queue in its session: it appends with a fresh read instead.
   */
  session: Versioned<SessionValue> | null | undefined = undefined;
  /**
   * A session this run found absent is created in its final commit, as nobody can create it while
   * this run holds its turn: one nobody else names (StartOptions.session_is_private, or none named),
   * or any on a store only this process writes, where every writer of a session's turns holds its
   * turn first (SessionGate: RunStarter.start; a resumed run in finish()). The gate is per process.
   */
  sessionCreateInCommit = false;
  /** The history write issued with the final record: true once written, false if it must be redone. */
  private historyWrite: Promise<boolean> | null = null;
  deltaSeq = 0;
  /** StartOptions.onDelta. */
  readonly onDelta?: (text: string, sequence: number, afterEvent: number) => void;
  /** Resolves when the run ends or waits for a person. Never rejects. */
  readonly settled: Promise<RunRecord>;
  private resolveSettled!: (r: RunRecord) => void;
  private heartbeat: NodeJS.Timeout | null = null;
  private timeout: NodeJS.Timeout | null = null;
  private readonly startedAtMs: number;
  readonly workspace_path: string | null;
  /** Set once the run's last write in this process is decided: later snapshots are not persisted. */
  ending = false;
  /** kernel.notifyEnded was told already, when the end was queued (an embedded store: onSnapshot). */
  private endedEarly = false;
  private keyReleaseInWrite = false; // the end or park write carries the key slot's release (a shared store)
  readonly kind: 'sync' | 'background';
  /** −100..100: its model calls' place among calls waiting for the provider's rate limit. */
  readonly priority: number;
  readonly task_id: string | null;
  readonly agent_id: string;
  /** The agent this run runs as (model, tools, instruction), held until the run retires. */
  readonly agent: AgentProfile;
  private readonly releaseAgent: () => void;
  /** This segment's trace record, rewritten in the commit that ends or parks the run. */
  private trace: TraceValue;
  /** Messages the run's turn adds to the session before its own (an interrupted run's query it took over). */
  prelude: ChatMessage[] = [];
  /** Texts of a caller-given conversation (StartOptions.history): guardrails check them as they check the query. */
  callerInput: string[] = [];
  /** The run's checkpoints so far, saved with every snapshot (machines/policies/checkpoints.ts). */
  private checkpoints: readonly Checkpoint[];
  /** A fork's or replay's origin (StartOptions.origin), saved with every snapshot. */
  readonly origin: RunOrigin | null;

  /** `create`: the run does not exist yet; its writer's first commit creates it, with these ops. */
  constructor(
    private readonly kernel: HostKernel,
    rec: Versioned<RunRecord>,
    private readonly releaseSlot: () => void,
    agent: AgentLease,
    opts: StartOptions,
    trace: TraceValue,
    create?: WriteOp[],
  ) {
    const { deps } = kernel;
    this.run_id = rec.value.run_id;
    this.session_id = rec.value.session_id;
    this.session_key = sessionKeyOf(rec.value);
    this.tenant = rec.value.tenant ?? null;
    this.metadata = rec.value.metadata ?? {};
    this.settled = new Promise<RunRecord>((r) => (this.resolveSettled = r));
    // A new run's first round waits to fold with what follows, or not (src/runtime/create-fold.ts).
    const foldMs = create === undefined ? null : createFoldMs(deps.store, rec.value.kind, opts, deps.createFoldMs);
    const fold = foldMs !== null;
    // On a store that writes events in a commit, the run's events ride in its record writes (run-events.ts).
    const ride = deps.store.capabilities.atomicCommitEvents === true;
    this.events = new RunEventChain(deps.telemetry, fold && !ride, ride ? () => this.writer.hasOpenWrite : null);
    this.writer = new RecordWriter<RunRecord>(
      deps.store,
      'runs',
      rec.id,
      rec,
      runIndexes,
      (err) => this.onFenced(err),
      create
        ? fold
          ? {
              extra: create,
              delayMs: foldMs,
              beforeIssue: () => this.events.release(),
              replaces: opts.queued?.version,
              after: opts.after,
            }
          : { extra: create, replaces: opts.queued?.version, after: opts.after }
        : undefined,
    );
    if (ride) this.writer.rider = this.events;
    // Its background run's claim was refused (StartOptions.after): the creating write goes now and fails, fenced off.
    opts.after?.catch(() => this.writer.flush());
    this.onDelta = opts.onDelta;
    this.startedAtMs = deps.clock.now();
    this.workspace_path = opts.workspace_path ?? null;
    this.kind = rec.value.kind;
    this.priority = rec.value.priority ?? 0;
    this.task_id = rec.value.task_id;
    this.agent_id = rec.value.agent_id;
    this.agent = agent.profile;
    this.releaseAgent = agent.release;
    this.trace = trace;
    this.checkpoints = opts.checkpoints ?? [];
    this.origin = opts.origin ?? null;
    // A background run's agent run renews no lease: its background run's owns it (docs/architecture.md "Which instance owns a run").
    if (this.kind !== 'background') this.heartbeat = setInterval(() => this.beat(), Math.max(50, Math.floor((deps.settings.lease_seconds * 1000) / 3)));
    this.heartbeat?.unref();
    const timeoutSeconds = opts.timeout_seconds ?? (this.kind === 'sync' ? deps.settings.request_timeout_seconds : null);
    if (timeoutSeconds && timeoutSeconds > 0) {
      this.timeout = setTimeout(() => this.ref?.send({ type: 'TIMEOUT' }), timeoutSeconds * 1000);
      this.timeout.unref();
    }
  }

  private get deps() {
    return this.kernel.deps;
  }

  private logger: AppLogger | null = null;

  /** This run's logger: the process's, every line bound to `run_id`. Made on first use (most runs never log). */
  get log(): AppLogger {
    return (this.logger ??= this.deps.logger.child({ run_id: this.run_id }));
  }

  /**
   * Spawns (or restores) the run's actor. `resumeEvent` is the person's decision a restored
   * waiting run continues with: it is sent before anything is persisted, because persisting the
   * restored `awaiting*` state first would park the run again.
   */
  spawn(opts: { input?: unknown; snapshot?: Snapshot<unknown> }, resumeEvent?: RunEvent): void {
    const ref = this.deps.system.spawn(`run:${this.run_id}`, this.kernel.logic, opts);
    this.ref = ref;
    ref.subscribe({
      next: (snap) => this.onSnapshot(snap as unknown as RunSnapshot),
      error: (err) => void this.failLive(err),
    });
    if (resumeEvent) ref.send(resumeEvent);
    // The subscription only sees later transitions: persist the state we start in too.
    else this.onSnapshot(ref.getSnapshot() as RunSnapshot);
  }

  /**
   * The run's current machine context, which the effects read (their invoke inputs carry only the
   * run id). While a restored actor starts, the effects active in its snapshot start before
   * spawn() returns its ref: the system knows the actor by then, already holding that snapshot.
   */
  context(): RunContext {
    const ref = this.ref ?? this.deps.system.get(`run:${this.run_id}`);
    // eslint-disable-next-line no-restricted-syntax -- an invariant: effects read the context only while the actor is spawned
    if (!ref) throw new Error(`run ${this.run_id} has no actor`);
    return (ref.getSnapshot() as RunSnapshot).context;
  }

  // ---------------------------------------------------------------- persistence after each transition

  private onSnapshot(snap: RunSnapshot): void {
    if (this.ending || !this.ref) return;
    const state = snap.value;
    const ctx = snap.context;
    const phase = phaseOf(state, this.kernel.closing);
    const { status, terminal, waiting, stopped, interrupt } = phase;
    const persisted = this.ref.getPersistedSnapshot();
    const now = iso(this.deps.clock.now());
    const checkpoints = this.deps.settings.checkpoints === false ? this.checkpoints : (this.checkpoints = nextCheckpoints(this.checkpoints, state, ctx, now));
    const origin = this.origin;
    if (phase.ending) this.ending = true;
    // The conversation grows in the same round as the completed run's record. A session nobody
    // can create meanwhile (sessionCreateInCommit) is created in the record's own commit; otherwise
    // it is written right before it (RecordWriter.update's beforeCommit) as its own job, so a
    // session changed meanwhile (its CAS misses) only makes finish() append the slow way. An
    // existing session always goes that way: DELETE /sessions/{id} takes no turn.
    const session = this.session;
    const historyInCommit = status === 'completed' && session === null && this.sessionCreateInCommit;
    let fold: CarriedWrite | null = null;
    const extra = (r: RunRecord): WriteOp[] => {
      const snapshot: SnapshotValue = {
        machine: 'run',
        machine_version: RUN_MACHINE_VERSION,
        snapshot: persisted,
        workspace_path: this.workspace_path,
        checkpoints,
      };
      const ops: WriteOp[] = [repos(this.deps.store).snapshots.updateOp(this.run_id, origin ? { ...snapshot, origin } : snapshot, null)];
      // The trace's status changes in the same commit as the run's, so nobody sees an ended or
      // parked run whose trace still reads `running`.
      if (phase.ending) {
        this.trace = { ...this.trace, status: terminal ? traceStatusOf(status) : 'suspended', ended_at: now };
        const indexes = { run_id: this.run_id, session_id: this.session_key, task_id: this.task_id };
        ops.push({ op: 'update', kind: repos(this.deps.store).traces.kind, id: this.trace.trace_id, value: this.trace, expectedVersion: null, indexes });
      }
      if (historyInCommit) ops.push(this.kernel.history.firstTurnOp(r, this.prelude));
      // A shared store: the run's key slot goes back in this commit (src/store/holders-op.ts), not a round of its own.
      if ((terminal || waiting) && r.concurrency && isSharedStore(this.deps.store)) {
        ops.push(keyReleaseOp(this.deps.store, r.concurrency.key, this.run_id));
        this.keyReleaseInWrite = true;
      }
      // A background agent run's end or park carries its background run's step (row, attempt,
      // trace, lifecycle event) in this same commit: both are written or neither is. Its ops and
      // events go with the write's carried events (the `carry` below, CarriedEvents.ops).
      if ((terminal || waiting) && this.kind === 'background' && this.kernel.finalFold) {
        try {
          fold = this.kernel.finalFold(r);
        } catch (err) {
          fold = null; // nothing folded: the end goes the usual way (onSettled)
          this.log.error({ err: String(err) }, "could not fold the background run's step into the agent run's final commit");
        }
      }
      return ops;
    };
    // A run's events are stored before it reads as ended or waiting, so a client that sees that status also finds
    // final_answer / runtime_error / policy_decision_ask: the last ones ride in this very update on a store that writes
    // events in a commit (run-events.ts), and every earlier one was handed to the store before it (first in, first out).
    // No waiting for the events here, so the run's end costs one store round, not two.
    this.events.rideNext(() => {
      if (terminal) void this.emitFinal(status, ctx);
      if (stopped)
        void this.emit({
          event_type: 'run_interrupted',
          actor: { type: 'system', id: this.deps.workerId },
          span_id: this.rootSpan,
          metadata: { interrupt_id: ctx.interrupt_handled ?? null, step: ctx.step, steered: (ctx.steered ?? []).length },
        });
    });
    const beforeCommit =
      status === 'completed' && session !== undefined && !historyInCommit
        ? (r: RunRecord) => (this.historyWrite = this.kernel.history.write(session, r, this.prelude))
        : undefined;
    const write = this.writer.update(
      (r) => recordFromSnapshot(r, state, ctx, phase, now, this.deps.telemetry),
      extra,
      beforeCommit,
      () => fold,
    );
    this.events.wrote();
    if (historyInCommit) this.historyWrite = write.then(() => true).catch(() => false);
    // An end, a pause or a stop must be durable at once (a delayed creation goes now), but an
    // end that carries its background run's may wait a few ms, still unwritten, for the next
    // run's claim to share its round (CarriedEvents.hold; the writer sends it then).
    const hold = this.writer.holding;
    if (phase.ending && !hold) this.writer.flush();
    // On a store only this process writes, what the run held for others (its concurrency key's
    // slot) goes on once its end or park is queued, not a commit round later: the store takes
    // writes first in, first out, so nothing the next holder writes is durable before this end
    // is, and a crash before it leaves the run running (recovery retakes its slot). A shared
    // store's holders are another record: they go on once the end is stored (finish, park).
    if ((terminal || waiting) && !hold && !isSharedStore(this.deps.store)) {
      this.endedEarly = true;
      this.kernel.notifyEnded(this.writer.value);
    }
    if (terminal)
      void write.then(
        (r) => this.finish(r.value),
        (err) => this.failLive(err),
      );
    else if (waiting)
      void write.then(
        (r) => this.park(r.value),
        (err) => this.failLive(err),
      );
    else if (interrupt) {
      // Stop the actor now, synchronously: the budgeting effect may resolve within microtasks
      // and would otherwise start the next model call or tool batch after we saved the boundary.
      this.deps.system.stop(`run:${this.run_id}`);
      void write.then(
        (r) => this.stopAtBoundary(r.value),
        (err) => this.failLive(err),
      );
    } else write.catch(() => {}); // a fenced write is handled by onFenced
  }

  /** Shutdown reached this run at a step boundary: its `interrupted` record is saved; let go of it. */
  private async stopAtBoundary(record: RunRecord): Promise<void> {
    this.abort.abort();
    await this.events.done;
    this.retire();
    this.resolveSettled(record);
  }

  /** A run waiting for a person: saved, actor stopped, slot released: it costs storage, not memory. */
  private async park(record: RunRecord): Promise<void> {
    if (!this.endedEarly) this.kernel.notifyEnded(record, this.keyReleaseInWrite);
    await this.events.done;
    this.retire();
    this.resolveSettled(record);
    this.kernel.notifySettled(record);
  }

  /** final_answer for a completed run, runtime_error for one that failed, was cancelled or timed out. */
  private emitFinal(status: RunRecordStatus, ctx: RunContext): Promise<unknown> {
    if (status === 'completed') {
      const usage = { input_tokens: ctx.usage.request_tokens, output_tokens: ctx.usage.response_tokens, total_tokens: ctx.usage.total_tokens };
      return this.emit({
        event_type: 'final_answer',
        actor: { type: 'agent', id: this.writer.value.agent_name },
        output: { response: ctx.response },
        span_id: this.rootSpan,
        token_usage: usage,
      });
    }
    if (status === 'blocked') return this.events.done; // guardrail_violation was the last word
    return this.emit({
      event_type: 'runtime_error',
      actor: { type: 'system', id: this.deps.workerId },
      error: ctx.error ?? { type: status, message: status },
      span_id: this.rootSpan,
      metadata: { termination_reason: ctx.termination_reason, status },
    });
  }

  private async finish(record: RunRecord): Promise<void> {
    if (!this.endedEarly) this.kernel.notifyEnded(record, this.keyReleaseInWrite);
    await this.events.done;
    if (record.status === 'completed' && !(this.historyWrite && (await this.historyWrite))) {
      // A resumed run let go of its session when it parked (docs/runs.md) and went on without
      // queueing in it (a decision does not wait for a newer run of the session). It appends once
      // it holds the turn again: the holder may be creating the session in its final commit, which
      // a create from here landing first would fail (test/http/session-turns.test.ts).
      if (this.session === undefined) await this.kernel.sessions.acquire(this.session_key, this.run_id);
      await this.kernel.history.append(record, this.prelude);
    }
    if (TERMINAL_RUN_STATUSES.has(record.status)) this.kernel.inbox.forget(record.run_id);
    this.deps.metrics.runFinished(record.status, (this.deps.clock.now() - this.startedAtMs) / 1000);
    this.retire();
    this.resolveSettled(record);
    this.kernel.notifySettled(record);
    // Holds are normally settled call by call; this only sweeps up what a failed call left, so it
    // need not delay the answer.
    await this.deps.ledger.releaseRun(record.run_id).catch(() => 0);
  }

  private retired = false;
  /** Lets go of everything the run holds in this process: timers, actor, slot, session turn, agent. */
  private retire(): void {
    if (this.retired) return; // once: a run fenced off as it started (StartOptions.after) is discarded too
    this.retired = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    if (this.timeout) clearTimeout(this.timeout);
    this.deps.system.stop(`run:${this.run_id}`);
    this.kernel.live.delete(this.run_id);
    this.kernel.sessions.release(this.session_key, this.run_id);
    this.deps.metrics.liveRuns.dec();
    this.releaseSlot();
    this.releaseAgent();
  }

  /** The run never got going (it could not be created, or its session not read): stop whatever started. */
  discard(): void {
    this.ending = true;
    this.abort.abort();
    this.retire();
  }

  /**
   * Graceful shutdown after the grace period: the caller already marked every such run `ending`
   * and aborted it; its record is saved `interrupted` with the lease let go, and the next start
   * resumes it.
   */
  async saveInterrupted(): Promise<void> {
    try {
      await this.writer.drain();
      await this.writer.update((r) => ({ ...r, status: 'interrupted', owner: null, lease_expires_at: null, updated_at: iso(this.deps.clock.now()) }));
    } catch {
      // fenced: someone else owns it already
    }
    await this.events.done;
    this.retire();
    this.resolveSettled(this.writer.value);
  }

  /** Something outside the machine failed (a write, an unexpected throw): record it, never crash. */
  async failLive(err: unknown): Promise<void> {
    if (err instanceof FencedError) return; // onFenced handles it
    this.log.error({ err: String(err) }, 'run failed outside its machine');
    this.ending = true;
    const message = this.deps.telemetry.redactText(err instanceof Error ? err.message : String(err));
    try {
      const rec = await this.writer.update((r) => ({
        ...r,
        status: 'failed',
        termination_reason: 'internal_error',
        error: { type: 'InternalError', message },
        owner: null,
        lease_expires_at: null,
        ended_at: iso(this.deps.clock.now()),
        updated_at: iso(this.deps.clock.now()),
      }));
      await this.finish(rec.value);
    } catch {
      this.retire();
      this.resolveSettled({ ...this.writer.value, status: 'failed' });
    }
  }

  /** Another owner took this run over: stop here without writing anything more. */
  private onFenced(_err: FencedError): void {
    this.log.warn('run lease lost to another owner; stopping this copy');
    this.deps.metrics.leaseLost('run');
    this.ending = true;
    this.abort.abort();
    this.retire();
    this.resolveSettled(this.writer.value);
  }

  private beat(): void {
    const now = this.deps.clock.now();
    this.writer
      .update((r) => ({ ...r, heartbeat_at: iso(now), lease_expires_at: this.deps.leases.expiresAt(this.deps.settings.lease_seconds * 1000) }))
      // A fenced or failed write ends the run through onFenced/failLive; the next beat tries again.
      .catch(swallow('runs.heartbeat', { run_id: this.run_id }, (err) => err instanceof FencedError));
  }

  // ---------------------------------------------------------------- telemetry

  /** One of the run's telemetry events, stamped now and given its place (stored by `events`, run-events.ts). */
  emit(input: RunEventInput): Promise<unknown> {
    const record = this.writer.value;
    const full: EventRecordInput = {
      // Stamped now, not when the store takes it: held events (run-events.ts) are stored later, and a
      // step's start must not read as later than its end.
      timestamp: iso(this.deps.clock.now()),
      ...input,
      sequence: ++this.events.seq,
      trace_id: record.trace_id,
      parent_span_id: input.parent_span_id ?? (input.span_id === this.rootSpan ? null : this.rootSpan),
      metadata: {
        run_id: this.run_id,
        session_id: this.session_id,
        // A tenant's own agent and task are keys inside (src/background/tenancy.ts): events show
        // the ids its client chose, with `tenant` below (reads of a tenant filter on that).
        agent_id: bgIdOf(this.agent_id),
        task_id: this.task_id === null ? null : bgIdOf(this.task_id),
        ...(input.metadata ?? {}),
        // Filtered on by every read of a tenant (src/runtime/telemetry-queries.ts); last, so no
        // emitter's metadata can name another.
        ...(this.tenant ? { tenant: this.tenant } : {}),
      },
    };
    return this.events.push(full);
  }
}
