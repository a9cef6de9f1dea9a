// Which runs an evaluation replays (docs/contract.md §3.7): named ones, or a filter over the stored
// runs (synchronous runs and background task runs alike), newest first, ended runs only unless a
// status is named. Replays made by evaluations are never selected.
import { HttpValidationFailure } from '../../errors.js';
import { repos } from '../../store/repos/index.js';
import type { ListQuery, Page, Store } from '../../store/store.js';
import { TERMINAL_RUN_STATUSES, type RunRecord } from '../run-record.js';
import { isEvalReplayRun } from './eval-types.js';
import { GLOBAL_SCOPE, sessionKeyOf, tenantKey, visibleIn, type TenantScope } from '../tenancy.js';

export type EvalSource =
  | { run_ids: string[] }
  | {
      filter: {
        agent_id?: string;
        task_id?: string;
        session_id?: string;
        status?: string;
        since?: string;
        until?: string;
        limit: number;
      };
    };

/** Records read at most while looking for a filter's runs (the filter is checked in memory). */
const MAX_SCANNED = 100_000;

/** `scope`: another tenant's runs are not selected, and a named one is not found as a missing one. */
export async function selectRuns(store: Store, source: EvalSource, scope: TenantScope = GLOBAL_SCOPE): Promise<RunRecord[]> {
  const runs = repos(store).runs;
  if ('run_ids' in source) {
    const found = (await runs.getMany<RunRecord>(source.run_ids)).map((r) => (r && visibleIn(scope, r.value.tenant) ? r : null));
    const problems = found.flatMap((r, i) =>
      r ? [] : [{ loc: ['body', 'source', 'run_ids', i], msg: `run '${source.run_ids[i]}' was not found`, type: 'not_found' }],
    );
    if (problems.length) throw new HttpValidationFailure(problems);
    return found.map((r) => r!.value);
  }
  const f = source.filter;
  // The most selective index the filter names; else every run, newest first.
  // A tenant's session ids are keys in its namespace; without one it walks its own runs.
  const sessionKey = f.session_id ? tenantKey(scope.tenant, f.session_id) : undefined;
  const index: ListQuery['index'] = sessionKey
    ? { name: 'session_id', value: sessionKey }
    : f.task_id
      ? { name: 'task_id', value: f.task_id }
      : !scope.all
        ? { name: 'tenant', value: scope.tenant ?? '' }
        : f.status
          ? { name: 'status', value: f.status }
          : undefined;
  const since = f.since ? Date.parse(f.since) : null;
  const until = f.until ? Date.parse(f.until) : null;
  const out: RunRecord[] = [];
  let cursor: string | null = null;
  let scanned = 0;
  do {
    const page: Page<RunRecord> = await runs.list<RunRecord>({ ...(index ? { index } : {}), cursor, limit: 500, reverse: true });
    for (const { value: r } of page.items) {
      scanned++;
      if (isEvalReplayRun(r.run_id) || !visibleIn(scope, r.tenant)) continue;
      if (f.status ? r.status !== f.status : !TERMINAL_RUN_STATUSES.has(r.status)) continue;
      if (f.agent_id && r.agent_id !== f.agent_id) continue;
      if (f.task_id && r.task_id !== f.task_id) continue;
      if (sessionKey && sessionKeyOf(r) !== sessionKey) continue;
      const at = Date.parse(r.created_at);
      if ((since !== null && at < since) || (until !== null && at >= until)) continue;
      out.push(r);
      if (out.length >= f.limit) return out;
    }
    cursor = page.next_cursor;
  } while (cursor && scanned < MAX_SCANNED);
  return out;
}
