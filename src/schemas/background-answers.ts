// The background routes' listings and status answers, query strings and path parameters
// (docs/contract.md §12); the resources they list are in background.ts.
import { z } from 'zod';
import {
  BackgroundAgentSpec,
  BackgroundAttempt,
  BackgroundRun,
  BackgroundRunStatus,
  BackgroundScheduleState,
  BackgroundTaskSpec,
  ScheduleSpec,
} from './background.js';
import { BackgroundId, Cursor, IsoDateTime, OffsetCursor, QueryBool, SafeId, TimeRangeQuery, checkTimeRange, listOrder, queryInt } from './common.js';

// --- listing and status answers ----------------------------------------------------------------

const Count = z.number().int().min(0);

export const BackgroundTasksResponse = z
  .object({ tasks: z.array(BackgroundTaskSpec), total: Count, next_cursor: z.string().nullable() })
  .meta({ id: 'BackgroundTasksResponse' });
export type BackgroundTasksResponse = z.infer<typeof BackgroundTasksResponse>;

export const BackgroundRunsResponse = z
  .object({ runs: z.array(BackgroundRun), total: Count, next_cursor: z.string().nullable() })
  .meta({ id: 'BackgroundRunsResponse' });
export type BackgroundRunsResponse = z.infer<typeof BackgroundRunsResponse>;

export const BackgroundTaskBulkRunResponse = z
  .object({
    runs: z
      .array(
        z
          .object({
            run: BackgroundRun,
            created: z.boolean().describe('False when an earlier item with the same idempotency_key queued this run.'),
          })
          .meta({ id: 'BackgroundTaskBulkRunResult' }),
      )
      .describe('One entry per item of the request, in its order.'),
    created: Count.describe('Runs this call queued (or stored skipped).'),
  })
  .meta({ id: 'BackgroundTaskBulkRunResponse' });
export type BackgroundTaskBulkRunResponse = z.infer<typeof BackgroundTaskBulkRunResponse>;

export const BackgroundAgentsResponse = z
  .object({ agents: z.array(BackgroundAgentSpec), total: Count, next_cursor: z.string().nullable() })
  .meta({ id: 'BackgroundAgentsResponse' });
export type BackgroundAgentsResponse = z.infer<typeof BackgroundAgentsResponse>;

/** A run-local lifecycle event (also a line of events.jsonl); free-form beyond these keys. */
export const BackgroundRunEvent = z
  .looseObject({
    event: z.string().optional(),
    timestamp: IsoDateTime.optional(),
    sequence: z.number().int().min(1).describe('1..n without gaps per run.'),
    run_id: z.string().optional(),
    task_id: z.string().optional(),
    agent_id: z.string().optional(),
    status: z.string().optional(),
    attempt: z.number().int().optional(),
    worker_id: z.string().nullish(),
    lease_generation: z.number().int().optional(),
  })
  .meta({ id: 'BackgroundRunEvent' });
export type BackgroundRunEvent = z.infer<typeof BackgroundRunEvent>;

export const BackgroundRunEventsResponse = z
  .object({ run_id: z.string(), events: z.array(BackgroundRunEvent), count: Count, next_cursor: z.string().nullable() })
  .meta({ id: 'BackgroundRunEventsResponse' });
export type BackgroundRunEventsResponse = z.infer<typeof BackgroundRunEventsResponse>;

export const WorkspaceFileEntry = z
  .object({
    path: z.string().describe('Relative to the run workspace, "/"-separated.'),
    name: z.string(),
    size: z.number().int().min(0),
    modified_at: IsoDateTime,
    is_dir: z.boolean(),
  })
  .meta({ id: 'WorkspaceFileEntry' });
export type WorkspaceFileEntry = z.infer<typeof WorkspaceFileEntry>;

export const BackgroundRunWorkspaceResponse = z
  .object({
    run_id: z.string(),
    task_id: z.string(),
    agent_id: z.string(),
    workspace_path: z.string(),
    files: z.array(WorkspaceFileEntry),
  })
  .meta({ id: 'BackgroundRunWorkspaceResponse' });
export type BackgroundRunWorkspaceResponse = z.infer<typeof BackgroundRunWorkspaceResponse>;

export const BackgroundRunAttemptsResponse = z
  .object({ run_id: z.string(), attempts: z.array(BackgroundAttempt), count: Count, next_cursor: z.string().nullable() })
  .meta({ id: 'BackgroundRunAttemptsResponse' });
export type BackgroundRunAttemptsResponse = z.infer<typeof BackgroundRunAttemptsResponse>;

/** `{status}` answers: deleted, paused, resumed, cancel_requested. */
export const BackgroundStatusResponse = z.object({ status: z.string().describe('Operation status.') }).meta({ id: 'BackgroundStatusResponse' });
export type BackgroundStatusResponse = z.infer<typeof BackgroundStatusResponse>;

const StatusCounts = z.record(z.string(), Count);

export const BackgroundManagerStatusResponse = z
  .object({
    running: z.boolean(),
    initialized: z.boolean(),
    worker_id: z.string(),
    lease_seconds: z.number(),
    agents: Count,
    tasks: Count,
    runs: Count,
    active_runs: Count,
    status_counts: StatusCounts,
    skipped_occurrences: Count.optional().describe(
      'Scheduled occurrences the overlap policy skipped, over the existing tasks (not runs: see schedule_state.skipped_occurrences).',
    ),
  })
  .meta({ id: 'BackgroundManagerStatusResponse' });
export type BackgroundManagerStatusResponse = z.infer<typeof BackgroundManagerStatusResponse>;

export const BackgroundTaskStatusResponse = z
  .object({
    task_id: z.string(),
    agent_id: z.string(),
    enabled: z.boolean(),
    schedule: ScheduleSpec,
    schedule_state: BackgroundScheduleState.nullable(),
    runs: Count,
    active_runs: Count,
    status_counts: StatusCounts,
    latest_run: BackgroundRun.nullable(),
  })
  .meta({ id: 'BackgroundTaskStatusResponse' });
export type BackgroundTaskStatusResponse = z.infer<typeof BackgroundTaskStatusResponse>;

export const ScheduleOccurrence = z
  .object({
    due_at: IsoDateTime.describe('UTC instant of the occurrence.'),
    local_time: z.string().describe('The same instant as wall-clock time in the task time zone, with its offset.'),
    note: z.string().nullable().describe('Set where DST moved or dropped the nominal local time.'),
  })
  .meta({ id: 'ScheduleOccurrence' });
export type ScheduleOccurrence = z.infer<typeof ScheduleOccurrence>;

export const SchedulePreviewResponse = z
  .object({ task_id: z.string(), timezone: z.string(), upcoming: z.array(ScheduleOccurrence) })
  .meta({ id: 'SchedulePreviewResponse' });
export type SchedulePreviewResponse = z.infer<typeof SchedulePreviewResponse>;

// --- query strings and path parameters (inline: swagger lists them as parameters) --------------

export const BackgroundTasksListQuery = z.object({
  agent_id: BackgroundId.optional(),
  order: listOrder('asc'),
  limit: queryInt(1, 500, 100),
  cursor: Cursor.optional(),
});
export type BackgroundTasksListQuery = z.infer<typeof BackgroundTasksListQuery>;

export const BackgroundRunsListQuery = TimeRangeQuery.extend({
  task_id: BackgroundId.optional(),
  status: BackgroundRunStatus.optional(),
  agent_id: BackgroundId.optional().describe('Only runs of this background agent.'),
  order: listOrder('asc'),
  limit: queryInt(1, 500, 100),
  cursor: Cursor.optional(),
}).superRefine(checkTimeRange);
export type BackgroundRunsListQuery = z.infer<typeof BackgroundRunsListQuery>;

/** GET /background/agents: specs can be large (instructions, tool lists), so pages are small. */
export const BackgroundAgentsListQuery = z.object({ limit: queryInt(1, 100, 20), cursor: Cursor.optional() });
export type BackgroundAgentsListQuery = z.infer<typeof BackgroundAgentsListQuery>;

/** A background run's attempts or lifecycle events, a page at a time (the cursor is a position in the chosen order). */
export const BackgroundRunListQuery = z.object({ order: listOrder('asc'), limit: queryInt(1, 1000, 1000), cursor: OffsetCursor.optional() });
export type BackgroundRunListQuery = z.infer<typeof BackgroundRunListQuery>;

export const SchedulePreviewQuery = z.object({ count: queryInt(1, 100, 5) });
export type SchedulePreviewQuery = z.infer<typeof SchedulePreviewQuery>;

export const BackgroundAgentDeleteQuery = z.object({ force: QueryBool.default(false) });
export type BackgroundAgentDeleteQuery = z.infer<typeof BackgroundAgentDeleteQuery>;

export const BackgroundTaskDeleteQuery = z.object({ delete_runs: QueryBool.default(false) });
export type BackgroundTaskDeleteQuery = z.infer<typeof BackgroundTaskDeleteQuery>;

export const TaskIdParams = z.object({ task_id: BackgroundId });
export type TaskIdParams = z.infer<typeof TaskIdParams>;

export const AgentIdParams = z.object({ agent_id: BackgroundId });
export type AgentIdParams = z.infer<typeof AgentIdParams>;

export const BackgroundRunIdParams = z.object({ run_id: SafeId });
export type BackgroundRunIdParams = z.infer<typeof BackgroundRunIdParams>;

/** GET /background/runs/{run_id}/workspace/files/*: the rest of the path is checked against the workspace by the route. */
export const WorkspaceFileParams = z.object({ run_id: SafeId, '*': z.string().min(1) });
export type WorkspaceFileParams = z.infer<typeof WorkspaceFileParams>;
