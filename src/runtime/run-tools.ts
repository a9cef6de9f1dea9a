// One tool call of a run's batch, start to end: the policy's and the person's decision applied,
// the call validated, its `started` state made durable before a non-idempotent tool runs (a crash
// can never make it run twice, docs/contract.md §6.3), the tool run under its timeout and the run's
// abort signal, its outcome saved and its telemetry emitted. Delegations to sub-agents are
// recorded the same way. Lives in the runtime (not agent/tools/) because it writes through the
// run's RunHost.
import type { RunContext, ToolOutcome } from '../../machines/run.machine.js';
import type { ToolCallRequest } from '../agent/model/types.js';
import { formatObservation } from '../agent/tools/observation.js';
import type { RegisteredTool, ToolContext } from '../agent/tools/types.js';
import { newId } from '../ids.js';
import { UNKNOWN_TOOL } from '../telemetry/metrics.js';
import { replayedCall } from './debug/replay-tools.js';
import type { ReplayAnswer } from '../../machines/policies/replay-match.js';
import type { RunHost } from './run-host.js';
import type { ToolCallRecord } from './run-record.js';
import { iso, type RunServiceDeps } from './run-types.js';
import type { SubagentSpec } from '../agent/subagents.js';

export class ToolRunner {
  constructor(private readonly deps: RunServiceDeps) {}

  async run(live: RunHost, ctx: RunContext, call: ToolCallRequest, batchSpan: string, signal: AbortSignal): Promise<ToolOutcome> {
    const base = { tool_call_id: call.id, tool_name: call.name };
    const saved = live.writer.value.tool_calls.find((c) => c.tool_call_id === call.id);
    // A call saved completed never runs again (docs/contract.md §6.3).
    if (saved?.state === 'completed') return { ...base, content: saved.result_content ?? '', outcome: saved.outcome ?? 'unknown' };

    // A replay answers from the recording; a non-idempotent tool never runs in one (src/runtime/debug/).
    const replayed = replayedCall(live, ctx, call);
    if (replayed) return this.recordReplayed(live, ctx, call, replayed);

    const decision = ctx.decisions.find((d) => d.tool_call_id === call.id);
    const approval = ctx.approvals.find((a) => a.tool_call_id === call.id);
    const tool = live.agent.tools.get(call.name);
    if (decision?.effect === 'deny') {
      return this.recordSkipped(live, ctx, call, tool, 'denied', `Denied by policy${decision.reason ? `: ${decision.reason}` : ''}. The tool was not run.`);
    }
    if (approval && approval.status !== 'approved') {
      const who = approval.approver ?? 'policy';
      const content =
        approval.status === 'expired'
          ? 'The approval for this call expired before anyone decided. The tool was not run.'
          : `Denied by ${who}${approval.note ? `: ${approval.note}` : ''}. The tool was not run.`;
      return this.recordSkipped(live, ctx, call, tool, 'denied', content);
    }
    const sub = live.agent.subagents?.find(call.name);
    if (sub) return this.runDelegation(live, ctx, call, sub, batchSpan, signal, saved);
    if (!tool)
      return this.recordSkipped(
        live,
        ctx,
        call,
        tool,
        'rejected',
        `Unknown tool '${call.name}'. Available tools: ${
          live.agent.tools
            .list()
            .map((t) => t.name)
            .join(', ') || 'none'
        }.`,
      );
    const args = approval?.edited_arguments ?? call.arguments;
    const valid = live.agent.tools.validate(call.name, args);
    if (!valid.ok) return this.recordSkipped(live, ctx, call, tool, 'rejected', `Invalid arguments for ${call.name}: ${valid.message}`);

    if (saved?.state === 'started' && !tool.idempotent) {
      // It may or may not have run before the crash. Never run a non-idempotent call twice.
      const content = `The outcome of this ${call.name} call is unknown: the service stopped while it was running, and the tool is not idempotent, so it was not run again. Check its effect before retrying.`;
      await this.save(live, { ...saved, state: 'completed', outcome: 'unknown', ended_at: iso(this.deps.clock.now()), result_content: content });
      return { ...base, content, outcome: 'unknown' };
    }

    const span = newId('span');
    const startedMs = this.deps.clock.now();
    const startedSave = this.save(live, {
      tool_call_id: call.id,
      tool_name: call.name,
      source: tool.source,
      idempotent: tool.idempotent,
      step: ctx.step,
      state: 'started',
      outcome: null,
      started_at: iso(startedMs),
      ended_at: null,
      result_content: null,
    });
    // A non-idempotent call is durable as `started` before it runs, so a crash cannot make it run
    // twice (docs/contract.md §6.3). An idempotent one may simply run again after a crash: it does not
    // wait for that store round (its `started` state folds into the run's next write).
    if (!tool.idempotent) {
      live.writer.flush();
      await startedSave;
    } else startedSave.catch(() => {}); // a fenced writer stops the run (RunHost.onFenced)
    void live.emit({
      event_type: 'tool_call',
      actor: { type: tool.source === 'mcp' ? 'mcp_server' : 'tool', id: call.name, name: tool.mcp_server ?? null },
      span_id: span,
      parent_span_id: batchSpan,
      input: { arguments: valid.args, edited: approval?.edited_arguments ? true : false },
      metadata: { tool_call_id: call.id, tool_name: call.name, idempotent: tool.idempotent, source: tool.source },
    });
    const record = live.writer.value;
    const controller = new AbortController();
    const onAbort = () => controller.abort();
    signal.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => controller.abort(new Error('tool timeout')), this.deps.settings.tool_timeout_ms);
    const context: ToolContext = {
      run_id: ctx.run_id,
      session_id: ctx.session_id,
      attempt: record.attempt,
      lease_token: `${this.deps.workerId}:${record.attempt}`,
      idempotency_key: `${ctx.run_id}:${call.id}`,
      workspace_path: live.workspace_path,
      signal: controller.signal,
    };
    let outcome: ToolOutcome['outcome'];
    let content: string;
    try {
      const value = await raceAbort(tool.execute(valid.args, context), controller.signal);
      const obs = formatObservation(value);
      content = obs.content;
      outcome = 'success';
      void live.emit({
        event_type: 'tool_result',
        actor: { type: 'tool', id: call.name },
        span_id: span,
        parent_span_id: batchSpan,
        output: value,
        duration_ms: this.deps.clock.now() - startedMs,
        metadata: { tool_call_id: call.id, tool_name: call.name, truncated: obs.truncated },
      });
    } catch (err) {
      const timedOut = controller.signal.aborted && !signal.aborted;
      outcome = timedOut ? 'timeout' : signal.aborted ? 'cancelled' : 'error';
      const message = timedOut ? `timed out after ${this.deps.settings.tool_timeout_ms} ms` : err instanceof Error ? err.message : String(err);
      content = `Tool ${call.name} failed (${outcome}): ${message}`;
      void live.emit({
        event_type: 'tool_error',
        actor: { type: 'tool', id: call.name },
        span_id: span,
        parent_span_id: batchSpan,
        error: { type: outcome, message },
        duration_ms: this.deps.clock.now() - startedMs,
        metadata: { tool_call_id: call.id, tool_name: call.name },
      });
      if (signal.aborted) throw err; // the run is being cancelled or stopped: do not save a completion
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    }
    const current = live.writer.value.tool_calls.find((c) => c.tool_call_id === call.id)!;
    this.recordCompletion(live, { ...current, state: 'completed', outcome, ended_at: iso(this.deps.clock.now()), result_content: content });
    return { ...base, content, outcome };
  }

  /** A delegation to a sub-agent, recorded like a tool call so a replay obeys the same rules (§6.3). */
  private async runDelegation(
    live: RunHost,
    ctx: RunContext,
    call: ToolCallRequest,
    sub: SubagentSpec,
    batchSpan: string,
    signal: AbortSignal,
    saved: ToolCallRecord | undefined,
  ): Promise<ToolOutcome> {
    const subagents = live.agent.subagents!;
    const idempotent = subagents.isIdempotent(sub);
    if (saved?.state === 'started' && !idempotent) {
      const content = `The outcome of this delegation to ${sub.name} is unknown: the service stopped while it ran, and it may call tools that are not idempotent, so it was not run again.`;
      await this.save(live, { ...saved, state: 'completed', outcome: 'unknown', ended_at: iso(this.deps.clock.now()), result_content: content });
      return { tool_call_id: call.id, tool_name: call.name, content, outcome: 'unknown' };
    }
    await this.save(live, {
      tool_call_id: call.id,
      tool_name: call.name,
      source: 'subagent',
      idempotent,
      step: ctx.step,
      state: 'started',
      outcome: null,
      started_at: iso(this.deps.clock.now()),
      ended_at: null,
      result_content: null,
    });
    const record = live.writer.value;
    const result = await subagents.delegate(
      sub,
      {
        run_id: ctx.run_id,
        session_id: live.session_key,
        agent_id: live.agent_id,
        tenant: live.tenant,
        eval_id: live.origin?.eval_id ?? null,
        attempt: record.attempt,
        lease_token: `${this.deps.workerId}:${record.attempt}`,
        workspace_path: live.workspace_path,
      },
      call,
      (input) => live.emit(input),
      batchSpan,
      signal,
    );
    const outcome = result.ok ? 'success' : 'error';
    const current = live.writer.value.tool_calls.find((c) => c.tool_call_id === call.id)!;
    this.recordCompletion(live, { ...current, state: 'completed', outcome, ended_at: iso(this.deps.clock.now()), result_content: result.content });
    return { tool_call_id: call.id, tool_name: call.name, content: result.content, outcome, usage: result.usage };
  }

  /** A replay's call answered from the recording (or refused there): nothing ran. */
  private recordReplayed(live: RunHost, ctx: RunContext, call: ToolCallRequest, answer: NonNullable<ReplayAnswer>): ToolOutcome {
    const now = iso(this.deps.clock.now());
    const tool = live.agent.tools.get(call.name);
    this.recordCompletion(live, {
      tool_call_id: call.id,
      tool_name: call.name,
      source: tool?.source ?? 'unknown',
      idempotent: tool?.idempotent ?? false,
      step: ctx.step,
      state: 'completed',
      outcome: answer.outcome,
      started_at: now,
      ended_at: now,
      result_content: answer.content,
    });
    const base = { actor: { type: 'tool' as const, id: call.name }, span_id: newId('span'), parent_span_id: live.stepSpan };
    const metadata = { tool_call_id: call.id, tool_name: call.name, replayed: answer.matched ? 'recorded' : 'unmatched' };
    if (answer.outcome === 'success') void live.emit({ ...base, event_type: 'tool_result', output: answer.content, metadata });
    else void live.emit({ ...base, event_type: 'tool_error', error: { type: answer.outcome, message: answer.content }, metadata });
    return { tool_call_id: call.id, tool_name: call.name, content: answer.content, outcome: answer.outcome };
  }

  private async recordSkipped(
    live: RunHost,
    ctx: RunContext,
    call: ToolCallRequest,
    tool: RegisteredTool | undefined,
    outcome: 'denied' | 'rejected',
    content: string,
  ): Promise<ToolOutcome> {
    const now = iso(this.deps.clock.now());
    this.recordCompletion(live, {
      tool_call_id: call.id,
      tool_name: call.name,
      source: tool?.source ?? 'unknown',
      idempotent: tool?.idempotent ?? false,
      step: ctx.step,
      state: 'completed',
      outcome,
      started_at: now,
      ended_at: now,
      result_content: content,
    });
    void live.emit({
      event_type: 'tool_error',
      actor: { type: 'tool', id: call.name },
      span_id: newId('span'),
      parent_span_id: live.stepSpan,
      error: { type: outcome, message: content },
      metadata: { tool_call_id: call.id, tool_name: call.name },
    });
    return { tool_call_id: call.id, tool_name: call.name, content, outcome };
  }

  /**
   * A call's completion is saved without waiting for it. Only `started` must be durable before
   * anything happens (it is what keeps a non-idempotent call from running twice); the completion
   * goes out with the run's next write (the writer keeps order and carries the newest record), so
   * the run goes on to its next model call instead of spending a store round here. Lost in a
   * crash, the call reads `started` and a non-idempotent one gets outcome `unknown`, never a rerun.
   */
  private recordCompletion(live: RunHost, call: ToolCallRecord): void {
    const ran = call.outcome !== 'denied' && call.outcome !== 'rejected';
    const seconds = ran && call.ended_at ? Math.max(0, Date.parse(call.ended_at) - Date.parse(call.started_at)) / 1000 : null;
    // A call to a tool the registry lacks is labelled as such: the model may name anything.
    this.deps.metrics.toolCall(call.source === 'unknown' ? UNKNOWN_TOOL : call.tool_name, call.outcome ?? 'unknown', seconds);
    this.save(live, call).catch(() => {}); // a fenced writer stops the run (RunHost.onFenced)
  }

  private async save(live: RunHost, call: ToolCallRecord): Promise<void> {
    await live.writer.update((r) => {
      const i = r.tool_calls.findIndex((c) => c.tool_call_id === call.tool_call_id);
      const tool_calls = i >= 0 ? r.tool_calls.map((c, j) => (j === i ? call : c)) : [...r.tool_calls, call];
      return { ...r, tool_calls, updated_at: iso(this.deps.clock.now()) };
    });
  }
}

/** Tools that ignore their AbortSignal still must not hold a cancelled run forever. */
function raceAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason ?? new Error('aborted'));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason ?? new Error('aborted'));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}
