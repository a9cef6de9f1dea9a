// Starting a run once it may go (RunService.start, after its concurrency key's slot if it has
// one): the session policy, a run slot, the agent, the record and its first commit, the session's
// turn and the conversation the actor starts with. RunService.start is the only caller (RunFlow
// calls it too, for a run that waited `queued`).
import type { ChatMessage } from '../agent/model/types.js';
import type { AgentLease } from '../agent/agent-profile.js';
import { domainError, notFound } from '../errors.js';
import { newId } from '../ids.js';
import { isSharedStore } from '../store/changes.js';
import { repos } from '../store/repos/index.js';
import { isRefusal, reportSwallowed, swallow } from '../telemetry/swallowed.js';
import { busySessionPlan } from '../../machines/policies/busy-session.js';
import { originView } from './debug/origin.js';
import type { RunDecisions } from './run-decisions.js';
import type { RunHost } from './run-host.js';
import type { RunKernel } from './run-kernel.js';
import { newRunRecord, runIndexes, type RunRecord } from './run-record.js';
import { iso, traceValueOf, type RunServiceDeps, type SessionValue, type StartOptions, type StartedRun } from './run-types.js';
import { keyTakeOp } from '../flow/key-slots.js';
import { takeFoldMs } from './create-fold.js';
import { bgKey, bgTenantOf, tenantKey } from './tenancy.js';

export class RunStarter {
  constructor(
    private readonly kernel: RunKernel,
    private readonly decisions: RunDecisions,
  ) {}

  private get deps(): RunServiceDeps {
    return this.kernel.deps;
  }

  /**
   * RunService.start once the run may go: its concurrency key's slot (if it has a key) is held.
   * `heldKey`: a key slot RunFlow.startKeyed took in memory for `opts.run_id`, given back here if
   * the start fails (so a keyed start needs no promise of its own to do it).
   */
  async start(query: string, sessionId: string | null | undefined, opts: StartOptions, heldKey?: string): Promise<StartedRun> {
    let releaseSlot: (() => void) | undefined;
    let live: RunHost | null = null;
    let agent: AgentLease | null = null;
    /** Set when start() fails: a shared store's late onAccepted must not open a stream for it. */
    let failed = false;
    try {
      if (this.kernel.closing) throw domainError('AGT_ERR_SHUTTING_DOWN', [], { headers: { 'retry-after': '5' } });
      // A session with a run in flight in this process: the session policy decides (docs/runs.md,
      // "Busy sessions"). `enqueue` waits in the session's queue, as every run did before.
      const policy = opts.session_policy ?? this.deps.settings.session_policy ?? 'enqueue';
      const tenant = opts.tenant ?? null;
      const busyWith = sessionId && policy !== 'enqueue' ? this.kernel.sessions.holder(tenantKey(tenant, sessionId)) : null;
      const plan = busySessionPlan(policy, busyWith);
      if (plan.refuse) throw domainError('AGT_ERR_SESSION_BUSY', [String(sessionId), String(busyWith)], { detail: 'session_busy' });
      releaseSlot = opts.slot ?? (opts.admitted ? () => {} : await this.kernel.slots.acquire({ priority: opts.priority }));
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
        // A background run's agent run holds no lease of its own: its background run's does
        // (docs/architecture.md "Which instance owns a run").
        lease_expires_at: opts.kind === 'background' ? null : this.deps.leases.expiresAt(settings.lease_seconds * 1000),
        owner: this.deps.workerId,
      });
      // A run with a concurrency key carries it (its end lets go of the slot); one that waited
      // `queued` keeps when it was made and what it waited on. Set on the new record, not a copy of
      // it; its priority only when not the default 0 (the views read `priority ?? 0`).
      const record = created;
      if (opts.concurrency) {
        record.concurrency = opts.concurrency;
        if (opts.priority) record.priority = opts.priority;
        if (queued) {
          record.created_at = queued.created_at;
          record.queue = queued.queue ? { ...queued.queue, admitted_at: opts.admitted_at ?? clock.now() } : null;
        }
      }
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
      // Nothing can have written its inbox yet: a new record's, and a queued one's too (steer and
      // interrupt refuse a `queued` run, src/runtime/run-decisions.ts, and RunFlow.admit read it
      // still queued just now). So its first boundary reads nothing: on a shared store an admitted
      // run's way to the model has no store round, and runs of a key admitted back to back reach
      // the model in their order (RunFlow.admit; test/flow/concurrency.test.ts, FIFO).
      this.kernel.inbox.born(run_id);
      const take = opts.takeSlotInCreate;
      live = this.kernel.host({ id: run_id, version: 0, seq: 0, value: record }, releaseSlot, agent, { ...opts, workspace_path }, trace, [
        { op: 'create', kind: repos(this.deps.store).traces.kind, id: trace_id, value: trace, indexes: traceIndexes },
        ...(take ? [keyTakeOp(this.deps.store, take.key, run_id, take.limit, clock.now())] : []),
      ]);
      // A key's slot taken in the creating commit: no event and no model call before the store
      // took it (refused, 'full': RunFlow.startKeyed queues the run, and nothing of this try remains).
      if (take) {
        await live.writer.created;
        // A background run's agent run's writes may wait for its claim's round instead (write-join.ts).
        if (opts.kind !== 'background') live.writer.foldNext(takeFoldMs(this.deps.createFoldMs));
      }
      void live.emit({
        event_type: 'user_message',
        actor: { type: 'user', id: session_id },
        input: opts.context ? { query, context: opts.context } : { query },
        span_id: live.rootSpan,
        // the trace's gen_ai.agent.name; a fork's or replay's origin (src/runtime/debug/origin.ts)
        // A run that waited for its key: when it was queued and when the key admitted it (docs/flow-control.md).
        metadata: { agent_name: record.agent_name, ...originView(opts.origin), ...queueView(record.queue) },
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
        await this.decisions.interrupt(busyWith, { by: `run:${run_id}` }).catch(swallow('runs.session_interrupt', { run_id: busyWith, by: run_id }, isRefusal));
      }
      if (busyWith && plan.stop === 'cancel')
        await this.decisions.cancel(busyWith).catch(swallow('runs.session_rollback_cancel', { run_id: busyWith, by: run_id }, isRefusal));
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
      live.sessionCreateInCommit = newSession || opts.session_is_private === true || !isSharedStore(this.deps.store);
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
      // Its creating write failed already (fenced off: StartOptions.after refused): nothing of it may run.
      if (live.ending) await live.writer.created;
      live.spawn({
        input: { run_id, session_id, agent_name: profile.agent_name, max_steps: profile.max_steps, messages, query, history_length },
      });
      opts.onSpawned?.();
      await live.writer.created; // (on a shared store, onAccepted was called just before this resumes)
      this.deps.metrics.runStarted();
      return { run_id, session_id, trace_id, settled: live.settled };
    } catch (err) {
      failed = true;
      if (live) {
        // Never created (or its session could not be read): stop whatever started, let go of
        // the slot and the session.
        live.discard();
        this.kernel.inbox.forget(live.run_id);
      } else {
        releaseSlot?.();
        agent?.release();
      }
      if (heldKey !== undefined && opts.run_id !== undefined) this.kernel.waitingRuns?.releaseHeld(heldKey, opts.run_id);
      throw err;
    }
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
}

/** user_message metadata of a run that waited `queued` for its concurrency key. */
function queueView(q: RunRecord['queue']): { queue?: { enqueued_at: string; admitted_at: string } } {
  return q?.admitted_at !== undefined ? { queue: { enqueued_at: iso(q.enqueued_at), admitted_at: iso(q.admitted_at) } } : {};
}

/** The user and assistant text of `conversation` before its last user message: what a seeded session holds. */
function seedPrelude(conversation: ChatMessage[], redact: (text: string) => string): ChatMessage[] {
  const turn = conversation.map((m) => m.role).lastIndexOf('user');
  return conversation
    .slice(0, Math.max(0, turn))
    .filter((m): m is Extract<ChatMessage, { role: 'user' | 'assistant' }> => (m.role === 'user' || m.role === 'assistant') && m.content !== '')
    .map((m) => ({ role: m.role, content: redact(m.content) }));
}
