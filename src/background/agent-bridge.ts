// The agent bridge: the agent run (RunService) of each attempt of a background run. Starts it,
// continues it after a pause, a lapsed lease or a restart, cancels it, stops it for its timeout,
// turns its end (onSettled) into the background run's AGENT_DONE, and hands a person's decision on
// it to the background run (decided: the background run's RESUME in the decision's commit), so
// the agent run goes on only under its background run's lease.
import {
  backgroundRunIdOf,
  type AgentOutcome,
  type BackgroundRunContext,
  type BackgroundRunEvent,
  type SideEffectInfo,
  type StartAgentParams,
} from '../../machines/background-run.machine.js';
import { AppError } from '../errors.js';
import { sideEffectsOf, TERMINAL_RUN_STATUSES, type RunRecord } from '../runtime/run-record.js';
import { AgentUnavailableError } from '../runtime/agent-registry.js';
import type { RunService } from '../runtime/runs.js';
import type { CarriedWrite } from '../runtime/persistence.js';
import type { BackgroundRun, BackgroundRunStatus } from '../schemas/background.js';
import { isStoreError, StoreError, type StoredEvent, type Versioned } from '../store/store.js';
import { WAITING, type BgRunRow } from './types.js';
import { ownSessionId } from './prepare-run.js';
import type { BackgroundDeps, SendResult } from './engine.js';
import type { Handle } from './run-host.js';
import { isRefusal, reportSwallowed } from '../telemetry/swallowed.js';
import { bgTenantOf } from './tenancy.js';

const iso = (ms: number) => new Date(ms).toISOString();
const PREVIEW_CHARS = 500;

/** What the bridge needs of the engine that hosts the runs. */
export interface BridgeHost {
  handleOf(runId: string): Handle | undefined;
  /** The live handle, or one restored from the row; a terminal row comes back as the row; null when there is none. */
  handle(runId: string): Promise<Handle | Versioned<BgRunRow> | null>;
  maybeRelease(h: Handle): void;
  contextOf(h: Handle): BackgroundRunContext;
  enqueue(h: Handle, job: () => Promise<void>, onError: (err: unknown) => void): void;
  send(runId: string, event: BackgroundRunEvent, opts?: { durable?: boolean; known?: Versioned<BgRunRow> }): Promise<SendResult>;
  foldInto(runId: string, event: BackgroundRunEvent, published: (stored: StoredEvent[]) => void, opts?: { anyStore?: boolean }): CarriedWrite | null;
  dirOf(run: BackgroundRun): string;
  closed(): boolean;
}

export class AgentBridge {
  /** Agent runs whose last commit carries their background run's step (foldFinal). */
  private readonly folded = new Set<string>();

  constructor(
    private readonly deps: BackgroundDeps,
    private readonly host: BridgeHost,
  ) {}

  /**
   * timeout_seconds reached: the agent run's actor gets TIMEOUT (status `timeout`). When it has no
   * actor here (still queued behind its session), it is cancelled and that cancellation reads as
   * the timeout.
   */
  async timeoutAgent(h: Handle, agentRunId: string): Promise<void> {
    const ctx = this.host.contextOf(h);
    if (ctx.run.status !== 'running' || ctx.internal.agent_run_id !== agentRunId) return;
    h.timedOut = agentRunId;
    const ref = this.deps.system.get(`run:${agentRunId}`);
    if (ref) {
      ref.send({ type: 'TIMEOUT' });
      return;
    }
    try {
      await this.deps.runs.cancel(agentRunId);
    } catch {
      this.deliver(h.id, {
        type: 'AGENT_DONE',
        at: iso(this.deps.clock.now()),
        agent_run_id: agentRunId,
        outcome: 'timeout',
        error: `timed out after ${ctx.internal.timeout_seconds} s`,
        result_preview: null,
        retryable: true,
        side_effects: [],
      });
    }
  }

  onStartAgent(runId: string, params: StartAgentParams): void {
    const h = this.host.handleOf(runId);
    if (!h) return;
    this.host.enqueue(
      h,
      () => this.startAgent(h, params),
      (err) => this.deps.logger.error({ bg_run_id: runId, err: String(err) }, 'could not start the agent run'),
    );
  }

  private async startAgent(h: Handle, params: StartAgentParams): Promise<void> {
    const ctx = this.host.contextOf(h);
    if (ctx.run.status !== 'running' || ctx.internal.agent_run_id !== params.agent_run_id) return;
    const id = params.agent_run_id;
    if (ctx.run.cancel_requested_at) {
      this.deliver(h.id, this.doneEvent(id, 'cancelled', 'cancelled before the agent started'));
      return;
    }
    if (params.mode === 'fresh') {
      // Not awaited: start() waits for the session's earlier runs, and this chain must stay free for heartbeats.
      void this.deps.runs
        .start(ctx.run.query_snapshot, ctx.run.session_id, {
          kind: 'background',
          run_id: id,
          task_id: ctx.run.task_id,
          agent_id: ctx.run.agent_id,
          workspace_path: this.host.dirOf(ctx.run),
          // A tenant's task (its key's prefix, tenancy.ts): the agent run and its session are the tenant's.
          tenant: bgTenantOf(ctx.run.task_id),
          // The task's metadata: what the governance conditions see as `metadata`.
          metadata: ctx.run.metadata,
          admitted: true,
          // session_policy `run`: no other run writes this session (its attempts run one at a time).
          session_is_private: ctx.run.session_id === ownSessionId(ctx.run.agent_id, ctx.run.task_id, ctx.run.run_id),
        })
        .catch((err: unknown) => {
          // Its agent's spec no longer builds (an env var unset since registration): nothing ran.
          if (err instanceof AgentUnavailableError) {
            this.deliver(h.id, this.doneEvent(id, 'failed', err.message));
            return undefined;
          }
          if (err instanceof AppError && err.code === 'Conflict') return this.continueAgent(h, id);
          // The process is shutting down (a claim whose write was under way when it began): nothing
          // ran, and failing the run would be wrong. It stays running; the next start recovers it.
          if (err instanceof AppError && err.code === 'ServerBusy') {
            this.deps.logger.info({ bg_run_id: h.id }, 'background run left for recovery: the service is shutting down');
            return undefined;
          }
          if (isStoreError(err, 'conflict')) return this.continueAgent(h, id);
          this.deliver(h.id, this.doneEvent(id, 'failed', `the agent run could not start: ${String((err as Error)?.message ?? err)}`));
          return undefined;
        });
      return;
    }
    await this.continueAgent(h, id);
  }

  /** Continue the agent run after a pause, a lapsed lease or a restart: completed tool calls do not repeat. */
  private async continueAgent(h: Handle, id: string): Promise<void> {
    const { runs } = this.deps;
    if (runs.isLive(id)) return; // its end comes through onSettled
    const ctx = this.host.contextOf(h);
    let rec: RunRecord;
    try {
      rec = await runs.get(id);
    } catch {
      // Nothing was stored for this agent run: nothing ran, so a fresh start with the same id is exact.
      await this.startAgent(h, { mode: 'fresh', agent_run_id: id, attempt: ctx.run.attempt });
      return;
    }
    const settled = this.agentDoneOf(rec, h);
    if (settled && TERMINAL_RUN_STATUSES.has(rec.status)) {
      this.deliver(h.id, settled);
      return;
    }
    let how: Parameters<RunService['resume']>[1];
    if (rec.status === 'awaiting_approval' || rec.status === 'awaiting_budget') {
      if (!rec.decided_at) {
        this.deliver(h.id, settled!);
        return;
      }
      how = { cause: (rec.decision as 'approval' | 'budget_grant' | 'budget_denied') ?? 'approval', trigger: 'explicit' };
    } else if (rec.status === 'interrupted') {
      how = { cause: 'interrupted', trigger: 'orphan_sweep' };
    } else {
      // status running, no live actor here.
      if (rec.owner === this.deps.workerId) return; // being resumed by this process right now; its end arrives via onSettled
      // This process holds the background run's lease (its claim or recovery was a CAS on the
      // row), and that lease owns the agent run: the agent run's own lease is not waited out.
      how = { cause: 'recovered_after_lapsed_lease', trigger: 'orphan_sweep', ownerDead: true };
    }
    void runs.resume(id, how).catch((err: unknown) => {
      if (runs.isLive(id)) return;
      void runs.get(id).then(
        (r) => {
          const done = this.agentDoneOf(r, h);
          this.deliver(
            h.id,
            done && TERMINAL_RUN_STATUSES.has(r.status)
              ? done
              : this.doneEvent(id, 'failed', `the agent run could not be continued: ${String((err as Error)?.message ?? err)}`, sideEffectsOf(r)),
          );
        },
        () => this.deliver(h.id, this.doneEvent(id, 'failed', `the agent run could not be continued: ${String((err as Error)?.message ?? err)}`)),
      );
    });
  }

  onCancelAgent(runId: string, agentRunId: string | null): void {
    const h = this.host.handleOf(runId);
    if (!h || !agentRunId) return;
    this.host.enqueue(
      h,
      () => this.cancelAgent(h, agentRunId),
      () => undefined,
    );
  }

  private async cancelAgent(h: Handle, agentRunId: string): Promise<void> {
    const { runs } = this.deps;
    // The agent run may be a moment from existing (start() is not awaited): give it a short while.
    for (let i = 0; i < 20; i++) {
      try {
        await runs.cancel(agentRunId);
        return;
      } catch (err) {
        if (!(err instanceof AppError) || err.code !== 'NotFound') break; // already ended: its settle came or comes
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    try {
      const rec = await runs.get(agentRunId);
      const done = this.agentDoneOf(rec, h);
      if (done && TERMINAL_RUN_STATUSES.has(rec.status)) this.deliver(h.id, done);
    } catch {
      this.deliver(h.id, this.doneEvent(agentRunId, 'cancelled', 'cancelled'));
    }
  }

  /**
   * An agent run's end or park (completed, failed, cancelled, timed out, awaiting a person) carries
   * its background run's step in the same commit (RunService.foldFinal): the AGENT_DONE this record
   * makes, taken by the background run's actor now, its row write handed to that commit, so a
   * crash leaves both or neither. Null when it cannot be folded (see RunHosts.foldInto):
   * onAgentSettled then delivers the event after the agent run's end is durable, as a write of
   * its own.
   */
  foldFinal(rec: RunRecord): CarriedWrite | null {
    if (rec.kind !== 'background' || this.host.closed()) return null;
    const bgId = backgroundRunIdOf(rec.run_id);
    const h = this.host.handleOf(bgId);
    if (!h) return null;
    const done = this.agentDoneOf(rec, h);
    if (!done) return null;
    const folded = this.host.foldInto(bgId, done, (stored) => this.deps.telemetry.published(stored));
    if (!folded) return null;
    this.folded.add(rec.run_id);
    return {
      ops: folded.ops,
      carry: folded.carry,
      settle: (written) => {
        folded.settle(written);
        // Not written: the agent run's end (failed outside its machine) comes through onSettled.
        written.catch(() => this.folded.delete(rec.run_id));
      },
      hold: () => folded.hold(),
    };
  }

  onAgentSettled(rec: RunRecord): void {
    if (rec.kind !== 'background' || this.host.closed()) return;
    if (TERMINAL_RUN_STATUSES.has(rec.status)) this.deps.system.stop(`run:${rec.run_id}`);
    // Its background run's step was written in the same commit (foldFinal).
    if (this.folded.delete(rec.run_id)) return;
    const bgId = backgroundRunIdOf(rec.run_id);
    const h = this.host.handleOf(bgId);
    const done = this.agentDoneOf(rec, h);
    if (!done) return;
    void (async () => {
      const r = await this.host.send(bgId, done);
      // A run parked for a person whose agent run was resumed and ended without us: move it on.
      if (!r.accepted && r.status && WAITING.has(r.status) && TERMINAL_RUN_STATUSES.has(rec.status)) {
        await this.host.send(bgId, { type: 'RESUME', at: iso(this.deps.clock.now()) });
      }
    })().catch((err) => this.deps.logger.warn({ bg_run_id: bgId, err: String(err) }, 'could not apply an agent run result'));
  }

  agentDoneOf(rec: RunRecord, h?: Handle): Extract<BackgroundRunEvent, { type: 'AGENT_DONE' }> | null {
    let outcome: AgentOutcome;
    switch (rec.status) {
      case 'completed':
        outcome = 'completed';
        break;
      case 'awaiting_approval':
        outcome = 'awaiting_approval';
        break;
      case 'awaiting_budget':
        outcome = 'awaiting_budget';
        break;
      case 'timeout':
        outcome = 'timeout';
        break;
      case 'cancelled':
        outcome = h?.timedOut === rec.run_id ? 'timeout' : 'cancelled';
        break;
      case 'failed':
      case 'blocked':
        outcome = 'failed';
        break;
      default:
        return null; // running / interrupted: not an end
    }
    const error =
      outcome === 'completed' || outcome === 'awaiting_approval' || outcome === 'awaiting_budget'
        ? null
        : outcome === 'timeout'
          ? `the attempt exceeded timeout_seconds${h ? ` (${this.host.contextOf(h).internal.timeout_seconds} s)` : ''}`
          : rec.error
            ? `${rec.error.type}: ${rec.error.message}`
            : `the agent run ended ${rec.status}`;
    const done = this.doneEvent(rec.run_id, outcome, error, outcome === 'completed' ? [] : sideEffectsOf(rec));
    done.result_preview = rec.response ? rec.response.slice(0, PREVIEW_CHARS) : null;
    done.retryable = rec.status !== 'blocked';
    return done;
  }

  private doneEvent(
    agentRunId: string,
    outcome: AgentOutcome,
    error: string | null,
    sideEffects: SideEffectInfo[] = [],
  ): Extract<BackgroundRunEvent, { type: 'AGENT_DONE' }> {
    return {
      type: 'AGENT_DONE',
      at: iso(this.deps.clock.now()),
      agent_run_id: agentRunId,
      outcome,
      error,
      result_preview: null,
      retryable: true,
      side_effects: sideEffects,
    };
  }

  deliver(runId: string, event: BackgroundRunEvent): void {
    void this.host
      .send(runId, event)
      .catch((err) => this.deps.logger.warn({ bg_run_id: runId, type: event.type, err: String(err) }, 'could not deliver an event to a background run'));
  }

  /**
   * A person decided the parked agent run `agentRunId` (every approval, or its budget): its
   * background run takes RESUME (awaiting -> queued), and that row write is handed to the
   * decision's commit (RunService.resumeThrough), so the decision and the requeue are one atomic
   * write. The agent run is then continued by its background run's claim, under that run's lease
   * (startAgent, mode continue), never by the decision itself. Null when there is no background
   * run to go through (deleted, or already ended): the decision resumes the agent run itself.
   * Throws a `stale_version` store error while the background run has not parked yet (its write
   * is under way, here or in another instance): the decision is read and tried again.
   */
  async decided(agentRunId: string): Promise<CarriedWrite | null> {
    if (this.host.closed()) return null;
    const bgId = backgroundRunIdOf(agentRunId);
    const loaded = await this.host.handle(bgId);
    if (loaded === null || !('actor' in loaded)) return null;
    const h = loaded;
    h.sends++;
    try {
      // A park write under way here: the row's version is settled once it lands.
      for (let i = 0; i < 100 && !h.dead && (h.pending > 0 || h.tailWrite); i++) await h.chain;
      if (h.dead) throw new StoreError('stale_version', `background run ${bgId}: its copy here was dropped`);
      const ctx = this.host.contextOf(h);
      if (ctx.internal.agent_run_id !== agentRunId) return null; // an older attempt's agent run
      if (!WAITING.has(ctx.run.status)) throw new StoreError('stale_version', `background run ${bgId} is ${ctx.run.status}, not parked yet`);
      const folded = this.host.foldInto(bgId, { type: 'RESUME', at: iso(this.deps.clock.now()) }, (stored) => this.deps.telemetry.published(stored), {
        anyStore: true,
      });
      if (!folded) throw new StoreError('stale_version', `background run ${bgId}: a write of its own is under way`);
      return folded;
    } finally {
      h.sends--;
      this.host.maybeRelease(h);
    }
  }

  /** A held row whose agent run already ended or parked takes that result; true when it did. */
  async settleFromAgent(row: BgRunRow): Promise<boolean> {
    const agentId = row.internal.agent_run_id;
    if (!agentId || this.deps.runs.isLive(agentId)) return false;
    const rec = await this.deps.runs
      .get(agentId)
      .catch((e: unknown) => (isRefusal(e) ? null : (reportSwallowed('background.read_agent_run', e, { agent_run_id: agentId }), null)));
    if (!rec) return false;
    const parked = WAITING.has(rec.status as BackgroundRunStatus);
    if (!TERMINAL_RUN_STATUSES.has(rec.status) && !parked) return false;
    const done = this.agentDoneOf(rec);
    if (!done) return false;
    const r = await this.host.send(row.run.run_id, done, { durable: true });
    if (r.accepted && parked && rec.decided_at) await this.host.send(row.run.run_id, { type: 'RESUME', at: iso(this.deps.clock.now()) }, { durable: true });
    return r.accepted;
  }

  async checkParked(row: BgRunRow): Promise<void> {
    const runId = row.run.run_id;
    const agentId = row.internal.agent_run_id;
    if (!agentId) return;
    let moveOn = this.deps.runs.isLive(agentId);
    if (!moveOn) {
      const rec = await this.deps.runs
        .get(agentId)
        .catch((e: unknown) => (isRefusal(e) ? null : (reportSwallowed('background.read_agent_run', e, { agent_run_id: agentId }), null)));
      moveOn = rec !== null && (TERMINAL_RUN_STATUSES.has(rec.status) || (WAITING.has(rec.status as BackgroundRunStatus) && rec.decided_at !== null));
    }
    if (moveOn) await this.host.send(runId, { type: 'RESUME', at: iso(this.deps.clock.now()) }, { durable: true });
  }
}
