// Read side of background runs for the routes (GET /background/runs..., attempts, events and
// workspace files), as answers show them. BackgroundManager delegates to this.
import { inTimeRange, scanPage, type ListOrder } from '../runtime/list-scan.js';
import { isAbsolute } from 'node:path';
import type { AttemptRecord } from '../../machines/background-run.machine.js';
import { HttpDetailError } from '../errors.js';
import type { BackgroundRun, BackgroundRunStatus } from '../schemas/background.js';
import type { BackgroundDeps, RunEngine } from './engine.js';
import { taskStatusKey, type BgRunRow } from './types.js';
import { listWorkspace, openWorkspaceFile, relativeWorkspace } from './workspace.js';
import { repos } from '../store/repos/index.js';
import { pageOf } from '../paging.js';

/** A run as answers show it: new rows store the workspace relative to the root; older rows held it absolute. */
export function publicRun(workspaceRoot: string, run: BackgroundRun): BackgroundRun {
  if (!isAbsolute(run.workspace_path)) return run;
  return { ...run, workspace_path: relativeWorkspace(workspaceRoot, run.workspace_path) };
}

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
  async listRuns(q: {
    task_id?: string;
    status?: BackgroundRunStatus;
    agent_id?: string;
    since?: string;
    until?: string;
    order?: ListOrder;
    limit: number;
    cursor?: string;
  }) {
    const index =
      q.task_id && q.status
        ? { name: 'task_status', value: taskStatusKey(q.task_id, q.status) }
        : q.task_id
          ? { name: 'task_id', value: q.task_id }
          : q.status
            ? { name: 'status', value: q.status }
            : undefined;
    const match =
      q.agent_id || q.since || q.until ? (row: BgRunRow) => (!q.agent_id || row.run.agent_id === q.agent_id) && inTimeRange(row.run.triggered_at, q) : null;
    const repo = repos(this.deps.store).bgRuns;
    const page = await scanPage<BgRunRow>((lq) => repo.list<BgRunRow>(lq), { index, cursor: q.cursor ?? null, limit: q.limit, order: q.order ?? 'asc', match });
    const total = await repo.count(index);
    return { runs: page.items.map((row) => publicRun(this.cfg.workspace_root, row.run)), total, next_cursor: page.next_cursor };
  }

  async getRun(runId: string): Promise<BackgroundRun> {
    return publicRun(this.cfg.workspace_root, await this.engine.get(runId));
  }

  async attempts(
    runId: string,
    q: { limit: number; cursor?: string },
  ): Promise<{ run_id: string; attempts: AttemptRecord[]; count: number; next_cursor: string | null }> {
    await this.engine.get(runId);
    const page = await repos(this.deps.store).bgAttempts.list<AttemptRecord>({ index: { name: 'run_id', value: runId }, limit: 1000 });
    const all = page.items.map((i) => i.value).sort((a, b) => a.attempt_number - b.attempt_number);
    const { items: attempts, next_cursor } = pageOf(all, q);
    return { run_id: runId, attempts, count: attempts.length, next_cursor };
  }

  async events(runId: string, q: { limit: number; cursor?: string }) {
    const { items: events, next_cursor } = pageOf(await this.engine.events(runId), q);
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
      task_id: run.task_id,
      agent_id: run.agent_id,
      workspace_path: relativeWorkspace(this.cfg.workspace_root, run.workspace_path),
      files: await listWorkspace(dir),
    };
  }

  async openWorkspaceFile(runId: string, rel: string) {
    const row = await this.engine.getRow(runId);
    if (!row) throw new HttpDetailError(404, `background run '${runId}' was not found`, 'AGT_ERR_BACKGROUND_RUN_NOT_FOUND');
    let dir: string;
    try {
      dir = this.engine.dirOf(row.value.run);
    } catch {
      throw new HttpDetailError(400, `the workspace of background run '${runId}' is outside the workspace root`, 'AGT_ERR_WORKSPACE_PATH_OUTSIDE');
    }
    return openWorkspaceFile(dir, rel);
  }
}
