// Background tasks (docs/contract.md §7): create, replace, patch, delete, pause and resume a task,
// and read it (its status, its upcoming occurrences). Every edit runs in the task's job
// (scheduler.ts taskJob), writes the task and schedule rows in one commit, then applies them to
// the scheduler and tells the cluster link (`edited`). The background manager (manager.ts) owns
// one; routes call it directly (`bg.tasks.*`).
import { upcoming, type ScheduleSpec as SchedSpec } from '../calendar/schedule.js';
import { domainError, notFound, RequestValidationError } from '../errors.js';
import type { BackgroundScheduleState, BackgroundTaskCreateRequest, BackgroundTaskPatchRequest } from '../schemas/background.js';
import type { Versioned, WriteOp } from '../store/store.js';
import type { core } from 'zod';
import { repos } from '../store/repos/index.js';
import { GLOBAL_SCOPE, type TenantScope } from '../runtime/tenancy.js';
import type { BackgroundDeps } from './host-types.js';
import type { TaskScheduler } from './scheduler.js';
import type { BackgroundAgents } from './agents.js';
import type { RunEngine } from './engine.js';
import { publicRun } from './run-queries.js';
import { ACTIVE, ALL_STATUSES, taskStatusKey, type BgRunRow, type ScheduleRow, type TaskRow } from './types.js';
import { checkNamespaceTemplate } from './workspace.js';
import { newScheduleRow, resumedScheduleRow } from './schedule-rows.js';
import { bgIdOf, bgKey, taskRowIndexes } from './tenancy.js';

const iso = (ms: number) => new Date(ms).toISOString();

export class BackgroundTasks {
  constructor(
    private readonly deps: BackgroundDeps,
    private readonly scheduler: TaskScheduler,
    private readonly agents: BackgroundAgents,
    private readonly engine: RunEngine,
    /** Told after every task edit this process wrote (BackgroundManager.onTaskEdited). */
    private readonly edited: (taskId: string) => void,
  ) {}

  private get cfg() {
    return this.deps.config.background;
  }

  private now(): number {
    return this.deps.clock.now();
  }

  /**
   * `tenant`: the tenant of the key (null: none); the task lives in its namespace (tenancy.ts) and
   * runs the tenant's own agent of that id, else the shared one.
   */
  async createTask(body: BackgroundTaskCreateRequest, tenant: string | null = null): Promise<TaskRow> {
    const agentId = await this.agents.resolveKey(body.agent_id ?? this.cfg.agent_id, tenant);
    const taskId = bgKey(tenant, body.task_id);
    const { replace, agent_id: _a, ...fields } = body;
    this.checkWorkspacePolicy(body.workspace_policy.namespace_template, agentId, taskId, body);
    return this.scheduler.taskJob(taskId, async () => {
      const { store } = this.deps;
      const existing = await repos(store).bgTasks.get<TaskRow>(taskId);
      if (existing && !replace) throw domainError('AGT_ERR_BACKGROUND_TASK_EXISTS', [body.task_id], { detail: 'pass replace: true to replace it' });
      const now = this.now();
      const task: TaskRow = { ...fields, task_id: taskId, agent_id: agentId, created_at: existing?.value.created_at ?? iso(now), updated_at: iso(now) };
      const prevSched = await repos(store).bgSchedule.get<ScheduleRow>(taskId);
      // A new revision for every create/replace: occurrence ids of the old schedule can never collide.
      const sched = newScheduleRow(task, (prevSched?.value.schedule_revision ?? 0) + 1, now, prevSched?.value ?? null);
      const { bgTasks, bgSchedule } = repos(store);
      const written = await store.commit([bgTasks.putOp(task.task_id, task, existing, taskRowIndexes(task)), bgSchedule.putOp(task.task_id, sched, prevSched)]);
      this.scheduler.applyTask(task, written[1] as Versioned<ScheduleRow>);
      this.edited(task.task_id);
      return task;
    });
  }

  /**
   * A task's workspaces stay in its own namespace (background/<agent_id>/<task_id>/) unless the
   * config allows shared namespaces: 422 with `loc` at the template otherwise. The schema already
   * refused malformed templates; this checks where the rendered path lands.
   */
  private checkWorkspacePolicy(template: string, agentId: string, taskId: string, body: unknown): void {
    const problem = checkNamespaceTemplate(template, { agent_id: agentId, task_id: taskId }, this.cfg.workspace.allow_shared_namespaces);
    if (!problem) return;
    throw new RequestValidationError(
      'body',
      [
        {
          code: 'custom',
          path: ['workspace_policy', 'namespace_template'],
          message: `namespace_template ${problem}`,
          input: template,
        } as core.$ZodIssue,
      ],
      body,
    );
  }

  /** Tasks visible in `scope` (a tenant walks its own indexes, so pages and totals are its own). */
  async listTasks(
    q: { agent_id?: string; order?: 'asc' | 'desc'; limit: number; cursor?: string },
    scope: TenantScope = GLOBAL_SCOPE,
  ): Promise<{ tasks: TaskRow[]; total: number; next_cursor: string | null }> {
    const agentKey = q.agent_id === undefined || scope.all ? q.agent_id : await this.agents.resolveKey(q.agent_id, scope.tenant).catch(() => q.agent_id);
    const index = scope.all
      ? agentKey
        ? { name: 'agent_id', value: agentKey }
        : undefined
      : agentKey
        ? { name: 'tenant_agent', value: `${scope.tenant}|${agentKey}` }
        : { name: 'tenant', value: scope.tenant ?? '' };
    const page = await repos(this.deps.store).bgTasks.list<TaskRow>({ index, cursor: q.cursor ?? null, limit: q.limit, reverse: q.order === 'desc' });
    const total = await repos(this.deps.store).bgTasks.count(index);
    return { tasks: page.items.map((i) => i.value), total, next_cursor: page.next_cursor };
  }

  async getTask(taskId: string): Promise<TaskRow> {
    const rec = await repos(this.deps.store).bgTasks.get<TaskRow>(taskId);
    if (!rec) throw notFound('background task', bgIdOf(taskId));
    return rec.value;
  }

  async patchTask(taskId: string, patch: BackgroundTaskPatchRequest): Promise<TaskRow> {
    return this.scheduler.taskJob(taskId, async () => {
      const { store } = this.deps;
      const rec = await repos(store).bgTasks.get<TaskRow>(taskId);
      if (!rec) throw notFound('background task', bgIdOf(taskId));
      const schedRec = await repos(store).bgSchedule.get<ScheduleRow>(taskId);
      const now = this.now();
      const prev = rec.value;
      if (patch.workspace_policy) this.checkWorkspacePolicy(patch.workspace_policy.namespace_template, prev.agent_id, taskId, patch);
      const next: TaskRow = { ...prev, updated_at: iso(now) };
      for (const [k, v] of Object.entries(patch)) {
        if (v !== undefined && v !== null) (next as Record<string, unknown>)[k] = v;
      }
      let sched = schedRec?.value ?? null;
      if (patch.schedule && JSON.stringify(patch.schedule) !== JSON.stringify(prev.schedule)) {
        sched = newScheduleRow(next, (sched?.schedule_revision ?? 0) + 1, now, sched);
      } else if (sched && next.enabled && !prev.enabled && !sched.paused) {
        sched = resumedScheduleRow(next, sched, now);
      }
      const { bgTasks, bgSchedule } = repos(store);
      const written = await store.commit([
        bgTasks.updateOp(taskId, next, rec.version, taskRowIndexes(next)),
        ...(sched && sched !== schedRec?.value ? [bgSchedule.putOp(taskId, sched, schedRec)] : []),
      ]);
      this.scheduler.applyTask(next, (written[1] as Versioned<ScheduleRow> | undefined) ?? schedRec);
      this.edited(taskId);
      return next;
    });
  }

  /** Removes the task; its schedule row stays as a tombstone so a re-created task gets a new revision. */
  async deleteTask(taskId: string, deleteRuns: boolean): Promise<{ status: 'deleted' }> {
    await this.scheduler.taskJob(taskId, async () => {
      const { store } = this.deps;
      const [rec, schedRec] = await Promise.all([repos(store).bgTasks.get<TaskRow>(taskId), repos(store).bgSchedule.get<ScheduleRow>(taskId)]);
      if (!rec) throw notFound('background task', bgIdOf(taskId));
      const { bgTasks, bgSchedule } = repos(store);
      const ops: WriteOp[] = [
        bgTasks.deleteOp(taskId),
        ...(schedRec
          ? [bgSchedule.updateOp(taskId, { ...schedRec.value, deleted: true, next_due_at: null, updated_at: iso(this.now()) }, schedRec.version)]
          : []),
      ];
      if (!deleteRuns) {
        await store.commit(ops);
        this.scheduler.removeTask(taskId);
        return;
      }
      // Inside the task's job nothing creates a run of it (dispatch and manual runs go through
      // this job too), and the task's own delete rides in the commit of its first page of runs:
      // one store round for a task with up to 500 runs.
      await this.engine.retention.deleteRunsOfTask(taskId, rec.value.agent_id, { ops, then: () => this.scheduler.removeTask(taskId) });
    });
    this.edited(taskId);
    return { status: 'deleted' };
  }

  async pauseTask(taskId: string): Promise<{ status: 'paused' }> {
    await this.editSchedule(taskId, (task, s, now) => ({ ...s, paused: true, paused_reason: 'paused through the API', updated_at: iso(now) }));
    return { status: 'paused' };
  }

  async resumeTask(taskId: string): Promise<{ status: 'resumed' }> {
    await this.editSchedule(taskId, (task, s, now) => (s.paused ? resumedScheduleRow(task, s, now) : s));
    return { status: 'resumed' };
  }

  private async editSchedule(taskId: string, edit: (task: TaskRow, s: ScheduleRow, now: number) => ScheduleRow): Promise<void> {
    await this.scheduler.taskJob(taskId, async () => {
      const { store } = this.deps;
      const rec = await repos(store).bgTasks.get<TaskRow>(taskId);
      if (!rec) throw notFound('background task', bgIdOf(taskId));
      const now = this.now();
      const schedRec = await repos(store).bgSchedule.get<ScheduleRow>(taskId);
      const current = schedRec?.value ?? newScheduleRow(rec.value, 1, now, null);
      const next = edit(rec.value, current, now);
      let written: Versioned<ScheduleRow>;
      if (schedRec) {
        written = next !== current ? await repos(store).bgSchedule.update<ScheduleRow>(taskId, next, schedRec.version) : schedRec;
      } else {
        written = await repos(store).bgSchedule.create<ScheduleRow>(taskId, next);
      }
      this.scheduler.applyTask(rec.value, written);
    });
    this.edited(taskId);
  }

  async taskStatus(taskId: string) {
    const task = await this.getTask(taskId);
    const { store } = this.deps;
    const sched = await repos(store).bgSchedule.get<ScheduleRow>(taskId);
    const status_counts: Record<string, number> = {};
    const counts = await Promise.all(ALL_STATUSES.map((s) => repos(store).bgRuns.count({ name: 'task_status', value: taskStatusKey(taskId, s) })));
    ALL_STATUSES.forEach((s, i) => (status_counts[s] = counts[i]));
    const latest = await repos(store).bgRuns.list<BgRunRow>({ index: { name: 'task_id', value: taskId }, limit: 1, reverse: true });
    return {
      task_id: bgIdOf(task.task_id),
      agent_id: bgIdOf(task.agent_id),
      enabled: task.enabled,
      schedule: task.schedule,
      schedule_state: sched ? publicSchedule(sched.value) : null,
      runs: await repos(store).bgRuns.count({ name: 'task_id', value: taskId }),
      active_runs: ACTIVE.reduce((n, s) => n + status_counts[s], 0),
      status_counts,
      latest_run: latest.items[0] ? publicRun(this.cfg.workspace_root, latest.items[0].value.run) : null,
    };
  }

  async schedulePreview(taskId: string, count: number) {
    const task = await this.getTask(taskId);
    const sched = await repos(this.deps.store).bgSchedule.get<ScheduleRow>(taskId);
    return { task_id: bgIdOf(taskId), timezone: task.schedule.timezone ?? 'UTC', upcoming: previewOf(task, sched?.value ?? null, count, this.now()) };
  }
}

/** The stored schedule row without its internal fields. */
export function publicSchedule(s: ScheduleRow): BackgroundScheduleState {
  const { anchor_at: _a, deleted: _d, ...pub } = s;
  // A paused schedule is due at no time: the stored next_due_at (kept for the ticker, and in the
  // past after a while) is recomputed on resume (resumedScheduleRow), so it is not shown.
  const next_due_at = s.paused ? null : s.next_due_at;
  return { ...pub, next_due_at, skipped_occurrences: s.skipped_occurrences ?? 0, last_skipped: s.last_skipped ?? null };
}

/** The next `count` due times of a task's schedule, from `now` (GET /background/tasks/{id}/schedule/preview). */
function previewOf(task: TaskRow, sched: ScheduleRow | null, count: number, now: number) {
  const anchorMs = sched ? Date.parse(sched.anchor_at) : Date.parse(task.created_at);
  return upcoming(task.schedule as SchedSpec, now, count, { anchorMs });
}
