// What an operator does to a background run through the API: cancel it (here, or by asking the
// instance that holds it on a shared store) and resume it after a person's decision. Both go
// through the run's machine (RunEngine.send), durably, so the answer reflects what was written.
import { AppError, domainError, notFound } from '../errors.js';
import { backgroundRunIdOf, type BackgroundRunEvent } from '../../machines/background-run.machine.js';
import type { Versioned } from '../store/store.js';
import { isRefusal, reportSwallowed } from '../telemetry/swallowed.js';
import type { BackgroundDeps, Handle, SendResult } from './host-types.js';
import { HELD, TERMINAL, WAITING, type BgRunRow } from './types.js';

const iso = (ms: number) => new Date(ms).toISOString();

/** What the actions need of the engine that hosts the runs. */
export interface OperatorHost {
  handleOf(runId: string): Handle | undefined;
  getRow(runId: string): Promise<Versioned<BgRunRow> | null>;
  send(runId: string, event: BackgroundRunEvent, opts: { durable: true }): Promise<SendResult>;
}

export class OperatorActions {
  /** Set by the cluster link on a shared store: asks the instance holding a run to cancel it (src/composition-root.ts). */
  remoteCancel: ((runId: string, reason: string | null) => Promise<void>) | null = null;

  constructor(
    private readonly deps: BackgroundDeps,
    private readonly host: OperatorHost,
  ) {}

  /** POST /background/runs/{id}/cancel. */
  async cancel(runId: string, reason: string | null = null): Promise<{ status: 'cancel_requested' }> {
    const row = await this.host.getRow(runId);
    if (!row) throw notFound('background run', runId);
    if (TERMINAL.has(row.value.run.status)) throw domainError('AGT_ERR_BACKGROUND_RUN_ENDED', [runId, row.value.run.status]);
    const run = row.value.run;
    const h = this.host.handleOf(runId);
    const remoteCancel = this.remoteCancel;
    // Held by another live instance of a shared store: its owner cancels it (through its own
    // chain of writes). Writing the row from here would only fence the owner off, and its agent
    // run would go on until its lease lapsed.
    if (remoteCancel && (!h || h.dead) && HELD.has(run.status) && this.deps.leases.heldElsewhere(run.lease_owner, run.lease_expires_at, this.deps.workerId)) {
      await remoteCancel(runId, reason);
      return { status: 'cancel_requested' };
    }
    const r = await this.host.send(runId, { type: 'CANCEL', at: iso(this.deps.clock.now()), reason }, { durable: true });
    if (!r.accepted && r.status && TERMINAL.has(r.status)) throw domainError('AGT_ERR_BACKGROUND_RUN_ENDED', [runId, r.status]);
    return { status: 'cancel_requested' };
  }

  /**
   * POST /runs/{id}/cancel of a running background agent run: its background run is cancelled
   * (here, or by the instance holding it), whose actor stops its child. False when it is not the
   * current attempt's agent run of a held background run (the agent run is cancelled on its own).
   */
  async cancelOfAgentRun(agentRunId: string): Promise<boolean> {
    const runId = backgroundRunIdOf(agentRunId);
    const row = await this.host.getRow(runId);
    if (!row || !HELD.has(row.value.run.status) || row.value.internal.agent_run_id !== agentRunId) return false;
    try {
      await this.cancel(runId, 'its agent run was cancelled');
      return true;
    } catch (err) {
      if (err instanceof AppError) return false; // ended meanwhile
      throw err;
    }
  }

  /** A cancel another instance relayed here: only a run this process holds is touched. */
  cancelIfHeld(runId: string, reason: string | null): void {
    const h = this.host.handleOf(runId);
    if (!h || h.dead) return;
    void this.cancel(runId, reason).catch((err) => this.deps.logger.warn({ bg_run_id: runId, err: String(err) }, 'relayed cancel failed'));
  }

  /** POST /background/runs/{id}/resume: a run paused for a person continues once its decision is in. */
  async resume(runId: string): Promise<{ status: 'resumed' }> {
    const row = await this.host.getRow(runId);
    if (!row) throw notFound('background run', runId);
    const run = row.value.run;
    if (!WAITING.has(run.status)) throw domainError('AGT_ERR_RUN_NOT_WAITING', [`background run ${runId}`, 'a person', run.status]);
    const agentId = row.value.internal.agent_run_id;
    if (agentId && !this.deps.runs.isLive(agentId)) {
      const rec = await this.deps.runs
        .get(agentId)
        .catch((e: unknown) => (isRefusal(e) ? null : (reportSwallowed('background.read_agent_run', e, { run_id: runId, agent_run_id: agentId }), null)));
      if (rec && (rec.status === 'awaiting_approval' || rec.status === 'awaiting_budget') && !rec.decided_at) {
        throw domainError('AGT_ERR_AGENT_RUN_UNDECIDED', [runId, agentId, rec.status], {
          detail: 'decide it through POST /runs/{run_id}/approvals/{approval_id} or /runs/{run_id}/budget',
        });
      }
    }
    const r = await this.host.send(runId, { type: 'RESUME', at: iso(this.deps.clock.now()) }, { durable: true });
    if (!r.accepted && r.status && !(r.status === 'queued' || HELD.has(r.status))) {
      throw domainError('AGT_ERR_RUN_NOT_WAITING', [`background run ${runId}`, 'a person', r.status]);
    }
    return { status: 'resumed' };
  }
}
