// What the parts of the run service share: its dependencies, the runs live in this process (one
// RunHost each), the admission slots, the session gate, the inbox, the session history, and the
// few things every part needs (acquiring the agent a run runs as, making a host, telling
// listeners that a run settled). RunService (src/runtime/runs.ts) owns it; run-effects, run-tools,
// run-decisions and run-recovery work through it.
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import type { AnyActorLogic } from 'xstate';
import { AppError, domainError, notFound } from '../errors.js';
import type { Versioned, WriteOp } from '../store/store.js';
import type { AgentLease, AgentProfile } from '../agent/agent-profile.js';
import type { CarriedWrite } from './persistence.js';
import { RunHost } from './run-host.js';
import type { RunRecord } from './run-record.js';
import { RunInbox } from './run-inbox.js';
import { SessionHistory } from './run-history.js';
import { SessionGate } from './session-gate.js';
import { Slots } from './slots.js';
import { iso, type RunServiceDeps, type StartOptions, type TraceValue } from './run-types.js';
import { repos } from '../store/repos/index.js';

/** A live text delta: its text, its number in the run, the sequence of the last event the run emitted before it. */
export type DeltaListener = (text: string, sequence: number, afterEvent: number) => void;

export class RunKernel {
  /** The runs this process hosts, by run id. */
  readonly live = new Map<string, RunHost>();
  readonly slots: Slots;
  readonly sessions: SessionGate;
  /** Steer messages and interrupt requests (src/runtime/run-inbox.ts). */
  readonly inbox: RunInbox;
  readonly history: SessionHistory;
  /** The run machine with its effects bound (RunEffects.bind); set once by RunService. */
  logic!: AnyActorLogic;
  /** Set by a graceful shutdown (RunRecovery.beginShutdown): no new runs, live ones stop at a boundary. */
  closing = false;
  /** The served agent (config `agent`): runs without an agent id, and agents registered as it. */
  private readonly served: AgentProfile;
  /**
   * Listeners of live runs' text deltas (RunService.followDeltas), by run id: whoever follows a run
   * this process hosts, its resumed segments included (a resumed run has no StartOptions.onDelta).
   */
  readonly deltaTaps = new Map<string, Set<DeltaListener>>();
  private readonly settledListeners = new Set<(record: RunRecord) => void>();
  private readonly endedListeners = new Set<(record: RunRecord, keyReleased: boolean) => void>();

  constructor(readonly deps: RunServiceDeps) {
    const st = deps.settings;
    this.slots = new Slots(st.max_concurrent_runs, st.admission_wait_ms, st.sweep.max_concurrent);
    this.sessions = new SessionGate(deps.system);
    this.inbox = new RunInbox(deps.store, () => iso(deps.clock.now()));
    this.history = new SessionHistory(deps);
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
  }

  /** See RunService.followDeltas. */
  followDeltas(runId: string, listener: DeltaListener): () => void {
    let set = this.deltaTaps.get(runId);
    if (!set) this.deltaTaps.set(runId, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.deltaTaps.get(runId) === set) this.deltaTaps.delete(runId);
    };
  }

  /** The served agent, or the registered agent `agentId` (404 when it is not registered). */
  async acquireAgent(agentId: string | undefined, opts: { resuming?: boolean; model?: Record<string, unknown> } = {}): Promise<AgentLease> {
    const lease = await this.acquireAgentAsIs(agentId, opts);
    if (!opts.model) return lease;
    // A replay's model variant (src/runtime/debug/): the agent as it is, answering with that model.
    try {
      if (!this.deps.agents?.variantModel) throw domainError('AGT_ERR_REPLAY_MODEL_UNAVAILABLE', []);
      const model = await this.deps.agents.variantModel(opts.model);
      return { profile: { ...lease.profile, model }, release: lease.release };
    } catch (err) {
      lease.release();
      throw err;
    }
  }

  private async acquireAgentAsIs(agentId: string | undefined, opts: { resuming?: boolean }): Promise<AgentLease> {
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
  sessionWorkspace(sessionId: string, root: string | null): string | null {
    if (!root) return null;
    const safe =
      /^[A-Za-z0-9_.-]{1,128}$/.test(sessionId) && !/^\.{1,2}$/.test(sessionId)
        ? sessionId
        : `h_${createHash('sha256').update(sessionId).digest('hex').slice(0, 32)}`;
    return join(root, safe);
  }

  /** A host for a run this process now owns, registered live. `create`: its writer's first commit creates the run, with these ops. */
  host(rec: Versioned<RunRecord>, releaseSlot: () => void, agent: AgentLease, opts: StartOptions, trace: TraceValue, create?: WriteOp[]): RunHost {
    const host = new RunHost(this, rec, releaseSlot, agent, opts, trace, create);
    this.live.set(host.run_id, host);
    return host;
  }

  /** The host of a run live here; effects run only while it is. */
  mustLive(runId: string): RunHost {
    const live = this.live.get(runId);
    // eslint-disable-next-line no-restricted-syntax -- an invariant: only the effects of a live run call it, never a route
    if (!live) throw new Error(`run ${runId} is not live in this process`);
    return live;
  }

  /**
   * The stored run. A run this process just accepted may not be durable yet (StartOptions.onAccepted):
   * its creating write, held back to fold with what follows (src/runtime/run-host.ts, up to 200 ms
   * for a background run's agent run), goes to the store now and is awaited.
   */
  async get(runId: string): Promise<RunRecord> {
    const live = this.live.get(runId);
    live?.writer.flush();
    const creating = live?.writer.created;
    if (creating) await creating.catch(() => undefined);
    const rec = await repos(this.deps.store).runs.get<RunRecord>(runId);
    if (!rec) throw notFound('run', runId);
    return rec.value;
  }

  /** RunService.foldFinal: what a background agent run's completion carries in its final commit. */
  finalFold: ((record: RunRecord) => CarriedWrite | null) | null = null;

  /** The runs waiting `queued` in this process for a concurrency key (src/runtime/run-flow.ts); set by RunService. */
  waitingRuns: { isWaiting(runId: string): boolean; dropped(runId: string): void; releaseHeld(key: string, runId: string): void } | null = null;

  /** RunService.resumeThrough: the background run a decided background agent run goes on through. */
  resumeThrough: ((agentRunId: string) => Promise<CarriedWrite | null>) | null = null;

  /** RunService.cancelRunning: cancels the background run of a running background agent run; false when there is none to go through. */
  cancelRunning: ((agentRunId: string) => Promise<boolean>) | null = null;

  /** RunService.cancelThrough: the background run a cancelled parked background agent run is cancelled with. */
  cancelThrough: ((agentRunId: string) => Promise<CarriedWrite | null>) | null = null;

  /**
   * Told as soon as a run's end or park is stored (on a store only this process writes: queued,
   * see RunHost.onSnapshot), before its last events and history are (which onSettled waits for):
   * what the run held for others (a concurrency key's slot) goes on at once. `keyReleased`: that
   * slot went back in the end's own commit already (a shared store: RunHost.onSnapshot).
   */
  onEnded(listener: (record: RunRecord, keyReleased: boolean) => void): void {
    this.endedListeners.add(listener);
  }

  notifyEnded(record: RunRecord, keyReleased = false): void {
    for (const l of this.endedListeners) l(record, keyReleased);
  }

  onSettled(listener: (record: RunRecord) => void): () => void {
    this.settledListeners.add(listener);
    return () => this.settledListeners.delete(listener);
  }

  notifySettled(record: RunRecord): void {
    for (const l of this.settledListeners) {
      try {
        l(record);
      } catch (err) {
        this.deps.logger.error({ run_id: record.run_id, err: String(err) }, 'run settled listener failed');
      }
    }
  }
}
