// Runs that no live actor holds, taken back: resume (a decision, an explicit resume, a recovery),
// the orphan sweep that finds runs whose owner died or that a shutdown interrupted and resumes
// them one recovery slot at a time, and the graceful shutdown that stops live runs at a boundary
// (docs/contract.md §6.2, §9; docs/operations.md "Shutdown and restarts").
import { sessionKeyOf } from './tenancy.js';
import type { Snapshot } from 'xstate';
import { RUN_MACHINE_VERSION } from '../../machines/run.machine.js';
import { domainError, notFound } from '../errors.js';
import { newId } from '../ids.js';
import { isStoreError, type Versioned } from '../store/store.js';
import type { AgentLease } from '../agent/agent-profile.js';
import type { RunKernel } from './run-kernel.js';
import { resumeEventFor } from './run-projection.js';
import { TERMINAL_RUN_STATUSES, WAITING_RUN_STATUSES, runIndexes, type RunRecord } from './run-record.js';
import { iso, traceValueOf, type RecoveryCause, type SnapshotValue, type StartedRun, type TraceValue } from './run-types.js';
import { repos } from '../store/repos/index.js';
import { swallow } from '../telemetry/swallowed.js';

/** Most runs waiting for a recovery slot; more are left in the store for the next sweep. */
const MAX_RECOVERY_QUEUE = 10_000;

/** A run the orphan sweep found; `ownerDead`: found at start-up on the single-process store. */
interface RecoveryCandidate {
  id: string;
  cause: RecoveryCause;
  ownerDead: boolean;
}

/** Why and how a run is resumed. */
export interface ResumeHow {
  cause: RecoveryCause;
  trigger: 'explicit' | 'orphan_sweep';
  extra?: Record<string, unknown>;
  /**
   * The previous owner is known to be gone, whatever the run's own lease says: the start-up sweep
   * on the single-process embedded store. (A background run's agent run has no lease of its own:
   * the holder of its background run's lease continues it; see resumeRead.)
   */
  ownerDead?: boolean;
  /** A slot the caller already holds (the recovery lane): the run keeps it; released if the resume fails. */
  slot?: () => void;
}

/**
 * Reads and the agent lease decideApproval starts for the resume it is about to make, before it
 * hands its decision to the store: with them in hand, the resume's claim is issued within the
 * same event-loop turn as the decision and joins its store round (one fsynced batch instead of
 * two in a row; docs/benchmarks.md, approvals).
 */
export interface ResumePrefetch {
  snapshot: Promise<Versioned<SnapshotValue> | null>;
  prevTrace: Promise<Versioned<TraceValue> | null>;
  agent: Promise<AgentLease>;
  /** Set by resume once the lease is its own to release. */
  taken?: boolean;
}

export class RunRecovery {
  private sweepTimer: NodeJS.Timeout | null = null;
  /** Runs the sweep found and that wait for a recovery slot (see recoverQueued), oldest first. */
  private readonly recoveryQueue: RecoveryCandidate[] = [];
  /** Ids queued or being resumed by recoverQueued, so a later sweep does not queue them twice. */
  private readonly recovering = new Set<string>();
  private recoveryPump: Promise<void> | null = null;

  constructor(private readonly kernel: RunKernel) {}

  private get deps() {
    return this.kernel.deps;
  }

  /**
   * Takes ownership of a run that no live actor holds and continues it from its snapshot.
   * Ownership is a CAS on the record: of two processes racing, exactly one wins.
   */
  async resume(
    runId: string,
    how: ResumeHow,
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
    if (this.kernel.live.has(runId)) {
      dropAgent();
      throw domainError('AGT_ERR_RUN_ALREADY_LIVE', [runId, 'this process']);
    }
    let rec: Versioned<RunRecord> | null;
    let snapRec: Versioned<SnapshotValue> | null;
    try {
      [rec, snapRec] = await Promise.all([
        known ?? repos(this.deps.store).runs.get<RunRecord>(runId),
        pre?.snapshot ?? repos(this.deps.store).snapshots.get<SnapshotValue>(runId),
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
    how: ResumeHow,
    rec: Versioned<RunRecord> | null,
    snapRec: Versioned<SnapshotValue> | null,
    pre: ResumePrefetch | undefined,
  ): Promise<StartedRun> {
    if (!rec) throw notFound('run', runId);
    const r = rec.value;
    if (TERMINAL_RUN_STATUSES.has(r.status)) throw domainError('AGT_ERR_RUN_ENDED', [runId, r.status]);
    if (WAITING_RUN_STATUSES.has(r.status) && !r.decided_at) throw domainError('AGT_ERR_RUN_STILL_WAITING', [runId, r.status]);
    // `ownerDead` (start-up sweep on the single-process embedded store): the owner's lease may not
    // have lapsed yet, but its process is gone. Without it, a SIGKILLed run waited out its whole
    // lease (60 s) and was then left `running` until the next periodic sweep (found by
    // test/http/recovery.test.ts, scenario a). A background run's agent run has no lease to ask
    // (an older record's is ignored): whoever holds its background run's lease continues it
    // (src/background/agent-bridge.ts), and POST /runs/{id}/resume refuses it (src/http/runs.ts).
    if (r.status === 'running' && r.kind !== 'background' && !how.ownerDead && this.deps.leases.heldElsewhere(r.owner, r.lease_expires_at, this.deps.workerId))
      throw domainError('AGT_ERR_RUN_ALREADY_LIVE', [runId, String(r.owner)]);
    if (!snapRec) throw domainError('AGT_ERR_RUN_NO_SNAPSHOT', [runId]);
    // A snapshot from a newer run machine (a rolling upgrade's other half, or a downgrade) is left
    // as it is for a server that knows it: restored here it would be misread. Older versions
    // restore (test/runtime/snapshot-fixtures.test.ts keeps one of each paused state).
    const snapVersion = snapRec.value.machine_version ?? 1;
    if (snapVersion > RUN_MACHINE_VERSION) {
      throw domainError('AGT_ERR_RUN_SAVED_BY_NEWER', [runId, snapVersion, RUN_MACHINE_VERSION]);
    }
    // Stopped on request (POST /runs/{id}/interrupt), not by a shutdown: resuming it is no recovery.
    const requested = r.status === 'interrupted' && r.machine_state === 'interrupted';
    const recovering = !requested && (how.cause === 'recovered_after_lapsed_lease' || how.cause === 'interrupted');
    if (recovering && r.recoveries >= this.deps.settings.sweep.max_recoveries) {
      await repos(this.deps.store).runs.update<RunRecord>(
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
      throw domainError('AGT_ERR_RUN_RECOVERY_EXHAUSTED', [runId]);
    }
    const releaseSlot = how.slot ?? (r.kind === 'background' ? () => {} : await this.kernel.slots.acquire());
    let agent: AgentLease | null = null;
    try {
      if (pre) pre.taken = true; // from here, the catch below releases the lease
      agent = await (pre?.agent ?? this.kernel.acquireAgent(r.agent_id, { resuming: true, model: snapRec.value.origin?.replay_of?.variant.model }));
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
        // None for a background run's agent run: its background run's lease owns it.
        lease_expires_at: r.kind === 'background' ? null : this.deps.leases.expiresAt(this.deps.settings.lease_seconds * 1000),
        recoveries: recovering ? r.recoveries + 1 : r.recoveries,
        updated_at: iso(now),
      };
      // The claim, the new trace segment and the end of the previous one: one commit. The claim's
      // CAS is what makes this process the only owner, so the old segment needs no check of its own.
      const trace = traceValueOf(claimed, r.trace_id, 'running', now);
      const prevTrace = await (pre?.prevTrace ?? repos(this.deps.store).traces.get<TraceValue>(r.trace_id));
      const [written] = await this.deps.store.commit([
        { op: 'update', kind: repos(this.deps.store).runs.kind, id: runId, value: claimed, expectedVersion: rec.version, indexes: runIndexes(claimed) },
        {
          op: 'create',
          kind: repos(this.deps.store).traces.kind,
          id: trace_id,
          value: trace,
          indexes: { run_id: runId, session_id: sessionKeyOf(r), task_id: r.task_id },
        },
        ...(prevTrace
          ? [
              {
                op: 'update' as const,
                kind: repos(this.deps.store).traces.kind,
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
        await this.deps.ledger
          .grant(req.key, req.meter as never, req.amount, { grant_id: req.request_id })
          .catch(swallow('recovery.budget_grant', { run_id: runId, request_id: req.request_id }));
      }
      this.deps.metrics.liveRuns.inc();
      const held = agent;
      agent = null; // the live run lets go of it when it retires
      const live = this.kernel.host(
        written as Versioned<RunRecord>,
        releaseSlot,
        held,
        {
          workspace_path: snapRec.value.workspace_path,
          kind: r.kind,
          task_id: r.task_id,
          agent_id: r.agent_id,
          checkpoints: snapRec.value.checkpoints,
          origin: snapRec.value.origin,
        },
        trace,
      );
      const lastBeat = r.heartbeat_at ? Date.parse(r.heartbeat_at) : now;
      void live.emit({
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
      this.kernel.inbox.mark(runId);
      live.spawn({ snapshot }, resumeEventFor(r, state, this.deps.clock.now()));
      return { run_id: runId, session_id: r.session_id, trace_id, settled: live.settled };
    } catch (err) {
      releaseSlot();
      agent?.release();
      if (isStoreError(err, 'stale_version')) throw domainError('AGT_ERR_RUN_TAKEN', [runId]);
      throw err;
    }
  }

  /**
   * One orphan sweep (docs/contract.md §6.2): runs whose lease lapsed, runs interrupted by a graceful
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
    if (!settings.sweep.enabled || this.kernel.closing) return [];
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
        const page: { items: Versioned<RunRecord>[]; next_cursor: string | null } = await repos(store).runs.list<RunRecord>({ index, cursor, limit: 500 });
        for (const { value: r } of page.items) {
          // A background run's agent run has no lease of its own: only its background run's RECOVER
          // (src/background/claimer.ts, machines/background-run.machine.ts) decides it is orphaned.
          if (r.kind === 'background') continue;
          if (this.kernel.live.has(r.run_id)) continue;
          let cause: RecoveryCause | null = null;
          if (status === 'running') {
            if (opts.startup || this.deps.leases.lapsed(r.lease_expires_at)) cause = 'recovered_after_lapsed_lease';
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
   * of them and every new run waited 5 s for a 503.
   * A resume is not awaited: the slot is what limits how many recovered runs are live.
   */
  private async recoverQueued(): Promise<void> {
    while (this.recoveryQueue.length > 0 && !this.kernel.closing) {
      let slot: () => void;
      try {
        slot = await this.kernel.slots.acquireRecovery();
      } catch {
        return; // shutdown cancelled the wait
      }
      const c = this.recoveryQueue.shift();
      if (!c || this.kernel.closing) {
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
          this.deps.logger.warn({ run_id: c.id, err: String(err) }, 'sweep could not resume run');
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
        await this.sweep().catch((err) => this.deps.logger.error({ err: String(err) }, 'orphan sweep failed'));
        if (!this.kernel.closing) schedule();
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
    this.kernel.closing = true;
    if (this.sweepTimer) clearTimeout(this.sweepTimer);
    // Runs still queued for recovery stay stored as they are; the next start finds them again.
    this.kernel.slots.cancelRecovery(domainError('AGT_ERR_SHUTTING_DOWN', [], { headers: { 'retry-after': '5' } }));
    for (const c of this.recoveryQueue.splice(0)) this.recovering.delete(c.id);
  }

  /**
   * Graceful shutdown: refuse new runs, give live runs `graceMs` to end on their own, then save
   * the rest as `interrupted` with their leases released; the next start resumes them.
   */
  async shutdown(graceMs: number): Promise<void> {
    this.beginShutdown();
    const pending = [...this.kernel.live.values()];
    if (pending.length > 0) {
      await Promise.race([Promise.all(pending.map((l) => l.settled)), new Promise((r) => setTimeout(r, graceMs).unref())]);
    }
    // The grace period is over: every run still inside a step has its tool calls and model call
    // aborted now, all at once, and only then are the runs saved (in parallel). Aborting run by
    // run between their writes gave the last run's tools their signal only after every other
    // run was written (test/http/shutdown.test.ts). `ending` first: whatever the aborted step
    // does next is not persisted over the `interrupted` record.
    const rest = [...this.kernel.live.values()];
    for (const live of rest) live.ending = true;
    for (const live of rest) live.abort.abort();
    await Promise.all(rest.map((live) => live.saveInterrupted()));
  }
}
