// The run machine's effects, bound with `runMachine.provide()` (bind): the input guardrail, the
// step boundary's inbox read, budget reservations, the model call, governance of tool calls, and
// the tool batch (each call run by src/runtime/run-tools.ts). Each works on the run's RunHost
// (telemetry, writer, agent) and returns what the machine folds into its context.
import { inputsDigest } from '../agent/policy-conditions.js';
import { fromPromise } from 'xstate';
import {
  effectRunId,
  runMachine,
  type ApprovalState,
  type BudgetRequest,
  type InboxRead,
  type ModelStepResult,
  type PolicyDecision,
  type ReserveResult,
  type RunContext,
  type ToolOutcome,
} from '../../machines/run.machine.js';
import { decide as decidePolicy, type PolicyInput } from '../../machines/policies/governance.js';
import type { MeterAmounts } from '../../machines/policies/budget.js';
import { withRetries } from '../agent/model/retry.js';
import { ModelCallError, type ToolCallRequest, type ToolDeclaration } from '../agent/model/types.js';
import type { AgentProfile } from '../agent/agent-profile.js';
import type { RegisteredTool } from '../agent/tools/types.js';
import { modelCallReservation, modelCallUsage } from '../agent/pricing.js';
import { fromSync } from './sync-effect.js';
import { checkInput } from '../agent/guardrails.js';
import { newId } from '../ids.js';
import { settleHold } from '../agent/budget-settle.js';
import { pauseOn429, rateLimited } from './run-rate.js';
import type { RunHost, RunEventInput } from './run-host.js';
import type { RunKernel } from './run-kernel.js';
import { ToolRunner } from './run-tools.js';
import { replayedCall } from './debug/replay-tools.js';
import { iso } from './run-types.js';

/**
 * How much of the conversation a model_call event carries as `prompt`, in JSON bytes: the most
 * recent messages that fit, so the span drawer shows what the model saw, while each event stays
 * well under the payload bound (MAX_PAYLOAD_BYTES, 64 KiB; `last` comes beside it) and a long run
 * does not store its whole conversation once per step. Redaction and the capture setting apply to
 * it as to every payload (capturePayload).
 */
const PROMPT_EVENT_BYTES = 24 * 1024;

/** The newest messages that fit PROMPT_EVENT_BYTES, oldest first, and how many earlier ones were left out. */
function promptOf(messages: readonly unknown[]): { prompt: unknown[]; prompt_omitted: number } {
  // Most conversations are far under the bound: an upper bound of their size says so without
  // serialising each message (twice per model call before: here, and as the stored event).
  if (fitsByBound(messages)) return { prompt: messages.slice(0), prompt_omitted: 0 };
  let bytes = 0;
  let from = messages.length;
  while (from > 0) {
    const size = Buffer.byteLength(JSON.stringify(messages[from - 1]) ?? '', 'utf8');
    if (bytes + size > PROMPT_EVENT_BYTES) break;
    bytes += size;
    from--;
  }
  return { prompt: messages.slice(from), prompt_omitted: from };
}

/**
 * Whether every message surely fits PROMPT_EVENT_BYTES: the sum of an upper bound of each one's
 * JSON size in UTF-8 (a string of n UTF-16 units takes at most 2 + 6n bytes: `\u00XX` escapes).
 * Only plain flat objects of strings are bounded; anything else says no, and promptOf measures exactly.
 */
function fitsByBound(messages: readonly unknown[]): boolean {
  let bound = 0;
  for (const m of messages) {
    // Plain objects only: a class's toJSON (not enumerable) could serialise to anything.
    if (typeof m !== 'object' || m === null || Object.getPrototypeOf(m) !== Object.prototype) return false;
    bound += 2;
    for (const k in m) {
      const v = (m as Record<string, unknown>)[k];
      if (v === undefined) continue;
      if (typeof v !== 'string') return false;
      bound += 2 + 6 * k.length + 1 + 2 + 6 * v.length + 1;
    }
    bound += 1;
    if (bound > PROMPT_EVENT_BYTES) return false;
  }
  return true;
}

export class RunEffects {
  private readonly tools: ToolRunner;

  constructor(private readonly kernel: RunKernel) {
    this.tools = new ToolRunner(kernel.deps);
  }

  private get deps() {
    return this.kernel.deps;
  }

  /**
   * The run machine with these effects bound. Effects are invoked with the run id only (the
   * machine's EffectInput) and read the run's current context from its actor: the invoke inputs
   * are persisted with the snapshot, so they must not carry the conversation a second time.
   */
  bind() {
    const ctxOf = (input: Parameters<typeof effectRunId>[0]): RunContext => this.kernel.mustLive(effectRunId(input)).context();
    return runMachine.provide({
      actors: {
        // The input guardrails need no I/O: answered within the step that invokes them (sync-effect.ts).
        checkInput: fromSync((input: { query: string; run_id: string }) => this.checkInput(input.query, input.run_id)),
        reserveBudget: fromPromise(async ({ input }) => this.reserve(ctxOf(input), input.phase)),
        callModel: fromPromise(async ({ input, signal }) => this.callModel(ctxOf(input), signal)),
        governTools: fromPromise(async ({ input }) => this.govern(ctxOf(input))),
        executeTools: fromPromise(async ({ input, signal }) => this.executeTools(ctxOf(input), signal)),
        readInbox: fromPromise(async ({ input }) => this.readInbox(ctxOf(input))),
      },
      actions: {
        notify: ({ context }, params) => {
          if (params.kind === 'step') this.onStep(context);
        },
      },
      // A run whose inbox this process knows is empty skips its boundary reads (no effect, no
      // transition): the same answer the read would give, decided at the same moment. Each
      // skipped effect is one child actor and one transition (and snapshot) less per step.
      guards: {
        inboxMaybe: ({ context }) => this.kernel.inbox.mayHold(context.run_id),
        // No budget configured: a reservation would hold nothing and pass, so the step skips it.
        // Not while shutting down: `budgeting` is where a graceful shutdown stops a run at its
        // step boundary (run-projection.ts phaseOf `interrupt`), so every run goes through it then.
        budgeted: () => this.deps.ledger.isBudgeted || this.kernel.closing,
      },
    });
  }

  private checkInput(query: string, runId: string): RunContext['guardrail_result'] {
    const live = this.kernel.live.get(runId);
    // A conversation the caller sent along (StartOptions.history) reaches the model as the query
    // does, so it passes the same checks; the first text refused is the verdict.
    let result = checkInput(query, this.deps.guardrails);
    for (const text of live?.callerInput ?? []) {
      if (!result.allowed) break;
      result = checkInput(text, this.deps.guardrails);
    }
    if (result.allowed) return { allowed: true };
    if (live) {
      void live.emit({
        event_type: 'guardrail_violation',
        actor: { type: 'guardrail', id: result.rule },
        input: { query },
        error: { type: 'GuardrailViolation', message: result.message },
        span_id: live.rootSpan,
        metadata: { rule: result.rule, matched: result.matched ?? null },
      });
    }
    return { allowed: false, rule: result.rule, message: result.message, matched: result.matched };
  }

  /** The step boundary's inbox read. A store failure delivers nothing this time (the next boundary reads again). */
  private async readInbox(ctx: RunContext): Promise<InboxRead> {
    try {
      return await this.kernel.inbox.read(ctx.run_id, ctx.steered ?? [], ctx.interrupt_handled ?? null);
    } catch (err) {
      this.deps.logger.warn({ run_id: ctx.run_id, err: String(err) }, 'run inbox could not be read; trying again at the next step boundary');
      return { messages: [], interrupt_id: null };
    }
  }

  private async reserve(ctx: RunContext, phase: 'model' | 'tools'): Promise<ReserveResult> {
    const live = this.kernel.mustLive(ctx.run_id);
    const amounts: MeterAmounts = phase === 'model' ? this.modelWorstCase(live, ctx) : { tool_calls: ctx.pending.filter((c) => willExecute(ctx, c)).length };
    const res = await this.deps.ledger.reserve({
      reservation_id: `${ctx.run_id}:${phase}:${ctx.step}`,
      run_id: ctx.run_id,
      // A tenant's session ids are its own: so are their budgets (src/runtime/tenancy.ts).
      session_id: live.session_key,
      agent_id: live.agent_id,
      tenant: live.tenant,
      // An evaluation's replay spends from the evaluation's budgets too (budgets.eval).
      eval_id: live.origin?.eval_id ?? null,
      amounts,
      // A background run's agent run started before its claim is stored holds nothing until it is
      // (refused: fenced off, and nothing of it was written).
      beforeWrite: () => live.writer.mayWrite(),
    });
    if (res.ok) {
      for (const w of res.warnings) {
        void live.emit({
          event_type: 'budget_warning',
          actor: { type: 'system', id: 'budget' },
          span_id: live.stepSpan ?? live.rootSpan,
          output: w,
          metadata: { key: w.key, meter: w.meter },
        });
      }
      return { ok: true };
    }
    const s = res.shortfall;
    const request: BudgetRequest = {
      request_id: newId('budgetreq'),
      key: s.key,
      scope: s.scope,
      meter: s.meter,
      limit: s.limit,
      used: s.used,
      needed: s.needed,
      shortfall: s.shortfall,
      status: 'pending',
      asked_at: iso(this.deps.clock.now()),
      phase,
    };
    void live.emit({
      event_type: 'budget_exhausted',
      actor: { type: 'system', id: 'budget' },
      span_id: live.stepSpan ?? live.rootSpan,
      output: { ...request, on_exhausted: res.on_exhausted },
      metadata: { key: s.key, meter: s.meter, on_exhausted: res.on_exhausted },
    });
    return { ok: false, on_exhausted: res.on_exhausted, request };
  }

  private modelWorstCase(live: RunHost, ctx: RunContext): MeterAmounts {
    const model = live.agent.model;
    const input = model.estimateInputTokens(ctx.messages, toolDeclarations(live));
    return modelCallReservation(this.deps.settings.pricing, model.model, { input_tokens: input, max_output_tokens: live.agent.max_output_tokens }).amounts;
  }

  private async callModel(ctx: RunContext, signal: AbortSignal): Promise<ModelStepResult> {
    const live = this.kernel.mustLive(ctx.run_id);
    const agentModel = live.agent.model;
    const span = newId('span');
    const started = this.deps.clock.now();
    const tools = toolDeclarations(live);
    void live.emit({
      event_type: 'model_call',
      actor: { type: 'model', id: agentModel.model, name: agentModel.provider },
      span_id: span,
      parent_span_id: live.stepSpan,
      input: { messages: ctx.messages.length, tools: tools.map((t) => t.name), last: ctx.messages.at(-1), ...promptOf(ctx.messages) },
      // The request's parameters, for gen_ai.request.max_tokens / .temperature on the OTLP span.
      metadata: {
        model: agentModel.model,
        provider: agentModel.provider,
        step: ctx.step,
        max_tokens: live.agent.max_output_tokens,
        ...(agentModel.temperature !== undefined ? { temperature: agentModel.temperature } : {}),
      },
    });
    const combined = AbortSignal.any([signal, live.abort.signal]);
    let result;
    try {
      // A retry wrapper per call, so each failed attempt's model_error lands in this run's trace.
      const model = withRetries(rateLimited(agentModel, live, this.deps, span), {
        onError: (err, attempt, willRetry, delayMs) => {
          pauseOn429(agentModel, this.deps, err);
          void live.emit(modelErrorEvent(live, span, err, attempt, willRetry, delayMs));
        },
      });
      result = await model.call({
        messages: ctx.messages,
        tools,
        max_output_tokens: live.agent.max_output_tokens,
        signal: combined,
        onDelta: (text) => {
          const seq = ++live.deltaSeq;
          live.onDelta?.(text, seq, live.events.seq);
          // Followers of the run in this process (RunService.followDeltas): a protocol's answer to a decision.
          const taps = this.kernel.deltaTaps.get(live.run_id);
          if (taps) for (const tap of taps) tap(text, seq, live.events.seq);
        },
      });
    } catch (err) {
      // Retries already emitted one model_error per failed attempt; this is the final one.
      if (!(err instanceof ModelCallError)) {
        void live.emit({
          event_type: 'model_error',
          actor: { type: 'model', id: agentModel.model },
          span_id: span,
          parent_span_id: live.stepSpan,
          error: { type: 'ModelError', message: String((err as Error)?.message ?? err) },
          duration_ms: this.deps.clock.now() - started,
        });
      }
      throw err;
    }
    const usage = modelCallUsage(this.deps.settings.pricing, agentModel.model, result.usage);
    await settleHold(this.deps, ctx.run_id, `${ctx.run_id}:model:${ctx.step}`, usage.amounts, 'model');
    this.deps.metrics.tokensUsed(
      result.usage.input_tokens,
      result.usage.output_tokens,
      { agent: live.agent_id, provider: agentModel.provider, model: agentModel.model },
      usage.amounts.cost_usd ?? 0,
    );
    void live.emit({
      event_type: 'model_response',
      actor: { type: 'model', id: agentModel.model, name: agentModel.provider },
      span_id: span,
      parent_span_id: live.stepSpan,
      output: { text: result.text, tool_calls: result.tool_calls, finish_reason: result.finish_reason },
      token_usage: result.usage,
      estimated_cost_usd: usage.amounts.cost_usd,
      duration_ms: this.deps.clock.now() - started,
      metadata: {
        model: result.model,
        provider: agentModel.provider,
        step: ctx.step,
        finish_reason: result.finish_reason,
        ...(result.response_id ? { response_id: result.response_id } : {}),
      },
    });
    return { result, cost_usd: usage.amounts.cost_usd };
  }

  private async govern(ctx: RunContext): Promise<{ decisions: PolicyDecision[]; approvals: ApprovalState[] }> {
    const live = this.kernel.mustLive(ctx.run_id);
    const { governance, approval_expires_seconds, policy_conditions } = this.deps.settings;
    const usage = live.writer.value.usage;
    const spend = {
      cost_usd: usage.estimated_cost_usd,
      tokens: usage.total_tokens,
      model_calls: usage.requests,
      tool_calls: live.writer.value.tool_calls.length,
    };
    const decisions: PolicyDecision[] = [];
    const approvals: ApprovalState[] = [];
    const now = this.deps.clock.now();
    for (const call of ctx.pending) {
      const tool = live.agent.tools.get(call.name);
      const span = newId('span');
      void live.emit({
        event_type: 'policy_request_created',
        actor: { type: 'agent', id: live.agent_id },
        span_id: span,
        parent_span_id: live.stepSpan,
        input: { tool_name: call.name, arguments: call.arguments },
        metadata: { tool_call_id: call.id, tool_name: call.name, mcp_server: tool?.mcp_server ?? null },
      });
      // What the rules' conditions see (docs/policies.md); its digest goes into both events.
      const input: PolicyInput = {
        tool: call.name,
        args: call.arguments,
        agent_id: live.agent_id,
        tenant: live.tenant ?? '',
        session_id: live.session_id,
        metadata: live.metadata,
        spend,
      };
      const inputs_sha256 = inputsDigest(input);
      // A replay's call answered from the recording asks nobody: the original's decision is in the recorded answer.
      const d = replayedCall(live, ctx, call)
        ? { effect: 'allow' as const, rule_index: null, rule_id: null, reason: 'replay: answered from the recording', approvers: null, error: undefined }
        : decidePolicy({ tool_name: call.name, mcp_server: tool?.mcp_server }, governance, input, policy_conditions);
      decisions.push({ tool_call_id: call.id, effect: d.effect, reason: d.reason ?? null });
      void live.emit({
        event_type: `policy_decision_${d.effect}`,
        actor: { type: 'system', id: 'governance' },
        span_id: span,
        parent_span_id: live.stepSpan,
        output: { effect: d.effect, rule_index: d.rule_index, rule_id: d.rule_id, reason: d.reason ?? null, ...(d.error ? { error: d.error } : {}) },
        metadata: { tool_call_id: call.id, tool_name: call.name, rule_id: d.rule_id, inputs_sha256 },
      });
      if (d.effect === 'ask') {
        approvals.push({
          approval_id: newId('approval'),
          status: 'pending',
          tool_name: call.name,
          tool_call_id: call.id,
          arguments: call.arguments,
          reason: d.reason ?? null,
          created_at: iso(now),
          expires_at: iso(now + approval_expires_seconds * 1000),
          approver: null,
          note: null,
          decided_at: null,
          edited_arguments: null,
          ...(d.rule_id ? { rule_id: d.rule_id } : {}),
          ...(d.approvers ? { approvers: d.approvers } : {}),
        });
      }
    }
    return { decisions, approvals };
  }

  private async executeTools(ctx: RunContext, signal: AbortSignal): Promise<ToolOutcome[]> {
    const live = this.kernel.mustLive(ctx.run_id);
    const batchSpan = newId('span');
    const started = this.deps.clock.now();
    void live.emit({
      event_type: 'tool_batch_start',
      actor: { type: 'agent', id: live.agent_id },
      span_id: batchSpan,
      parent_span_id: live.stepSpan,
      input: { tool_calls: ctx.pending.map((c) => ({ id: c.id, name: c.name })) },
      metadata: { size: ctx.pending.length, step: ctx.step },
    });
    const combined = AbortSignal.any([signal, live.abort.signal]);
    const outcomes = await Promise.all(ctx.pending.map((call) => this.tools.run(live, ctx, call, batchSpan, combined)));
    const executed = outcomes.filter((o) => o.outcome !== 'denied' && o.outcome !== 'rejected').length;
    await settleHold(this.deps, ctx.run_id, `${ctx.run_id}:tools:${ctx.step}`, { tool_calls: executed }, 'tools');
    void live.emit({
      event_type: 'observation_pipeline_end',
      actor: { type: 'agent', id: live.agent_id },
      span_id: newId('span'),
      parent_span_id: batchSpan,
      output: { observations: outcomes.map((o) => ({ tool_call_id: o.tool_call_id, outcome: o.outcome, chars: o.content.length })) },
      duration_ms: this.deps.clock.now() - started,
    });
    return outcomes;
  }

  private onStep(ctx: RunContext): void {
    const live = this.kernel.live.get(ctx.run_id);
    if (!live) return;
    live.stepSpan = newId('span');
    void live.emit({
      event_type: 'agent_step',
      actor: { type: 'agent', id: live.agent_id },
      span_id: live.stepSpan,
      parent_span_id: live.rootSpan,
      metadata: { step: ctx.step },
    });
  }
}

/** Whether a pending call will actually run (not denied, not refused). */
function willExecute(ctx: RunContext, call: ToolCallRequest): boolean {
  const d = ctx.decisions.find((x) => x.tool_call_id === call.id);
  if (d?.effect === 'deny') return false;
  const a = ctx.approvals.find((x) => x.tool_call_id === call.id);
  return !(a && a.status !== 'approved');
}

/**
 * The declarations the model sees, per agent: the same array (and objects) run after run while the
 * agent's tools stay the same, so what is derived from them is derived once, not per call: the
 * request's `tools` JSON (src/agent/model/chat-completions-body.ts toolsJson, keyed by the array)
 * and the schemas' share of the token estimate (src/agent/model/tokens.ts, keyed by declaration).
 * A tool list that changed (an MCP server's tools) makes a new one. Nobody changes them in place.
 */
const declared = new WeakMap<AgentProfile, { own: number; subagents: AgentProfile['subagents']; decls: ToolDeclaration[] }>();

function toolDeclarations(live: RunHost): ToolDeclaration[] {
  const { tools, subagents } = live.agent;
  const list = tools.list();
  const known = declared.get(live.agent);
  if (known && known.subagents === subagents && known.own === list.length && sameDeclarations(known.decls, list)) return known.decls;
  const own = list.map((t) => ({ name: t.name, description: t.description, input_schema: t.input_schema }));
  const decls = subagents ? [...own, ...subagents.declarations()] : own;
  declared.set(live.agent, { own: own.length, subagents, decls });
  return decls;
}

/** Whether the first declarations still say what the tools do: the same name, description and schema object. */
function sameDeclarations(decls: ToolDeclaration[], tools: RegisteredTool[]): boolean {
  for (let i = 0; i < tools.length; i++) {
    const d = decls[i];
    const t = tools[i];
    if (d.name !== t.name || d.description !== t.description || d.input_schema !== t.input_schema) return false;
  }
  return true;
}

function modelErrorEvent(
  live: RunHost,
  span: string,
  err: ModelCallError,
  attempt: number,
  willRetry: boolean,
  delayMs: number,
): RunEventInput & { metadata: Record<string, unknown> } {
  return {
    event_type: 'model_error',
    actor: { type: 'model', id: live.agent.model.model, name: live.agent.model.provider },
    span_id: span,
    parent_span_id: live.stepSpan,
    error: { type: err.kind, message: err.message },
    metadata: { attempt, will_retry: willRetry, retry_delay_ms: willRetry ? delayMs : null, status: err.status ?? null },
  };
}
