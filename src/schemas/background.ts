// Background tasks, their policies, runs, attempts and agents (docs/contract.md §12, §1 and §7);
// their schedules are in schedule.ts; the listings, status answers, query strings and path parameters of the
// background routes are in background-answers.ts.
import { z } from 'zod';
import { WebhookUrl } from './webhooks.js';
import { ConcurrencySpec, RunPriority } from './runs.js';
import { ATTEMPT_REASONS, ATTEMPT_STATUSES, BACKGROUND_RUN_STATUSES, TRIGGER_TYPES } from '../../machines/background-types.js';
import type * as MachineTypes from '../../machines/background-types.js';
import { BackgroundId, IsoDateTime, JsonObject, SafeId } from './common.js';
import { ScheduleSpec } from './schedule.js';

// --- enums -------------------------------------------------------------------------------------

export const OverlapPolicy = z
  .enum(['skip_if_running', 'queue_next', 'cancel_previous', 'allow_parallel'] satisfies readonly MachineTypes.OverlapPolicy[])
  .meta({ id: 'OverlapPolicy' });
export type OverlapPolicy = z.infer<typeof OverlapPolicy>;

export const BackgroundRunStatus = z.enum(BACKGROUND_RUN_STATUSES).meta({ id: 'RunStatus' });
export type BackgroundRunStatus = z.infer<typeof BackgroundRunStatus>;

/** Statuses a background run never leaves (docs/contract.md §7). */
export const TERMINAL_BACKGROUND_RUN_STATUSES: readonly BackgroundRunStatus[] = ['completed', 'failed', 'timeout', 'cancelled', 'skipped'];

export const TriggerType = z.enum(TRIGGER_TYPES).meta({ id: 'TriggerType' });
export type TriggerType = z.infer<typeof TriggerType>;

export const AttemptStatus = z.enum(ATTEMPT_STATUSES).meta({ id: 'AttemptStatus' });
export type AttemptStatus = z.infer<typeof AttemptStatus>;

export const AttemptReason = z.enum(ATTEMPT_REASONS).meta({ id: 'AttemptReason' });
export type AttemptReason = z.infer<typeof AttemptReason>;

export const RetryOn = z.enum(['exception', 'timeout']).meta({ id: 'RetryOn' });
export type RetryOn = z.infer<typeof RetryOn>;

// --- policies ----------------------------------------------------------------------------------

export const RetryPolicy = z
  .strictObject({
    backoff: z.enum(['fixed', 'exponential']).default('fixed'),
    initial_delay_seconds: z.number().int().min(0).default(30),
    max_delay_seconds: z.number().int().min(0).default(300),
    max_retries: z.number().int().min(0).default(0),
    retry_on: z.array(RetryOn).default(['exception', 'timeout']),
  })
  .meta({ id: 'RetryPolicy', description: 'max_attempts of a run = max_retries + 1.' });
export type RetryPolicy = z.infer<typeof RetryPolicy>;

export const SessionPolicy = z
  .strictObject({
    mode: z
      .enum(['task', 'run', 'fixed'])
      .default('task')
      .describe('task: session `background:<agent_id>:<task_id>`; run: a fresh session per run; fixed: `session_id`.'),
    session_id: SafeId.nullish().describe('Required when mode is fixed.'),
  })
  .superRefine((p, ctx) => {
    if (p.mode === 'fixed' && (p.session_id === undefined || p.session_id === null)) {
      ctx.addIssue({
        code: 'custom',
        path: ['session_id'],
        message: 'Field required when mode is fixed',
        params: { type: 'missing' },
      });
    }
  })
  .meta({ id: 'SessionPolicy' });
export type SessionPolicy = z.infer<typeof SessionPolicy>;

export const DEFAULT_NAMESPACE_TEMPLATE = 'background/{agent_id}/{task_id}/{run_id}';

/**
 * Why a namespace template (or the path it renders to) cannot name a workspace, or null. The form
 * only: a relative, "/"-separated path with no "." or ".." segment, no backslash, no control
 * character, no drive letter or "~", and no percent-encoded ".", "/", "\\" or NUL (something
 * downstream might decode them). Where it may point is checked against the task's own namespace
 * by the background manager (src/background/workspace.ts checkNamespaceTemplate).
 */
export function namespaceTemplateProblem(t: string): string | null {
  if (/[\u0000-\u001f\u007f]/.test(t)) return 'must not contain control characters';
  if (t.includes('\\')) return 'must use "/" as the separator (no backslash)';
  if (t.startsWith('/') || /^[A-Za-z]:/.test(t) || t.startsWith('~')) return 'must be a relative path (no leading "/", drive letter or "~")';
  if (/%(2e|2f|5c|00)/i.test(t)) return 'must not contain percent-encoded ".", "/", "\\" or NUL';
  if (t.split('/').some((seg) => seg === '.' || seg === '..')) return 'must not contain "." or ".." segments';
  return null;
}

export const WorkspacePolicy = z
  .strictObject({
    namespace_template: z
      .string()
      .min(1)
      .max(1024)
      .default(DEFAULT_NAMESPACE_TEMPLATE)
      .superRefine((t, ctx) => {
        const problem = namespaceTemplateProblem(t);
        if (problem) ctx.addIssue({ code: 'custom', message: problem, input: t });
      })
      .describe(
        'Path under the workspace root; placeholders {agent_id}, {task_id}, {run_id}. Must resolve inside background/{agent_id}/{task_id}/ unless background.workspace.allow_shared_namespaces is true.',
      ),
    write_events_jsonl: z.boolean().default(true),
    write_run_json: z.boolean().default(true),
  })
  .meta({ id: 'WorkspacePolicy' });
export type WorkspacePolicy = z.infer<typeof WorkspacePolicy>;

const TimeoutSeconds = z.number().int().positive().describe('Per-run timeout in seconds.');

// --- tasks -------------------------------------------------------------------------------------

/**
 * A task's concurrency key: its runs share the key's limit with every run (POST /run, other
 * tasks) naming the same key. `{metadata.<field>}` in the key is the task's metadata field.
 */
export const TaskConcurrency = z
  .strictObject({
    key: z
      .string()
      .min(1)
      .max(256)
      .describe(
        "The key; `{metadata.<field>}` is replaced by the task's metadata field, e.g. `customer:{metadata.customer_id}` (a field the metadata lacks stays as written). A matching `flow.concurrency` rule of the config wins over `limit`.",
      ),
    limit: z.number().int().min(1).max(10_000).describe('Runs of this key running at once, at most (between runs naming different limits, the lowest wins).'),
  })
  .meta({ id: 'TaskConcurrency' });
export type TaskConcurrency = z.infer<typeof TaskConcurrency>;

const taskConcurrency = TaskConcurrency.nullish().describe(
  "Admission of the task's runs: a queued run is claimed only while its key is under its limit (docs/flow-control.md).",
);
const taskPriority = RunPriority.nullish().describe(
  "Priority of the task's runs (−100..100, default 0): queued runs are claimed by a free worker highest priority first (oldest first among equal ones), and it orders them for the key slots and the model tokens they wait for.",
);

export const BackgroundTaskSpec = z
  .strictObject({
    task_id: BackgroundId,
    agent_id: BackgroundId,
    query: z.string().min(1),
    schedule: ScheduleSpec,
    enabled: z.boolean().default(true),
    metadata: JsonObject.default({}),
    overlap_policy: OverlapPolicy.default('skip_if_running'),
    retry_policy: RetryPolicy.prefault({}),
    session_policy: SessionPolicy.prefault({}),
    timeout_seconds: TimeoutSeconds.nullish(),
    workspace_policy: WorkspacePolicy.prefault({}),
    concurrency: taskConcurrency,
    priority: taskPriority,
    created_at: IsoDateTime.optional(),
    updated_at: IsoDateTime.optional(),
    tenant: z.string().nullish().describe('The tenant of the key that created it (docs/multi-tenant.md); null or absent: none. Set by the service.'),
  })
  .meta({ id: 'BackgroundTaskSpec' });
export type BackgroundTaskSpec = z.infer<typeof BackgroundTaskSpec>;

export const BackgroundTaskCreateRequest = z
  .strictObject({
    task_id: BackgroundId.describe('Stable identifier.'),
    query: z.string().min(1).describe('Instruction executed for each run.'),
    schedule: ScheduleSpec,
    agent_id: BackgroundId.nullish().describe('Defaults to the configured background agent id.'),
    enabled: z.boolean().default(true).describe('Whether the scheduler may run it.'),
    metadata: JsonObject.default({}),
    overlap_policy: OverlapPolicy.default('skip_if_running'),
    replace: z.boolean().default(false).describe('Replace an existing task.'),
    concurrency: taskConcurrency,
    priority: taskPriority,
    retry_policy: RetryPolicy.prefault({}),
    session_policy: SessionPolicy.prefault({}),
    timeout_seconds: TimeoutSeconds.nullish(),
    workspace_policy: WorkspacePolicy.prefault({}),
  })
  .meta({ id: 'BackgroundTaskCreateRequest' });
export type BackgroundTaskCreateRequest = z.infer<typeof BackgroundTaskCreateRequest>;

/** Every field optional; absent or null leaves the stored value unchanged. A given policy replaces the stored one. */
export const BackgroundTaskPatchRequest = z
  .strictObject({
    enabled: z.boolean().nullish(),
    metadata: JsonObject.nullish(),
    overlap_policy: OverlapPolicy.nullish(),
    query: z.string().min(1).nullish(),
    concurrency: taskConcurrency,
    priority: taskPriority,
    retry_policy: RetryPolicy.nullish(),
    schedule: ScheduleSpec.nullish(),
    session_policy: SessionPolicy.nullish(),
    timeout_seconds: TimeoutSeconds.nullish(),
    workspace_policy: WorkspacePolicy.nullish(),
  })
  .meta({ id: 'BackgroundTaskPatchRequest' });
export type BackgroundTaskPatchRequest = z.infer<typeof BackgroundTaskPatchRequest>;

export const BackgroundTaskRunRequest = z
  .strictObject({
    query: z.string().min(1).nullish().describe('One-off query override for this run.'),
    wait: z.boolean().default(false).describe('Wait for a terminal status (or a pause for a person) before answering.'),
    webhook: WebhookUrl.nullish(),
    debounce_seconds: z
      .number()
      .int()
      .min(1)
      .max(3600)
      .nullish()
      .describe(
        "Debounce: triggers of this task within this many seconds collapse into one run that starts when the window ends. Each trigger extends the window (up to 10 times its length from the first trigger); the last trigger's query wins; every collapsed trigger answers the same run (with wait, each waits on it). The run is queued meanwhile, with trigger_metadata.debounce {window_seconds, triggers, first_triggered_at, starts_at, latest_start_at}.",
      ),
  })
  .meta({ id: 'BackgroundTaskRunRequest' });
export type BackgroundTaskRunRequest = z.infer<typeof BackgroundTaskRunRequest>;

/** Most runs one POST /background/tasks/{task_id}/runs queues (BullMQ's addBulk and pg-boss take 1,000 jobs a call). */
export const MAX_BULK_RUNS = 1000;

/** One run of a bulk trigger: its overrides of the task, and the key that makes queuing it idempotent. */
export const BackgroundTaskBulkRunItem = z
  .strictObject({
    query: z.string().min(1).nullish().describe('One-off query override for this run.'),
    idempotency_key: z
      .string()
      // The Idempotency-Key header's characters (src/integrations/idempotency.ts).
      .regex(/^[\x21-\x7e]{1,255}$/, { message: '1 to 255 printable ASCII characters' })
      .nullish()
      .describe(
        'Queues this run at most once per task: a later item (in this or another call) with the same key answers with the run it queued, as long as that run is kept (background.run_retention), and queues nothing.',
      ),
  })
  .meta({ id: 'BackgroundTaskBulkRunItem' });
export type BackgroundTaskBulkRunItem = z.infer<typeof BackgroundTaskBulkRunItem>;

export const BackgroundTaskBulkRunRequest = z
  .strictObject({
    runs: z
      .array(BackgroundTaskBulkRunItem)
      .min(1)
      .max(MAX_BULK_RUNS)
      .describe(`The runs to queue, in order (1 to ${MAX_BULK_RUNS}). Each obeys the task's overlap policy like a manual run.`),
  })
  .meta({ id: 'BackgroundTaskBulkRunRequest' });
export type BackgroundTaskBulkRunRequest = z.infer<typeof BackgroundTaskBulkRunRequest>;

// --- runs and attempts -------------------------------------------------------------------------

export const BackgroundRun = z
  .strictObject({
    run_id: z.string(),
    task_id: BackgroundId,
    agent_id: BackgroundId,
    query_snapshot: z.string(),
    trigger_type: TriggerType,
    session_id: z.string(),
    workspace_path: z.string(),
    status: BackgroundRunStatus.default('queued'),
    attempt: z.number().int().min(0).default(0),
    max_attempts: z.number().int().min(1).default(1),
    lease_generation: z.number().int().min(0).default(0),
    lease_owner: z.string().nullable().default(null),
    lease_token: z.string().nullable().default(null),
    occurrence_id: z.string().nullable().default(null),
    error: z.string().nullable().default(null),
    result_preview: z.string().nullable().default(null),
    triggered_at: IsoDateTime,
    queued_at: IsoDateTime.nullable().default(null),
    claimed_at: IsoDateTime.nullable().default(null),
    started_at: IsoDateTime.nullable().default(null),
    heartbeat_at: IsoDateTime.nullable().default(null),
    lease_expires_at: IsoDateTime.nullable().default(null),
    finished_at: IsoDateTime.nullable().default(null),
    cancel_requested_at: IsoDateTime.nullable().default(null),
    due_at: IsoDateTime.nullable().default(null),
    metadata: JsonObject.default({}),
    trigger_metadata: JsonObject.default({}),
    concurrency: ConcurrencySpec.nullish().describe("The run's concurrency key, its task's with the metadata filled in (absent: none)."),
    priority: RunPriority.nullish().describe("The run's priority, its task's (absent: 0)."),
    tenant: z.string().nullish().describe("The tenant of the run's task (docs/multi-tenant.md); null or absent: none."),
  })
  .meta({ id: 'BackgroundRun' });
export type BackgroundRun = z.infer<typeof BackgroundRun>;

export const BackgroundAttempt = z
  .object({
    attempt_id: z.string(),
    run_id: z.string(),
    attempt_number: z.number().int().min(1),
    worker_id: z.string(),
    lease_token: z.string(),
    status: AttemptStatus.default('running'),
    reason: AttemptReason.default('initial'),
    started_at: IsoDateTime,
    finished_at: IsoDateTime.nullable().default(null),
    error: z.string().nullable().default(null),
    retry_delay_seconds: z.number().int().min(0).nullable().default(null),
  })
  .meta({ id: 'BackgroundAttempt' });
export type BackgroundAttempt = z.infer<typeof BackgroundAttempt>;

// The background-run machine works on its own copies of these types (machines/background-types.ts,
// as machines/ import nothing from src/): what these schemas parse must be exactly those types.
type Same<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const sameTypes: [
  Same<OverlapPolicy, MachineTypes.OverlapPolicy>,
  Same<BackgroundRunStatus, MachineTypes.BackgroundRunStatus>,
  Same<TriggerType, MachineTypes.TriggerType>,
  Same<AttemptStatus, MachineTypes.AttemptStatus>,
  Same<AttemptReason, MachineTypes.AttemptReason>,
  Same<BackgroundRun, MachineTypes.BackgroundRun>,
  Same<BackgroundAttempt, MachineTypes.BackgroundAttempt>,
] = [true, true, true, true, true, true, true];
void sameTypes;

export const BackgroundScheduleState = z
  .object({
    task_id: BackgroundId,
    paused: z.boolean().default(false),
    paused_reason: z.string().nullable().default(null),
    schedule_revision: z.number().int().min(1).default(1),
    last_due_at: IsoDateTime.nullable().default(null),
    last_dispatched_at: IsoDateTime.nullable().default(null),
    next_due_at: IsoDateTime.nullable().default(null),
    misfire_cursor: z.string().nullable().default(null),
    updated_at: IsoDateTime,
    skipped_occurrences: z
      .number()
      .int()
      .min(0)
      .default(0)
      .describe('Scheduled occurrences the overlap policy skipped (counted here, not stored as runs; docs/background.md).'),
    last_skipped: z
      .object({ occurrence_id: z.string(), due_at: IsoDateTime, skipped_at: IsoDateTime, reason: z.string() })
      .nullable()
      .default(null)
      .describe('The most recent scheduled occurrence the overlap policy skipped.'),
  })
  .meta({ id: 'BackgroundScheduleState' });
export type BackgroundScheduleState = z.infer<typeof BackgroundScheduleState>;

// --- agents ------------------------------------------------------------------------------------

export const BackgroundAgentSpec = z
  .strictObject({
    agent_id: BackgroundId,
    name: z.string().nullish(),
    system_instruction: z.string().nullish(),
    agent_config: JsonObject.default({}),
    model_config: JsonObject.nullish(),
    workspace_config: JsonObject.nullish(),
    local_tools_ref: z.string().nullish().describe('A tools module inside one of agents.tools_dirs; registering a spec with one needs an admin key.'),
    mcp_tools: z
      .array(JsonObject)
      .default([])
      .describe('MCP servers by name, each {"server": "<name>"} of a server defined in the config (agents.mcp_servers).'),
    metadata: JsonObject.default({}),
    created_at: IsoDateTime.optional(),
    updated_at: IsoDateTime.optional(),
    tenant: z
      .string()
      .nullish()
      .describe(
        'The tenant of the key that registered it (docs/multi-tenant.md); null or absent: shared, registered by a global key. Set by the service; ignored in a request.',
      ),
  })
  .meta({ id: 'BackgroundAgentSpec' });
export type BackgroundAgentSpec = z.infer<typeof BackgroundAgentSpec>;

export const BackgroundAgentRegistrationRequest = z
  .strictObject({
    agent_id: BackgroundId.nullish().describe('Defaults to the configured background agent id.'),
    replace: z.boolean().default(false).describe('Replace an existing spec.'),
    spec: BackgroundAgentSpec.nullish().describe('Omit to register the served agent.'),
  })
  .superRefine((r, ctx) => {
    if (r.agent_id != null && r.spec != null && r.spec.agent_id !== r.agent_id) {
      ctx.addIssue({
        code: 'custom',
        path: ['spec', 'agent_id'],
        message: `spec.agent_id '${r.spec.agent_id}' does not match agent_id '${r.agent_id}'`,
        input: r.spec.agent_id,
        params: { type: 'value_error' },
      });
    }
  })
  .meta({ id: 'BackgroundAgentRegistrationRequest' });
export type BackgroundAgentRegistrationRequest = z.infer<typeof BackgroundAgentRegistrationRequest>;
