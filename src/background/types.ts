// Stored shapes of the background subsystem (record kinds bg_*), and their secondary indexes.
import type { BackgroundLifecycleEventType, BackgroundRunContext } from '../../machines/background-run.machine.js';
import type { BackgroundRunStatus, BackgroundScheduleState, BackgroundTaskSpec } from '../schemas/background.js';
import type { RecordIndexes } from '../store/store.js';
import { QUEUE_ORDER_INDEX, queueRank } from '../store/repos/bg-runs.js';
import type { AgentRow } from '../agent/agent-row.js';
import { bgTenantOf } from '../runtime/tenancy.js';

/** One lifecycle event as kept in the row's outbox, events.jsonl and the replay. */
export interface LifecycleRecord {
  sequence: number;
  event: BackgroundLifecycleEventType;
  timestamp: string;
  run_id: string;
  task_id: string;
  agent_id: string;
  status: BackgroundRunStatus;
  attempt: number;
  worker_id: string;
  lease_generation: number;
  data: Record<string, unknown>;
}

/**
 * kind `bg_runs`, id = run id. `context` is the background-run machine's whole context (the public
 * BackgroundRun plus bookkeeping); its `run.status` is the machine state, so the row alone restores
 * the actor. `event_seq` is the last lifecycle sequence given out: it lives in the row so it is
 * contiguous across restarts. `outbox` holds the events of the latest write: the row is written
 * first, then the events are appended; if a crash falls in between, the next load re-appends the
 * missing ones (found by sequence), so the replay never has a gap.
 */
export interface BgRunRow extends BackgroundRunContext {
  machine_version: number;
  event_seq: number;
  outbox: LifecycleRecord[];
}

/**
 * kind `bg_schedule`, id = task id: the durable schedule state a ticker turns into due events.
 * `anchor_at` is when the current schedule revision began (interval phase without start_at, and
 * the "nothing before this" bound of a new task). A deleted task leaves a tombstone so its
 * revision keeps counting up and a re-created task never reuses an old occurrence id.
 */
export interface ScheduleRow extends Omit<BackgroundScheduleState, 'skipped_occurrences' | 'last_skipped'> {
  anchor_at: string;
  deleted?: boolean;
  /**
   * Scheduled occurrences the overlap policy skipped, and the latest one. Counted here (the row is
   * written with every dispatch anyway) instead of a run row, trace, events and occurrence record
   * each: 1,000 one-second tasks skip ~1,000 occurrences a second. Absent in rows of older versions.
   */
  skipped_occurrences?: number;
  last_skipped?: SkippedOccurrence | null;
}

export interface SkippedOccurrence {
  occurrence_id: string;
  due_at: string;
  skipped_at: string;
  reason: string;
}

/** kind `bg_tasks`, id = task id. */
export type TaskRow = BackgroundTaskSpec & { created_at: string; updated_at: string };

/** kind `bg_occurrences`, id = `<task_id>/<occurrence_id>`: created in the same commit as its run (no index: only its existence is ever read). */
interface OccurrenceRow {
  task_id: string;
  occurrence_id: string;
  run_id: string;
  dispatched_at: string;
}

export const IN_FLIGHT: ReadonlySet<BackgroundRunStatus> = new Set(['queued', 'claimed', 'running', 'retrying', 'awaiting_approval', 'awaiting_budget']);
export const ACTIVE: readonly BackgroundRunStatus[] = ['claimed', 'running', 'retrying', 'awaiting_approval', 'awaiting_budget'];
export const TERMINAL: ReadonlySet<BackgroundRunStatus> = new Set(['completed', 'failed', 'timeout', 'cancelled', 'skipped']);
export const HELD: ReadonlySet<BackgroundRunStatus> = new Set(['claimed', 'running']);
export const WAITING: ReadonlySet<BackgroundRunStatus> = new Set(['awaiting_approval', 'awaiting_budget']);
export const ALL_STATUSES: readonly BackgroundRunStatus[] = [
  'queued',
  'claimed',
  'running',
  'retrying',
  'awaiting_approval',
  'awaiting_budget',
  'completed',
  'failed',
  'timeout',
  'cancelled',
  'skipped',
];

/**
 * Indexes of a run row: by task, by status, by both (task status counts without scans),
 * `queue_order` (the claim order while queued: queueRank),
 * `inflight_task` (the task id while the run is not terminal) to seed the overlap decision, and
 * `agent_active` (the agent while in flight) for agent deletion. Every index costs a key and a
 * counter per row write, 1,000 a second with one-second tasks: none is kept that nothing reads.
 */
export function runRowIndexes(row: BgRunRow): RecordIndexes {
  const { task_id, status, agent_id } = row.run;
  // A tenant's runs (the prefix of their task key, src/background/tenancy.ts) are also indexed by
  // tenant and tenant + status: its lists and counts walk its own. Runs without a tenant are not
  // (no cost where tenants are not used; a tenant scope never asks for them).
  const tenant = bgTenantOf(task_id);
  return {
    task_id,
    status,
    task_status: taskStatusKey(task_id, status),
    inflight_task: IN_FLIGHT.has(status) ? task_id : null,
    agent_active: IN_FLIGHT.has(status) ? agent_id : null,
    tenant,
    tenant_status: tenant ? taskStatusKey(tenant, status) : null,
    [QUEUE_ORDER_INDEX]: status === 'queued' ? queueRank(row.run.priority) : null,
  };
}

/** Task ids cannot contain '|' (BackgroundId), so this key is unambiguous. */
export function taskStatusKey(taskId: string, status: string): string {
  return `${taskId}|${status}`;
}

export function attemptRecordId(runId: string, attemptNumber: number): string {
  return `${runId}#${String(attemptNumber).padStart(4, '0')}`;
}

export function occurrenceRecordId(taskId: string, occurrenceId: string): string {
  return `${taskId}/${occurrenceId}`;
}

// The value types of the background kinds, for the typed repositories (src/store/repos/values.ts).
declare module '../store/repos/values.js' {
  interface RecordValues {
    bg_runs: BgRunRow;
    bg_schedule: ScheduleRow;
    bg_tasks: TaskRow;
    bg_agents: AgentRow;
    bg_occurrences: OccurrenceRow;
  }
}
