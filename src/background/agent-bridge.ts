// The agent bridge: the agent run (RunService) of each attempt of a background run, as the
// background run's child actor. `running` invokes `agentRun` (logic() here): it starts or continues
// the agent run once the row write that entered `running` is in, stops it on CANCEL or TIMEOUT,
// and sends its end or park back to its parent as AGENT_DONE; leaving `running` stops it. An end or
// park also carries the parent's step in the agent run's final commit where it can (foldFinal),
// and a person's decision carries the parent's RESUME in the decision's commit (decided), so the
// agent run goes on only under its background run's lease.
import { fromCallback } from 'xstate';
import {
  backgroundRunIdOf,
  type AgentOutcome,
  type AgentRunChildEvent,
  type AgentSettled,
  type BackgroundRunContext,
  type BackgroundRunEvent,
  type SideEffectInfo,
  type StartAgentParams,
} from '../../machines/background-run.machine.js';
import { AppError, domainError } from '../errors.js';
import { sideEffectsOf, TERMINAL_RUN_STATUSES, type RunRecord } from '../runtime/run-record.js';
import { AgentUnavailableError } from '../agent/agent-registry.js';
import type { RunService, StartedRun } from '../runtime/runs.js';
import type { CarriedWrite } from '../runtime/persistence.js';
import type { BackgroundRun, BackgroundRunStatus } from '../schemas/background.js';
import { isStoreError, StoreError, type StoredEvent, type Versioned } from '../store/store.js';
import { TERMINAL, WAITING, type BgRunRow } from './types.js';
import { ownSessionId } from './prepare-run.js';
import type { BackgroundDeps, Handle, SendResult } from './host-types.js';
import { isRefusal, reportSwallowed } from '../telemetry/swallowed.js';
import { bgTenantOf } from './tenancy.js';

const iso = (ms: number) => new Date(ms).toISOString();
const PREVIEW_CHARS = 500;

type AgentDone = Extract<BackgroundRunEvent, { type: 'AGENT_DONE' }>;
/** Sends the agent run's end to the background run that is its parent (nothing once that child is stopped). */
type SendDone = (done: AgentDone) => void;

/** What the bridge needs of the engine that hosts the runs. */
export interface BridgeHost {
  handleOf(runId: string): Handle | undefined;
  /** The live handle, or one restored from the row; a terminal row comes back as the row; null when there is none. */
  handle(runId: string): Promise<Handle | Versioned<BgRunRow> | null>;
  maybeRelease(h: Handle): void;
  contextOf(h: Handle): BackgroundRunContext;
  enqueue(h: Handle, job: () => Promise<void>, onError: (err: unknown) => void): void;
  /** Calls `fn` once the run's queued row write is handed to the store (RunHosts.whenIssued); false when none is queued. */
  whenIssued(h: Handle, fn: (landed: Promise<unknown>) => void): boolean;
  /** This process is the store's only writer and the store takes commits first in, first out (not a shared store). */
  ownsStore(): boolean;
  send(runId: string, event: BackgroundRunEvent, opts?: { durable?: boolean; known?: Versioned<BgRunRow> }): Promise<SendResult>;
  foldInto(runId: string, event: BackgroundRunEvent, published: (stored: StoredEvent[]) => void, opts?: { decision?: boolean }): CarriedWrite | null;
  dirOf(run: BackgroundRun): string;
  closed(): boolean;
}

export class AgentBridge {
  /** Agent runs being cancelled from their background run's chain (cancelAgent): not carried through it. */
  private readonly ownCancels = new Set<string>();
  /**
   * Starts before the claim landed on a shared store (`after`), by agent run id, until they
   * settle: a claim refused makes its agent run stop by itself, and a later claim of the same run
   * here starts the same id only once that one let go of it (one host per run id in a process).
   */
  private readonly starting = new Map<string, Promise<unknown>>();

  constructor(
    private readonly deps: BackgroundDeps,
    private readonly host: BridgeHost,
  ) {}

  /**
   * The logic of the `agentRun` child the background run's `running` state invokes. It waits on
   * the run's write chain (the row write that entered `running` goes first), then starts or
   * continues the agent run without holding the chain (start() waits for the session's earlier
   * runs, and the chain must stay free for heartbeats), and sends its end or park back.
   */
  logic() {
    return fromCallback<AgentRunChildEvent, StartAgentParams>(({ input, sendBack, receive }) => {
      let stopped = false;
      const done: SendDone = (e) => {
        if (!stopped) sendBack(e);
      };
      const h = this.host.handleOf(backgroundRunIdOf(input.agent_run_id));
      if (h) {
        const failed = (err: unknown) => this.deps.logger.error({ bg_run_id: h.id, err: String(err) }, 'could not start the agent run');
        // A fresh attempt starts as its claim is handed to the store, not once it is durable: the
        // next run's model request does not wait for the round that carries its claim and the
        // previous run's end (docs/background.md "Starting before the claim lands" argues why a
        // crash meanwhile repeats nothing). On a store only this process writes, first in, first
        // out, the agent run's writes land after the claim; on one other instances share, the
        // agent run writes nothing before the claim is stored (StartOptions.after), so a claim
        // another instance won leaves nothing of it stored.
        const owns = this.host.ownsStore();
        const early =
          input.mode === 'fresh' &&
          this.host.whenIssued(h, (landed) => {
            if (h.dead) return;
            this.startAgent(h, input, done, owns ? undefined : landed).catch(failed);
            // The claim was refused (the row moved or went, the store failed): this process does
            // not hold the run, so the agent run it started stops (on a shared store it stops by
            // itself, fenced off before its first write).
            if (owns) landed.catch(() => this.abandon(input.agent_run_id));
          });
        if (!early) this.host.enqueue(h, () => this.startAgent(h, input, done), failed);
        receive((e) => {
          if (e.type === 'TIMEOUT') void this.timeoutAgent(h, input.agent_run_id, done);
          else
            this.host.enqueue(
              h,
              () => this.cancelAgent(h, input.agent_run_id, done),
              () => undefined,
            );
        });
      }
      return () => {
        stopped = true;
      };
    });
  }

  /**
   * timeout_seconds reached: the agent run's actor gets TIMEOUT (status `timeout`). When it has no
   * actor here (still queued behind its session), it is cancelled and that cancellation reads as
   * the timeout.
   */
  private async timeoutAgent(h: Handle, agentRunId: string, done: SendDone): Promise<void> {
    const ctx = this.host.contextOf(h);
    if (ctx.run.status !== 'running' || ctx.internal.agent_run_id !== agentRunId) return;
    h.timedOut = agentRunId;
    const ref = this.deps.system.get(`run:${agentRunId}`);
    if (ref) {
      ref.send({ type: 'TIMEOUT' });
      return;
    }
    try {
      await this.deps.runs.cancel(agentRunId, { direct: true });
    } catch {
      done({ ...this.doneEvent(agentRunId, 'timeout', `timed out after ${ctx.internal.timeout_seconds} s`) });
    }
  }

  /** The agent run of a claim that did not land: cancelled (it may still be starting, so a few tries). */
  private abandon(agentRunId: string): void {
    void (async () => {
      for (let i = 0; i < 20; i++) {
        try {
          await this.deps.runs.cancel(agentRunId, { direct: true });
          return;
        } catch (err) {
          if (!(err instanceof AppError) || err.code !== 'NotFound') return; // already ended
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
  }

  /** Its end or park, sent back once the agent run settles. */
  private follow(h: Handle, settled: Promise<RunRecord>, done: SendDone): void {
    void settled.then((rec) => {
      const d = this.agentDoneOf(rec, h);
      if (d) done(d);
    });
  }

  /** `after`: the claim's commit, not landed yet (a shared store): the agent run writes nothing before it (StartOptions.after). */
  private async startAgent(h: Handle, params: StartAgentParams, done: SendDone, after?: Promise<unknown>): Promise<void> {
    const prior = params.mode === 'fresh' ? this.starting.get(params.agent_run_id) : undefined;
    if (prior && (await prior, h.dead)) return;
    const ctx = this.host.contextOf(h);
    if (ctx.run.status !== 'running' || ctx.internal.agent_run_id !== params.agent_run_id) return;
    const id = params.agent_run_id;
    if (ctx.run.cancel_requested_at) {
      done(this.doneEvent(id, 'cancelled', 'cancelled before the agent started'));
      return;
    }
    if (params.mode === 'fresh') {
      // Not awaited: start() waits for the session's earlier runs, and this chain must stay free for heartbeats.
      const started = this.deps.runs.start(ctx.run.query_snapshot, ctx.run.session_id, {
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
        ...(ctx.run.priority ? { priority: ctx.run.priority } : {}), // its place among calls waiting for model tokens
        // session_policy `run`: no other run writes this session (its attempts run one at a time).
        session_is_private: ctx.run.session_id === ownSessionId(ctx.run.agent_id, ctx.run.task_id, ctx.run.run_id),
        ...(after ? { after } : {}),
      });
      if (after) {
        const settled = started.then(
          () => undefined,
          () => undefined,
        );
        this.starting.set(id, settled);
        void settled.then(() => this.starting.get(id) === settled && this.starting.delete(id));
      }
      void started.then(
        (started: StartedRun) => this.follow(h, started.settled, done),
        (err: unknown) => {
          // Its claim was refused (`after`): this process does not hold the run; nothing of the agent run was written.
          if (h.dead) return undefined;
          // Its agent's spec no longer builds (an env var unset since registration): nothing ran.
          if (err instanceof AgentUnavailableError) return done(this.doneEvent(id, 'failed', err.message));
          if (err instanceof AppError && err.code === 'Conflict') return this.continueAgent(h, id, done);
          // The process is shutting down (a claim whose write was under way when it began): nothing
          // ran, and failing the run would be wrong. It stays running; the next start recovers it.
          if (err instanceof AppError && err.code === 'ServerBusy') {
            this.deps.logger.info({ bg_run_id: h.id }, 'background run left for recovery: the service is shutting down');
            return undefined;
          }
          if (isStoreError(err, 'conflict')) return this.continueAgent(h, id, done);
          return done(this.doneEvent(id, 'failed', `the agent run could not start: ${String((err as Error)?.message ?? err)}`));
        },
      );
      return;
    }
    await this.continueAgent(h, id, done);
  }

  /** Continue the agent run after a pause, a lapsed lease or a restart: completed tool calls do not repeat. */
  private async continueAgent(h: Handle, id: string, done: SendDone): Promise<void> {
    const { runs } = this.deps;
    const live = runs.settledOf(id);
    if (live) return this.follow(h, live, done);
    const ctx = this.host.contextOf(h);
    let rec: RunRecord;
    try {
      rec = await runs.get(id);
    } catch {
      // Nothing was stored for this agent run: nothing ran, so a fresh start with the same id is exact.
      await this.startAgent(h, { mode: 'fresh', agent_run_id: id, attempt: ctx.run.attempt }, done);
      return;
    }
    const settled = this.agentDoneOf(rec, h);
    if (settled && TERMINAL_RUN_STATUSES.has(rec.status)) {
      done(settled);
      return;
    }
    let how: Parameters<RunService['resume']>[1];
    if (rec.status === 'awaiting_approval' || rec.status === 'awaiting_budget') {
      if (!rec.decided_at) {
        done(settled!);
        return;
      }
      how = { cause: (rec.decision as 'approval' | 'budget_grant' | 'budget_denied') ?? 'approval', trigger: 'explicit' };
    } else if (rec.status === 'interrupted') {
      how = { cause: 'interrupted', trigger: 'orphan_sweep' };
    } else {
      // status running, no live actor here. This process holds the background run's lease (its
      // claim or recovery was a CAS on the row), and that lease is the only one that owns the
      // agent run (it has none of its own; RunRecovery.resumeRead asks no other).
      how = { cause: 'recovered_after_lapsed_lease', trigger: 'orphan_sweep' };
    }
    const failed = (err: unknown, r?: RunRecord) =>
      this.doneEvent(id, 'failed', `the agent run could not be continued: ${String((err as Error)?.message ?? err)}`, r ? sideEffectsOf(r) : []);
    void runs.resume(id, how).then(
      (started) => this.follow(h, started.settled, done),
      (err: unknown) => {
        const again = runs.settledOf(id);
        if (again) return this.follow(h, again, done);
        void runs.get(id).then(
          (r) => {
            const d = this.agentDoneOf(r, h);
            done(d && TERMINAL_RUN_STATUSES.has(r.status) ? d : failed(err, r));
          },
          () => done(failed(err)),
        );
      },
    );
  }

  /**
   * The `cancelAgent` effect: stop an agent run that is not the background run's child here (a
   * parked one, or one this copy of the run does not hold). Its end, if it comes, is the row's
   * next write (an AGENT_DONE sent through the engine); a parked run was cancelled already.
   */
  onCancelAgent(runId: string, agentRunId: string | null): void {
    const h = this.host.handleOf(runId);
    if (!h || !agentRunId) return;
    this.host.enqueue(
      h,
      () => this.cancelAgent(h, agentRunId, (d) => this.deliver(runId, d)),
      () => undefined,
    );
  }

  private async cancelAgent(h: Handle, agentRunId: string, done: SendDone): Promise<void> {
    const { runs } = this.deps;
    // The agent run may be a moment from existing (start() is not awaited): give it a short while.
    for (let i = 0; i < 20; i++) {
      // This job runs on the background run's chain: an agent run that parked before its
      // background run heard of it (its park not written yet) is cancelled on its own, not through
      // the background run (carryInto would wait for this very chain); its end reaches the run
      // as AGENT_DONE, like any other end.
      this.ownCancels.add(agentRunId);
      try {
        await runs.cancel(agentRunId, { direct: true });
        return;
      } catch (err) {
        if (!(err instanceof AppError) || err.code !== 'NotFound') break; // already ended: its settle came or comes
      } finally {
        this.ownCancels.delete(agentRunId);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    try {
      const rec = await runs.get(agentRunId);
      const d = this.agentDoneOf(rec, h);
      if (d && TERMINAL_RUN_STATUSES.has(rec.status)) done(d);
    } catch {
      done(this.doneEvent(agentRunId, 'cancelled', 'cancelled'));
    }
  }

  /**
   * An agent run's end or park (completed, failed, cancelled, timed out, awaiting a person) carries
   * its background run's step in the same commit (RunService.foldFinal): the AGENT_DONE this record
   * makes, taken by the background run's actor now (which stops its child), its row write handed
   * to that commit, so a crash leaves both or neither. Null when it cannot be folded (see
   * RunHosts.foldInto): the child then sends AGENT_DONE once the agent run's end is durable, and
   * the row is written by a commit of its own.
   */
  foldFinal(rec: RunRecord): CarriedWrite | null {
    if (rec.kind !== 'background' || this.host.closed()) return null;
    const bgId = backgroundRunIdOf(rec.run_id);
    const h = this.host.handleOf(bgId);
    if (!h) return null;
    const done = this.agentDoneOf(rec, h);
    if (!done) return null;
    return this.host.foldInto(bgId, done, (stored) => this.deps.telemetry.published(stored));
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

  private deliver(runId: string, event: BackgroundRunEvent): void {
    void this.host
      .send(runId, event)
      .catch((err) => this.deps.logger.warn({ bg_run_id: runId, type: event.type, err: String(err) }, 'could not deliver an event to a background run'));
  }

  /**
   * A person decided the parked agent run `agentRunId` (every approval, or its budget): its
   * background run takes RESUME (awaiting -> queued), and that row write is handed to the
   * decision's commit (RunService.resumeThrough), so the decision and the requeue are one atomic
   * write. The agent run is then continued by its background run's claim, under that run's lease
   * (its child, mode continue), never by the decision itself. Null when there is no background
   * run to go through (deleted, or already ended): the decision resumes the agent run itself.
   * Throws a `stale_version` store error while the background run has not parked yet (its write
   * is under way, here or in another instance): the decision is read and tried again.
   */
  decided(agentRunId: string): Promise<CarriedWrite | null> {
    return this.carryInto(agentRunId, { type: 'RESUME', at: iso(this.deps.clock.now()) });
  }

  /**
   * The parked agent run `agentRunId` is cancelled through the run API (POST /runs/{id}/cancel):
   * its background run takes CANCEL (awaiting -> cancelled) in the cancel's commit
   * (RunService.cancelThrough), so neither is left waiting for the other. Null and throws as decided().
   */
  cancelled(agentRunId: string): Promise<CarriedWrite | null> {
    return this.carryInto(agentRunId, { type: 'CANCEL', at: iso(this.deps.clock.now()), reason: 'its agent run was cancelled' });
  }

  /** The parked background run of `agentRunId` takes `event` in the commit of a write on its agent run (decided, cancelled). */
  private async carryInto(agentRunId: string, event: BackgroundRunEvent): Promise<CarriedWrite | null> {
    // Never around it: nothing else would move the background run on once its agent run moved.
    if (this.host.closed()) throw domainError('AGT_ERR_SHUTTING_DOWN', [], { headers: { 'retry-after': '5' } });
    if (this.ownCancels.has(agentRunId)) return null;
    const bgId = backgroundRunIdOf(agentRunId);
    const loaded = await this.host.handle(bgId);
    if (loaded === null || !('actor' in loaded)) return null;
    const h = loaded;
    h.sends++;
    try {
      const owns = () => {
        const ctx = this.host.contextOf(h);
        // An older attempt's agent run, or a run that ended (its own cancel may be what asks, from its chain).
        return ctx.internal.agent_run_id === agentRunId && !TERMINAL.has(ctx.run.status);
      };
      if (!owns()) return null;
      // A park write under way here: the row's version is settled once it lands.
      for (let i = 0; i < 100 && !h.dead && (h.pending > 0 || h.tailWrite); i++) await h.chain;
      if (h.dead) throw new StoreError('stale_version', `background run ${bgId}: its copy here was dropped`);
      if (!owns()) return null;
      const status = this.host.contextOf(h).run.status;
      if (!WAITING.has(status)) throw new StoreError('stale_version', `background run ${bgId} is ${status}, not parked yet`);
      const folded = this.host.foldInto(bgId, event, (stored) => this.deps.telemetry.published(stored), { decision: true });
      if (!folded) throw new StoreError('stale_version', `background run ${bgId}: a write of its own is under way`);
      return folded;
    } finally {
      h.sends--;
      this.host.maybeRelease(h);
    }
  }

  /**
   * The agent run of a running row whose lease lapsed, if it already ended or parked (its owner
   * stopped before recording that): what the claimer's RECOVER carries, so the machine settles
   * the run from it instead of starting another attempt. Null when it is live here, still
   * running, or cannot be read (the RECOVER then recovers the attempt, which continues it).
   */
  async agentSettledOf(row: BgRunRow): Promise<AgentSettled | null> {
    const agentId = row.internal.agent_run_id;
    if (!agentId || this.deps.runs.isLive(agentId)) return null;
    const rec = await this.deps.runs
      .get(agentId)
      .catch((e: unknown) => (isRefusal(e) ? null : (reportSwallowed('background.read_agent_run', e, { agent_run_id: agentId }), null)));
    if (!rec) return null;
    const parked = WAITING.has(rec.status as BackgroundRunStatus);
    if (!TERMINAL_RUN_STATUSES.has(rec.status) && !parked) return null;
    const done = this.agentDoneOf(rec);
    if (!done) return null;
    const { type: _t, at: _a, agent_run_id: _id, ...settled } = done;
    return { ...settled, decided: parked && !!rec.decided_at };
  }
}
