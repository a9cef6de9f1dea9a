// Read side of background runs for the routes (GET /background/runs..., attempts, events and
// workspace files), as answers show them. BackgroundManager delegates to this.
import { inTimeRange, scanPage, type ListOrder } from '../runtime/list-scan.js';
import { isAbsolute } from 'node:path';
import type { AttemptRecord } from '../../machines/background-run.machine.js';
import { HttpDetailError } from '../errors.js';
import type { BackgroundRun, BackgroundRunStatus } from '../schemas/background.js';
import type { RunEngine } from './engine.js';
import type { BackgroundDeps } from './host-types.js';
import { taskStatusKey, type BgRunRow } from './types.js';
import { listWorkspace, openWorkspaceFile, relativeWorkspace } from './workspace.js';
import { repos } from '../store/repos/index.js';
import { pageOf } from '../paging.js';
import { notFound } from '../errors.js';
import { GLOBAL_SCOPE, type TenantScope } from '../runtime/tenancy.js';
import { bgIdOf, bgKey, bgVisible, publicRunIds } from './tenancy.js';

/** The 404 of the workspace file route (HttpErrorResponse `{detail}`). */
const fileRunNotFound = (runId: string) => new HttpDetailError(404, `background run '${runId}' was not found`, 'AGT_ERR_BACKGROUND_RUN_NOT_FOUND');

/**
 * A run as answers show it: the client's task and agent ids and the run's tenant (tenancy.ts); new
 * rows store the workspace relative to the root, older rows held it absolute.
 */
export function publicRun(workspaceRoot: string, run: BackgroundRun): BackgroundRun {
  const shown = publicRunIds(run);
  if (!isAbsolute(run.workspace_path)) return shown;
  return { ...shown, workspace_path: relativeWorkspace(workspaceRoot, run.workspace_path) };
}

const runNotFound = (runId: string) => notFound('background run', runId);

export class BackgroundRunQueries {
  constructor(
    private readonly deps: BackgroundDeps,
    private readonly engine: RunEngine,
  ) {}

  private get cfg() {
    return this.deps.config.background;
  }

  /**
   * GET /background/runs (docs/contract.md §1): task and status pick the store index; agent and
   * time range (triggered_at) are applied while reading (src/runtime/list-scan.ts). `total` counts
   * what the indexed filters select.
   */
  async listRuns(
    q: {
      task_id?: string;
      status?: BackgroundRunStatus;
      agent_id?: string;
      since?: string;
      until?: string;
      order?: ListOrder;
      limit: number;
      cursor?: string;
    },
    scope: TenantScope = GLOBAL_SCOPE,
  ) {
    // A tenant's task ids are keys in its namespace; without a task it walks its own tenant and
    // tenant_status indexes, so pages and totals never count another tenant's runs.
    const taskKey = q.task_id === undefined ? undefined : bgKey(scope.tenant, q.task_id);
    const tenant = scope.all ? null : (scope.tenant ?? '');
    const index =
      taskKey && q.status
        ? { name: 'task_status', value: taskStatusKey(taskKey, q.status) }
        : taskKey
          ? { name: 'task_id', value: taskKey }
          : q.status
            ? tenant === null
              ? { name: 'status', value: q.status }
              : { name: 'tenant_status', value: taskStatusKey(tenant, q.status) }
            : tenant === null
              ? undefined
              : { name: 'tenant', value: tenant };
    // An agent id is the client's: a tenant's own agent or a shared one of that id.
    const agentMatch = (id: string) => bgIdOf(id) === q.agent_id;
    const match =
      q.agent_id || q.since || q.until ? (row: BgRunRow) => (!q.agent_id || agentMatch(row.run.agent_id)) && inTimeRange(row.run.triggered_at, q) : null;
    const repo = repos(this.deps.store).bgRuns;
    const page = await scanPage<BgRunRow>((lq) => repo.list<BgRunRow>(lq), { index, cursor: q.cursor ?? null, limit: q.limit, order: q.order ?? 'asc', match });
    const total = await repo.count(index);
    return { runs: page.items.map((row) => publicRun(this.cfg.workspace_root, row.run)), total, next_cursor: page.next_cursor };
  }

  async getRun(runId: string): Promise<BackgroundRun> {
    return publicRun(this.cfg.workspace_root, await this.engine.get(runId));
  }

  /**
   * Refuses a run `scope` may not see exactly as a run that does not exist (the hook of every
   * /background/runs/{run_id} route, src/http/tenancy.ts): the workspace file route with its own
   * 404 shape, the others with the run's.
   */
  async checkVisible(runId: string, scope: TenantScope, fileRoute: boolean): Promise<void> {
    if (scope.all) return;
    const row = await this.engine.getRow(runId);
    if (row && bgVisible(scope, row.value.run.task_id)) return;
    throw fileRoute ? fileRunNotFound(runId) : runNotFound(runId);
  }

  async attempts(
    runId: string,
    q: { limit: number; cursor?: string; order?: 'asc' | 'desc' },
  ): Promise<{ run_id: string; attempts: AttemptRecord[]; count: number; next_cursor: string | null }> {
    await this.engine.get(runId);
    const page = await repos(this.deps.store).bgAttempts.list<AttemptRecord>({ index: { name: 'run_id', value: runId }, limit: 1000 });
    const all = page.items.map((i) => i.value).sort((a, b) => a.attempt_number - b.attempt_number);
    const { items: attempts, next_cursor } = pageOf(all, q);
    return { run_id: runId, attempts, count: attempts.length, next_cursor };
  }

  async events(runId: string, q: { limit: number; cursor?: string; order?: 'asc' | 'desc' }) {
    const { items, next_cursor } = pageOf(await this.engine.events(runId), q);
    // The client's task and agent ids, as the run shows them (tenancy.ts).
    const events = items.map((e) => ({
      ...e,
      ...(typeof e.task_id === 'string' ? { task_id: bgIdOf(e.task_id) } : {}),
      ...(typeof e.agent_id === 'string' ? { agent_id: bgIdOf(e.agent_id) } : {}),
    }));
    return { run_id: runId, events, count: events.length, next_cursor };
  }

  async workspace(runId: string) {
    const run = await this.engine.get(runId);
    let dir: string;
    try {
      dir = this.engine.dirOf(run);
    } catch {
      throw new HttpDetailError(400, `the workspace of background run '${runId}' is outside the workspace root`, 'AGT_ERR_WORKSPACE_PATH_OUTSIDE');
    }
    // workspace_path as stored: relative to the workspace root (answers never show server paths).
    return {
      run_id: run.run_id,
      task_id: bgIdOf(run.task_id),
      agent_id: bgIdOf(run.agent_id),
      workspace_path: relativeWorkspace(this.cfg.workspace_root, run.workspace_path),
      files: await listWorkspace(dir),
    };
  }

  async openWorkspaceFile(runId: string, rel: string) {
    const row = await this.engine.getRow(runId);
    if (!row) throw fileRunNotFound(runId);
    let dir: string;
    try {
      dir = this.engine.dirOf(row.value.run);
    } catch {
      throw new HttpDetailError(400, `the workspace of background run '${runId}' is outside the workspace root`, 'AGT_ERR_WORKSPACE_PATH_OUTSIDE');
    }
    return openWorkspaceFile(dir, rel);
  }
}

/** The 504 AGT_ERR_RUN_WAIT_TIMEOUT answer of a `wait` whose run did not settle within `budget` seconds (it goes on). */
export function runWaitTimeout(run: BackgroundRun, taskId: string, budget: number): HttpDetailError {
  return new HttpDetailError(
    504,
    {
      message: `background run ${run.run_id} did not finish within the wait budget of ${budget} s; it goes on and can be inspected at GET /background/runs/${run.run_id}`,
      run_id: run.run_id,
      task_id: taskId,
      status: run.status,
      request_timeout_seconds: budget,
      wait_timeout_seconds: budget,
    },
    'AGT_ERR_RUN_WAIT_TIMEOUT',
  );
}
