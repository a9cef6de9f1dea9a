// Hosts run actors: creates and restores them under the root system, binds the run machine's
// effects, persists record + snapshot after every transition through one serial writer per run,
// keeps the lease alive, and turns HTTP decisions into events. Routes call only this class.
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { fromPromise, type AnyActorRef, type Snapshot } from 'xstate';
import {
  RUN_MACHINE_VERSION,
  recordStatusOf,
  runMachine,
  type ApprovalState,
  type BudgetRequest,
  type ModelStepResult,
  type PolicyDecision,
  type ReserveResult,
  type InboxRead,
  type RunContext,
  type RunEvent,
  type RunStateValue,
  type ToolOutcome,
} from '../../machines/run.machine.js';
import { decide as decidePolicy, type GovernanceConfig } from '../../machines/policies/governance.js';
import type { BudgetsConfig, MeterAmounts } from '../../machines/policies/budget.js';
import type { Clock } from '../clock.js';
import { AppError, conflict, notFound } from '../errors.js';
import { newId } from '../ids.js';
import type { ChatMessage, ModelProvider, ToolCallRequest, ToolDeclaration } from '../agent/model/types.js';
import { withRetries } from '../agent/model/retry.js';
import { ModelCallError } from '../agent/model/types.js';
import type { BudgetLedger } from '../agent/budget-ledger.js';
import type { AgentLease, AgentProfile, AgentSource } from './agent-profile.js';
import { modelCallReservation, modelCallUsage, type Pricing } from '../agent/pricing.js';
import { checkInput, type CompiledGuardrails } from '../agent/guardrails.js';
import { formatObservation } from '../agent/tools/observation.js';
import type { RegisteredTool, ToolContext } from '../agent/tools/types.js';
import { isStoreError, type Store, type Versioned, type WriteOp } from '../store/store.js';
import type { EventRecordInput } from '../telemetry/record.js';
import type { TelemetryEmitter } from './emitter.js';
import { UNKNOWN_TOOL, type Metrics } from './metrics.js';
import { FencedError, RecordWriter } from './persistence.js';
import {
  TERMINAL_RUN_STATUSES,
  WAITING_RUN_STATUSES,
  runIndexes,
  type OutcomeRecord,
  type RunRecord,
  type RunRecordStatus,
  type ToolCallRecord,
} from './run-record.js';
import { SessionGate } from './session-gate.js';
import { isSharedStore } from '../store/changes.js';
import { RunInbox, type InboxValue } from './run-inbox.js';
import type { Subagents, SubagentSpec } from './subagents.js';
import { Slots } from './slots.js';
import type { ActorSystem } from './system.js';

export interface RunSettings {
  agent_name: string;
  agent_id: string;
  system_instruction: string | null;
  max_steps: number;
  max_output_tokens: number;
  governance: GovernanceConfig;
  approval_expires_seconds: number;
  budgets: BudgetsConfig;
  pricing: Pricing;
  lease_seconds: number;
  max_concurrent_runs: number;
  admission_wait_ms: number;
  request_timeout_seconds: number;
  tool_timeout_ms: number;
  /** Synchronous runs get `<this>/<session id>` as their workspace (background runs get their own). */
  session_workspace_root: string | null;
  sweep: { enabled: boolean; interval_seconds: number; max_concurrent: number; max_recoveries: number; decided_grace_seconds: number };
  /** What a run does when its session already has one in flight (config `runs.session_policy`). */
  session_policy?: SessionPolicy;
}

/** Session concurrency policy (issue 14 item 3; docs/runs.md "Busy sessions"). */
export type SessionPolicy = 'enqueue' | 'reject' | 'interrupt' | 'rollback';

export interface ToolSource {
  list(): RegisteredTool[];
  get(name: string): RegisteredTool | undefined;
  validate(name: string, args: unknown): { ok: true; args: Record<string, unknown> } | { ok: false; message: string };
}

export interface RunServiceDeps {
  store: Store;
  system: ActorSystem;
  clock: Clock;
  telemetry: TelemetryEmitter;
  metrics: Metrics;
  model: ModelProvider;
  tools: ToolSource;
  ledger: BudgetLedger;
  guardrails: CompiledGuardrails;
  settings: RunSettings;
  workerId: string;
  /** Sub-agents the model may delegate to (config `agent.subagents`). */
  subagents?: Subagents;
  /** Registered agents by id (src/runtime/agent-registry.ts); without it every run is the served agent's. */
  agents?: AgentSource;
  log?: (level: 'info' | 'warn' | 'error', msg: string, extra?: Record<string, unknown>) => void;
}

export interface StartOptions {
  /**
   * A live text delta (never stored). `afterEvent` is the `sequence` of the last telemetry event
   * the run emitted before it: events are published when stored, deltas at once, so a stream
   * that wants them in the order they happened holds a delta until that event has gone out.
   */
  onDelta?: (text: string, sequence: number, afterEvent: number) => void;
  kind?: 'sync' | 'background';
  task_id?: string | null;
  agent_id?: string;
  workspace_path?: string | null;
  /** Overrides request_timeout_seconds (background runs use the task's timeout_seconds). */
  timeout_seconds?: number | null;
  /** A caller-chosen run id (background runs use their BackgroundRun id). */
  run_id?: string;
  /** `run_id` was made with newId() just now for this run, never handed to start() before (the store need not look it up). */
  run_id_is_new?: boolean;
  /** Skip admission control (background workers have their own concurrency). */
  admitted?: boolean;
  /**
   * Called once the run is admitted and has its ids, before its first store round is durable and
   * before it waits for its turn in the session (POST /run sends its `session` frame here, so the
   * first frame does not wait for an fsync). If start() then fails, it still rejects; get() of the
   * run waits for that first round meanwhile, so an id handed out here always reads.
   */
  onAccepted?: (ids: { run_id: string; session_id: string }) => void;
  /** When the session has a run in flight in this process; default `settings.session_policy`. */
  session_policy?: SessionPolicy;
}

export interface StartedRun {
  run_id: string;
  session_id: string;
  trace_id: string;
  /** Resolves when the run ends or waits for a person. Never rejects. */
  settled: Promise<RunRecord>;
}

interface SnapshotValue {
  machine: 'run';
  machine_version: number;
  snapshot: Snapshot<unknown>;
  workspace_path: string | null;
}

interface SessionValue {
  session_id: string;
  messages: ChatMessage[];
  run_ids: string[];
  /** Messages each run of `run_ids` added (absent: 2 each), so a rollback can take a turn back out. */
  counts?: number[];
  created_at: string;
  updated_at: string;
}

interface LiveRun {
  run_id: string;
  session_id: string;
  writer: RecordWriter<RunRecord>;
  ref: AnyActorRef | null;
  abort: AbortController;
  rootSpan: string;
  stepSpan: string | null;
  /** Resolves when every event emitted so far is stored and published. */
  emitChain: Promise<unknown>;
  /** Events held back with the delayed creating write (CREATE_FOLD_MS), in order; null once it went. */
  heldEvents: { events: EventRecordInput[]; release: () => void } | null;
  /**
   * The session record as this run found it once its turn came (null: a new session), so the
   * completed run's history is written in the same store round as its final record. Undefined
   * for a resumed run, which did not queue in its session: it appends with a fresh read instead.
   */
  session: Versioned<SessionValue> | null | undefined;
  /** The history write issued with the final record: true once written, false if it must be redone. */
  historyWrite: Promise<boolean> | null;
  /** Event order within this trace segment, 1..n. */
  eventSeq: number;
  deltaSeq: number;
  /** StartOptions.onDelta. */
  onDelta?: (text: string, sequence: number, afterEvent: number) => void;
  settled: Promise<RunRecord>;
  resolve: (r: RunRecord) => void;
  releaseSlot: () => void;
  heartbeat: NodeJS.Timeout | null;
  timeout: NodeJS.Timeout | null;
  startedAtMs: number;
  workspace_path: string | null;
  ending: boolean;
  kind: 'sync' | 'background';
  task_id: string | null;
  agent_id: string;
  /** The agent this run runs as (model, tools, instruction), held until the run retires. */
  agent: AgentProfile;
  releaseAgent: () => void;
  /** This segment's trace record, rewritten in the commit that ends or parks the run. */
  trace: TraceValue;
  /** Messages the run's turn adds to the session before its own (an interrupted run's query it took over). */
  prelude: ChatMessage[];
}

type TraceValue = ReturnType<RunService['traceValue']>;

type RecoveryCause = 'approval' | 'budget_grant' | 'budget_denied' | 'interrupted' | 'recovered_after_lapsed_lease';

/** A run the orphan sweep found; `ownerDead`: found at start-up on the single-process store. */
interface RecoveryCandidate {
  id: string;
  cause: RecoveryCause;
  ownerDead: boolean;
}

/**
 * A new run's creating write (and its first events) wait this long for the run to go on before
 * they are handed to the store: a run that ends or parks meanwhile (a short answer, a tool and an
 * answer) is created already ended, in one store round instead of two. Bounded, so a long run is
 * durable after this long; anything that must be durable sooner (an end, a pause, a non-idempotent
 * tool) hands it over at once.
 */
const CREATE_FOLD_MS = 10;

/** Most runs waiting for a recovery slot; more are left in the store for the next sweep. */
const MAX_RECOVERY_QUEUE = 10_000;

const iso = (ms: number) => new Date(ms).toISOString();

/** Statuses a steer message is accepted in (decisions.md §11). */
const STEERABLE: ReadonlySet<RunRecordStatus> = new Set(['running', 'awaiting_approval', 'interrupted']);

/**
 * Reads and the agent lease decideApproval starts for the resume it is about to make, before it
 * hands its decision to the store: with them in hand, the resume's claim is issued within the
 * same event-loop turn as the decision and joins its store round (one fsynced batch instead of
 * two in a row; docs/benchmarks.md, approvals).
 */
interface ResumePrefetch {
  snapshot: Promise<Versioned<SnapshotValue> | null>;
  prevTrace: Promise<Versioned<TraceValue> | null>;
  agent: Promise<AgentLease>;
  /** Set by resume once the lease is its own to release. */
  taken?: boolean;
}

export class RunService {
  private readonly live = new Map<string, LiveRun>();
  private readonly slots: Slots;
  private readonly sessions: SessionGate;
  private readonly logic;
  /** The served agent (config `agent`): runs without an agent id, and agents registered as it. */
  private readonly served: AgentProfile;
  private sweepTimer: NodeJS.Timeout | null = null;
  private closing = false;
  /** Runs the sweep found and that wait for a recovery slot (see recoverQueued), oldest first. */
  private readonly recoveryQueue: RecoveryCandidate[] = [];
  /** Ids queued or being resumed by recoverQueued, so a later sweep does not queue them twice. */
  private readonly recovering = new Set<string>();
  private recoveryPump: Promise<void> | null = null;
  private readonly settledListeners = new Set<(record: RunRecord) => void>();
  /** Steer messages and interrupt requests (src/runtime/run-inbox.ts). */
  readonly inbox: RunInbox;

  constructor(private readonly deps: RunServiceDeps) {
    this.slots = new Slots(deps.settings.max_concurrent_runs, deps.settings.admission_wait_ms, deps.settings.sweep.max_concurrent);
    this.sessions = new SessionGate(deps.system);
    const st = deps.settings;
    this.served = {
      agent_id: st.agent_id,
      agent_name: st.agent_name,
      system_instruction: st.system_instruction,
      model: deps.model,
      tools: deps.tools,
      subagents: deps.subagents,
      max_steps: st.max_steps,
      max_output_tokens: st.max_output_tokens,
      session_workspace_root: st.session_workspace_root,
    };
    this.inbox = new RunInbox(deps.store, () => iso(deps.clock.now()));
    this.logic = runMachine.provide({
      actors: {
        checkInput: fromPromise(async ({ input }) => this.checkInputEffect(input.query, input.run_id)),
        reserveBudget: fromPromise(async ({ input }) => this.reserveEffect(input.ctx, input.phase)),
        callModel: fromPromise(async ({ input, signal }) => this.callModelEffect(input.ctx, signal)),
        governTools: fromPromise(async ({ input }) => this.governEffect(input.ctx)),
        executeTools: fromPromise(async ({ input, signal }) => this.executeToolsEffect(input.ctx, signal)),
        readInbox: fromPromise(async ({ input }) => this.readInboxEffect(input.ctx)),
      },
      actions: {
        notify: ({ context }, params) => {
          if (params.kind === 'step') this.onStep(context);
        },
      },
    });
  }

  get liveCount(): number {
    return this.live.size;
  }

  /** True once a graceful shutdown began: no new runs, /ready answers `ready: false`. */
  get shuttingDown(): boolean {
    return this.closing;
  }

  /**
   * Called whenever a run ends or parks for a person, whoever started or resumed it (the
   * background manager follows its agent runs this way). Listeners must not throw.
   */
  onSettled(listener: (record: RunRecord) => void): () => void {
    this.settledListeners.add(listener);
    return () => this.settledListeners.delete(listener);
  }

  private notifySettled(record: RunRecord): void {
    for (const l of this.settledListeners) {
      try {
        l(record);
      } catch (err) {
        this.deps.log?.('error', 'run settled listener failed', { run_id: record.run_id, err: String(err) });
      }
    }
  }

  /**
   * Set by the cluster link on a store several instances share: asks the owner of a run live in
   * another instance to cancel it (src/runtime/cluster.ts). Unset: such a cancel is a 409.
   */
  remoteCancel: ((runId: string) => Promise<void>) | null = null;

  /** A cancel another instance relayed here: only a run live in this process is touched. */
  cancelIfLive(runId: string): boolean {
    const live = this.live.get(runId);
    if (!live?.ref || live.ending) return false;
    live.ref.send({ type: 'CANCEL' });
    return true;
  }

  /** True when this process hosts a live actor for the run. */
  isLive(runId: string): boolean {
    return this.live.has(runId);
  }

  // ---------------------------------------------------------------- starting a run

  async start(query: string, sessionId: string | null | undefined, opts: StartOptions = {}): Promise<StartedRun> {
    if (this.closing) throw new AppError('ServerBusy', 'the service is shutting down', null, { 'retry-after': '5' });
    // A session with a run in flight in this process: the session policy decides (docs/runs.md,
    // "Busy sessions"). `enqueue` waits in the session's queue, as every run did before.
    const policy = opts.session_policy ?? this.deps.settings.session_policy ?? 'enqueue';
    const busyWith = sessionId && policy !== 'enqueue' ? this.sessions.holder(sessionId) : null;
    if (busyWith && policy === 'reject') throw conflict(`session '${sessionId}' has a run in flight (${busyWith})`, 'session_busy');
    const releaseSlot = opts.admitted ? () => {} : await this.slots.acquire();
    let live: LiveRun | null = null;
    let agent: AgentLease | null = null;
    try {
      agent = await this.acquireAgent(opts.agent_id);
      const profile = agent.profile;
      const { clock, settings } = this.deps;
      const session_id = sessionId ?? newId('session');
      const run_id = opts.run_id ?? newId('run');
      const trace_id = newId('trace');
      const now = iso(clock.now());
      const record: RunRecord = {
        run_id,
        session_id,
        agent_name: profile.agent_name,
        agent_id: opts.agent_id ?? settings.agent_id,
        kind: opts.kind ?? 'sync',
        task_id: opts.task_id ?? null,
        query,
        status: 'running',
        step: 0,
        attempt: 1,
        trace_id,
        trace_ids: [trace_id],
        tool_calls: [],
        usage: { requests: 0, request_tokens: 0, response_tokens: 0, total_tokens: 0, estimated_cost_usd: 0 },
        approvals: [],
        budget_requests: [],
        budget_request: null,
        outcomes: [],
        error: null,
        response: null,
        termination_reason: null,
        guardrail_result: null,
        machine_state: 'checking',
        created_at: now,
        updated_at: now,
        heartbeat_at: now,
        lease_seconds: settings.lease_seconds,
        lease_expires_at: iso(clock.now() + settings.lease_seconds * 1000),
        owner: this.deps.workerId,
        recoveries: 0,
        decided_at: null,
        decision: null,
        ended_at: null,
      };
      // The run's writer creates the run and its first trace segment in one commit, handed to the
      // store now. The actor starts without waiting for it: whatever the run does before the store
      // takes that commit is folded into it (a zero-latency model's whole run can be one batch),
      // and later writes queue behind it. start() returns only once the run exists, so a client
      // that is told the run id can always read the run.
      const trace = this.traceValue(record, null, 'running');
      const traceIndexes = { run_id, session_id, task_id: record.task_id };
      // What the run's first store round will read (all new, so in no cache): read it meanwhile.
      // Ids made up just now are new (no read at all): the trace's always, the session's when the
      // caller named none, the run's when made here or so marked (a background run reuses its id
      // and relies on the create's conflict to find an agent run that already started).
      const newRun = opts.run_id === undefined || opts.run_id_is_new === true;
      const newSession = !sessionId;
      this.deps.store.prefetch?.([
        { kind: 'runs', id: run_id, indexes: runIndexes(record), ...(newRun ? { fresh: newSession ? ['session_id'] : [] } : {}) },
        { kind: 'traces', id: trace_id, indexes: traceIndexes, fresh: newRun ? (newSession ? ['run_id', 'session_id'] : ['run_id']) : [] },
        { kind: 'snapshots', id: run_id, ...(newRun ? { fresh: [] } : {}) },
        { kind: 'sessions', id: session_id, ...(newSession ? { fresh: [] } : {}) },
      ]);
      const workspace_path = opts.workspace_path ?? this.sessionWorkspace(session_id, profile.session_workspace_root);
      this.deps.metrics.liveRuns.inc();
      live = this.makeLive({ id: run_id, version: 0, seq: 0, value: record }, releaseSlot, agent, { ...opts, workspace_path }, trace, [
        { op: 'create', kind: 'traces', id: trace_id, value: trace, indexes: traceIndexes },
      ]);
      void this.emit(live, {
        event_type: 'user_message',
        actor: { type: 'user', id: session_id },
        input: { query },
        span_id: live.rootSpan,
        metadata: { agent_name: record.agent_name }, // the trace's gen_ai.agent.name
      });
      // On a store other processes share, another instance may be asked for the run: the id goes
      // out only once the run is stored (below), as a client could read it anywhere.
      const shared = isSharedStore(this.deps.store);
      if (!shared) opts.onAccepted?.({ run_id, session_id });
      // `interrupt`: the run in flight stops at its next step boundary; `rollback`: it is cancelled.
      // Either way it then lets go of the session, and this run (queued behind it) goes next.
      if (busyWith && policy === 'interrupt') {
        // A run that just started may not be stored yet: its record is what the request checks.
        const busyLive = this.live.get(busyWith);
        busyLive?.writer.flush();
        await busyLive?.writer.created?.catch(() => undefined);
        await this.interrupt(busyWith, { by: `run:${run_id}` }).catch(() => undefined);
      }
      if (busyWith && policy === 'rollback') await this.cancel(busyWith).catch(() => undefined);
      // Our turn in the session, then the conversation the runs before us left (a session id we
      // just made up has none: no read).
      await this.sessions.acquire(session_id, run_id);
      let history = sessionId ? await this.deps.store.getRecord<SessionValue>('sessions', session_id) : null;
      let carried: ChatMessage[] = [];
      if (busyWith && policy === 'rollback') history = await this.rollbackTurn(session_id, busyWith, history);
      if (busyWith && policy === 'interrupt') {
        const c = await this.carryOver(busyWith);
        carried = c.messages;
        live.prelude = c.prelude;
      }
      live.session = history;
      const messages: ChatMessage[] = [
        ...(profile.system_instruction ? [{ role: 'system' as const, content: profile.system_instruction }] : []),
        ...(history?.value.messages ?? []),
        ...carried,
        { role: 'user', content: query },
      ];
      this.spawnActor(live, {
        input: { run_id, session_id, agent_name: profile.agent_name, max_steps: profile.max_steps, messages, query, history_length: messages.length - 1 },
      });
      await live.writer.created;
      if (shared) opts.onAccepted?.({ run_id, session_id });
      this.deps.metrics.runStarted();
      return { run_id, session_id, trace_id, settled: live.settled };
    } catch (err) {
      if (live) {
        // Never created (or its session could not be read): stop whatever started, let go of
        // the slot and the session.
        live.ending = true;
        live.abort.abort();
        this.retire(live);
      } else {
        releaseSlot();
        agent?.release();
      }
      throw err;
    }
  }

  /** The served agent, or the registered agent `agentId` (404 when it is not registered). */
  private async acquireAgent(agentId: string | undefined, opts: { resuming?: boolean } = {}): Promise<AgentLease> {
    const served = (id: string) => ({ profile: id === this.served.agent_id ? this.served : { ...this.served, agent_id: id }, release: () => {} });
    if (agentId === undefined || !this.deps.agents) return served(agentId ?? this.served.agent_id);
    try {
      return await this.deps.agents.acquire(agentId);
    } catch (err) {
      // A run started with no agent id carries the served agent's id, whose row may be gone: it
      // goes on as the served agent.
      if (opts.resuming && agentId === this.served.agent_id && err instanceof AppError && err.code === 'NotFound') return served(agentId);
      throw err;
    }
  }

  /** A session's folder for the workspace tools; ids that are not path-safe are hashed. */
  private sessionWorkspace(sessionId: string, root: string | null): string | null {
    if (!root) return null;
    const safe =
      /^[A-Za-z0-9_.-]{1,128}$/.test(sessionId) && !/^\.{1,2}$/.test(sessionId)
        ? sessionId
        : `h_${createHash('sha256').update(sessionId).digest('hex').slice(0, 32)}`;
    return join(root, safe);
  }

  /** `create`: the run does not exist yet; its writer's first commit creates it, with these ops. */
  private makeLive(rec: Versioned<RunRecord>, releaseSlot: () => void, agent: AgentLease, opts: StartOptions, trace: TraceValue, create?: WriteOp[]): LiveRun {
    let resolve!: (r: RunRecord) => void;
    const settled = new Promise<RunRecord>((r) => (resolve = r));
    // A new run's first round waits to fold with what follows (CREATE_FOLD_MS), unless other
    // processes share the store (they must be able to read the run as soon as its id is out).
    const fold = create !== undefined && !isSharedStore(this.deps.store);
    const live: LiveRun = {
      run_id: rec.value.run_id,
      session_id: rec.value.session_id,
      writer: new RecordWriter<RunRecord>(
        this.deps.store,
        'runs',
        rec.id,
        rec,
        runIndexes,
        (err) => this.onFenced(live, err),
        create ? (fold ? { extra: create, delayMs: CREATE_FOLD_MS, beforeIssue: () => this.releaseHeldEvents(live) } : { extra: create }) : undefined,
      ),
      ref: null,
      abort: new AbortController(),
      rootSpan: newId('span'),
      stepSpan: null,
      emitChain: Promise.resolve(),
      heldEvents: null,
      session: undefined,
      historyWrite: null,
      eventSeq: 0,
      deltaSeq: 0,
      onDelta: opts.onDelta,
      settled,
      resolve,
      releaseSlot,
      heartbeat: null,
      timeout: null,
      startedAtMs: this.deps.clock.now(),
      workspace_path: opts.workspace_path ?? null,
      ending: false,
      kind: rec.value.kind,
      task_id: rec.value.task_id,
      agent_id: rec.value.agent_id,
      agent: agent.profile,
      releaseAgent: agent.release,
      trace,
      prelude: [],
    };
    if (fold) {
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      live.heldEvents = { events: [], release };
      live.emitChain = released;
    }
    this.live.set(live.run_id, live);
    const leaseMs = this.deps.settings.lease_seconds * 1000;
    live.heartbeat = setInterval(() => this.beat(live), Math.max(50, Math.floor(leaseMs / 3)));
    live.heartbeat.unref();
    const timeoutSeconds = opts.timeout_seconds ?? (live.kind === 'sync' ? this.deps.settings.request_timeout_seconds : null);
    if (timeoutSeconds && timeoutSeconds > 0) {
      live.timeout = setTimeout(() => live.ref?.send({ type: 'TIMEOUT' }), timeoutSeconds * 1000);
      live.timeout.unref();
    }
    return live;
  }

  /**
   * Spawns (or restores) the run's actor. `resumeEvent` is the person's decision a restored
   * waiting run continues with: it is sent before anything is persisted, because persisting the
   * restored `awaiting*` state first would park the run again.
   */
  private spawnActor(live: LiveRun, opts: { input?: unknown; snapshot?: Snapshot<unknown> }, resumeEvent?: RunEvent): void {
    const ref = this.deps.system.spawn(`run:${live.run_id}`, this.logic, opts);
    live.ref = ref;
    ref.subscribe({
      next: (snap) => this.onSnapshot(live, snap as unknown as { value: RunStateValue; context: RunContext; status: string }),
      error: (err) => void this.failLive(live, err),
    });
    if (resumeEvent) ref.send(resumeEvent);
    // The subscription only sees later transitions: persist the state we start in too.
    else this.onSnapshot(live, ref.getSnapshot() as { value: RunStateValue; context: RunContext; status: string });
  }

  // ---------------------------------------------------------------- persistence after each transition

  private onSnapshot(live: LiveRun, snap: { value: RunStateValue; context: RunContext; status: string }): void {
    if (live.ending || !live.ref) return;
    const state = snap.value;
    const ctx = snap.context;
    const status = recordStatusOf(state);
    const persisted = live.ref.getPersistedSnapshot();
    const now = iso(this.deps.clock.now());
    const terminal = TERMINAL_RUN_STATUSES.has(status);
    // Parked: waiting for a person, or stopped at a step boundary on request (POST /runs/{id}/interrupt).
    const stopped = state === 'interrupted';
    const waiting = WAITING_RUN_STATUSES.has(status) || stopped;
    // Graceful shutdown (decisions.md §9): a run reaching a step boundary (about to reserve for
    // its next model call or tool batch) stops there, saved `interrupted`, instead of starting
    // work the grace period may not cover. Before this, shutdown waited for whole runs to end, so
    // a SIGTERM during a long run spent the full 30 s grace and then cut a step in the middle
    // (test/http/recovery.test.ts, scenario c). Restoring a `budgeting` snapshot only repeats the
    // budget reservation, which is idempotent.
    const interrupt = this.closing && state === 'budgeting' && !terminal && !waiting;
    if (terminal || waiting || interrupt) live.ending = true;
    const extra = (): WriteOp[] => {
      const ops: WriteOp[] = [
        {
          op: 'update',
          kind: 'snapshots',
          id: live.run_id,
          expectedVersion: null,
          value: { machine: 'run', machine_version: RUN_MACHINE_VERSION, snapshot: persisted, workspace_path: live.workspace_path } satisfies SnapshotValue,
        },
      ];
      // The trace's status changes in the same commit as the run's, so nobody sees an ended or
      // parked run whose trace still reads `running`.
      if (terminal || waiting || interrupt) {
        live.trace = { ...live.trace, status: terminal ? traceStatusOf(status) : 'suspended', ended_at: now };
        ops.push({
          op: 'update',
          kind: 'traces',
          id: live.trace.trace_id,
          value: live.trace,
          expectedVersion: null,
          indexes: { run_id: live.run_id, session_id: live.session_id, task_id: live.task_id },
        });
      }
      return ops;
    };
    // A run's events are stored before it reads as ended or waiting, so a client that sees that
    // status also finds final_answer / runtime_error / policy_decision_ask: every event was handed
    // to the store before this record update, and the store's write queue is first in, first out
    // (same atomic batch or an earlier one). No waiting for the events here, so the run's end
    // costs one store round, not two.
    if (terminal) void this.emitFinal(live, status, ctx);
    if (stopped) {
      void this.emit(live, {
        event_type: 'run_interrupted',
        actor: { type: 'system', id: this.deps.workerId },
        span_id: live.rootSpan,
        metadata: { interrupt_id: ctx.interrupt_handled ?? null, step: ctx.step, steered: (ctx.steered ?? []).length },
      });
    }
    // The conversation grows in the same round as the completed run's record: issued right
    // before it (see RecordWriter.update's beforeCommit), as its own job, so a session changed
    // meanwhile (its CAS misses) only makes finish() append the slow way.
    const beforeCommit = status === 'completed' && live.session !== undefined ? (r: RunRecord) => (live.historyWrite = this.writeHistory(live, r)) : undefined;
    const write = live.writer.update(
      (r) => ({
        ...r,
        status: interrupt ? 'interrupted' : status,
        machine_state: state,
        step: ctx.step,
        usage: ctx.usage,
        approvals: mergeById(r.approvals, ctx.approvals, 'approval_id'),
        budget_request: ctx.budget_request,
        budget_requests: ctx.budget_request ? mergeById(r.budget_requests, [ctx.budget_request], 'request_id') : r.budget_requests,
        // The run as stored and served (GET /runs*, the complete frame, the history) is redacted
        // like its events; the conversation in the snapshot stays as the model saw it.
        response: this.deps.telemetry.redactText(ctx.response),
        termination_reason: ctx.termination_reason,
        error: this.deps.telemetry.redactValue(ctx.error),
        guardrail_result: this.deps.telemetry.redactValue(ctx.guardrail_result as Record<string, unknown> | null),
        updated_at: now,
        owner: terminal || waiting || interrupt ? null : r.owner,
        lease_expires_at: terminal || waiting || interrupt ? null : r.lease_expires_at,
        ended_at: terminal ? now : r.ended_at,
        decided_at: WAITING_RUN_STATUSES.has(status) ? null : r.decided_at,
      }),
      extra,
      beforeCommit,
    );
    // An end, a pause or a stop must be durable at once (a delayed creation goes now).
    if (terminal || waiting || interrupt) live.writer.flush();
    if (terminal)
      void write.then(
        (r) => this.finish(live, r.value),
        (err) => this.failLive(live, err),
      );
    else if (waiting)
      void write.then(
        (r) => this.park(live, r.value),
        (err) => this.failLive(live, err),
      );
    else if (interrupt) {
      // Stop the actor now, synchronously: the budgeting effect may resolve within microtasks
      // and would otherwise start the next model call or tool batch after we saved the boundary.
      this.deps.system.stop(`run:${live.run_id}`);
      void write.then(
        (r) => this.stopAtBoundary(live, r.value),
        (err) => this.failLive(live, err),
      );
    } else write.catch(() => {}); // a fenced write is handled by onFenced
  }

  /** Shutdown reached this run at a step boundary: its `interrupted` record is saved; let go of it. */
  private async stopAtBoundary(live: LiveRun, record: RunRecord): Promise<void> {
    live.abort.abort();
    await live.emitChain;
    this.retire(live);
    live.resolve(record);
  }

  /** A run waiting for a person: saved, actor stopped, slot released: it costs storage, not memory. */
  private async park(live: LiveRun, record: RunRecord): Promise<void> {
    await live.emitChain;
    this.retire(live);
    live.resolve(record);
    this.notifySettled(record);
  }

  /** final_answer for a completed run, runtime_error for one that failed, was cancelled or timed out. */
  private emitFinal(live: LiveRun, status: RunRecordStatus, ctx: RunContext): Promise<unknown> {
    if (status === 'completed') {
      const usage = { input_tokens: ctx.usage.request_tokens, output_tokens: ctx.usage.response_tokens, total_tokens: ctx.usage.total_tokens };
      return this.emit(live, {
        event_type: 'final_answer',
        actor: { type: 'agent', id: live.writer.value.agent_name },
        output: { response: ctx.response },
        span_id: live.rootSpan,
        token_usage: usage,
      });
    }
    if (status === 'blocked') return live.emitChain; // guardrail_violation was the last word
    return this.emit(live, {
      event_type: 'runtime_error',
      actor: { type: 'system', id: this.deps.workerId },
      error: ctx.error ?? { type: status, message: status },
      span_id: live.rootSpan,
      metadata: { termination_reason: ctx.termination_reason, status },
    });
  }

  private async finish(live: LiveRun, record: RunRecord): Promise<void> {
    await live.emitChain;
    if (record.status === 'completed' && !(live.historyWrite && (await live.historyWrite))) await this.appendHistory(record, live.prelude);
    if (TERMINAL_RUN_STATUSES.has(record.status)) this.inbox.forget(record.run_id);
    this.deps.metrics.runFinished(record.status, (this.deps.clock.now() - live.startedAtMs) / 1000);
    this.retire(live);
    live.resolve(record);
    this.notifySettled(record);
    // Holds are normally settled call by call; this only sweeps up what a failed call left, so it
    // need not delay the answer.
    await this.deps.ledger.releaseRun(record.run_id).catch(() => 0);
  }

  private retire(live: LiveRun): void {
    if (live.heartbeat) clearInterval(live.heartbeat);
    if (live.timeout) clearTimeout(live.timeout);
    live.heartbeat = null;
    live.timeout = null;
    this.deps.system.stop(`run:${live.run_id}`);
    this.live.delete(live.run_id);
    this.sessions.release(live.session_id, live.run_id);
    this.deps.metrics.liveRuns.dec();
    live.releaseSlot();
    live.releaseAgent();
  }

  /** Something outside the machine failed (a write, an unexpected throw): record it, never crash. */
  private async failLive(live: LiveRun, err: unknown): Promise<void> {
    if (err instanceof FencedError) return; // onFenced handles it
    this.deps.log?.('error', 'run failed outside its machine', { run_id: live.run_id, err: String(err) });
    live.ending = true;
    const message = this.deps.telemetry.redactText(err instanceof Error ? err.message : String(err));
    try {
      const rec = await live.writer.update((r) => ({
        ...r,
        status: 'failed',
        termination_reason: 'internal_error',
        error: { type: 'InternalError', message },
        owner: null,
        lease_expires_at: null,
        ended_at: iso(this.deps.clock.now()),
        updated_at: iso(this.deps.clock.now()),
      }));
      await this.finish(live, rec.value);
    } catch {
      this.retire(live);
      live.resolve({ ...live.writer.value, status: 'failed' });
    }
  }

  /** Another owner took this run over: stop here without writing anything more. */
  private onFenced(live: LiveRun, _err: FencedError): void {
    this.deps.log?.('warn', 'run lease lost to another owner; stopping this copy', { run_id: live.run_id });
    this.deps.metrics.leaseLost('run');
    live.ending = true;
    live.abort.abort();
    this.retire(live);
    live.resolve(live.writer.value);
  }

  private beat(live: LiveRun): void {
    const now = this.deps.clock.now();
    live.writer.update((r) => ({ ...r, heartbeat_at: iso(now), lease_expires_at: iso(now + this.deps.settings.lease_seconds * 1000) })).catch(() => {});
  }

  // ---------------------------------------------------------------- effects bound into the machine

  private async checkInputEffect(query: string, runId: string): Promise<RunContext['guardrail_result']> {
    const result = checkInput(query, this.deps.guardrails);
    if (result.allowed) return { allowed: true };
    const live = this.live.get(runId);
    if (live) {
      void this.emit(live, {
        event_type: 'guardrail_violation',
        actor: { type: 'guardrail', id: result.rule },
        input: { query },
        error: { type: 'GuardrailViolation', message: result.message },
        span_id: live.rootSpan,
        metadata: { rule: result.rule, matched: result.matched ?? null },
      });
    }
    return { allowed: false, rule: result.rule, message: result.message, matched: result.matched };
  }

  /** The step boundary's inbox read. A store failure delivers nothing this time (the next boundary reads again). */
  private async readInboxEffect(ctx: RunContext): Promise<InboxRead> {
    try {
      return await this.inbox.read(ctx.run_id, ctx.steered ?? [], ctx.interrupt_handled ?? null);
    } catch (err) {
      this.deps.log?.('warn', 'run inbox could not be read; trying again at the next step boundary', { run_id: ctx.run_id, err: String(err) });
      return { messages: [], interrupt_id: null };
    }
  }

  private async reserveEffect(ctx: RunContext, phase: 'model' | 'tools'): Promise<ReserveResult> {
    const live = this.mustLive(ctx.run_id);
    const amounts: MeterAmounts =
      phase === 'model' ? this.modelWorstCase(live, ctx) : { tool_calls: ctx.pending.filter((c) => this.willExecute(ctx, c)).length };
    const res = await this.deps.ledger.reserve({
      reservation_id: `${ctx.run_id}:${phase}:${ctx.step}`,
      run_id: ctx.run_id,
      session_id: ctx.session_id,
      agent_id: live.agent_id,
      amounts,
    });
    if (res.ok) {
      for (const w of res.warnings) {
        void this.emit(live, {
          event_type: 'budget_warning',
          actor: { type: 'system', id: 'budget' },
          span_id: live.stepSpan ?? live.rootSpan,
          output: w,
          metadata: { key: w.key, meter: w.meter },
        });
      }
      return { ok: true };
    }
    const s = res.shortfall;
    const request: BudgetRequest = {
      request_id: newId('budgetreq'),
      key: s.key,
      scope: s.scope,
      meter: s.meter,
      limit: s.limit,
      used: s.used,
      needed: s.needed,
      shortfall: s.shortfall,
      status: 'pending',
      asked_at: iso(this.deps.clock.now()),
      phase,
    };
    void this.emit(live, {
      event_type: 'budget_exhausted',
      actor: { type: 'system', id: 'budget' },
      span_id: live.stepSpan ?? live.rootSpan,
      output: { ...request, on_exhausted: res.on_exhausted },
      metadata: { key: s.key, meter: s.meter, on_exhausted: res.on_exhausted },
    });
    return { ok: false, on_exhausted: res.on_exhausted, request };
  }

  private modelWorstCase(live: LiveRun, ctx: RunContext): MeterAmounts {
    const model = live.agent.model;
    const input = model.estimateInputTokens(ctx.messages, this.toolDeclarations(live));
    return modelCallReservation(this.deps.settings.pricing, model.model, { input_tokens: input, max_output_tokens: live.agent.max_output_tokens }).amounts;
  }

  private async callModelEffect(ctx: RunContext, signal: AbortSignal): Promise<ModelStepResult> {
    const live = this.mustLive(ctx.run_id);
    const agentModel = live.agent.model;
    const span = newId('span');
    const started = this.deps.clock.now();
    const tools = this.toolDeclarations(live);
    void this.emit(live, {
      event_type: 'model_call',
      actor: { type: 'model', id: agentModel.model, name: agentModel.provider },
      span_id: span,
      parent_span_id: live.stepSpan,
      input: { messages: ctx.messages.length, tools: tools.map((t) => t.name), last: ctx.messages.at(-1) },
      metadata: { model: agentModel.model, provider: agentModel.provider, step: ctx.step },
    });
    const combined = AbortSignal.any([signal, live.abort.signal]);
    let result;
    try {
      // A retry wrapper per call, so each failed attempt's model_error lands in this run's trace.
      const model = withRetries(agentModel, {
        onError: (err, attempt, willRetry, delayMs) => void this.emit(live, this.modelErrorEvent(live, span, err, attempt, willRetry, delayMs)),
      });
      result = await model.call({
        messages: ctx.messages,
        tools,
        max_output_tokens: live.agent.max_output_tokens,
        signal: combined,
        onDelta: (text) => live.onDelta?.(text, ++live.deltaSeq, live.eventSeq),
      });
    } catch (err) {
      // Retries already emitted one model_error per failed attempt; this is the final one.
      if (!(err instanceof ModelCallError)) {
        void this.emit(live, {
          event_type: 'model_error',
          actor: { type: 'model', id: agentModel.model },
          span_id: span,
          parent_span_id: live.stepSpan,
          error: { type: 'ModelError', message: String((err as Error)?.message ?? err) },
          duration_ms: this.deps.clock.now() - started,
        });
      }
      throw err;
    }
    const usage = modelCallUsage(this.deps.settings.pricing, agentModel.model, result.usage);
    await this.deps.ledger.settle(`${ctx.run_id}:model:${ctx.step}`, usage.amounts).catch(() => undefined);
    this.deps.metrics.tokensUsed(result.usage.input_tokens, result.usage.output_tokens);
    void this.emit(live, {
      event_type: 'model_response',
      actor: { type: 'model', id: agentModel.model, name: agentModel.provider },
      span_id: span,
      parent_span_id: live.stepSpan,
      output: { text: result.text, tool_calls: result.tool_calls, finish_reason: result.finish_reason },
      token_usage: result.usage,
      estimated_cost_usd: usage.amounts.cost_usd,
      duration_ms: this.deps.clock.now() - started,
      metadata: { model: result.model, provider: agentModel.provider, step: ctx.step, finish_reason: result.finish_reason },
    });
    return { result, cost_usd: usage.amounts.cost_usd };
  }

  private modelErrorEvent(
    live: LiveRun,
    span: string,
    err: ModelCallError,
    attempt: number,
    willRetry: boolean,
    delayMs: number,
  ): Omit<EventRecordInput, 'trace_id' | 'metadata'> & { metadata: Record<string, unknown> } {
    return {
      event_type: 'model_error',
      actor: { type: 'model', id: live.agent.model.model, name: live.agent.model.provider },
      span_id: span,
      parent_span_id: live.stepSpan,
      error: { type: err.kind, message: err.message },
      metadata: { attempt, will_retry: willRetry, retry_delay_ms: willRetry ? delayMs : null, status: err.status ?? null },
    };
  }

  private async governEffect(ctx: RunContext): Promise<{ decisions: PolicyDecision[]; approvals: ApprovalState[] }> {
    const live = this.mustLive(ctx.run_id);
    const { governance, approval_expires_seconds } = this.deps.settings;
    const decisions: PolicyDecision[] = [];
    const approvals: ApprovalState[] = [];
    const now = this.deps.clock.now();
    for (const call of ctx.pending) {
      const tool = live.agent.tools.get(call.name);
      const span = newId('span');
      void this.emit(live, {
        event_type: 'policy_request_created',
        actor: { type: 'agent', id: live.agent_id },
        span_id: span,
        parent_span_id: live.stepSpan,
        input: { tool_name: call.name, arguments: call.arguments },
        metadata: { tool_call_id: call.id, tool_name: call.name, mcp_server: tool?.mcp_server ?? null },
      });
      const d = decidePolicy({ tool_name: call.name, mcp_server: tool?.mcp_server }, governance);
      decisions.push({ tool_call_id: call.id, effect: d.effect, reason: d.reason ?? null });
      void this.emit(live, {
        event_type: `policy_decision_${d.effect}`,
        actor: { type: 'system', id: 'governance' },
        span_id: span,
        parent_span_id: live.stepSpan,
        output: { effect: d.effect, rule_index: d.rule_index, reason: d.reason ?? null },
        metadata: { tool_call_id: call.id, tool_name: call.name },
      });
      if (d.effect === 'ask') {
        approvals.push({
          approval_id: newId('approval'),
          status: 'pending',
          tool_name: call.name,
          tool_call_id: call.id,
          arguments: call.arguments,
          reason: d.reason ?? null,
          created_at: iso(now),
          expires_at: iso(now + approval_expires_seconds * 1000),
          approver: null,
          note: null,
          decided_at: null,
          edited_arguments: null,
        });
      }
    }
    return { decisions, approvals };
  }

  /** Whether a pending call will actually run (not denied, not refused). */
  private willExecute(ctx: RunContext, call: ToolCallRequest): boolean {
    const d = ctx.decisions.find((x) => x.tool_call_id === call.id);
    if (d?.effect === 'deny') return false;
    const a = ctx.approvals.find((x) => x.tool_call_id === call.id);
    return !(a && a.status !== 'approved');
  }

  private async executeToolsEffect(ctx: RunContext, signal: AbortSignal): Promise<ToolOutcome[]> {
    const live = this.mustLive(ctx.run_id);
    const batchSpan = newId('span');
    const started = this.deps.clock.now();
    void this.emit(live, {
      event_type: 'tool_batch_start',
      actor: { type: 'agent', id: live.agent_id },
      span_id: batchSpan,
      parent_span_id: live.stepSpan,
      input: { tool_calls: ctx.pending.map((c) => ({ id: c.id, name: c.name })) },
      metadata: { size: ctx.pending.length, step: ctx.step },
    });
    const combined = AbortSignal.any([signal, live.abort.signal]);
    const outcomes = await Promise.all(ctx.pending.map((call) => this.runOneTool(live, ctx, call, batchSpan, combined)));
    const executed = outcomes.filter((o) => o.outcome !== 'denied' && o.outcome !== 'rejected').length;
    await this.deps.ledger.settle(`${ctx.run_id}:tools:${ctx.step}`, { tool_calls: executed }).catch(() => undefined);
    void this.emit(live, {
      event_type: 'observation_pipeline_end',
      actor: { type: 'agent', id: live.agent_id },
      span_id: newId('span'),
      parent_span_id: batchSpan,
      output: { observations: outcomes.map((o) => ({ tool_call_id: o.tool_call_id, outcome: o.outcome, chars: o.content.length })) },
      duration_ms: this.deps.clock.now() - started,
    });
    return outcomes;
  }

  private async runOneTool(live: LiveRun, ctx: RunContext, call: ToolCallRequest, batchSpan: string, signal: AbortSignal): Promise<ToolOutcome> {
    const base = { tool_call_id: call.id, tool_name: call.name };
    const saved = live.writer.value.tool_calls.find((c) => c.tool_call_id === call.id);
    // A call saved completed never runs again (decisions.md §6.3).
    if (saved?.state === 'completed') return { ...base, content: saved.result_content ?? '', outcome: saved.outcome ?? 'unknown' };

    const decision = ctx.decisions.find((d) => d.tool_call_id === call.id);
    const approval = ctx.approvals.find((a) => a.tool_call_id === call.id);
    const tool = live.agent.tools.get(call.name);
    if (decision?.effect === 'deny') {
      return this.recordSkipped(live, ctx, call, tool, 'denied', `Denied by policy${decision.reason ? `: ${decision.reason}` : ''}. The tool was not run.`);
    }
    if (approval && approval.status !== 'approved') {
      const who = approval.approver ?? 'policy';
      const content =
        approval.status === 'expired'
          ? 'The approval for this call expired before anyone decided. The tool was not run.'
          : `Denied by ${who}${approval.note ? `: ${approval.note}` : ''}. The tool was not run.`;
      return this.recordSkipped(live, ctx, call, tool, 'denied', content);
    }
    const sub = live.agent.subagents?.find(call.name);
    if (sub) return this.runDelegation(live, ctx, call, sub, batchSpan, signal, saved);
    if (!tool)
      return this.recordSkipped(
        live,
        ctx,
        call,
        tool,
        'rejected',
        `Unknown tool '${call.name}'. Available tools: ${
          live.agent.tools
            .list()
            .map((t) => t.name)
            .join(', ') || 'none'
        }.`,
      );
    const args = approval?.edited_arguments ?? call.arguments;
    const valid = live.agent.tools.validate(call.name, args);
    if (!valid.ok) return this.recordSkipped(live, ctx, call, tool, 'rejected', `Invalid arguments for ${call.name}: ${valid.message}`);

    if (saved?.state === 'started' && !tool.idempotent) {
      // It may or may not have run before the crash. Never run a non-idempotent call twice.
      const content = `The outcome of this ${call.name} call is unknown: the service stopped while it was running, and the tool is not idempotent, so it was not run again. Check its effect before retrying.`;
      await this.saveToolCall(live, { ...saved, state: 'completed', outcome: 'unknown', ended_at: iso(this.deps.clock.now()), result_content: content });
      return { ...base, content, outcome: 'unknown' };
    }

    const span = newId('span');
    const startedMs = this.deps.clock.now();
    const startedSave = this.saveToolCall(live, {
      tool_call_id: call.id,
      tool_name: call.name,
      source: tool.source,
      idempotent: tool.idempotent,
      step: ctx.step,
      state: 'started',
      outcome: null,
      started_at: iso(startedMs),
      ended_at: null,
      result_content: null,
    });
    // A non-idempotent call is durable as `started` before it runs, so a crash cannot make it run
    // twice (decisions.md §6.3). An idempotent one may simply run again after a crash: it does not
    // wait for that store round (its `started` state folds into the run's next write).
    if (!tool.idempotent) {
      live.writer.flush();
      await startedSave;
    } else startedSave.catch(() => {}); // a fenced writer stops the run (onFenced)
    void this.emit(live, {
      event_type: 'tool_call',
      actor: { type: tool.source === 'mcp' ? 'mcp_server' : 'tool', id: call.name, name: tool.mcp_server ?? null },
      span_id: span,
      parent_span_id: batchSpan,
      input: { arguments: valid.args, edited: approval?.edited_arguments ? true : false },
      metadata: { tool_call_id: call.id, tool_name: call.name, idempotent: tool.idempotent, source: tool.source },
    });
    const record = live.writer.value;
    const controller = new AbortController();
    const onAbort = () => controller.abort();
    signal.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => controller.abort(new Error('tool timeout')), this.deps.settings.tool_timeout_ms);
    const context: ToolContext = {
      run_id: ctx.run_id,
      session_id: ctx.session_id,
      attempt: record.attempt,
      lease_token: `${this.deps.workerId}:${record.attempt}`,
      idempotency_key: `${ctx.run_id}:${call.id}`,
      workspace_path: live.workspace_path,
      signal: controller.signal,
    };
    let outcome: ToolOutcome['outcome'];
    let content: string;
    try {
      const value = await raceAbort(tool.execute(valid.args, context), controller.signal);
      const obs = formatObservation(value);
      content = obs.content;
      outcome = 'success';
      void this.emit(live, {
        event_type: 'tool_result',
        actor: { type: 'tool', id: call.name },
        span_id: span,
        parent_span_id: batchSpan,
        output: value,
        duration_ms: this.deps.clock.now() - startedMs,
        metadata: { tool_call_id: call.id, tool_name: call.name, truncated: obs.truncated },
      });
    } catch (err) {
      const timedOut = controller.signal.aborted && !signal.aborted;
      outcome = timedOut ? 'timeout' : signal.aborted ? 'cancelled' : 'error';
      const message = timedOut ? `timed out after ${this.deps.settings.tool_timeout_ms} ms` : err instanceof Error ? err.message : String(err);
      content = `Tool ${call.name} failed (${outcome}): ${message}`;
      void this.emit(live, {
        event_type: 'tool_error',
        actor: { type: 'tool', id: call.name },
        span_id: span,
        parent_span_id: batchSpan,
        error: { type: outcome, message },
        duration_ms: this.deps.clock.now() - startedMs,
        metadata: { tool_call_id: call.id, tool_name: call.name },
      });
      if (signal.aborted) throw err; // the run is being cancelled or stopped: do not save a completion
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    }
    const current = live.writer.value.tool_calls.find((c) => c.tool_call_id === call.id)!;
    this.recordCompletion(live, { ...current, state: 'completed', outcome, ended_at: iso(this.deps.clock.now()), result_content: content });
    return { ...base, content, outcome };
  }

  /** A delegation to a sub-agent, recorded like a tool call so a replay obeys the same rules (§6.3). */
  private async runDelegation(
    live: LiveRun,
    ctx: RunContext,
    call: ToolCallRequest,
    sub: SubagentSpec,
    batchSpan: string,
    signal: AbortSignal,
    saved: ToolCallRecord | undefined,
  ): Promise<ToolOutcome> {
    const subagents = live.agent.subagents!;
    const idempotent = subagents.isIdempotent(sub);
    if (saved?.state === 'started' && !idempotent) {
      const content = `The outcome of this delegation to ${sub.name} is unknown: the service stopped while it ran, and it may call tools that are not idempotent, so it was not run again.`;
      await this.saveToolCall(live, { ...saved, state: 'completed', outcome: 'unknown', ended_at: iso(this.deps.clock.now()), result_content: content });
      return { tool_call_id: call.id, tool_name: call.name, content, outcome: 'unknown' };
    }
    await this.saveToolCall(live, {
      tool_call_id: call.id,
      tool_name: call.name,
      source: 'subagent',
      idempotent,
      step: ctx.step,
      state: 'started',
      outcome: null,
      started_at: iso(this.deps.clock.now()),
      ended_at: null,
      result_content: null,
    });
    const record = live.writer.value;
    const result = await subagents.delegate(
      sub,
      {
        run_id: ctx.run_id,
        session_id: ctx.session_id,
        agent_id: live.agent_id,
        attempt: record.attempt,
        lease_token: `${this.deps.workerId}:${record.attempt}`,
        workspace_path: live.workspace_path,
      },
      call,
      (input) => this.emit(live, input),
      batchSpan,
      signal,
    );
    const outcome = result.ok ? 'success' : 'error';
    const current = live.writer.value.tool_calls.find((c) => c.tool_call_id === call.id)!;
    this.recordCompletion(live, { ...current, state: 'completed', outcome, ended_at: iso(this.deps.clock.now()), result_content: result.content });
    return { tool_call_id: call.id, tool_name: call.name, content: result.content, outcome, usage: result.usage };
  }

  private async recordSkipped(
    live: LiveRun,
    ctx: RunContext,
    call: ToolCallRequest,
    tool: RegisteredTool | undefined,
    outcome: 'denied' | 'rejected',
    content: string,
  ): Promise<ToolOutcome> {
    const now = iso(this.deps.clock.now());
    this.recordCompletion(live, {
      tool_call_id: call.id,
      tool_name: call.name,
      source: tool?.source ?? 'unknown',
      idempotent: tool?.idempotent ?? false,
      step: ctx.step,
      state: 'completed',
      outcome,
      started_at: now,
      ended_at: now,
      result_content: content,
    });
    void this.emit(live, {
      event_type: 'tool_error',
      actor: { type: 'tool', id: call.name },
      span_id: newId('span'),
      parent_span_id: live.stepSpan,
      error: { type: outcome, message: content },
      metadata: { tool_call_id: call.id, tool_name: call.name },
    });
    return { tool_call_id: call.id, tool_name: call.name, content, outcome };
  }

  /**
   * A call's completion is saved without waiting for it. Only `started` must be durable before
   * anything happens (it is what keeps a non-idempotent call from running twice); the completion
   * goes out with the run's next write (the writer keeps order and carries the newest record), so
   * the run goes on to its next model call instead of spending a store round here. Lost in a
   * crash, the call reads `started` and a non-idempotent one gets outcome `unknown`, never a rerun.
   */
  private recordCompletion(live: LiveRun, call: ToolCallRecord): void {
    const ran = call.outcome !== 'denied' && call.outcome !== 'rejected';
    const seconds = ran && call.ended_at ? Math.max(0, Date.parse(call.ended_at) - Date.parse(call.started_at)) / 1000 : null;
    // A call to a tool the registry lacks is labelled as such: the model may name anything.
    this.deps.metrics.toolCall(call.source === 'unknown' ? UNKNOWN_TOOL : call.tool_name, call.outcome ?? 'unknown', seconds);
    this.saveToolCall(live, call).catch(() => {}); // a fenced writer stops the run (onFenced)
  }

  private async saveToolCall(live: LiveRun, call: ToolCallRecord): Promise<void> {
    await live.writer.update((r) => {
      const i = r.tool_calls.findIndex((c) => c.tool_call_id === call.tool_call_id);
      const tool_calls = i >= 0 ? r.tool_calls.map((c, j) => (j === i ? call : c)) : [...r.tool_calls, call];
      return { ...r, tool_calls, updated_at: iso(this.deps.clock.now()) };
    });
  }

  private onStep(ctx: RunContext): void {
    const live = this.live.get(ctx.run_id);
    if (!live) return;
    live.stepSpan = newId('span');
    void this.emit(live, {
      event_type: 'agent_step',
      actor: { type: 'agent', id: live.agent_id },
      span_id: live.stepSpan,
      parent_span_id: live.rootSpan,
      metadata: { step: ctx.step },
    });
  }

  private toolDeclarations(live: LiveRun): ToolDeclaration[] {
    const { tools, subagents } = live.agent;
    const own = tools.list().map((t) => ({ name: t.name, description: t.description, input_schema: t.input_schema }));
    return subagents ? [...own, ...subagents.declarations()] : own;
  }

  // ---------------------------------------------------------------- telemetry helpers

  /**
   * Events of one run are stored in order through a per-run chain, then published. Effects do not
   * wait for them (telemetry must not add a durable write to every step's latency); the run only
   * reads as ended, and only settles, after its chain has drained (see onSnapshot and finish).
   */
  private emit(live: LiveRun, input: Omit<EventRecordInput, 'trace_id' | 'metadata'> & { metadata?: Record<string, unknown> }): Promise<unknown> {
    const record = live.writer.value;
    const full: EventRecordInput = {
      ...input,
      sequence: ++live.eventSeq,
      trace_id: record.trace_id,
      parent_span_id: input.parent_span_id ?? (input.span_id === live.rootSpan ? null : live.rootSpan),
      metadata: { run_id: live.run_id, session_id: live.session_id, agent_id: live.agent_id, task_id: live.task_id, ...(input.metadata ?? {}) },
    };
    // A new run's first events wait with its creating write (CREATE_FOLD_MS) and go to the store
    // right before it: same round, same order, and no event of a run that was never stored.
    if (live.heldEvents) {
      live.heldEvents.events.push(full);
      return live.emitChain;
    }
    // Handed to the store now, not after the previous event landed: the store's write queue is
    // first in, first out and group-commits, so the events of a step share one durable write and
    // keep their order (sequence numbers and cursors alike) without waiting on each other.
    live.emitChain = Promise.all([live.emitChain, this.deps.telemetry.emitManySafe([full])]);
    return live.emitChain;
  }

  /** The delayed creating write goes to the store now: the events held with it go first. */
  private releaseHeldEvents(live: LiveRun): void {
    const held = live.heldEvents;
    if (!held) return;
    live.heldEvents = null;
    const stored = held.events.length ? this.deps.telemetry.emitManySafe(held.events) : Promise.resolve();
    live.emitChain = Promise.all([live.emitChain, stored]);
    held.release();
  }

  private traceValue(r: RunRecord, parent: string | null, status: string) {
    return {
      trace_id: r.trace_id,
      parent_trace_id: parent,
      run_id: r.run_id,
      session_id: r.session_id,
      task_id: r.task_id,
      agent_id: r.agent_id,
      status,
      started_at: iso(this.deps.clock.now()),
      ended_at: null as string | null,
    };
  }

  private async setTraceStatus(traceId: string, status: string): Promise<void> {
    for (let i = 0; i < 5; i++) {
      const cur = await this.deps.store.getRecord<ReturnType<RunService['traceValue']>>('traces', traceId);
      if (!cur) return;
      const ended = status === 'running' ? null : iso(this.deps.clock.now());
      try {
        await this.deps.store.updateRecord('traces', traceId, { ...cur.value, status, ended_at: ended }, cur.version);
        return;
      } catch (err) {
        if (!isStoreError(err, 'stale_version')) return;
      }
    }
  }

  /** The completed run's turn added to the session it read at its start, in one conditional write. */
  private writeHistory(live: LiveRun, record: RunRecord): Promise<boolean> {
    const cur = live.session;
    if (cur?.value.run_ids.includes(record.run_id)) return Promise.resolve(true);
    const add: ChatMessage[] = [
      ...live.prelude,
      { role: 'user', content: this.deps.telemetry.redactText(record.query) },
      { role: 'assistant', content: record.response ?? '' },
    ];
    const now = record.updated_at;
    const op: WriteOp = cur
      ? {
          op: 'update',
          kind: 'sessions',
          id: record.session_id,
          expectedVersion: cur.version,
          value: {
            ...cur.value,
            messages: [...cur.value.messages, ...add],
            run_ids: [...cur.value.run_ids, record.run_id],
            counts: [...countsOf(cur.value), add.length],
            updated_at: now,
          } satisfies SessionValue,
        }
      : {
          op: 'create',
          kind: 'sessions',
          id: record.session_id,
          value: {
            session_id: record.session_id,
            messages: add,
            run_ids: [record.run_id],
            counts: [add.length],
            created_at: now,
            updated_at: now,
          } satisfies SessionValue,
        };
    return this.deps.store.commit([op]).then(
      () => true,
      () => false,
    );
  }

  private async appendHistory(record: RunRecord, prelude: ChatMessage[] = []): Promise<void> {
    const { store, clock } = this.deps;
    const now = iso(clock.now());
    for (let i = 0; i < 10; i++) {
      const cur = await store.getRecord<SessionValue>('sessions', record.session_id);
      const add: ChatMessage[] = [
        ...prelude,
        { role: 'user', content: this.deps.telemetry.redactText(record.query) },
        { role: 'assistant', content: record.response ?? '' },
      ];
      try {
        if (!cur) {
          await store.createRecord<SessionValue>('sessions', record.session_id, {
            session_id: record.session_id,
            messages: add,
            run_ids: [record.run_id],
            counts: [add.length],
            created_at: now,
            updated_at: now,
          });
        } else {
          if (cur.value.run_ids.includes(record.run_id)) return;
          await store.updateRecord<SessionValue>(
            'sessions',
            record.session_id,
            {
              ...cur.value,
              messages: [...cur.value.messages, ...add],
              run_ids: [...cur.value.run_ids, record.run_id],
              counts: [...countsOf(cur.value), add.length],
              updated_at: now,
            },
            cur.version,
          );
        }
        return;
      } catch (err) {
        if (!isStoreError(err, 'stale_version') && !isStoreError(err, 'conflict')) throw err;
      }
    }
  }

  private mustLive(runId: string): LiveRun {
    const live = this.live.get(runId);
    if (!live) throw new Error(`run ${runId} is not live in this process`);
    return live;
  }

  // ---------------------------------------------------------------- reads

  async get(runId: string): Promise<RunRecord> {
    // A run this process just accepted may not be durable yet (StartOptions.onAccepted).
    const creating = this.live.get(runId)?.writer.created;
    if (creating) await creating.catch(() => undefined);
    const rec = await this.deps.store.getRecord<RunRecord>('runs', runId);
    if (!rec) throw notFound('run', runId);
    return rec.value;
  }

  async list(q: { status?: RunRecordStatus; session_id?: string; limit: number; cursor?: string | null }) {
    const index = q.status ? { name: 'status', value: q.status } : q.session_id ? { name: 'session_id', value: q.session_id } : undefined;
    const page = await this.deps.store.listRecords<RunRecord>('runs', { index, cursor: q.cursor, limit: q.limit });
    let runs = page.items.map((i) => i.value);
    if (q.status && q.session_id) runs = runs.filter((r) => r.session_id === q.session_id);
    const total = await this.deps.store.countRecords('runs', index);
    return { runs, total, next_cursor: page.next_cursor };
  }

  async history(sessionId: string) {
    const rec = await this.deps.store.getRecord<SessionValue>('sessions', sessionId);
    if (!rec) throw notFound('session', sessionId);
    return { session_id: sessionId, messages: rec.value.messages, count: rec.value.messages.length };
  }

  async clearSession(sessionId: string) {
    const rec = await this.deps.store.getRecord<SessionValue>('sessions', sessionId);
    if (!rec) throw notFound('session', sessionId);
    await this.deps.store.deleteRecord('sessions', sessionId);
    return { status: 'cleared' as const, session_id: sessionId };
  }

  // ---------------------------------------------------------------- cancellation

  /** Cancel a run. `onlyIfLive` is the stream-closed case: a run paused for a person stays paused. */
  async cancel(runId: string, opts: { onlyIfLive?: boolean } = {}): Promise<{ status: 'cancel_requested'; run_id: string }> {
    const live = this.live.get(runId);
    // A stream closed by the service's own shutdown (Fastify destroys every connection) is not
    // the client giving up: the run is saved `interrupted` and resumed on the next start. Before
    // this, SIGTERM turned every run streamed over POST /run into `cancelled` (test/http/
    // recovery.test.ts, "SIGTERM while a client streams the run"). The streams' close events
    // arrive after shutdown() began today; calling beginShutdown() before app.close() makes it certain.
    if (opts.onlyIfLive && this.closing) return { status: 'cancel_requested', run_id: runId };
    if (live?.ref) {
      live.ref.send({ type: 'CANCEL' });
      return { status: 'cancel_requested', run_id: runId };
    }
    if (opts.onlyIfLive) return { status: 'cancel_requested', run_id: runId };
    const rec = await this.deps.store.getRecord<RunRecord>('runs', runId);
    if (!rec) throw notFound('run', runId);
    if (TERMINAL_RUN_STATUSES.has(rec.value.status)) throw conflict(`run ${runId} already ended (${rec.value.status})`);
    if (rec.value.status === 'running' && rec.value.owner && rec.value.owner !== this.deps.workerId && !this.leaseLapsed(rec.value)) {
      // Live in another instance of a shared store: its owner is told (the change feed), cancels
      // it there at its next step, and writes the end itself. Writing the record from here would
      // only fence the owner off, leaving the run `running` until its lease lapsed.
      if (this.remoteCancel) {
        await this.remoteCancel(runId);
        return { status: 'cancel_requested', run_id: runId };
      }
      throw conflict(`run ${runId} is running in another process (${rec.value.owner}); cancel it there`);
    }
    const now = iso(this.deps.clock.now());
    const done = await this.deps.store.updateRecord<RunRecord>(
      'runs',
      runId,
      {
        ...rec.value,
        status: 'cancelled',
        termination_reason: 'cancelled',
        error: { type: 'Cancelled', message: 'the run was cancelled' },
        approvals: rec.value.approvals.map((a) => (a.status === 'pending' ? { ...a, status: 'expired' as const } : a)),
        owner: null,
        lease_expires_at: null,
        ended_at: now,
        updated_at: now,
      },
      rec.version,
      runIndexes({ ...rec.value, status: 'cancelled' }),
    );
    await this.deps.ledger.releaseRun(runId).catch(() => 0);
    this.inbox.forget(runId);
    await this.setTraceStatus(done.value.trace_id, 'cancelled');
    // The same last word a live run's cancel leaves (emitFinal), so the trace ends and the
    // webhook dispatcher (src/integrations/webhooks.ts) sees run.cancelled.
    await this.deps.telemetry.emitSafe({
      event_type: 'runtime_error',
      trace_id: done.value.trace_id,
      span_id: newId('span'),
      actor: { type: 'system', id: this.deps.workerId },
      error: { type: 'Cancelled', message: 'the run was cancelled' },
      metadata: {
        run_id: runId,
        session_id: done.value.session_id,
        agent_id: done.value.agent_id,
        task_id: done.value.task_id,
        termination_reason: 'cancelled',
        status: 'cancelled',
      },
    });
    this.notifySettled(done.value);
    return { status: 'cancel_requested', run_id: runId };
  }

  // ---------------------------------------------------------------- steer and interrupt (issue 14 item 2)

  /**
   * Queues a message for the run's next step boundary. Refused (409) unless the run is running,
   * awaiting approval or interrupted; a message the input guardrails block is refused too, and
   * recorded as a `guardrail_violation` event of the run (`blocked` in the answer).
   */
  async steer(
    runId: string,
    body: { message: string; sender: string },
  ): Promise<{ status: 'queued'; message_id: string; run_id: string } | { blocked: { rule: string; message: string } }> {
    const r = await this.get(runId);
    if (!STEERABLE.has(r.status))
      throw conflict(`run ${runId} cannot be steered while ${r.status}; only running, awaiting_approval or interrupted runs can`, r.status);
    const meta = { run_id: runId, session_id: r.session_id, agent_id: r.agent_id, task_id: r.task_id };
    const verdict = checkInput(body.message, this.deps.guardrails);
    if (!verdict.allowed) {
      await this.deps.telemetry.emitSafe({
        event_type: 'guardrail_violation',
        trace_id: r.trace_id,
        span_id: await this.rootSpanOf(r),
        actor: { type: 'guardrail', id: verdict.rule },
        input: { message: body.message, sender: body.sender },
        error: { type: 'GuardrailViolation', message: verdict.message },
        metadata: { ...meta, rule: verdict.rule, matched: verdict.matched ?? null, source: 'steer', sender: body.sender },
      });
      return { blocked: { rule: verdict.rule, message: verdict.message } };
    }
    const entry = await this.inbox.queueSteer(runId, body.sender, body.message);
    // The run may have ended between the status check and the append (its last boundary read
    // nothing): then nobody will take the message. Say so instead of answering `queued`.
    const after = await this.get(runId);
    if (TERMINAL_RUN_STATUSES.has(after.status) && !(await this.steeredInto(runId, entry.message_id))) {
      await this.inbox.withdrawSteer(runId, entry.message_id);
      throw conflict(`run ${runId} ended (${after.status}) before the message could be delivered`, after.status);
    }
    await this.deps.telemetry.emitSafe({
      event_type: 'run_steered',
      trace_id: after.trace_id,
      span_id: await this.rootSpanOf(after),
      actor: { type: 'user', id: body.sender },
      input: { message: body.message },
      metadata: { ...meta, message_id: entry.message_id, sender: body.sender, status: after.status },
    });
    return { status: 'queued', message_id: entry.message_id, run_id: runId };
  }

  /**
   * The root span of the run's current trace segment, where events about the run itself go (as
   * run_resumed does): the live segment's, else the span of the segment's first event.
   */
  private async rootSpanOf(r: RunRecord): Promise<string> {
    const live = this.live.get(r.run_id);
    if (live && live.writer.value.trace_id === r.trace_id) return live.rootSpan;
    const first = await this.deps.store.readEvents({ filters: { trace_id: r.trace_id }, limit: 1 }).catch(() => null);
    const span = first?.events[0]?.span_id;
    return typeof span === 'string' && span ? span : newId('span');
  }

  /** Whether the run's saved context already holds the steer message. */
  private async steeredInto(runId: string, messageId: string): Promise<boolean> {
    const snap = await this.deps.store.getRecord<SnapshotValue>('snapshots', runId);
    const ctx = (snap?.value.snapshot as { context?: RunContext } | undefined)?.context;
    return (ctx?.steered ?? []).includes(messageId);
  }

  /**
   * Asks a running run to stop at its next step boundary (saved `interrupted`, resumable with
   * POST /runs/{id}/resume). A tool call or model call in flight finishes and is saved first.
   */
  async interrupt(
    runId: string,
    opts: { by?: string | null } = {},
  ): Promise<{ status: 'interrupt_requested' | 'interrupted'; run_id: string; interrupt_id: string | null }> {
    const r = await this.get(runId);
    if (r.status === 'interrupted' && r.machine_state === 'interrupted') return { status: 'interrupted', run_id: runId, interrupt_id: null };
    if (r.kind === 'background') throw conflict(`run ${runId} is a background run; stop it with POST /background/runs/{run_id}/cancel`, 'background');
    // A run a graceful shutdown interrupted is resumed at the next start: the request makes it
    // stop again at its first boundary there, and stay stopped.
    if (r.status !== 'running' && r.status !== 'interrupted')
      throw conflict(`run ${runId} cannot be interrupted while ${r.status}; only running runs can`, r.status);
    const interrupt_id = await this.inbox.requestInterrupt(runId, opts.by ?? null);
    return { status: 'interrupt_requested', run_id: runId, interrupt_id };
  }

  /** The inbox of a run (steer messages queued so far, the last interrupt request). */
  async inboxOf(runId: string): Promise<InboxValue> {
    const r = await this.get(runId);
    return (await this.inbox.get(runId)) ?? { run_id: r.run_id, messages: [], interrupt: null, updated_at: r.updated_at };
  }

  /**
   * Session policy `interrupt`: the conversation the interrupted run had reached (its query, its
   * tool calls and results, steer messages it took), which the new run continues from.
   */
  private async carryOver(runId: string): Promise<{ messages: ChatMessage[]; prelude: ChatMessage[] }> {
    const none = { messages: [], prelude: [] };
    const [rec, snap] = await Promise.all([this.deps.store.getRecord<RunRecord>('runs', runId), this.deps.store.getRecord<SnapshotValue>('snapshots', runId)]);
    if (!rec || rec.value.status !== 'interrupted' || !snap) return none;
    const ctx = (snap.value.snapshot as { context?: RunContext }).context;
    if (!ctx) return none;
    let from = ctx.history_length;
    if (from === undefined) {
      // v1 snapshot: the run's own turn starts at its query.
      from = ctx.messages.findLastIndex((m) => m.role === 'user' && m.content === ctx.query);
      if (from < 0) return none;
    }
    const messages = ctx.messages.slice(from).filter((m) => m.role !== 'system');
    return { messages, prelude: [{ role: 'user', content: this.deps.telemetry.redactText(rec.value.query) }] };
  }

  /**
   * Session policy `rollback`: the cancelled run's turn leaves the session. A run cancelled in
   * time never added one; one that completed first (the race is short) is taken back out.
   */
  private async rollbackTurn(sessionId: string, runId: string, cur: Versioned<SessionValue> | null): Promise<Versioned<SessionValue> | null> {
    for (let attempt = 0; attempt < 10 && cur; attempt++) {
      const i = cur.value.run_ids.indexOf(runId);
      if (i < 0) return cur;
      const counts = countsOf(cur.value);
      const start = counts.slice(0, i).reduce((a, b) => a + b, 0);
      const value: SessionValue = {
        ...cur.value,
        messages: [...cur.value.messages.slice(0, start), ...cur.value.messages.slice(start + counts[i])],
        run_ids: cur.value.run_ids.filter((_, j) => j !== i),
        counts: counts.filter((_, j) => j !== i),
        updated_at: iso(this.deps.clock.now()),
      };
      try {
        return await this.deps.store.updateRecord<SessionValue>('sessions', sessionId, value, cur.version);
      } catch (err) {
        if (!isStoreError(err, 'stale_version')) throw err;
        cur = await this.deps.store.getRecord<SessionValue>('sessions', sessionId);
      }
    }
    return cur;
  }

  // ---------------------------------------------------------------- decisions

  async decideApproval(
    runId: string,
    approvalId: string,
    body: { decision: 'approve' | 'deny'; approver: string; arguments?: Record<string, unknown> | null; note?: string | null },
  ): Promise<ApprovalState> {
    if (body.decision === 'deny' && body.arguments) throw conflict('arguments can only be given with an approval', 'decision=deny with arguments');
    for (let attempt = 0; attempt < 10; attempt++) {
      // The snapshot a resume needs is read in the same round as the run (unused if this fails).
      const snapshotRead = this.deps.store.getRecord<SnapshotValue>('snapshots', runId);
      snapshotRead.catch(() => undefined);
      const rec = await this.deps.store.getRecord<RunRecord>('runs', runId);
      if (!rec) throw notFound('run', runId);
      const approval = rec.value.approvals.find((a) => a.approval_id === approvalId);
      if (!approval) throw notFound('approval', approvalId);
      const now = this.deps.clock.now();
      if (approval.status === 'pending' && Date.parse(approval.expires_at) <= now) {
        await this.deps.store
          .updateRecord<RunRecord>(
            'runs',
            runId,
            {
              ...rec.value,
              approvals: rec.value.approvals.map((a) => (a.approval_id === approvalId ? { ...a, status: 'expired' as const } : a)),
            },
            rec.version,
          )
          .catch(() => undefined);
        throw conflict(`approval ${approvalId} expired at ${approval.expires_at}`, 'expired');
      }
      if (approval.status !== 'pending') throw conflict(`approval ${approvalId} was already decided (${approval.status})`, approval.status);
      if (rec.value.status !== 'awaiting_approval') throw conflict(`run ${runId} is not awaiting approval (${rec.value.status})`);
      const decided: ApprovalState = {
        ...approval,
        status: body.decision === 'approve' ? 'approved' : 'denied',
        approver: body.approver,
        note: body.note ?? null,
        decided_at: iso(now),
        edited_arguments: body.decision === 'approve' && body.arguments ? body.arguments : null,
      };
      const approvals = rec.value.approvals.map((a) => (a.approval_id === approvalId ? decided : a));
      const allDecided = !approvals.some((a) => a.status === 'pending');
      const next: RunRecord = {
        ...rec.value,
        approvals,
        updated_at: iso(now),
        decided_at: allDecided ? iso(now) : null,
        decision: allDecided ? 'approval' : null,
      };
      // Everything the resume reads (snapshot, previous trace, agent) is in hand before the
      // decision goes to the store, so the claim is issued in the same turn and lands in the same
      // fsynced batch (ResumePrefetch). Reads only: the decision waits for no write.
      let pre: ResumePrefetch | undefined;
      if (allDecided && !this.live.has(runId)) {
        pre = {
          snapshot: snapshotRead,
          prevTrace: this.deps.store.getRecord<TraceValue>('traces', rec.value.trace_id),
          agent: this.acquireAgent(rec.value.agent_id, { resuming: true }),
        };
        pre.prevTrace.catch(() => undefined);
        pre.agent.catch(() => undefined);
        await Promise.allSettled([pre.snapshot, pre.prevTrace, pre.agent]);
      }
      const writing = this.deps.store.updateRecord('runs', runId, next, rec.version, runIndexes(next));
      // The resume does not wait for the decision to land: it is told the record the decision
      // writes (the version after it), reads what it needs meanwhile, and its claim (a CAS on
      // that version) joins the same store round or the next. Should the decision fail, the
      // claim fails with it; a decision that landed and a resume that failed are the sweep's.
      const resuming = allDecided
        ? this.resume(runId, { cause: 'approval', trigger: 'explicit' }, { id: runId, seq: rec.seq, version: rec.version + 1, value: next }, pre)
        : null;
      // Marked handled at once: a resume refused before the decision lands (a snapshot from a
      // newer machine, found by test/runtime/snapshot-fixtures.test.ts) was an unhandled rejection.
      resuming?.catch(() => undefined);
      try {
        await writing;
      } catch (err) {
        if (isStoreError(err, 'stale_version')) continue;
        throw err;
      }
      resuming?.catch((err) => this.deps.log?.('warn', 'resume after approval failed; the sweep will retry', { run_id: runId, err: String(err) }));
      return decided;
    }
    throw conflict('the run changed too often while deciding; retry');
  }

  async budgetView(runId: string) {
    const run = await this.get(runId);
    const budgets = await this.deps.ledger.entriesForRun({ run_id: run.run_id, session_id: run.session_id, agent_id: run.agent_id });
    return { run_id: runId, budgets, requests: run.budget_requests };
  }

  async decideBudget(
    runId: string,
    body: { decision: 'grant' | 'deny'; approver: string; amount?: number | null; note?: string | null; request_id?: string | null },
  ) {
    for (let attempt = 0; attempt < 10; attempt++) {
      // The snapshot a resume needs is read in the same round as the run (unused if this fails).
      const snapshotRead = this.deps.store.getRecord<SnapshotValue>('snapshots', runId);
      snapshotRead.catch(() => undefined);
      const rec = await this.deps.store.getRecord<RunRecord>('runs', runId);
      if (!rec) throw notFound('run', runId);
      const req = rec.value.budget_request;
      if (rec.value.status !== 'awaiting_budget' || !req || req.status !== 'pending')
        throw conflict(`run ${runId} is not waiting for a budget (${rec.value.status})`);
      if (body.request_id && body.request_id !== req.request_id) throw conflict(`budget request ${body.request_id} is not the pending one (${req.request_id})`);
      const amount = body.decision === 'grant' ? (body.amount ?? req.shortfall) : null;
      const now = iso(this.deps.clock.now());
      const decided: BudgetRequest = {
        ...req,
        status: body.decision === 'grant' ? 'granted' : 'denied',
        approver: body.approver,
        note: body.note ?? null,
        decided_at: now,
        amount,
      };
      try {
        const next: RunRecord = {
          ...rec.value,
          budget_request: decided,
          budget_requests: mergeById(rec.value.budget_requests, [decided], 'request_id'),
          decided_at: now,
          decision: body.decision === 'grant' ? 'budget_grant' : 'budget_denied',
          updated_at: now,
        };
        await this.deps.store.updateRecord<RunRecord>('runs', runId, next, rec.version, runIndexes(next));
      } catch (err) {
        if (isStoreError(err, 'stale_version')) continue;
        throw err;
      }
      if (amount !== null) await this.deps.ledger.grant(req.key, req.meter as never, amount, { grant_id: req.request_id });
      void this.resume(runId, { cause: body.decision === 'grant' ? 'budget_grant' : 'budget_denied', trigger: 'explicit' }).catch((err) =>
        this.deps.log?.('warn', 'resume after budget decision failed; the sweep will retry', { run_id: runId, err: String(err) }),
      );
      return {
        run_id: runId,
        request_id: req.request_id,
        status: decided.status,
        scope: req.scope,
        meter: req.meter,
        amount,
        approver: body.approver,
        note: body.note ?? null,
      };
    }
    throw conflict('the run changed too often while deciding; retry');
  }

  async recordOutcome(
    runId: string,
    body: { source: string; label?: string | null; reward?: number | null; detail?: Record<string, unknown> | null },
  ): Promise<OutcomeRecord> {
    for (let attempt = 0; attempt < 10; attempt++) {
      // The snapshot a resume needs is read in the same round as the run (unused if this fails).
      const snapshotRead = this.deps.store.getRecord<SnapshotValue>('snapshots', runId);
      snapshotRead.catch(() => undefined);
      const rec = await this.deps.store.getRecord<RunRecord>('runs', runId);
      if (!rec) throw notFound('run', runId);
      const outcome: OutcomeRecord = {
        outcome_id: newId('outcome'),
        source: body.source,
        label: body.label ?? null,
        reward: body.reward ?? null,
        detail: body.detail ?? null,
        recorded_at: iso(this.deps.clock.now()),
      };
      try {
        await this.deps.store.updateRecord<RunRecord>('runs', runId, { ...rec.value, outcomes: [...rec.value.outcomes, outcome] }, rec.version);
      } catch (err) {
        if (isStoreError(err, 'stale_version')) continue;
        throw err;
      }
      await this.deps.telemetry.emitSafe({
        event_type: 'run_outcome',
        trace_id: rec.value.trace_id,
        span_id: newId('span'),
        actor: { type: 'user', id: body.source },
        output: outcome,
        metadata: { run_id: runId, session_id: rec.value.session_id, agent_id: rec.value.agent_id, task_id: rec.value.task_id },
      });
      return outcome;
    }
    throw conflict('the run changed too often; retry');
  }

  // ---------------------------------------------------------------- resuming (decision, recovery, interruption)

  /**
   * Takes ownership of a run that no live actor holds and continues it from its snapshot.
   * Ownership is a CAS on the record: of two processes racing, exactly one wins.
   */
  async resume(
    runId: string,
    how: {
      cause: RecoveryCause;
      trigger: 'explicit' | 'orphan_sweep';
      extra?: Record<string, unknown>;
      ownerDead?: boolean;
      /** A slot the caller already holds (the recovery lane): the run keeps it; released if the resume fails. */
      slot?: () => void;
    },
    /** The record as a write already handed to the store leaves it (decideApproval): not read again. */
    known?: Versioned<RunRecord>,
    /**
     * What decideApproval already read or started for this resume (see ResumePrefetch). The
     * agent lease is this call's from here on: released on every failure.
     */
    pre?: ResumePrefetch,
  ): Promise<StartedRun> {
    const dropAgent = (): void =>
      void pre?.agent.then(
        (a) => a.release(),
        () => undefined,
      );
    if (this.live.has(runId)) {
      dropAgent();
      throw conflict(`run ${runId} is already live in this process`);
    }
    let rec: Versioned<RunRecord> | null;
    let snapRec: Versioned<SnapshotValue> | null;
    try {
      [rec, snapRec] = await Promise.all([
        known ?? this.deps.store.getRecord<RunRecord>('runs', runId),
        pre?.snapshot ?? this.deps.store.getRecord<SnapshotValue>('snapshots', runId),
      ]);
    } catch (err) {
      dropAgent();
      throw err;
    }
    try {
      return await this.resumeRead(runId, how, rec, snapRec, pre);
    } catch (err) {
      // resumeRead releases a lease it took; one it never reached is let go here.
      if (!pre?.taken) dropAgent();
      throw err;
    }
  }

  private async resumeRead(
    runId: string,
    how: Parameters<RunService['resume']>[1],
    rec: Versioned<RunRecord> | null,
    snapRec: Versioned<SnapshotValue> | null,
    pre: ResumePrefetch | undefined,
  ): Promise<StartedRun> {
    if (!rec) throw notFound('run', runId);
    const r = rec.value;
    if (TERMINAL_RUN_STATUSES.has(r.status)) throw conflict(`run ${runId} already ended (${r.status})`);
    if (WAITING_RUN_STATUSES.has(r.status) && !r.decided_at) throw conflict(`run ${runId} is still waiting for a person (${r.status})`);
    // `ownerDead` (start-up sweep on the single-process embedded store): the owner's lease may not
    // have lapsed yet, but its process is gone. Without it, a SIGKILLed run waited out its whole
    // lease (60 s) and was then left `running` until the next periodic sweep (found by
    // test/http/recovery.test.ts, scenario a).
    if (r.status === 'running' && r.owner && !how.ownerDead && !this.leaseLapsed(r) && r.owner !== this.deps.workerId)
      throw conflict(`run ${runId} is live in ${r.owner}`);
    if (!snapRec) throw conflict(`run ${runId} has no saved snapshot to resume from`);
    // A snapshot from a newer run machine (a rolling upgrade's other half, or a downgrade) is left
    // as it is for a server that knows it: restored here it would be misread. Older versions
    // restore (test/runtime/snapshot-fixtures.test.ts keeps one of each paused state).
    const snapVersion = snapRec.value.machine_version ?? 1;
    if (snapVersion > RUN_MACHINE_VERSION) {
      throw conflict(
        `run ${runId} was saved by a newer agentd (run machine v${snapVersion}; this server knows up to v${RUN_MACHINE_VERSION}); resume it on an upgraded server`,
      );
    }
    // Stopped on request (POST /runs/{id}/interrupt), not by a shutdown: resuming it is no recovery.
    const requested = r.status === 'interrupted' && r.machine_state === 'interrupted';
    const recovering = !requested && (how.cause === 'recovered_after_lapsed_lease' || how.cause === 'interrupted');
    if (recovering && r.recoveries >= this.deps.settings.sweep.max_recoveries) {
      await this.deps.store.updateRecord<RunRecord>(
        'runs',
        runId,
        {
          ...r,
          status: 'failed',
          termination_reason: 'internal_error',
          owner: null,
          lease_expires_at: null,
          error: { type: 'TooManyRecoveries', message: `the run was recovered ${r.recoveries} times and kept dying; giving up` },
          ended_at: iso(this.deps.clock.now()),
          updated_at: iso(this.deps.clock.now()),
        },
        rec.version,
        runIndexes({ ...r, status: 'failed' }),
      );
      await this.deps.ledger.releaseRun(runId).catch(() => 0);
      throw conflict(`run ${runId} was recovered too many times and is now failed`);
    }
    const releaseSlot = how.slot ?? (r.kind === 'background' ? () => {} : await this.slots.acquire());
    let agent: AgentLease | null = null;
    try {
      if (pre) pre.taken = true; // from here, the catch below releases the lease
      agent = await (pre?.agent ?? this.acquireAgent(r.agent_id, { resuming: true }));
      const now = this.deps.clock.now();
      const trace_id = newId('trace');
      const claimed: RunRecord = {
        ...r,
        status: 'running',
        owner: this.deps.workerId,
        attempt: r.attempt + 1,
        trace_id,
        trace_ids: [...r.trace_ids, trace_id],
        heartbeat_at: iso(now),
        lease_expires_at: iso(now + this.deps.settings.lease_seconds * 1000),
        recoveries: recovering ? r.recoveries + 1 : r.recoveries,
        updated_at: iso(now),
      };
      // The claim, the new trace segment and the end of the previous one: one commit. The claim's
      // CAS is what makes this process the only owner, so the old segment needs no check of its own.
      const trace = this.traceValue(claimed, r.trace_id, 'running');
      const prevTrace = await (pre?.prevTrace ?? this.deps.store.getRecord<TraceValue>('traces', r.trace_id));
      const [written] = await this.deps.store.commit([
        { op: 'update', kind: 'runs', id: runId, value: claimed, expectedVersion: rec.version, indexes: runIndexes(claimed) },
        { op: 'create', kind: 'traces', id: trace_id, value: trace, indexes: { run_id: runId, session_id: r.session_id, task_id: r.task_id } },
        ...(prevTrace
          ? [
              {
                op: 'update' as const,
                kind: 'traces' as const,
                id: r.trace_id,
                expectedVersion: null,
                value: { ...prevTrace.value, status: r.status === 'running' || r.status === 'interrupted' ? 'failed' : 'suspended', ended_at: iso(now) },
              },
            ]
          : []),
      ]);
      const snapshot = snapRec.value.snapshot as Snapshot<unknown> & { value?: string };
      const state = String(snapshot.value ?? '');
      // Holds of the dead attempt are released, except those guarding the very call that is about to be replayed.
      if (state !== 'calling' && state !== 'executing') await this.deps.ledger.releaseRun(runId).catch(() => 0);
      // decideBudget saves the grant on the run, then adds it to the ledger: a death in between
      // lost the grant, and the resumed run asked for the same budget again (test/http/
      // recovery.test.ts, "decisions survive ..."). Applying it again is a no-op when it landed
      // (the ledger remembers grant ids).
      const req = r.budget_request;
      if (req?.status === 'granted' && req.amount) {
        // A budget removed from the config since: nothing to add to; the run simply asks again.
        await this.deps.ledger.grant(req.key, req.meter as never, req.amount, { grant_id: req.request_id }).catch(() => undefined);
      }
      this.deps.metrics.liveRuns.inc();
      const held = agent;
      agent = null; // the live run lets go of it when it retires
      const live = this.makeLive(
        written as Versioned<RunRecord>,
        releaseSlot,
        held,
        { workspace_path: snapRec.value.workspace_path, kind: r.kind, task_id: r.task_id, agent_id: r.agent_id },
        trace,
      );
      const lastBeat = r.heartbeat_at ? Date.parse(r.heartbeat_at) : now;
      void this.emit(live, {
        event_type: 'run_resumed',
        actor: { type: 'system', id: this.deps.workerId },
        span_id: live.rootSpan,
        metadata: {
          cause: how.cause,
          trigger: how.trigger,
          previous_trace_id: r.trace_id,
          agent_name: r.agent_name,
          ...(requested ? { interrupted_by: 'request' } : {}),
          ...(recovering ? { previous_owner: r.owner, lease_expired_at: r.lease_expires_at, orphaned_seconds: Math.max(0, (now - lastBeat) / 1000) } : {}),
          ...(r.decided_at ? { decision: r.decision, decided_at: r.decided_at } : {}),
          ...(how.extra ?? {}),
        },
      });
      // Steer messages an earlier process accepted wait in the inbox: the boundary must read it.
      this.inbox.mark(runId);
      let resumeEvent: RunEvent | undefined;
      if (state === 'interrupted') resumeEvent = { type: 'RESUME' };
      else if (r.status === 'awaiting_approval') resumeEvent = { type: 'APPROVALS_DECIDED', approvals: this.currentBatch(r) };
      else if (r.status === 'awaiting_budget' && r.budget_request) {
        resumeEvent = { type: r.budget_request.status === 'granted' ? 'BUDGET_GRANTED' : 'BUDGET_DENIED', request: r.budget_request };
      } else if (state === 'awaitingApproval' && !this.currentBatch(r).some((a) => a.status === 'pending')) {
        // A resume claimed this decided run (record `running`) and its process died before the
        // actor saved again, so the snapshot still waits. Restored without the decision, the
        // actor parked again and its stale context reverted the approvals to `pending`: the
        // person's decision was lost (found by the crash harness, test/crash/harness.ts).
        resumeEvent = { type: 'APPROVALS_DECIDED', approvals: this.currentBatch(r) };
      } else if (state === 'awaitingBudget' && r.budget_request && r.budget_request.status !== 'pending') {
        resumeEvent = { type: r.budget_request.status === 'granted' ? 'BUDGET_GRANTED' : 'BUDGET_DENIED', request: r.budget_request };
      }
      this.spawnActor(live, { snapshot }, resumeEvent);
      return { run_id: runId, session_id: r.session_id, trace_id, settled: live.settled };
    } catch (err) {
      releaseSlot();
      agent?.release();
      if (isStoreError(err, 'stale_version')) throw conflict(`run ${runId} was taken by another process`);
      throw err;
    }
  }

  /** The approvals of the batch the run paused on (older batches are already used/denied). */
  private currentBatch(r: RunRecord): ApprovalState[] {
    const snapApprovals = r.approvals.filter((a) => a.status !== 'used');
    return snapApprovals.map((a) => (a.status === 'pending' && Date.parse(a.expires_at) <= this.deps.clock.now() ? { ...a, status: 'expired' as const } : a));
  }

  private leaseLapsed(r: RunRecord): boolean {
    return !r.lease_expires_at || Date.parse(r.lease_expires_at) <= this.deps.clock.now();
  }

  /**
   * One orphan sweep (decisions.md §6.2): runs whose lease lapsed, runs interrupted by a graceful
   * shutdown, and decided runs nobody resumed. It only finds them and queues them; recoverQueued
   * admits them through the recovery lane of the slots, at most `orphan_sweep.max_concurrent` live
   * at once, so new runs keep the rest of `max_concurrent_runs` (docs/operations.md, "Shutdown and
   * restarts"). Returns the ids it queued.
   * With `startup`, every `running` run is dead (only one process can open the embedded store).
   */
  async sweep(opts: { startup?: boolean } = {}): Promise<string[]> {
    const { store, settings, clock } = this.deps;
    // `orphan_sweep.enabled: false` means no automatic recovery at all, start-up included: runs
    // stay where they are until POST /runs/{id}/resume (docs/configuration.md). Before this check
    // the start-up sweep resumed them anyway (test/http/recovery.test.ts, explicit resume).
    if (!settings.sweep.enabled || this.closing) return [];
    const now = clock.now();
    const queued: string[] = [];
    const add = (c: RecoveryCandidate): boolean => {
      if (this.recovering.has(c.id)) return true;
      // Bounded: what does not fit is still stored as it was, and the next sweep finds it.
      if (this.recoveryQueue.length >= MAX_RECOVERY_QUEUE) return false;
      this.recovering.add(c.id);
      this.recoveryQueue.push(c);
      queued.push(c.id);
      return true;
    };
    // Live and interrupted runs by status; decided waiting runs by their own small index.
    const scans = [
      { name: 'status', value: 'running' },
      { name: 'status', value: 'interrupted' },
      { name: 'resumable', value: 'decided' },
    ];
    scan: for (const index of scans) {
      const status = index.name === 'status' ? index.value : 'decided';
      let cursor: string | null = null;
      do {
        const page: { items: Versioned<RunRecord>[]; next_cursor: string | null } = await store.listRecords<RunRecord>('runs', { index, cursor, limit: 500 });
        for (const { value: r } of page.items) {
          // Background runs are recovered by the background manager, which owns their attempts.
          if (r.kind === 'background') continue;
          if (this.live.has(r.run_id)) continue;
          let cause: RecoveryCause | null = null;
          if (status === 'running') {
            if (opts.startup || this.leaseLapsed(r)) cause = 'recovered_after_lapsed_lease';
          } else if (status === 'interrupted') {
            // Stopped on request: it waits for POST /runs/{id}/resume, like a run waiting for a person.
            if (r.machine_state !== 'interrupted') cause = 'interrupted';
          } else if (r.decided_at && (opts.startup || now - Date.parse(r.decided_at) >= settings.sweep.decided_grace_seconds * 1000)) {
            // At start-up nobody else can be resuming a decided run (the embedded store is
            // single-process): a decision whose resume died with the last process goes on now,
            // not a grace period plus a sweep interval later.
            cause = (r.decision as 'approval' | 'budget_grant' | 'budget_denied') ?? 'approval';
          }
          if (cause && !add({ id: r.run_id, cause, ownerDead: opts.startup === true })) break scan;
        }
        cursor = page.next_cursor;
      } while (cursor);
    }
    if (this.recoveryQueue.length > 0 && !this.recoveryPump) {
      this.recoveryPump = this.recoverQueued().finally(() => (this.recoveryPump = null));
    }
    return queued;
  }

  /**
   * Resumes queued runs one recovery slot at a time. Before, the start-up sweep resumed 16 at once
   * through the same slots as new runs: after a crash with many live runs, recovered runs held all
   * of them and every new run waited 5 s for a 503 (issue 10, finding 12; test/http/shutdown.test.ts).
   * A resume is not awaited: the slot is what limits how many recovered runs are live.
   */
  private async recoverQueued(): Promise<void> {
    while (this.recoveryQueue.length > 0 && !this.closing) {
      let slot: () => void;
      try {
        slot = await this.slots.acquireRecovery();
      } catch {
        return; // shutdown cancelled the wait
      }
      const c = this.recoveryQueue.shift();
      if (!c || this.closing) {
        slot();
        if (c) this.recovering.delete(c.id);
        return;
      }
      void this.resume(c.id, { cause: c.cause, trigger: 'orphan_sweep', ownerDead: c.ownerDead, slot }).then(
        () => {
          this.recovering.delete(c.id);
          this.deps.metrics.recovered('run', c.cause);
        },
        (err) => {
          slot();
          this.recovering.delete(c.id);
          this.deps.log?.('warn', 'sweep could not resume run', { run_id: c.id, err: String(err) });
        },
      );
    }
  }

  startSweeper(): void {
    if (!this.deps.settings.sweep.enabled || this.sweepTimer) return;
    const schedule = () => {
      const base = this.deps.settings.sweep.interval_seconds * 1000;
      // ±25 % jitter so several processes do not sweep in lockstep.
      const delay = base * (0.75 + Math.random() * 0.5);
      this.sweepTimer = setTimeout(async () => {
        await this.sweep().catch((err) => this.deps.log?.('error', 'orphan sweep failed', { err: String(err) }));
        if (!this.closing) schedule();
      }, delay);
      this.sweepTimer.unref();
    };
    schedule();
  }

  /**
   * First step of a graceful shutdown, to call BEFORE the HTTP server closes its connections:
   * refuse new runs, stop sweeping, and let live runs stop at their next step boundary. Idempotent.
   */
  beginShutdown(): void {
    this.closing = true;
    if (this.sweepTimer) clearTimeout(this.sweepTimer);
    // Runs still queued for recovery stay stored as they are; the next start finds them again.
    this.slots.cancelRecovery(new AppError('ServerBusy', 'the service is shutting down', null, { 'retry-after': '5' }));
    for (const c of this.recoveryQueue.splice(0)) this.recovering.delete(c.id);
  }

  /**
   * Graceful shutdown: refuse new runs, give live runs `graceMs` to end on their own, then save
   * the rest as `interrupted` with their leases released; the next start resumes them.
   */
  async shutdown(graceMs: number): Promise<void> {
    this.beginShutdown();
    const pending = [...this.live.values()];
    if (pending.length > 0) {
      await Promise.race([Promise.all(pending.map((l) => l.settled)), new Promise((r) => setTimeout(r, graceMs).unref())]);
    }
    // The grace period is over: every run still inside a step has its tool calls and model call
    // aborted now, all at once, and only then are the runs saved (in parallel). Aborting run by
    // run between their writes gave the last run's tools their signal only after every other
    // run was written (test/http/shutdown.test.ts). `ending` first: whatever the aborted step
    // does next is not persisted over the `interrupted` record.
    const rest = [...this.live.values()];
    for (const live of rest) live.ending = true;
    for (const live of rest) live.abort.abort();
    await Promise.all(
      rest.map(async (live) => {
        try {
          await live.writer.drain();
          await live.writer.update((r) => ({ ...r, status: 'interrupted', owner: null, lease_expires_at: null, updated_at: iso(this.deps.clock.now()) }));
        } catch {
          // fenced: someone else owns it already
        }
        await live.emitChain;
        this.retire(live);
        live.resolve(live.writer.value);
      }),
    );
  }
}

/** Messages each run of a session added (sessions written before `counts` existed: 2 per run). */
function countsOf(v: SessionValue): number[] {
  return v.counts && v.counts.length === v.run_ids.length ? v.counts : v.run_ids.map(() => 2);
}

function mergeById<T, K extends keyof T>(existing: T[], updates: T[], key: K): T[] {
  if (updates.length === 0) return existing;
  const byId = new Map(updates.map((u) => [u[key], u]));
  const merged = existing.map((e) => byId.get(e[key]) ?? e);
  for (const u of updates) if (!existing.some((e) => e[key] === u[key])) merged.push(u);
  return merged;
}

function traceStatusOf(status: RunRecordStatus): string {
  switch (status) {
    case 'completed':
      return 'completed';
    case 'cancelled':
      return 'cancelled';
    case 'timeout':
      return 'timeout';
    case 'awaiting_approval':
    case 'awaiting_budget':
    case 'interrupted':
      return 'suspended';
    default:
      return 'failed';
  }
}

/** Tools that ignore their AbortSignal still must not hold a cancelled run forever. */
function raceAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason ?? new Error('aborted'));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason ?? new Error('aborted'));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}
