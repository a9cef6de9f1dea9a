// The event outbox of background runs. A live run's row write carries its lifecycle events in
// the same commit (Store.commitWithEvents: one store round; on the embedded stores, one atomic
// write); the runs a scheduler tick creates have theirs appended to the event log (the run's own
// trace) behind the commit, in order, on a per-run chain that does not hold up the run's next
// transition. Either way they also ride in the row's outbox, so a crash that leaves the row
// without them (PostgreSQL appends after the commit) is repaired from the row (repairOutbox).
// Then the workspace mirror, in the same order.
import { bgIdOf, tenantField } from './tenancy.js';
import type { BackgroundRunContext, LifecycleEvent } from '../../machines/background-run.machine.js';
import type { TelemetryEmitter } from '../runtime/emitter.js';
import type { Store } from '../store/store.js';
import { BACKGROUND_EVENT_TYPES, type EventRecordInput } from '../telemetry/record.js';
import { TERMINAL, type BgRunRow, type LifecycleRecord } from './types.js';
import type { AppLogger } from '../telemetry/logger.js';
import type { RunWorkspaces } from './run-workspace.js';

/**
 * Lifecycle events of one run on their way to the event log and the workspace, in order. The row
 * is committed first and the append follows without holding up the run's next transition; events
 * not yet acknowledged stay in `unacked` and ride in the outbox of every row write until they
 * are, so a crash at any point leaves them recoverable from the row (repairOutbox).
 */
interface AppendState {
  /** The appends (a load waits for these, or it would re-emit them). */
  chain: Promise<void>;
  /** The appends and the workspace files (a caller told "ended" waits for these). */
  flushed: Promise<unknown>;
  unacked: LifecycleRecord[];
  /** Steps not yet flushed (the state is dropped at 0). */
  pending: number;
  /** Steps on `chain` whose mirror step is not issued yet: while there are some, a step queues behind them. */
  chained: number;
}

export interface EventOutboxDeps {
  store: Store;
  telemetry: TelemetryEmitter;
  workerId: string;
  workspaces(): RunWorkspaces;
  logger: AppLogger;
  /** An append failed: the engine drops its copy of the run (the row's outbox still holds the events). */
  onAppendFailed(ctx: BackgroundRunContext): void;
}

const RESOLVED: Promise<void> = Promise.resolve();

export class EventOutbox {
  /** Runs whose lifecycle events are on their way to the log: a load waits, or it would re-emit them. */
  private readonly appends = new Map<string, AppendState>();
  /** Highest sequence this process appended per non-terminal run: a load with a match skips the outbox check. */
  private readonly emitted = new Map<string, number>();

  constructor(private readonly deps: EventOutboxDeps) {}

  /** Resolves once every lifecycle event this process has queued for the run is stored. */
  appended(runId: string): Promise<void> {
    // Not async: the chain itself, or one settled promise when nothing is on its way (every
    // manual run's POST asks, once its row is written).
    return this.appends.get(runId)?.chain ?? RESOLVED;
  }

  /** The run's appends under way, if any (a load waits for these, or it would re-emit them). */
  appending(runId: string): Promise<void> | undefined {
    return this.appends.get(runId)?.chain;
  }

  /** The run's appends and workspace files under way, if any (a caller told "ended" waits for these). */
  flushed(runId: string): Promise<unknown> | undefined {
    return this.appends.get(runId)?.flushed;
  }

  /** Every append and workspace write still on its way (engine close; the store closes after this). */
  async flushAll(): Promise<void> {
    await Promise.all([...this.appends.values()].map((a) => a.flushed));
  }

  has(runId: string): boolean {
    return this.appends.has(runId);
  }

  /** Events written to the row but not yet acknowledged by the log: they ride in the next row write's outbox. */
  unacked(runId: string): LifecycleRecord[] {
    return this.appends.get(runId)?.unacked ?? [];
  }

  /** The run's row is gone or ended elsewhere: the next load checks its outbox again. */
  forget(runId: string): void {
    this.emitted.delete(runId);
  }

  lifecycleOf(ctx: BackgroundRunContext, e: LifecycleEvent, sequence: number, at: string): LifecycleRecord {
    return {
      sequence,
      event: e.type,
      timestamp: at,
      run_id: ctx.run.run_id,
      task_id: ctx.run.task_id,
      agent_id: ctx.run.agent_id,
      status: ctx.run.status,
      attempt: ctx.run.attempt,
      worker_id: ctx.run.lease_owner ?? this.deps.workerId,
      lease_generation: ctx.run.lease_generation,
      data: stripUndefined(e.data ?? {}),
    };
  }

  /**
   * Queues the append of a write's lifecycle events to telemetry (the run's own trace), then their
   * workspace mirror, behind the run's earlier ones. Resolves when this batch is through (never
   * rejects). A failed append drops this process's copy of the run: the row's outbox still holds
   * the events, and the next load re-appends them.
   */
  queueEmit(ctx: BackgroundRunContext, lifecycle: LifecycleRecord[], opts: { runJson: boolean; mirror: boolean; stored?: boolean }): Promise<unknown> {
    const runId = ctx.run.run_id;
    let st = this.appends.get(runId);
    // The events are stored with the row and no step of the run is on the chain (no append is on
    // its way): there is nothing to order this step behind, so its mirror step goes to the
    // workspace lane now, which keeps each folder's steps in the order they come. Every row write
    // of a run on a store that takes events in its commits (LevelDB) goes this way, without the
    // chain's promises (test/background/outbox.test.ts).
    if (opts.stored && (!st || st.chained === 0)) return this.mirrorNow(ctx, lifecycle, opts, st);
    if (!st) {
      st = { chain: RESOLVED, flushed: RESOLVED, unacked: [], pending: 0, chained: 0 };
      this.appends.set(runId, st);
    }
    const state = st;
    // `stored`: the events went to the log in the row's own commit (commitWithEvents): only
    // their workspace mirror is left, behind the run's earlier steps.
    if (!opts.stored) for (const l of lifecycle) state.unacked.push(l);
    state.pending++;
    state.chained++;
    const terminal = TERMINAL.has(ctx.run.status);
    let mirrored: Promise<unknown> | null = null;
    const step = state.chain.then(async () => {
      try {
        if (lifecycle.length > 0 && opts.stored) this.noteEmitted(runId, lifecycle, terminal);
        else if (lifecycle.length > 0) {
          try {
            await this.deps.telemetry.emitMany(lifecycle.map((l) => this.telemetryOf(ctx, l)));
          } catch (err) {
            this.deps.logger.warn(
              { bg_run_id: runId, err: String(err) },
              'could not append the lifecycle events of a background run; its next load re-appends them',
            );
            this.emitted.delete(runId);
            this.deps.onAppendFailed(ctx);
            return;
          }
          const last = lifecycle[lifecycle.length - 1].sequence;
          state.unacked = state.unacked.filter((l) => l.sequence > last);
          this.noteEmitted(runId, lifecycle, terminal);
        }
        // Issued in append order; the mirror lane keeps each folder's writes in that order.
        if (opts.mirror) mirrored = this.deps.workspaces().mirror(ctx, lifecycle, opts.runJson, terminal);
      } finally {
        state.chained--;
      }
    });
    // The chain only orders the next step; `step` rejects to this step's own caller.
    state.chain = step.catch(() => undefined);
    const flushed = state.chain.then(() => mirrored ?? undefined);
    state.flushed = flushed;
    void flushed.finally(() => this.stepFlushed(runId, state));
    return flushed;
  }

  /** The highest sequence this process appended for a run that goes on (a load with a match skips the outbox check). */
  private noteEmitted(runId: string, lifecycle: LifecycleRecord[], terminal: boolean): void {
    if (lifecycle.length === 0) return;
    if (terminal) this.emitted.delete(runId);
    else this.emitted.set(runId, lifecycle[lifecycle.length - 1].sequence);
  }

  /** A step is flushed: the run's state goes once none is left. */
  private stepFlushed(runId: string, state: AppendState): void {
    if (--state.pending === 0 && this.appends.get(runId) === state) this.appends.delete(runId);
  }

  /**
   * queueEmit of a stored step with no step of its run on the chain: noted, and its mirror step
   * issued at once. Its state lives until the files are written: a caller told "ended" waits for
   * them (flushed), and a later step queues behind an append on its way.
   */
  private mirrorNow(
    ctx: BackgroundRunContext,
    lifecycle: LifecycleRecord[],
    opts: { runJson: boolean; mirror: boolean },
    st: AppendState | undefined,
  ): Promise<unknown> {
    const runId = ctx.run.run_id;
    const terminal = TERMINAL.has(ctx.run.status);
    this.noteEmitted(runId, lifecycle, terminal);
    if (!opts.mirror) return RESOLVED;
    // The lane writes a folder's steps in order: this step's files written, the earlier ones are too.
    const flushed = this.deps.workspaces().mirror(ctx, lifecycle, opts.runJson, terminal);
    const state = st ?? { chain: RESOLVED, flushed, unacked: [], pending: 0, chained: 0 };
    if (!st) this.appends.set(runId, state);
    state.pending++;
    state.flushed = flushed;
    const done = () => this.stepFlushed(runId, state);
    flushed.then(done, done);
    return flushed;
  }

  /** Appends now and waits (the outbox repair path). Throws when the append fails. */
  private async emitLifecycle(ctx: BackgroundRunContext, lifecycle: LifecycleRecord[]): Promise<void> {
    await this.deps.telemetry.emitMany(lifecycle.map((l) => this.telemetryOf(ctx, l)));
    await this.deps.workspaces().mirror(ctx, lifecycle, true, TERMINAL.has(ctx.run.status));
  }

  /** Lifecycle records as the telemetry events that carry them (a row write's commitWithEvents). */
  eventsOf(ctx: BackgroundRunContext, lifecycle: LifecycleRecord[]): EventRecordInput[] {
    return lifecycle.map((l) => this.telemetryOf(ctx, l));
  }

  private telemetryOf(ctx: BackgroundRunContext, l: LifecycleRecord): EventRecordInput {
    const isError = l.event === 'background_run_failed' || l.event === 'background_run_timeout' || l.event === 'background_run_retrying';
    return {
      event_type: l.event,
      trace_id: ctx.internal.trace_id,
      span_id: ctx.internal.span_id,
      parent_span_id: null,
      // The client's task and agent ids (a tenant's are keys inside, tenancy.ts), with its tenant.
      actor: { type: 'background', id: l.worker_id, name: bgIdOf(ctx.run.task_id) },
      sequence: l.sequence,
      error: isError && ctx.run.error ? { type: l.event, message: ctx.run.error } : null,
      metadata: {
        run_id: l.run_id,
        session_id: ctx.run.session_id,
        agent_id: bgIdOf(l.agent_id),
        task_id: bgIdOf(l.task_id),
        status: l.status,
        attempt: l.attempt,
        worker_id: l.worker_id,
        lease_generation: l.lease_generation,
        lifecycle_timestamp: l.timestamp,
        detail: l.data,
        // The run's tenant (its task key's, tenancy.ts): telemetry reads of a tenant filter on it.
        ...tenantField(l.task_id),
      },
    };
  }

  /** Lifecycle events of a run as stored in telemetry, oldest first. */
  async storedLifecycle(runId: string): Promise<Array<{ sequence: number; event: Record<string, unknown> }>> {
    const out: Array<{ sequence: number; event: Record<string, unknown> }> = [];
    let after: string | null = null;
    do {
      const page = await this.deps.store.readEvents({ filters: { run_id: runId, event_type: [...BACKGROUND_EVENT_TYPES] }, after, limit: 1000 });
      for (const e of page.events) {
        if (typeof e.sequence === 'number') out.push({ sequence: e.sequence, event: e });
      }
      after = page.next_cursor;
    } while (after);
    return out;
  }

  /**
   * The row is written before its events are appended; a crash in between leaves events the row
   * counted but the log lacks. Re-append those (from the outbox) so the replay stays 1..n.
   */
  async repairOutbox(row: BgRunRow): Promise<void> {
    const runId = row.run.run_id;
    if (this.emitted.get(runId) === row.event_seq) return;
    // An empty outbox: nothing to re-append (on a store that commits the events with the row, the
    // row keeps none), but the workspace may still lack lines.
    if (row.outbox.length > 0) {
      const have = new Set((await this.storedLifecycle(runId)).map((e) => e.sequence));
      const missing = row.outbox.filter((l) => !have.has(l.sequence));
      if (missing.length > 0) {
        this.deps.logger.warn({ bg_run_id: runId, sequences: missing.map((m) => m.sequence) }, 're-appending lifecycle events lost by a crash');
        await this.emitLifecycle(row, missing);
      }
    }
    await this.deps.workspaces().repairWorkspace(row);
    if (!TERMINAL.has(row.run.status)) this.emitted.set(runId, row.event_seq);
  }

  /** The replay of GET /background/runs/{id}/events, from the log, in sequence order, each once. */
  async replay(runId: string): Promise<Array<Record<string, unknown>>> {
    const stored = await this.storedLifecycle(runId);
    stored.sort((a, b) => a.sequence - b.sequence);
    const seen = new Set<number>();
    const out: Array<Record<string, unknown>> = [];
    for (const { sequence, event } of stored) {
      if (seen.has(sequence)) continue; // a re-append raced a late original: keep the first
      seen.add(sequence);
      const m = (event.metadata ?? {}) as Record<string, unknown>;
      out.push({
        sequence,
        event: event.event_type,
        event_type: event.event_type,
        event_id: event.event_id,
        trace_id: event.trace_id,
        span_id: event.span_id,
        timestamp: m.lifecycle_timestamp ?? event.timestamp,
        run_id: m.run_id,
        task_id: m.task_id,
        agent_id: m.agent_id,
        session_id: m.session_id,
        status: m.status,
        attempt: m.attempt,
        worker_id: m.worker_id,
        lease_generation: m.lease_generation,
        data: m.detail ?? {},
        error: event.error ?? null,
      });
    }
    return out;
  }
}

function stripUndefined(o: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v;
  return out;
}
