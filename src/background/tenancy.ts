// Background ids per tenant (docs/multi-tenant.md). A task or agent a tenant key creates lives in
// the tenant's namespace: inside the background subsystem its id is the key `<tenant>~<id>`, so the
// scheduler, the run rows and their indexes, occurrence records and workspace folders keep two
// tenants' same task id apart with no change of their own (a run's tenant is its task key's
// prefix). Neither ids (BackgroundId) nor tenant names (src/http/tenancy.ts) can hold `~`, so no key
// of one namespace spells a key of another, and ids without a tenant keep their plain key. The
// character is also safe in the workspace folders the keys name (background/<agent>/<task>/).
// Answers show the plain id and the record's `tenant` (the *public helpers below). The key
// functions themselves live in src/runtime/tenancy.ts, below both the run service and background/.
import { bgIdOf, bgTenantOf, tenantKey, type TenantScope } from '../runtime/tenancy.js';
export { bgIdOf, bgKey, bgTenantOf } from '../runtime/tenancy.js';
import type { BackgroundRun } from '../schemas/background.js';
import type { RecordIndexes } from '../store/store.js';
import type { TaskRow } from './types.js';

/** Whether a record keyed `key` (a task key, or a run's task key) is visible in `scope`. */
export function bgVisible(scope: TenantScope, key: string): boolean {
  return scope.all || bgTenantOf(key) === scope.tenant;
}

/** A task as answers show it: the client's ids and the task's tenant. */
export function publicTask(task: TaskRow): TaskRow {
  return { ...task, task_id: bgIdOf(task.task_id), agent_id: bgIdOf(task.agent_id), ...tenantField(task.task_id) };
}

/** A run's ids as answers show them (publicRun in run-queries.ts applies it). */
export function publicRunIds(run: BackgroundRun): BackgroundRun {
  return { ...run, task_id: bgIdOf(run.task_id), agent_id: bgIdOf(run.agent_id), ...tenantField(run.task_id) };
}

/** `{tenant}` of a keyed record, or nothing for one without a tenant (as runs answer it, src/runtime/run-types.ts). */
export function tenantField(key: string): { tenant?: string } {
  const tenant = bgTenantOf(key);
  return tenant ? { tenant } : {};
}

/**
 * The store key of a background run's session: its session id in the run's tenant, as its agent
 * run keeps it (src/runtime/tenancy.ts). Trace indexes hold it, so a lookup of a session's trace
 * by a tenant's key finds the background trace too.
 */
export function bgSessionKey(run: { task_id: string; session_id: string }): string {
  return tenantKey(bgTenantOf(run.task_id), run.session_id);
}

/**
 * A lifecycle record as its workspace line: without `data`, its ids as answers show them and its
 * tenant, the other fields in their order; one copy (the mirror makes one per lifecycle step of
 * every run, src/background/run-workspace.ts).
 */
export function publicLifecycleLine<T extends { task_id: string; agent_id: string; data?: unknown }>(l: T): Omit<T, 'data'> & { tenant?: string } {
  const { data: _d, ...line } = l;
  const shown: Omit<T, 'data'> & { tenant?: string } = line;
  shown.task_id = bgIdOf(l.task_id);
  shown.agent_id = bgIdOf(l.agent_id);
  const tenant = bgTenantOf(l.task_id);
  if (tenant) shown.tenant = tenant;
  return shown;
}

/**
 * Indexes of a task row: its agent, and for a tenant's task its tenant and tenant + agent (a
 * tenant's lists and counts walk its own; a shared agent's index holds every tenant's tasks).
 */
export function taskRowIndexes(task: TaskRow): RecordIndexes {
  const tenant = bgTenantOf(task.task_id);
  return { agent_id: task.agent_id, tenant, tenant_agent: tenant ? `${tenant}|${task.agent_id}` : null };
}
