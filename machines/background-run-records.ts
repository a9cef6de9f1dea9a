// What each transition of the background-run machine writes (its `record` effect's params): the
// lifecycle events, in order, and the attempt records that go into the same atomic row write.
// Pure functions of the context after the transition and the event that took it; split from
// background-run.machine.ts so the statechart reads as states and transitions.
import type { AttemptRecord, Ctx, Ev, LifecycleEvent, RecordParams } from './background-run-model.js';
import { closedOnly } from './background-run-model.js';

export const rec = (events: LifecycleEvent[], attempts: AttemptRecord[] = []): RecordParams => ({ events, attempts });

const currentOnly = (ctx: Ctx): AttemptRecord[] => (ctx.internal.current_attempt ? [ctx.internal.current_attempt] : []);

/** claimed -> running, the paused attempt goes on. */
export const startedContinueRecord = (ctx: Ctx): RecordParams =>
  rec([{ type: 'background_run_started', data: { continued: true, agent_run_id: ctx.internal.agent_run_id } }], currentOnly(ctx));

/** claimed -> running, a new attempt. */
export const startedFreshRecord = (ctx: Ctx): RecordParams =>
  rec(
    [{ type: 'background_run_started', data: { agent_run_id: ctx.internal.agent_run_id, reason: ctx.internal.current_attempt?.reason ?? null } }],
    currentOnly(ctx),
  );

/** running -> retrying. */
export const retryingRecord = (ctx: Ctx, e: Ev<'AGENT_DONE'>): RecordParams =>
  rec(
    [
      // timeout_seconds stopped the attempt: background_run_timeout says so even when a retry follows.
      ...(e.outcome === 'timeout' ? [{ type: 'background_run_timeout' as const, data: { will_retry: true, error: e.error } }] : []),
      {
        type: 'background_run_retrying' as const,
        data: {
          error: e.error,
          error_kind: e.outcome === 'timeout' ? 'timeout' : 'exception',
          failed_attempt: ctx.run.attempt,
          next_attempt: ctx.run.attempt + 1,
          retry_delay_seconds: ctx.internal.last_closed_attempt?.retry_delay_seconds ?? 0,
          retry_at: ctx.internal.retry_at,
        },
      },
    ],
    closedOnly(ctx),
  );

/** running -> timeout, no retry. */
export const timeoutRecord = (ctx: Ctx, e: Ev<'AGENT_DONE'>): RecordParams =>
  rec([{ type: 'background_run_timeout', data: { will_retry: false, error: e.error, side_effects: e.side_effects } }], closedOnly(ctx));

/** running -> failed, no retry. */
export const failedRecord = (ctx: Ctx, e: Ev<'AGENT_DONE'>): RecordParams =>
  rec(
    [
      {
        type: 'background_run_failed',
        data: { error: ctx.run.error, side_effects: e.side_effects, not_retried_because_of_side_effects: e.side_effects.length > 0 },
      },
    ],
    closedOnly(ctx),
  );

/** running, lease lapsed: the next attempt continues the same agent run. */
export const recoveredRecord = (ctx: Ctx, e: Ev<'RECOVER'>): RecordParams =>
  rec(
    [
      {
        type: 'background_run_recovered',
        data: {
          from: 'running',
          previous_owner: e.previous_owner ?? null,
          interrupted_attempt: ctx.run.attempt - 1,
          continues_agent_run: ctx.internal.agent_run_id,
        },
      },
      { type: 'background_run_started', data: { agent_run_id: ctx.internal.agent_run_id, reason: 'recovery' } },
    ],
    [...closedOnly(ctx), ...currentOnly(ctx)],
  );

/** running -> failed: the lease lapsed and no attempts remain. */
export const lapsedFailedRecord = (ctx: Ctx, e: Ev<'RECOVER'>): RecordParams =>
  rec(
    [
      { type: 'background_run_recovered', data: { from: 'running', previous_owner: e.previous_owner ?? null, attempts_exhausted: true } },
      { type: 'background_run_failed', data: { error: ctx.run.error } },
    ],
    closedOnly(ctx),
  );
