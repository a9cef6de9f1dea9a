// The run service: starts synchronous (and background agent) runs and answers for every run of
// this process. Routes call only this class. Its parts: RunKernel (shared state, run-kernel.ts),
// RunHost (one per live run: writer, actor, timers, telemetry; run-host.ts), RunEffects (the
// machine's effects; run-effects.ts, tool calls in run-tools.ts), RunDecisions (approvals, budget,
// steer, interrupt, cancel, outcomes; run-decisions.ts) and RunRecovery (resume, sweep, shutdown;
// run-recovery.ts). The record a snapshot makes is projected in run-projection.ts.
import { inTimeRange, scanPage, type ListOrder } from './list-scan.js';
import { bgIdOf, bgKey, bgTenantOf, GLOBAL_SCOPE, idOfTenantKey, keyInTenant, sessionKeyOf, tenantKey, visibleIn, type TenantScope } from './tenancy.js';
import type { ChatMessage } from '../agent/model/types.js';
import { domainError, notFound } from '../errors.js';
import { newId } from '../ids.js';
import { isSharedStore } from '../store/changes.js';
import type { AgentLease } from '../agent/agent-profile.js';
import { RunDecisions } from './run-decisions.js';
import { RunEffects } from './run-effects.js';
import type { RunHost } from './run-host.js';
import type { InboxValue } from './run-inbox.js';
import { RunKernel, type DeltaListener } from './run-kernel.js';
import { RunFlow } from './run-flow.js';
import type { ConcurrencyRequest } from '../../machines/policies/flow.js';
import { busySessionPlan } from '../../machines/policies/busy-session.js';
import type { CarriedWrite } from './persistence.js';
import { originView } from './debug/origin.js';
import { newRunRecord, runIndexes, type OutcomeRecord, type RunRecord, type RunRecordStatus } from './run-record.js';
import { RunRecovery, type ResumeHow } from './run-recovery.js';
import { iso, traceValueOf, type RunServiceDeps, type SessionValue, type StartOptions, type StartedRun } from './run-types.js';
import { repos } from '../store/repos/index.js';
import { isRefusal, reportSwallowed, swallow } from '../telemetry/swallowed.js';
import { pageOf } from '../paging.js';

export type { RunServiceDeps, RunSettings, SessionPolicy, StartOptions, StartedRun } from './run-types.js';

/** GET /runs filters (src/schemas/runs.ts RunsListQuery). */
export interface RunListQuery {
  status?: RunRecordStatus;
  session_id?: string;
  task_id?: string;
  agent_id?: string;
  since?: string;
  until?: string;
  order?: ListOrder;
  limit: number;
  cursor?: string | null;
}

export class RunService {
  private readonly kernel: RunKernel;
  private readonly decisions: RunDecisions;
  private readonly recovery: RunRecovery;
  private readonly flow: RunFlow;

  constructor(deps: RunServiceDeps) {
    this.kernel = new RunKernel(deps);
    this.kernel.logic = new RunEffects(this.kernel).bind();
    this.recovery = new RunRecovery(this.kernel);
    this.decisions = new RunDecisions(this.kernel, this.recovery);
    this.flow = new RunFlow(this.kernel, (query, sessionId, opts) => this.startAdmitted(query, sessionId, opts));
    this.kernel.waitingRuns = this.flow;
  }

  private get deps(): RunServiceDeps {
    return this.kernel.deps;
  }

  /** Steer messages and interrupt requests (src/runtime/run-inbox.ts). */
  get inbox() {
    return this.kernel.inbox;
  }

  get liveCount(): number {
    return this.kernel.live.size;
  }

  /** True once a graceful shutdown began: no new runs, /ready answers `ready: false`. */
  get shuttingDown(): boolean {
    return this.kernel.closing;
  }

  /**
   * Called whenever a run ends or parks for a person, whoever started or resumed it (the
   * background manager follows its agent runs this way). Listeners must not throw.
   */
  onSettled(listener: (record: RunRecord) => void): () => void {
    return this.kernel.onSettled(listener);
  }

  /**
   * A background agent run that completes asks `fold` (the background manager) for writes to
   * carry in its final commit: its background run's completion, so both are one atomic write
   * (only on a store with capabilities.atomicCommitEvents; null: nothing folded). Must not throw.
   */
  foldFinal(fold: ((record: RunRecord) => CarriedWrite | null) | null): void {
    this.kernel.finalFold = fold;
  }

  /**
   * A decision that lets a parked background agent run go on asks `through` (the background
   * manager) for the write that moves its background run on (RESUME), carried in the decision's
   * commit; the agent run is then continued by its background run, under that run's lease, not
   * by the decision. `through` answers null when there is no background run to go through (the
   * decision then resumes the agent run itself) and throws a `stale_version` store error while
   * the background run has not parked yet (the decision is read and tried again).
   */
  resumeThrough(through: ((agentRunId: string) => Promise<CarriedWrite | null>) | null): void {
    this.kernel.resumeThrough = through;
  }

  /**
   * A cancel of a parked background agent run through the run API asks `through` (the background
   * manager) for the write that cancels its background run too, carried in the cancel's commit.
   * Null: no background run to go through (the cancel is written alone).
   */
  cancelThrough(through: ((agentRunId: string) => Promise<CarriedWrite | null>) | null): void {
    this.kernel.cancelThrough = through;
  }

  /**
   * A cancel of a running background agent run asks `cancel` (the background manager) to cancel
   * its background run instead, whose actor stops its child; `cancel` answers false when there is
   * no background run to go through (the agent run is then cancelled as a run of its own).
   */
  cancelRunning(cancel: ((agentRunId: string) => Promise<boolean>) | null): void {
    this.kernel.cancelRunning = cancel;
  }

  /**
   * Set by the cluster link on a store several instances share: asks the owner of a run live in
   * another instance to cancel it (src/runtime/cluster.ts). Unset: such a cancel is a 409.
   */
  get remoteCancel(): ((runId: string) => Promise<void>) | null {
    return this.decisions.remoteCancel;
  }

  set remoteCancel(fn: ((runId: string) => Promise<void>) | null) {
    this.decisions.remoteCancel = fn;
  }

  /** A cancel another instance relayed here: only a run live in this process is touched. */
  cancelIfLive(runId: string): boolean {
    const live = this.kernel.live.get(runId);
    if (!live?.ref || live.ending) return false;
    live.ref.send({ type: 'CANCEL' });
    return true;
  }

  /** True when this process hosts a live actor for the run. */
  isLive(runId: string): boolean {
    return this.kernel.live.has(runId);
  }

  /**
   * The text deltas of run `runId` while this process hosts it, from now on, whichever of its
   * segments (a resume after a decision included) streams them; a run hosted by another instance
   * gives none here. Returns the unsubscribe. Listeners must not throw.
   */
  followDeltas(runId: string, listener: DeltaListener): () => void {
    return this.kernel.followDeltas(runId, listener);
  }

  /** Resolves when a run live in this process ends or waits for a person (never rejects); null when it is not live here. */
  settledOf(runId: string): Promise<RunRecord> | null {
    return this.kernel.live.get(runId)?.settled ?? null;
  }

  // ---------------------------------------------------------------- starting a run

  async start(query: string, sessionId: string | null | undefined, opts: StartOptions = {}): Promise<StartedRun> {
    if (this.kernel.closing) throw domainError('AGT_ERR_SHUTTING_DOWN', [], { headers: { 'retry-after': '5' } });
    // A concurrency key: its slot first, or a durable wait for one (src/runtime/run-flow.ts). A
    // run without one pays nothing for flow control.
    if (opts.concurrency && !opts.queued) return this.flow.startKeyed(query, sessionId, { ...opts, concurrency: opts.concurrency });
    return this.startAdmitted(query, sessionId, opts);
  }

  /** start() once the run may go: its concurrency key's slot (if it has a key) is held. */
  private async startAdmitted(query: string, sessionId: string | null | undefined, opts: StartOptions): Promise<StartedRun> {
    if (this.kernel.closing) throw domainError('AGT_ERR_SHUTTING_DOWN', [], { headers: { 'retry-after': '5' } });
    // A session with a run in flight in this process: the session policy decides (docs/runs.md,
    // "Busy sessions"). `enqueue` waits in the session's queue, as every run did before.
    const policy = opts.session_policy ?? this.deps.settings.session_policy ?? 'enqueue';
    const tenant = opts.tenant ?? null;
    const busyWith = sessionId && policy !== 'enqueue' ? this.kernel.sessions.holder(tenantKey(tenant, sessionId)) : null;
    const plan = busySessionPlan(policy, busyWith);
    if (plan.refuse) throw domainError('AGT_ERR_SESSION_BUSY', [String(sessionId), String(busyWith)], { detail: 'session_busy' });
    const releaseSlot = opts.slot ?? (opts.admitted ? () => {} : await this.kernel.slots.acquire({ priority: opts.priority }));
    let live: RunHost | null = null;
    let agent: AgentLease | null = null;
    /** Set when start() fails: a shared store's late onAccepted must not open a stream for it. */
    let failed = false;
    try {
      // A tenant's run names its own registered agent of that id first, else the shared one
      // (src/background/tenancy.ts); a run without a tenant or an agent reads nothing more.
      const agentId = opts.agent_id ? await this.agentKeyIn(tenant, opts.agent_id) : opts.agent_id;
      agent = await this.kernel.acquireAgent(agentId, { model: opts.origin?.replay_of?.variant.model });
      const profile = agent.profile;
      const { clock, settings } = this.deps;
      const session_id = sessionId ?? newId('session');
      // Where the session is stored and queued: its id in the run's tenant (src/runtime/tenancy.ts).
      const session_key = tenantKey(tenant, session_id);
      const run_id = opts.run_id ?? newId('run');
      const queued = opts.queued?.value;
      const trace_id = queued?.trace_id ?? newId('trace');
      const now = iso(clock.now());
      const created = newRunRecord({
        run_id,
        session_id,
        tenant,
        metadata: opts.metadata,
        agent_name: profile.agent_name,
        agent_id: agentId ?? settings.agent_id,
        kind: opts.kind ?? 'sync',
        task_id: opts.task_id ?? null,
        query,
        trace_id,
        now,
        lease_seconds: settings.lease_seconds,
        lease_expires_at: this.deps.leases.expiresAt(settings.lease_seconds * 1000),
        owner: this.deps.workerId,
      });
      // A run with a concurrency key carries it (its end lets go of the slot); one that waited
      // `queued` keeps when it was made and what it waited on.
      const record = opts.concurrency
        ? {
            ...created,
            concurrency: opts.concurrency,
            priority: opts.priority ?? 0,
            ...(queued ? { created_at: queued.created_at, queue: queued.queue ?? null } : {}),
          }
        : created;
      // The run's writer creates the run and its first trace segment in one commit, handed to the
      // store now. The actor starts without waiting for it: whatever the run does before the store
      // takes that commit is folded into it (a zero-latency model's whole run can be one batch),
      // and later writes queue behind it. start() returns only once the run exists, so a client
      // that is told the run id can always read the run.
      const trace = traceValueOf(record, null, 'running', clock.now());
      const traceIndexes = { run_id, session_id: session_key, task_id: record.task_id };
      // What the run's first store round will read (all new, so in no cache): read it meanwhile.
      // Ids made up just now are new (no read at all): the trace's always, the session's when the
      // caller named none, the run's when made here or so marked (a background run reuses its id
      // and relies on the create's conflict to find an agent run that already started).
      const newRun = opts.run_id === undefined || opts.run_id_is_new === true;
      const newSession = !sessionId;
      this.deps.store.prefetch?.([
        { kind: repos(this.deps.store).runs.kind, id: run_id, indexes: runIndexes(record), ...(newRun ? { fresh: newSession ? ['session_id'] : [] } : {}) },
        {
          kind: repos(this.deps.store).traces.kind,
          id: trace_id,
          indexes: traceIndexes,
          fresh: newRun ? (newSession ? ['run_id', 'session_id'] : ['run_id']) : [],
        },
        { kind: repos(this.deps.store).snapshots.kind, id: run_id, ...(newRun ? { fresh: [] } : {}) },
        { kind: repos(this.deps.store).sessions.kind, id: session_key, ...(newSession ? { fresh: [] } : {}) },
      ]);
      const workspace_path = opts.workspace_path ?? this.kernel.sessionWorkspace(session_key, profile.session_workspace_root);
      this.deps.metrics.liveRuns.inc();
      live = this.kernel.host({ id: run_id, version: 0, seq: 0, value: record }, releaseSlot, agent, { ...opts, workspace_path }, trace, [
        { op: 'create', kind: repos(this.deps.store).traces.kind, id: trace_id, value: trace, indexes: traceIndexes },
      ]);
      void live.emit({
        event_type: 'user_message',
        actor: { type: 'user', id: session_id },
        input: opts.context ? { query, context: opts.context } : { query },
        span_id: live.rootSpan,
        // the trace's gen_ai.agent.name; a fork's or replay's origin (src/runtime/debug/origin.ts)
        metadata: { agent_name: record.agent_name, ...originView(opts.origin) },
      });
      // On a store other processes share, another instance may be asked for the run: the id goes
      // out only once the run is stored, as a client could read it anywhere. Its create is issued
      // already (no fold there), so that is one store round, not the session's turn: a run queued
      // behind a busy session is told at once (its frame waited for the run before it to end).
      const shared = isSharedStore(this.deps.store);
      if (!shared) opts.onAccepted?.({ run_id, session_id });
      else
        void live.writer.created?.then(
          () => {
            // start() failed first (its caller already answered with the error): nothing was accepted.
            if (failed) return;
            try {
              opts.onAccepted?.({ run_id, session_id });
            } catch (err) {
              reportSwallowed('runs.on_accepted', err, { run_id }); // a callback's fault must not become an unhandled rejection
            }
          },
          () => undefined, // start() rejects with it below
        );
      // `interrupt`: the run in flight stops at its next step boundary; `rollback`: it is cancelled.
      // Either way it then lets go of the session, and this run (queued behind it) goes next.
      if (busyWith && plan.stop === 'interrupt') {
        // A run that just started may not be stored yet: its record is what the request checks.
        const busyLive = this.kernel.live.get(busyWith);
        busyLive?.writer.flush();
        await busyLive?.writer.created?.catch(() => undefined); // its own failure is reported by that run
        await this.interrupt(busyWith, { by: `run:${run_id}` }).catch(swallow('runs.session_interrupt', { run_id: busyWith, by: run_id }, isRefusal));
      }
      if (busyWith && plan.stop === 'cancel')
        await this.cancel(busyWith).catch(swallow('runs.session_rollback_cancel', { run_id: busyWith, by: run_id }, isRefusal));
      // Our turn in the session, then the conversation the runs before us left (a session id we
      // just made up has none: no read).
      await this.kernel.sessions.acquire(session_key, run_id);
      let history = sessionId ? await repos(this.deps.store).sessions.get<SessionValue>(session_key) : null;
      let carried: ChatMessage[] = [];
      // The turn taken back out: the run this one cancelled (`rollback`), or the one it replaces
      // (a regenerated answer: StartOptions.replaces_run_id).
      const rolledBack = busyWith && plan.history === 'roll_back' ? busyWith : (opts.replaces_run_id ?? null);
      if (rolledBack) history = await this.kernel.history.rollbackTurn(session_key, rolledBack, history);
      if (busyWith && plan.history === 'carry_over') {
        const c = await this.kernel.history.carryOver(busyWith);
        carried = c.messages;
        live.prelude = c.prelude;
      }
      live.session = history;
      // A fork's or replay's new session starts with the conversation before its turn (user and assistant text).
      if (opts.conversation) live.prelude = seedPrelude(opts.conversation, (t) => this.deps.telemetry.redactText(t));
      if (!history && opts.history) live.callerInput = opts.history.filter((m) => m.role !== 'assistant').map((m) => m.content);
      live.sessionPrivate = newSession || opts.session_is_private === true;
      const system = opts.system_instruction !== undefined ? opts.system_instruction : profile.system_instruction;
      const messages: ChatMessage[] = opts.conversation
        ? [...(system ? [{ role: 'system' as const, content: system }] : []), ...opts.conversation]
        : [
            ...(profile.system_instruction ? [{ role: 'system' as const, content: profile.system_instruction }] : []),
            ...(history?.value.messages ?? opts.history ?? []),
            ...carried,
            ...(opts.context ? [{ role: 'system' as const, content: opts.context }] : []),
            { role: 'user', content: query },
          ];
      // A fork's or replay's conversation (StartOptions.conversation): its turn starts at its last user message.
      const history_length = opts.conversation ? Math.max(0, messages.map((m) => m.role).lastIndexOf('user')) : messages.length - 1;
      live.spawn({
        input: { run_id, session_id, agent_name: profile.agent_name, max_steps: profile.max_steps, messages, query, history_length },
      });
      await live.writer.created; // (on a shared store, onAccepted was called just before this resumes)
      this.deps.metrics.runStarted();
      return { run_id, session_id, trace_id, settled: live.settled };
    } catch (err) {
      failed = true;
      if (live) {
        // Never created (or its session could not be read): stop whatever started, let go of
        // the slot and the session.
        live.discard();
      } else {
        releaseSlot();
        agent?.release();
      }
      throw err;
    }
  }

  // ---------------------------------------------------------------- reads

  /**
   * The run, when `scope` may see it: another tenant's run is not found, exactly as a run that
   * does not exist (docs/multi-tenant.md).
   */
  /**
   * A slot of a concurrency key for a background run, now or not at all (the claimer leaves the run
   * queued and tries again: src/background/task-keys.ts). It counts against the same limit as the
   * runs of POST /run naming the key; a config rule wins over `request.limit`.
   */
  takeKeySlot(request: ConcurrencyRequest, runId: string, tenant: string | null): Promise<boolean> {
    const { key, limit } = keyInTenant(this.flow.resolve(request), tenant);
    return this.flow.queue.tryTake(key, limit, runId);
  }

  /**
   * The slot of a background run that held it when its process died and is recovered running
   * (src/background/claimer.ts, maintenance): taken again with no limit check, as it held it
   * before. On an embedded store the holders live in memory and were lost with the process; on a
   * shared store its holder entry is still there and this is a read.
   */
  retakeKeySlot(request: ConcurrencyRequest, runId: string, tenant: string | null): Promise<boolean> {
    const { key } = keyInTenant(this.flow.resolve(request), tenant);
    return this.flow.queue.slots.take(key, Number.MAX_SAFE_INTEGER, runId, this.deps.clock.now());
  }

  /** Lets go of a key's slot taken with takeKeySlot, and hands it on. */
  releaseKeySlot(key: string, runId: string, tenant: string | null): Promise<void> {
    return this.flow.release(keyInTenant({ key }, tenant).key, runId);
  }

  async get(runId: string, scope: TenantScope = GLOBAL_SCOPE): Promise<RunRecord> {
    const r = await this.kernel.get(runId);
    if (!visibleIn(scope, r.tenant)) throw notFound('run', runId);
    return r;
  }

  /** `queue` of the run view: while the run waits `queued`, its key and 1-based place (docs/contract.md §3.4); else null. */
  async queueOf(record: RunRecord): Promise<{ key: string; position: number } | null> {
    if (record.status !== 'queued' || !record.queue) return null;
    const position = (await this.flow.position(record)) ?? 1;
    return { key: idOfTenantKey(record.queue.key), position };
  }

  /**
   * GET /runs (docs/contract.md §1): one indexed filter picks the store list (the most selective
   * given: session, task, status); the others, agent and time range are applied while reading
   * (list-scan.ts). `total` counts what the indexed filter selects: with several filters it is an
   * upper bound.
   */
  async list(q: RunListQuery, scope: TenantScope = GLOBAL_SCOPE) {
    // A tenant's session ids are keys in its namespace; without a more selective filter its lists
    // walk its own indexes (tenant, tenant_status), so pages and totals never count another
    // tenant's runs. Other filters (agent, time range, a second indexed one) apply while reading.
    const sessionKey = q.session_id === undefined ? undefined : tenantKey(scope.tenant, q.session_id);
    // Likewise a task id (a background task's key, src/background/tenancy.ts).
    const taskKey = q.task_id ? bgKey(scope.tenant, q.task_id) : undefined;
    const index =
      sessionKey !== undefined
        ? { name: 'session_id', value: sessionKey }
        : taskKey
          ? { name: 'task_id', value: taskKey }
          : q.status
            ? scope.all
              ? { name: 'status', value: q.status }
              : { name: 'tenant_status', value: `${scope.tenant ?? ''}\u001f${q.status}` }
            : scope.all
              ? undefined
              : { name: 'tenant', value: scope.tenant ?? '' };
    const rest = (r: RunRecord): boolean =>
      visibleIn(scope, r.tenant) &&
      (!q.status || r.status === q.status) &&
      (sessionKey === undefined || sessionKeyOf(r) === sessionKey) &&
      (!taskKey || r.task_id === taskKey) &&
      (!q.agent_id || r.agent_id === q.agent_id || bgIdOf(r.agent_id) === q.agent_id) &&
      inTimeRange(r.created_at, q);
    // The index alone answers when it covers the one filter given (a tenant's session key, its
    // tenant_status and tenant indexes are its own); task_id is not kept per tenant.
    const given = [q.session_id, q.task_id, q.status, q.agent_id, q.since, q.until].filter(Boolean).length;
    const fromFilter = index !== undefined && index.name !== 'tenant';
    const filtered = given > (fromFilter ? 1 : 0) || (index?.name === 'task_id' && !scope.all);
    const repo = repos(this.deps.store).runs;
    const page = await scanPage<RunRecord>((lq) => repo.list<RunRecord>(lq), {
      index,
      cursor: q.cursor,
      limit: q.limit,
      order: q.order ?? 'asc',
      match: filtered ? rest : null,
    });
    const total = await repo.count(index);
    return { runs: page.items, total, next_cursor: page.next_cursor };
  }

  /**
   * The stored key of agent `agentId` for a run of `tenant`: the tenant's own agent, else the
   * shared one. A key already naming a tenant (a background attempt's) is taken only for that
   * tenant: an id no schema checked (A2A metadata) never reaches another tenant's agent.
   */
  private async agentKeyIn(tenant: string | null, agentId: string): Promise<string> {
    const owner = bgTenantOf(agentId);
    if (owner !== null) {
      if (owner !== tenant) throw notFound('agent', agentId);
      return agentId;
    }
    if (!tenant) return agentId;
    const own = bgKey(tenant, agentId);
    return (await repos(this.deps.store).bgAgents.get(own)) ? own : agentId;
  }

  async history(sessionId: string, q: { limit: number; cursor?: string }, tenant: string | null = null) {
    const rec = await repos(this.deps.store).sessions.get<SessionValue>(tenantKey(tenant, sessionId));
    if (!rec) throw notFound('session', sessionId);
    const all = rec.value.messages;
    const { items: messages, next_cursor } = pageOf(all, q);
    return { session_id: sessionId, messages, count: messages.length, total: all.length, next_cursor };
  }

  async clearSession(sessionId: string, tenant: string | null = null) {
    const key = tenantKey(tenant, sessionId);
    const rec = await repos(this.deps.store).sessions.get<SessionValue>(key);
    if (!rec) throw notFound('session', sessionId);
    await repos(this.deps.store).sessions.delete(key);
    return { status: 'cleared' as const, session_id: sessionId };
  }

  // ---------------------------------------------------------------- decisions (run-decisions.ts)

  cancel(runId: string, opts: { onlyIfLive?: boolean; direct?: boolean } = {}): Promise<{ status: 'cancel_requested'; run_id: string }> {
    return this.decisions.cancel(runId, opts);
  }

  steer(runId: string, body: { message: string; sender: string }): ReturnType<RunDecisions['steer']> {
    return this.decisions.steer(runId, body);
  }

  interrupt(runId: string, opts: { by?: string | null } = {}): ReturnType<RunDecisions['interrupt']> {
    return this.decisions.interrupt(runId, opts);
  }

  inboxOf(runId: string): Promise<InboxValue> {
    return this.decisions.inboxOf(runId);
  }

  decideApproval(
    runId: string,
    approvalId: string,
    body: Parameters<RunDecisions['decideApproval']>[2],
    decider: Parameters<RunDecisions['decideApproval']>[3] = null,
  ): ReturnType<RunDecisions['decideApproval']> {
    return this.decisions.decideApproval(runId, approvalId, body, decider);
  }

  budgetView(runId: string): ReturnType<RunDecisions['budgetView']> {
    return this.decisions.budgetView(runId);
  }

  decideBudget(runId: string, body: Parameters<RunDecisions['decideBudget']>[1]): ReturnType<RunDecisions['decideBudget']> {
    return this.decisions.decideBudget(runId, body);
  }

  recordOutcome(runId: string, body: Parameters<RunDecisions['recordOutcome']>[1]): Promise<OutcomeRecord> {
    return this.decisions.recordOutcome(runId, body);
  }

  // ---------------------------------------------------------------- recovery and shutdown (run-recovery.ts)

  /**
   * Takes ownership of a run that no live actor holds and continues it from its snapshot.
   * Ownership is a CAS on the record: of two processes racing, exactly one wins.
   */
  resume(runId: string, how: ResumeHow): Promise<StartedRun> {
    return this.recovery.resume(runId, how);
  }

  /** One orphan sweep (RunRecovery.sweep); returns the ids it queued for recovery. */
  sweep(opts: { startup?: boolean } = {}): Promise<string[]> {
    // At start-up, runs left `queued` by the last process go back in the queue (run-flow.ts).
    if (opts.startup) void this.flow.recoverQueued(opts).catch((err) => reportSwallowed('flow.recover_queued', err));
    return this.recovery.sweep(opts);
  }

  startSweeper(): void {
    this.recovery.startSweeper();
    if (this.deps.settings.sweep.enabled) this.flow.startBeating(); // a shared store: queued runs of stopped instances are taken over
  }

  /** First step of a graceful shutdown, to call BEFORE the HTTP server closes its connections (RunRecovery.beginShutdown). */
  beginShutdown(): void {
    this.flow.queue.close(); // queued runs stay stored `queued`; the next start (or another instance) queues them again
    this.flow.stopBeating();
    this.recovery.beginShutdown();
  }

  /** Graceful shutdown: live runs get `graceMs` to end, the rest are saved `interrupted` (RunRecovery.shutdown). */
  shutdown(graceMs: number): Promise<void> {
    return this.recovery.shutdown(graceMs);
  }
}

/** The user and assistant text of `conversation` before its last user message: what a seeded session holds. */
function seedPrelude(conversation: ChatMessage[], redact: (text: string) => string): ChatMessage[] {
  const turn = conversation.map((m) => m.role).lastIndexOf('user');
  return conversation
    .slice(0, Math.max(0, turn))
    .filter((m): m is Extract<ChatMessage, { role: 'user' | 'assistant' }> => (m.role === 'user' || m.role === 'assistant') && m.content !== '')
    .map((m) => ({ role: m.role, content: redact(m.content) }));
}
