import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  BackgroundAgentRegistrationRequest,
  BackgroundAgentSpec,
  BackgroundRun,
  BackgroundRunsListQuery,
  BackgroundTaskCreateRequest,
  BackgroundTaskDeleteQuery,
  BackgroundTaskPatchRequest,
  BackgroundTaskRunRequest,
  BackgroundTaskSpec,
  BackgroundTaskStatusResponse,
  RetryPolicy,
  ScheduleSpec,
  SchedulePreviewQuery,
  SessionPolicy,
  TaskIdParams,
  WorkspacePolicy,
  cronExpressionProblem,
  isValidTimeZone,
  safeParseRequest,
} from '../../src/schemas/index.js';

/** Issues of a failed parse as `path: message` lines. */
function problems(schema: z.ZodType, value: unknown): Array<{ path: string; message: string }> {
  const r = schema.safeParse(value);
  if (r.success) return [];
  return r.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message }));
}

function paths(schema: z.ZodType, value: unknown): string[] {
  return problems(schema, value).map((p) => p.path);
}

describe('ScheduleSpec', () => {
  it('fills defaults', () => {
    expect(ScheduleSpec.parse({ type: 'manual' })).toEqual({
      type: 'manual',
      jitter_seconds: 0,
      misfire_policy: 'run_once',
      timezone: 'UTC',
    });
  });

  it('manual rejects seconds, expression and run_at, each at its own path', () => {
    expect(paths(ScheduleSpec, { type: 'manual', seconds: 5 })).toEqual(['seconds']);
    expect(paths(ScheduleSpec, { type: 'manual', expression: '* * * * *' })).toEqual(['expression']);
    expect(paths(ScheduleSpec, { type: 'manual', run_at: '2026-01-01T00:00:00Z' })).toEqual(['run_at']);
    expect(paths(ScheduleSpec, { type: 'manual', seconds: 5, expression: 'x', run_at: '2026-01-01T00:00:00Z' }).sort()).toEqual([
      'expression',
      'run_at',
      'seconds',
    ]);
    // null means "not set"
    expect(ScheduleSpec.safeParse({ type: 'manual', seconds: null, expression: null, run_at: null }).success).toBe(true);
  });

  it('once needs run_at with a timezone offset', () => {
    expect(paths(ScheduleSpec, { type: 'once' })).toEqual(['run_at']);
    expect(ScheduleSpec.safeParse({ type: 'once', run_at: '2026-05-01T09:00:00Z' }).success).toBe(true);
    expect(ScheduleSpec.safeParse({ type: 'once', run_at: '2026-05-01T09:00:00+02:00' }).success).toBe(true);
    expect(paths(ScheduleSpec, { type: 'once', run_at: '2026-05-01T09:00:00' })).toEqual(['run_at']);
    expect(paths(ScheduleSpec, { type: 'once', run_at: 'tomorrow' })).toEqual(['run_at']);
  });

  it('interval needs seconds > 0 (an integer)', () => {
    expect(paths(ScheduleSpec, { type: 'interval' })).toEqual(['seconds']);
    expect(paths(ScheduleSpec, { type: 'interval', seconds: 0 })).toEqual(['seconds']);
    expect(paths(ScheduleSpec, { type: 'interval', seconds: -3 })).toEqual(['seconds']);
    expect(paths(ScheduleSpec, { type: 'interval', seconds: 1.5 })).toEqual(['seconds']);
    expect(ScheduleSpec.parse({ type: 'interval', seconds: 60 }).seconds).toBe(60);
  });

  it('cron needs a valid 5-field expression', () => {
    expect(paths(ScheduleSpec, { type: 'cron' })).toEqual(['expression']);
    expect(ScheduleSpec.safeParse({ type: 'cron', expression: '*/5 * * * *' }).success).toBe(true);
    expect(ScheduleSpec.safeParse({ type: 'cron', expression: '0 9 * * MON-FRI', timezone: 'Europe/Paris' }).success).toBe(true);
    expect(ScheduleSpec.safeParse({ type: 'cron', expression: '0 9 * * THU' }).success).toBe(true);
    // six fields (seconds) are accepted by cron-parser but not by the contract
    const six = problems(ScheduleSpec, { type: 'cron', expression: '0 0 9 * * *' });
    expect(six).toHaveLength(1);
    expect(six[0].path).toBe('expression');
    expect(six[0].message).toMatch(/exactly 5 fields/);
    expect(paths(ScheduleSpec, { type: 'cron', expression: '* * * *' })).toEqual(['expression']);
    expect(paths(ScheduleSpec, { type: 'cron', expression: '@daily' })).toEqual(['expression']);
    expect(paths(ScheduleSpec, { type: 'cron', expression: '61 * * * *' })).toEqual(['expression']);
    expect(paths(ScheduleSpec, { type: 'cron', expression: 'foo bar baz qux quux' })).toEqual(['expression']);
    expect(paths(ScheduleSpec, { type: 'cron', expression: 'H * * * *' })).toEqual(['expression']);
  });

  it('cronExpressionProblem explains itself', () => {
    expect(cronExpressionProblem('0 0 * * *')).toBeNull();
    expect(cronExpressionProblem('0 0 0 * * *')).toMatch(/got 6/);
    expect(cronExpressionProblem('0 0 31 2 *')).toMatch(/not a valid cron expression/);
  });

  it('timezone must be an IANA zone, default UTC', () => {
    expect(isValidTimeZone('Europe/Paris')).toBe(true);
    expect(isValidTimeZone('Mars/Olympus')).toBe(false);
    expect(isValidTimeZone('')).toBe(false);
    expect(paths(ScheduleSpec, { type: 'interval', seconds: 60, timezone: 'Mars/Olympus' })).toEqual(['timezone']);
    expect(paths(ScheduleSpec, { type: 'cron', expression: '0 9 * * *', timezone: 'Not/AZone' })).toEqual(['timezone']);
    expect(ScheduleSpec.parse({ type: 'cron', expression: '0 9 * * *', timezone: 'America/New_York' }).timezone).toBe('America/New_York');
  });

  it('end_at must be after start_at', () => {
    const base = { type: 'interval', seconds: 60 };
    expect(paths(ScheduleSpec, { ...base, start_at: '2026-02-01T00:00:00Z', end_at: '2026-01-01T00:00:00Z' })).toEqual(['end_at']);
    expect(paths(ScheduleSpec, { ...base, start_at: '2026-01-01T00:00:00Z', end_at: '2026-01-01T00:00:00Z' })).toEqual(['end_at']);
    // offsets are compared as instants: 01:00+02:00 is before 00:00Z
    expect(paths(ScheduleSpec, { ...base, start_at: '2026-01-01T00:00:00Z', end_at: '2026-01-01T01:00:00+02:00' })).toEqual(['end_at']);
    expect(ScheduleSpec.safeParse({ ...base, start_at: '2026-01-01T00:00:00Z', end_at: '2026-01-02T00:00:00Z' }).success).toBe(true);
  });

  it('jitter_seconds is an integer >= 0; misfire_policy is an enum', () => {
    expect(paths(ScheduleSpec, { type: 'manual', jitter_seconds: -1 })).toEqual(['jitter_seconds']);
    expect(paths(ScheduleSpec, { type: 'manual', jitter_seconds: 0.5 })).toEqual(['jitter_seconds']);
    expect(ScheduleSpec.parse({ type: 'manual', jitter_seconds: 10 }).jitter_seconds).toBe(10);
    expect(paths(ScheduleSpec, { type: 'manual', misfire_policy: 'sometimes' })).toEqual(['misfire_policy']);
    expect(ScheduleSpec.parse({ type: 'manual', misfire_policy: 'queue_all' }).misfire_policy).toBe('queue_all');
  });

  it('refuses unknown fields and unknown types', () => {
    expect(paths(ScheduleSpec, { type: 'manual', every: 5 })).toEqual(['']);
    expect(paths(ScheduleSpec, { type: 'weekly' })).toEqual(['type']);
  });

  it('reports the 422 location inside a request body', () => {
    const r = safeParseRequest(BackgroundTaskCreateRequest, { task_id: 't', query: 'q', schedule: { type: 'interval', seconds: 0 } }, 'body');
    expect(r.success).toBe(false);
    if (!r.success) {
      expect(r.detail).toEqual([
        { loc: ['body', 'schedule', 'seconds'], msg: 'Input should be greater than 0', type: 'greater_than', ctx: { gt: 0 }, input: 0 },
      ]);
    }
    const missing = safeParseRequest(BackgroundTaskCreateRequest, { task_id: 't', query: 'q', schedule: { type: 'once' } }, 'body');
    expect(missing.success ? null : missing.detail).toEqual([
      { loc: ['body', 'schedule', 'run_at'], msg: 'Field required for a once schedule', type: 'missing' },
    ]);
  });
});

describe('policies', () => {
  it('RetryPolicy defaults and strictness', () => {
    expect(RetryPolicy.parse({})).toEqual({
      backoff: 'fixed',
      initial_delay_seconds: 30,
      max_delay_seconds: 300,
      max_retries: 0,
      retry_on: ['exception', 'timeout'],
    });
    expect(paths(RetryPolicy, { max_retries: -1 })).toEqual(['max_retries']);
    expect(paths(RetryPolicy, { backoff: 'linear' })).toEqual(['backoff']);
    expect(paths(RetryPolicy, { retry_on: ['crash'] })).toEqual(['retry_on.0']);
    expect(paths(RetryPolicy, { jitter: true })).toEqual(['']);
  });

  it('SessionPolicy: modes task|run|fixed, fixed needs session_id', () => {
    expect(SessionPolicy.parse({})).toEqual({ mode: 'task' });
    expect(SessionPolicy.safeParse({ mode: 'run' }).success).toBe(true);
    expect(paths(SessionPolicy, { mode: 'fixed' })).toEqual(['session_id']);
    expect(SessionPolicy.parse({ mode: 'fixed', session_id: 'shared' })).toEqual({ mode: 'fixed', session_id: 'shared' });
    expect(paths(SessionPolicy, { mode: 'sticky' })).toEqual(['mode']);
    expect(paths(SessionPolicy, { mode: 'fixed', session_id: '../etc' })).toEqual(['session_id']);
  });

  it('WorkspacePolicy defaults per decisions §7 and no escaping template', () => {
    expect(WorkspacePolicy.parse({})).toEqual({
      namespace_template: 'background/{agent_id}/{task_id}/{run_id}',
      write_events_jsonl: true,
      write_run_json: true,
    });
    expect(paths(WorkspacePolicy, { namespace_template: '../{task_id}' })).toEqual(['namespace_template']);
    expect(paths(WorkspacePolicy, { namespace_template: '/abs/{run_id}' })).toEqual(['namespace_template']);
    expect(WorkspacePolicy.parse({ write_run_json: false }).write_run_json).toBe(false);
  });
});

describe('tasks', () => {
  const create = { task_id: 'nightly.report-1', query: 'summarise', schedule: { type: 'cron', expression: '0 3 * * *' } };

  it('create request fills defaults', () => {
    const r = BackgroundTaskCreateRequest.parse(create);
    expect(r.enabled).toBe(true);
    expect(r.replace).toBe(false);
    expect(r.overlap_policy).toBe('skip_if_running');
    expect(r.metadata).toEqual({});
    expect(r.retry_policy.max_retries).toBe(0);
    expect(r.session_policy.mode).toBe('task');
    expect(r.workspace_policy.write_events_jsonl).toBe(true);
    expect(r.schedule.timezone).toBe('UTC');
    expect(r.agent_id).toBeUndefined();
  });

  it('task ids match ^[A-Za-z0-9_.-]{1,128}$ and are not . or ..', () => {
    for (const bad of ['a/b', '..', '.', '', 'a b', 'x'.repeat(129), 'é']) {
      expect(paths(BackgroundTaskCreateRequest, { ...create, task_id: bad })).toEqual(['task_id']);
    }
    for (const good of ['a', '...', 'A-Z_0.9', 'x'.repeat(128)]) {
      expect(BackgroundTaskCreateRequest.safeParse({ ...create, task_id: good }).success).toBe(true);
    }
    expect(paths(TaskIdParams, { task_id: '..' })).toEqual(['task_id']);
  });

  it('refuses unknown fields at every level', () => {
    expect(paths(BackgroundTaskCreateRequest, { ...create, colour: 'red' })).toEqual(['']);
    expect(paths(BackgroundTaskCreateRequest, { ...create, retry_policy: { max_retries: 1, extra: 1 } })).toEqual(['retry_policy']);
    expect(paths(BackgroundTaskPatchRequest, { task_id: 'renamed' })).toEqual(['']);
    expect(paths(BackgroundTaskRunRequest, { wait: true, priority: 1 })).toEqual(['']);
  });

  it('requires task_id, query and schedule; timeout_seconds is a positive integer or null', () => {
    expect(paths(BackgroundTaskCreateRequest, {}).sort()).toEqual(['query', 'schedule', 'task_id']);
    expect(paths(BackgroundTaskCreateRequest, { ...create, timeout_seconds: 0 })).toEqual(['timeout_seconds']);
    expect(paths(BackgroundTaskCreateRequest, { ...create, timeout_seconds: 1.5 })).toEqual(['timeout_seconds']);
    expect(BackgroundTaskCreateRequest.safeParse({ ...create, timeout_seconds: null }).success).toBe(true);
  });

  it('patch: everything optional and nullable, schedule still validated', () => {
    expect(BackgroundTaskPatchRequest.parse({})).toEqual({});
    expect(BackgroundTaskPatchRequest.safeParse({ enabled: null, query: null, schedule: null }).success).toBe(true);
    expect(paths(BackgroundTaskPatchRequest, { schedule: { type: 'interval' } })).toEqual(['schedule.seconds']);
  });

  it('run request defaults wait to false', () => {
    expect(BackgroundTaskRunRequest.parse({})).toEqual({ wait: false });
    expect(BackgroundTaskRunRequest.parse({ query: 'once more', wait: true })).toEqual({ query: 'once more', wait: true });
  });

  it('stored spec: strict, defaults filled, encodes as it parses', () => {
    const spec = BackgroundTaskSpec.parse({ ...create, agent_id: 'default', created_at: '2026-01-01T00:00:00Z' });
    expect(spec.overlap_policy).toBe('skip_if_running');
    expect(z.encode(BackgroundTaskSpec, spec)).toEqual(spec);
    expect(paths(BackgroundTaskSpec, { ...spec, replace: true })).toEqual(['']);
    expect(paths(BackgroundTaskSpec, { ...create })).toEqual(['agent_id']);
  });
});

describe('runs and agents', () => {
  const run = {
    run_id: 'bgrun_1',
    task_id: 't',
    agent_id: 'default',
    query_snapshot: 'q',
    trigger_type: 'manual',
    session_id: 'background:default:t',
    workspace_path: '/tmp/ws/background/default/t/bgrun_1',
    triggered_at: '2026-01-01T00:00:00Z',
  };

  it('BackgroundRun defaults and enums', () => {
    const r = BackgroundRun.parse(run);
    expect(r.status).toBe('queued');
    expect(r.attempt).toBe(0);
    expect(r.max_attempts).toBe(1);
    expect(r.lease_generation).toBe(0);
    expect(r.lease_owner).toBeNull();
    expect(r.metadata).toEqual({});
    for (const s of [
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
    ]) {
      expect(BackgroundRun.safeParse({ ...run, status: s }).success).toBe(true);
    }
    for (const t of ['manual', 'once', 'interval', 'cron', 'retry', 'recovery']) {
      expect(BackgroundRun.safeParse({ ...run, trigger_type: t }).success).toBe(true);
    }
    expect(paths(BackgroundRun, { ...run, status: 'done' })).toEqual(['status']);
    expect(paths(BackgroundRun, { ...run, trigger_type: 'webhook' })).toEqual(['trigger_type']);
    expect(paths(BackgroundRun, { ...run, internal: 1 })).toEqual(['']);
    expect(paths(BackgroundRun, { ...run, session_id: undefined })).toEqual(['session_id']);
  });

  it('task status answer nests schedule state and latest run', () => {
    const ok = BackgroundTaskStatusResponse.safeParse({
      task_id: 't',
      agent_id: 'default',
      enabled: true,
      schedule: { type: 'manual' },
      schedule_state: { task_id: 't', updated_at: '2026-01-01T00:00:00Z' },
      runs: 1,
      active_runs: 0,
      status_counts: { completed: 1 },
      latest_run: run,
    });
    expect(ok.success).toBe(true);
    if (ok.success) expect(ok.data.schedule_state?.schedule_revision).toBe(1);
  });

  it('agent registration: defaults, strict spec, id mismatch refused', () => {
    expect(BackgroundAgentRegistrationRequest.parse({})).toEqual({ replace: false });
    const spec = BackgroundAgentSpec.parse({ agent_id: 'helper' });
    expect(spec).toEqual({ agent_id: 'helper', agent_config: {}, mcp_tools: [], metadata: {} });
    expect(paths(BackgroundAgentSpec, { agent_id: 'helper', tools: [] })).toEqual(['']);
    expect(paths(BackgroundAgentRegistrationRequest, { agent_id: 'a', spec: { agent_id: 'b' } })).toEqual(['spec.agent_id']);
    expect(BackgroundAgentRegistrationRequest.safeParse({ agent_id: 'a', spec: { agent_id: 'a' } }).success).toBe(true);
    expect(paths(BackgroundAgentRegistrationRequest, { agent_id: 'a/b' })).toEqual(['agent_id']);
  });
});

describe('query strings', () => {
  it('coerce numbers with ranges and defaults', () => {
    expect(BackgroundRunsListQuery.parse({})).toEqual({ order: 'asc', limit: 100 });
    expect(BackgroundRunsListQuery.parse({ limit: '5', status: 'failed' })).toEqual({ order: 'asc', limit: 5, status: 'failed' });
    expect(paths(BackgroundRunsListQuery, { limit: '0' })).toEqual(['limit']);
    expect(paths(BackgroundRunsListQuery, { limit: '501' })).toEqual(['limit']);
    expect(paths(BackgroundRunsListQuery, { limit: 'ten' })).toEqual(['limit']);
    expect(paths(BackgroundRunsListQuery, { status: 'nope' })).toEqual(['status']);
    expect(SchedulePreviewQuery.parse({})).toEqual({ count: 5 });
    expect(paths(SchedulePreviewQuery, { count: '101' })).toEqual(['count']);
  });

  it('booleans read "false" as false', () => {
    expect(BackgroundTaskDeleteQuery.parse({})).toEqual({ delete_runs: false });
    expect(BackgroundTaskDeleteQuery.parse({ delete_runs: 'false' })).toEqual({ delete_runs: false });
    expect(BackgroundTaskDeleteQuery.parse({ delete_runs: 'true' })).toEqual({ delete_runs: true });
    expect(BackgroundTaskDeleteQuery.parse({ delete_runs: '1' })).toEqual({ delete_runs: true });
    expect(BackgroundTaskDeleteQuery.safeParse({ delete_runs: 'maybe' }).success).toBe(false);
  });
});
