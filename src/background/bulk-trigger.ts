// POST /background/tasks/{id}/runs, the bulk trigger (as BullMQ's addBulk): a list of manual runs
// of one task queued together, idempotent per item. Split from manager.ts, which checks the
// service and the task and hands the list here.
import type { BackgroundTaskBulkRunItem } from '../schemas/background.js';
import type { BackgroundTaskBulkRunResponse } from '../schemas/background-answers.js';
import type { BackgroundRun } from '../schemas/background.js';
import type { Store } from '../store/store.js';
import { repos } from '../store/repos/index.js';
import { notFound } from '../errors.js';
import { newId } from '../ids.js';
import type { RunEngine } from './engine.js';
import type { TaskScheduler } from './scheduler.js';
import type { QueuedRunBound } from './queue-bound.js';
import { keyedRunId } from './prepare-run.js';
import { publicRun } from './run-queries.js';
import { bgIdOf } from './tenancy.js';

/** What queuing a list needs of the background manager. */
export interface BulkParts {
  store: Store;
  scheduler: TaskScheduler;
  engine: RunEngine;
  queueBound: QueuedRunBound;
  /** background.workspace_root (answers show workspace paths relative to it). */
  workspaceRoot: string;
}

/**
 * POST /background/tasks/{id}/runs: queues one manual run per item, in order, each decided by
 * the task's overlap policy as POST /background/tasks/{id}/run would (queued, or stored
 * skipped). The runs' writes are issued together and share the store's rounds (one round for a
 * list on the embedded stores, instead of one per call). An item with an `idempotency_key` takes
 * the run id that key names for this task (keyedRunId): a run already stored under it is
 * answered as it is and nothing is queued, and two items of one list with one key queue one
 * run. The whole list is admitted against background.max_queued_runs at once: 503, nothing
 * queued, when the new runs would pass it.
 */
export async function queueBulk(parts: BulkParts, taskId: string, items: BackgroundTaskBulkRunItem[]): Promise<BackgroundTaskBulkRunResponse> {
  const ids = items.map((it) => (it.idempotency_key ? keyedRunId(taskId, it.idempotency_key) : newId('bgrun')));
  const keyed = [...new Set(ids.filter((_, i) => items[i].idempotency_key))];
  const stored = new Map<string, BackgroundRun>();
  if (keyed.length > 0) {
    const rows = await repos(parts.store).bgRuns.getMany(keyed);
    for (const row of rows) if (row) stored.set(row.value.run.run_id, row.value.run);
  }
  // The items that queue a run: not stored yet, and the first of their key in this list.
  const fresh: number[] = [];
  const seen = new Set<string>();
  ids.forEach((id, i) => {
    if (stored.has(id) || seen.has(id)) return;
    seen.add(id);
    fresh.push(i);
  });
  if (fresh.length > 0) await parts.queueBound.admit(fresh.length);
  const dispatched = await parts.scheduler.taskJob(taskId, async () => {
    const current = parts.scheduler.tasks.get(taskId);
    if (!current || !current.enabled) throw notFound('enabled background task', bgIdOf(taskId));
    const out = [];
    for (const i of fresh) out.push(await parts.scheduler.dispatchManual(current, items[i].query ?? null, ids[i]));
    return out;
  });
  const made = await Promise.all(dispatched.map((d) => d.done));
  const created = new Set<string>();
  const lost: string[] = [];
  made.forEach((run, k) => {
    if (run) {
      stored.set(run.run_id, run);
      created.add(run.run_id);
    } else lost.push(ids[fresh[k]]); // stored meanwhile under its key (a concurrent call with the same key)
  });
  if (lost.length > 0) {
    for (const row of await repos(parts.store).bgRuns.getMany(lost)) if (row) stored.set(row.value.run.run_id, row.value.run);
  }
  // Answer once the runs' creation events are stored too, as a single manual run does.
  await Promise.all([...created].map((id) => parts.engine.creation.appended(id)));
  const seenInAnswer = new Set<string>();
  return {
    runs: ids.map((id) => {
      const run = stored.get(id);
      if (!run) throw notFound('enabled background task', bgIdOf(taskId));
      const first = created.has(id) && !seenInAnswer.has(id);
      seenInAnswer.add(id);
      return { run: publicRun(parts.workspaceRoot, run), created: first };
    }),
    created: created.size,
  };
}
