// The run service: starts synchronous (and background agent) runs and answers for every run of
// this process. Routes call this class and its two public parts: `decisions` (RunDecisions:
// approvals, budget, steer, interrupt, cancel, outcomes; run-decisions.ts) and `lifecycle`
// (RunLifecycle: start-up recovery, the sweeper, shutdown; run-lifecycle.ts). Its inner parts:
// RunKernel (shared state, run-kernel.ts), RunStarter (a new run, run-start.ts), RunHost (one per
// live run: writer, actor, timers, telemetry; run-host.ts), RunEffects (the machine's effects;
// run-effects.ts, tool calls in run-tools.ts) and RunRecovery (resume, sweep, shutdown;
// run-recovery.ts). The record a snapshot makes is projected in run-projection.ts.
import { inTimeRange, scanPage, type ListOrder } from './list-scan.js';
import { bgIdOf, bgKey, GLOBAL_SCOPE, idOfTenantKey, keyInTenant, sessionKeyOf, tenantKey, visibleIn, type TenantScope } from './tenancy.js';
import { domainError, notFound } from '../errors.js';
import { RunDecisions } from './run-decisions.js';
import { RunEffects } from './run-effects.js';
import { RunKernel, type DeltaListener } from './run-kernel.js';
import { RunFlow } from './run-flow.js';
import { RunLifecycle } from './run-lifecycle.js';
import { RunStarter } from './run-start.js';
import type { ConcurrencyRequest } from '../../machines/policies/flow.js';
import type { CarriedWrite } from './persistence.js';
import type { RunRecord, RunRecordStatus } from './run-record.js';
import { RunRecovery, type ResumeHow } from './run-recovery.js';
import type { RunServiceDeps, SessionValue, StartOptions, StartedRun } from './run-types.js';
import { repos } from '../store/repos/index.js';
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
  private readonly flow: RunFlow;
  private readonly starter: RunStarter;
  /**
   * Approvals, budget decisions, steer, interrupt, outcomes (run-decisions.ts): the routes call
   * them there, this class does not repeat them.
   */
  readonly decisions: RunDecisions;
  /** Start-up recovery, the orphan sweeper and graceful shutdown (run-lifecycle.ts). */
  readonly lifecycle: RunLifecycle;
  private readonly recovery: RunRecovery;

  constructor(deps: RunServiceDeps) {
    this.kernel = new RunKernel(deps);
    this.kernel.logic = new RunEffects(this.kernel).bind();
    this.recovery = new RunRecovery(this.kernel);
    this.decisions = new RunDecisions(this.kernel, this.recovery);
    this.starter = new RunStarter(this.kernel, this.decisions);
    this.flow = new RunFlow(this.kernel, (query, sessionId, opts, heldKey) => this.starter.start(query, sessionId, opts, heldKey));
    this.kernel.waitingRuns = this.flow;
    this.lifecycle = new RunLifecycle(this.kernel, this.recovery, this.flow);
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
    if (opts.concurrency && !opts.queued) return this.flow.startKeyed(query, sessionId, opts, opts.concurrency);
    return this.starter.start(query, sessionId, opts);
  }

  // ---------------------------------------------------------------- reads

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
    return this.flow.queue.slots.take(key, Number.MAX_SAFE_INTEGER, runId, this.kernel.deps.clock.now());
  }

  /** Lets go of a key's slot taken with takeKeySlot, and hands it on. */
  releaseKeySlot(key: string, runId: string, tenant: string | null): Promise<void> {
    return this.flow.release(keyInTenant({ key }, tenant).key, runId);
  }

  /**
   * The run, when `scope` may see it: another tenant's run is not found, exactly as a run that
   * does not exist (docs/multi-tenant.md).
   */
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
    const repo = repos(this.kernel.deps.store).runs;
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

  async history(sessionId: string, q: { limit: number; cursor?: string }, tenant: string | null = null) {
    const rec = await repos(this.kernel.deps.store).sessions.get<SessionValue>(tenantKey(tenant, sessionId));
    if (!rec) throw notFound('session', sessionId);
    const all = rec.value.messages;
    const { items: messages, next_cursor } = pageOf(all, q);
    return { session_id: sessionId, messages, count: messages.length, total: all.length, next_cursor };
  }

  async clearSession(sessionId: string, tenant: string | null = null) {
    const key = tenantKey(tenant, sessionId);
    const rec = await repos(this.kernel.deps.store).sessions.get<SessionValue>(key);
    if (!rec) throw notFound('session', sessionId);
    await repos(this.kernel.deps.store).sessions.delete(key);
    return { status: 'cleared' as const, session_id: sessionId };
  }

  // ---------------------------------------------------------------- decisions (run-decisions.ts)

  cancel(runId: string, opts: { onlyIfLive?: boolean; direct?: boolean } = {}): Promise<{ status: 'cancel_requested'; run_id: string }> {
    return this.decisions.cancel(runId, opts);
  }

  // ---------------------------------------------------------------- recovery and shutdown (run-recovery.ts)

  /**
   * Takes ownership of a run that no live actor holds and continues it from its snapshot.
   * Ownership is a CAS on the record: of two processes racing, exactly one wins.
   */
  resume(runId: string, how: ResumeHow): Promise<StartedRun> {
    return this.recovery.resume(runId, how);
  }
}
