// A new background run, built and validated in memory without writing anything: its row, its
// creation events (queued, or scheduled then skipped when the overlap policy said so) and the ops
// of its commit (the scheduler puts the ops of every occurrence of a tick into one commit per task).
import {
  BACKGROUND_RUN_MACHINE_VERSION,
  backgroundRunMachine,
  type BackgroundRunContext,
  type LifecycleEvent,
  type RecordParams,
} from '../../machines/background-run.machine.js';
import { createHash } from 'node:crypto';
import { transition } from 'xstate';
import { maxAttempts } from '../../machines/policies/retry.js';
import { renderTaskKey } from '../../machines/policies/flow.js';
import { newId } from '../ids.js';
import type { BackgroundRun } from '../schemas/background.js';
import type { RecordIndexes, Store, WriteOp } from '../store/store.js';
import type { Repos } from '../store/repos/index.js';
import type { TraceRecord } from '../telemetry/traces.js';
import { TERMINAL, attemptRecordId, occurrenceRecordId, runRowIndexes, type BgRunRow, type LifecycleRecord, type TaskRow } from './types.js';
import type { CreateRunInput, PreparedRun } from './host-types.js';
import { bgIdOf, bgSessionKey } from './tenancy.js';

const iso = (ms: number) => new Date(ms).toISOString();

/** What building a run needs of the engine's parts. */
export interface PrepareParts {
  /** The run's workspace, relative to the workspace root (run-workspace.ts). */
  workspaceFor(task: TaskRow, runId: string): string;
  lifecycleOf(ctx: BackgroundRunContext, e: LifecycleEvent, sequence: number, at: string): LifecycleRecord;
  traceValue(ctx: BackgroundRunContext, status: string): TraceRecord;
  /** The repositories of the engine's store (the ops of the run's commit). */
  repos: Repos;
  /** Store.prefetch: what the run's commit will read is read (or, for ids made up here, known absent) now. */
  prefetch?: Store['prefetch'];
  /** The run's commit carries its events atomically (Store.commitWithEvents): the row needs no outbox copy. */
  eventsInCommits?: boolean;
}

/**
 * The session of a run of a task with session_policy `run`: that run's alone. Named with the
 * client's ids: a tenant's run keeps its session in the tenant's namespace (bgSessionKey), so the
 * ids its answers and events show never spell another tenant's key.
 */
export const ownSessionId = (agentId: string, taskId: string, runId: string): string => `background:${bgIdOf(agentId)}:${bgIdOf(taskId)}:${runId}`;

/**
 * The run id an idempotency key names for a task (POST /background/tasks/{id}/runs): the same
 * key on the same task id is always the same run id, so queuing it twice is the row's `create`
 * refused, and a retried list finds the runs it queued by id. Shaped like newId's ids.
 */
export function keyedRunId(taskId: string, key: string): string {
  return `bgrun_${createHash('sha256').update(taskId).update('\n').update(key).digest('base64url').slice(0, 21)}`;
}

/**
 * Builds a run, its creation events and its write ops, without writing anything: the scheduler
 * puts the ops of every occurrence of a tick, with the schedule row, into one commit per task.
 */
export function prepareRun(input: CreateRunInput, nowMs: number, parts: PrepareParts): PreparedRun {
  const { task } = input;
  const at = iso(nowMs);
  const run_id = input.run_id ?? newId('bgrun');
  const sp = task.session_policy;
  const session_id =
    sp.mode === 'fixed' && sp.session_id
      ? sp.session_id
      : sp.mode === 'run'
        ? ownSessionId(task.agent_id, task.task_id, run_id)
        : `background:${bgIdOf(task.agent_id)}:${bgIdOf(task.task_id)}`;
  const workspace_path = parts.workspaceFor(task, run_id);
  const occ = input.occurrence;
  const run: BackgroundRun = {
    run_id,
    task_id: task.task_id,
    agent_id: task.agent_id,
    query_snapshot: input.query ?? task.query,
    trigger_type: input.trigger_type,
    session_id,
    workspace_path,
    status: 'queued',
    attempt: 0,
    max_attempts: maxAttempts(task.retry_policy),
    lease_generation: 0,
    lease_owner: null,
    lease_token: null,
    occurrence_id: occ?.occurrence_id ?? null,
    error: null,
    result_preview: null,
    triggered_at: at,
    queued_at: at,
    claimed_at: null,
    started_at: null,
    heartbeat_at: null,
    lease_expires_at: null,
    finished_at: null,
    cancel_requested_at: null,
    due_at: occ?.due_at ?? null,
    metadata: { ...task.metadata },
    // Flow control (src/background/task-keys.ts): only when the task names them, so rows stay as they were otherwise.
    ...(task.concurrency ? { concurrency: { key: renderTaskKey(task.concurrency.key, task.metadata), limit: task.concurrency.limit } } : {}),
    ...(task.priority ? { priority: task.priority } : {}),
    trigger_metadata: occ
      ? { occurrence_id: occ.occurrence_id, due_at: occ.due_at, run_at: occ.run_at, missed: occ.missed }
      : { query_override: input.query !== null, ...input.trigger_extra },
  };
  let ctx: BackgroundRunContext = {
    run,
    internal: {
      trace_id: newId('trace'),
      span_id: newId('span'),
      agent_run_id: null,
      continue_agent: false,
      next_reason: null,
      retry_at: null,
      not_before: input.not_before ?? (occ && occ.run_at > occ.due_at ? occ.run_at : null),
      retry_policy: task.retry_policy,
      timeout_seconds: task.timeout_seconds ?? null,
      overlap_policy: task.overlap_policy,
      write_events_jsonl: task.workspace_policy.write_events_jsonl,
      write_run_json: task.workspace_policy.write_run_json,
      current_attempt: null,
      last_closed_attempt: null,
    },
  };
  const lifecycle: LifecycleRecord[] = [];
  if (occ) {
    lifecycle.push(
      parts.lifecycleOf(
        ctx,
        {
          type: 'background_task_scheduled',
          data: { occurrence_id: occ.occurrence_id, trigger_type: occ.trigger_type, due_at: occ.due_at, run_at: occ.run_at, missed: occ.missed },
        },
        1,
        at,
      ),
    );
  }
  if (input.skip !== null) {
    // queued -> skipped, computed by the machine without running its effects. xstate's pure
    // transition() costs ~30 µs (it builds an inert actor per call): fine here, a run created
    // skipped is rare (a cancel_previous task's skip); the scheduler's per-occurrence decisions
    // and every live run's steps go through long-lived actors (docs/machines.md "Public APIs").
    const snap = backgroundRunMachine.resolveState({ value: 'queued', context: ctx });
    const [next, actions] = transition(backgroundRunMachine, snap, { type: 'SKIP', at, reason: input.skip });
    ctx = next.context;
    for (const a of actions) {
      if (a.type !== 'record') continue;
      for (const e of (a.params as RecordParams).events) lifecycle.push(parts.lifecycleOf(ctx, e, lifecycle.length + 1, at));
    }
  } else {
    lifecycle.push(parts.lifecycleOf(ctx, { type: 'background_run_queued', data: { trigger_type: input.trigger_type } }, lifecycle.length + 1, at));
  }
  const row: BgRunRow = {
    ...ctx,
    machine_version: BACKGROUND_RUN_MACHINE_VERSION,
    event_seq: lifecycle.length,
    outbox: parts.eventsInCommits ? [] : lifecycle,
  };
  const r = parts.repos;
  const ops: WriteOp[] = [];
  if (occ) {
    const occurrence = { task_id: task.task_id, occurrence_id: occ.occurrence_id, run_id, dispatched_at: at };
    ops.push(r.bgOccurrences.createOp(occurrenceRecordId(task.task_id, occ.occurrence_id), occurrence));
  }
  const rowIndexes = runRowIndexes(row);
  // The session index holds the session's key in the run's tenant (as a run's trace does), the
  // task index the task's key: a tenant's lookups find its own, never another's of the same id.
  const sessionKey = bgSessionKey({ task_id: task.task_id, session_id });
  const traceIndexes: RecordIndexes = { run_id, session_id: sessionKey, task_id: task.task_id };
  ops.push(r.bgRuns.createOp(run_id, row, rowIndexes));
  ops.push(r.traces.createOp(ctx.internal.trace_id, parts.traceValue(ctx, TERMINAL.has(ctx.run.status) ? ctx.run.status : 'running'), traceIndexes));
  // Ids made up here are new (no row, no record under an index value made from them): the trace's
  // always, the run's unless the caller chose it (an Idempotency-Key reserved it), and the session
  // of session mode `run` with it. The commit then needs no disk read for them.
  const newRun = input.run_id === undefined;
  // A new run id also makes the rows of the run's first attempt new, read when it is claimed and
  // its agent run starts: its attempt record, the agent run's record and snapshot (the first
  // attempt's agent run takes the run's id: agentRunIdFor), and, for session mode `run`, the
  // session (named after the run). Known absent now, they cost no disk read then (about two
  // thread-pool trips per run), as long as the store's row cache still holds them.
  const firstAttempt = newRun
    ? [
        { kind: r.bgAttempts.kind, id: attemptRecordId(run_id, 1), indexes: { run_id }, fresh: ['run_id'] },
        { kind: r.runs.kind, id: run_id, ...(sp.mode === 'run' ? { indexes: { session_id: sessionKey }, fresh: ['session_id'] } : { fresh: [] }) },
        { kind: r.snapshots.kind, id: run_id, fresh: [] },
        ...(sp.mode === 'run' ? [{ kind: r.sessions.kind, id: sessionKey, fresh: [] }] : []),
      ]
    : [];
  parts.prefetch?.([
    { kind: r.bgRuns.kind, id: run_id, indexes: rowIndexes, ...(newRun ? { fresh: [] } : {}) },
    {
      kind: r.traces.kind,
      id: ctx.internal.trace_id,
      indexes: traceIndexes,
      fresh: newRun ? (sp.mode === 'run' ? ['run_id', 'session_id'] : ['run_id']) : [],
    },
    ...firstAttempt,
  ]);
  return { ctx, row, lifecycle, ops };
}
