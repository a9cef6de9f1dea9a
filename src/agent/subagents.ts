// Sub-agents (config `agent.subagents`): the model delegates with a `delegate_to_<name>` tool call.
// Each delegation is a child actor under the root system (`subagent:<run_id>:<tool_call_id>`), so
// the supervisor sees its failure like any other child's. It runs a short model/tool loop of its
// own with the tools it is allowed, and its usage counts toward the parent run.
import { fromPromise, toPromise, type AnyActorLogic, type AnyActorRef } from 'xstate';
import type { Usage } from '../../machines/run.machine.js';
import { decide, type GovernanceConfig } from '../../machines/policies/governance.js';
import type { Clock } from '../clock.js';
import { newId } from '../ids.js';
import { withRetries } from './model/retry.js';
import type { ChatMessage, ModelProvider, ToolCallRequest, ToolDeclaration } from './model/types.js';
import type { BudgetLedger } from './budget-ledger.js';
import { modelCallReservation, modelCallUsage, type Pricing } from './pricing.js';
import { formatObservation } from './tools/observation.js';
import type { RegisteredTool, ToolContext } from './tools/types.js';
import type { EventRecordInput } from '../telemetry/record.js';
import { settleHold } from './budget-settle.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { AgentToolSource } from './tools/types.js';
import type { AppLogger } from '../telemetry/logger.js';

export interface SubagentSpec {
  name: string;
  description: string;
  system_instruction?: string;
  tools: readonly string[];
}

/** What delegation needs of the agent's tools: the served agent's tool source, less its listing. */
export type SubagentToolSource = Pick<AgentToolSource, 'get' | 'validate'>;

/**
 * Where delegations run as child actors: the runtime's actor system (src/runtime/system.ts
 * ActorSystem), of which delegation needs only spawn and stop by id.
 */
export interface ChildActors {
  spawn<TLogic extends AnyActorLogic>(systemId: string, logic: TLogic, opts?: { input?: unknown }): AnyActorRef;
  stop(systemId: string): void;
}

export interface SubagentDeps {
  system: ChildActors;
  model: ModelProvider;
  tools: SubagentToolSource;
  governance: GovernanceConfig;
  ledger: BudgetLedger;
  pricing: Pricing;
  clock: Clock;
  max_steps: number;
  max_output_tokens: number;
  /** Where a failed settle of a delegation's hold is logged and counted (src/agent/budget-settle.ts). */
  metrics?: Metrics;
  logger?: AppLogger;
}

export interface DelegationParent {
  run_id: string;
  /** The session's store key (its id in the run's tenant): what its budgets are keyed by. */
  session_id: string;
  agent_id: string;
  tenant: string | null;
  /** Set when the run is an evaluation's replay: its eval budgets cover the delegation too. */
  eval_id?: string | null;
  attempt: number;
  lease_token: string;
  workspace_path: string | null;
}

type Emit = (input: Omit<EventRecordInput, 'trace_id' | 'metadata'> & { metadata?: Record<string, unknown> }) => Promise<unknown>;

const zero = (): Usage => ({ requests: 0, request_tokens: 0, response_tokens: 0, total_tokens: 0, estimated_cost_usd: 0 });

export const subagentToolName = (name: string): string => `delegate_to_${name.replace(/[^a-zA-Z0-9_-]/g, '_')}`.slice(0, 64);

export class Subagents {
  private readonly byTool = new Map<string, SubagentSpec>();

  constructor(
    specs: readonly SubagentSpec[],
    private readonly deps: SubagentDeps,
  ) {
    for (const s of specs) this.byTool.set(subagentToolName(s.name), s);
  }

  declarations(): ToolDeclaration[] {
    return [...this.byTool.entries()].map(([name, s]) => ({
      name,
      description: `Delegate a task to the '${s.name}' sub-agent: ${s.description}`,
      input_schema: { type: 'object', properties: { task: { type: 'string', description: 'What the sub-agent should do, in full.' } }, required: ['task'] },
    }));
  }

  find(toolName: string): SubagentSpec | undefined {
    return this.byTool.get(toolName);
  }

  /** A delegation may be replayed after a crash only when every tool it may call is idempotent. */
  isIdempotent(spec: SubagentSpec): boolean {
    return spec.tools.every((t) => this.deps.tools.get(t)?.idempotent === true);
  }

  async delegate(
    spec: SubagentSpec,
    parent: DelegationParent,
    call: ToolCallRequest,
    emit: Emit,
    parentSpan: string,
    signal: AbortSignal,
  ): Promise<{ content: string; usage: Usage; ok: boolean }> {
    const span = newId('span');
    const task = typeof call.arguments.task === 'string' ? call.arguments.task : JSON.stringify(call.arguments);
    const started = this.deps.clock.now();
    void emit({
      event_type: 'subagent_spawn',
      actor: { type: 'agent', id: spec.name },
      span_id: span,
      parent_span_id: parentSpan,
      input: { task },
      metadata: { subagent: spec.name, tool_call_id: call.id },
    });
    const systemId = `subagent:${parent.run_id}:${call.id}`;
    const logic = fromPromise<{ text: string; usage: Usage }, { task: string }>(({ input, signal: own }) =>
      this.loop(spec, parent, call, input.task, emit, span, AbortSignal.any([own, signal])),
    );
    this.deps.system.stop(systemId); // a replay after a crash starts the delegation afresh
    const ref = this.deps.system.spawn(systemId, logic, { input: { task } });
    const onAbort = () => this.deps.system.stop(systemId);
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      const out = await toPromise(ref);
      void emit({
        event_type: 'subagent_result',
        actor: { type: 'agent', id: spec.name },
        span_id: span,
        parent_span_id: parentSpan,
        output: { text: out.text },
        token_usage: { input_tokens: out.usage.request_tokens, output_tokens: out.usage.response_tokens, total_tokens: out.usage.total_tokens },
        duration_ms: this.deps.clock.now() - started,
        metadata: { subagent: spec.name, tool_call_id: call.id },
      });
      return { content: out.text, usage: out.usage, ok: true };
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      void emit({
        event_type: 'subagent_error',
        actor: { type: 'agent', id: spec.name },
        span_id: span,
        parent_span_id: parentSpan,
        error: { type: 'SubagentError', message },
        duration_ms: this.deps.clock.now() - started,
        metadata: { subagent: spec.name, tool_call_id: call.id },
      });
      if (signal.aborted) throw err;
      return { content: `The ${spec.name} sub-agent failed: ${message}`, usage: zero(), ok: false };
    } finally {
      signal.removeEventListener('abort', onAbort);
      this.deps.system.stop(systemId);
    }
  }

  private async loop(
    spec: SubagentSpec,
    parent: DelegationParent,
    call: ToolCallRequest,
    task: string,
    emit: Emit,
    span: string,
    signal: AbortSignal,
  ): Promise<{ text: string; usage: Usage }> {
    const { model, ledger, pricing, max_output_tokens } = this.deps;
    const allowed = spec.tools.map((t) => this.deps.tools.get(t)).filter((t): t is RegisteredTool => Boolean(t));
    const declarations = allowed.map((t) => ({ name: t.name, description: t.description, input_schema: t.input_schema }));
    const messages: ChatMessage[] = [
      { role: 'system', content: spec.system_instruction ?? `You are the ${spec.name} sub-agent. ${spec.description}` },
      { role: 'user', content: task },
    ];
    const usage = zero();
    const retrying = withRetries(model, {});
    for (let step = 1; step <= this.deps.max_steps; step++) {
      const reservation_id = `${parent.run_id}:sub:${call.id}:${step}`;
      const worst = modelCallReservation(pricing, model.model, { input_tokens: model.estimateInputTokens(messages, declarations), max_output_tokens });
      const held = await ledger.reserve({
        reservation_id,
        run_id: parent.run_id,
        session_id: parent.session_id,
        agent_id: parent.agent_id,
        tenant: parent.tenant,
        eval_id: parent.eval_id ?? null,
        amounts: worst.amounts,
      });
      // eslint-disable-next-line no-restricted-syntax -- the sub-agent tool's failure: the tool result the parent model reads
      if (!held.ok) throw new Error(`budget ${held.shortfall.key} (${held.shortfall.meter}) is exhausted`);
      const mspan = newId('span');
      void emit({
        event_type: 'model_call',
        actor: { type: 'model', id: model.model, name: model.provider },
        span_id: mspan,
        parent_span_id: span,
        metadata: { subagent: spec.name, step },
      });
      const res = await retrying.call({ messages, tools: declarations, max_output_tokens, signal });
      const actual = modelCallUsage(pricing, model.model, res.usage);
      await settleHold(this.deps, parent.run_id, reservation_id, actual.amounts, 'subagent');
      usage.requests += 1;
      usage.request_tokens += res.usage.input_tokens;
      usage.response_tokens += res.usage.output_tokens;
      usage.total_tokens += res.usage.total_tokens;
      usage.estimated_cost_usd += actual.amounts.cost_usd;
      void emit({
        event_type: 'model_response',
        actor: { type: 'model', id: model.model, name: model.provider },
        span_id: mspan,
        parent_span_id: span,
        output: { text: res.text, tool_calls: res.tool_calls },
        token_usage: res.usage,
        metadata: { subagent: spec.name, step },
      });
      if (res.tool_calls.length === 0) return { text: res.text, usage };
      messages.push({ role: 'assistant', content: res.text, tool_calls: res.tool_calls });
      const results = await Promise.all(res.tool_calls.map((c) => this.runTool(spec, allowed, parent, call, c, emit, span, signal)));
      messages.push(...results);
    }
    // eslint-disable-next-line no-restricted-syntax -- the sub-agent tool's failure: the tool result the parent model reads
    throw new Error(`the sub-agent used all ${this.deps.max_steps} steps without an answer`);
  }

  private async runTool(
    spec: SubagentSpec,
    allowed: RegisteredTool[],
    parent: DelegationParent,
    delegation: ToolCallRequest,
    c: ToolCallRequest,
    emit: Emit,
    span: string,
    signal: AbortSignal,
  ): Promise<ChatMessage> {
    const reply = (content: string): ChatMessage => ({ role: 'tool', tool_call_id: c.id, tool_name: c.name, content });
    const tool = allowed.find((t) => t.name === c.name);
    if (!tool) return reply(`Tool '${c.name}' is not available to the ${spec.name} sub-agent.`);
    // A sub-agent cannot stop to ask a person: only calls the policy allows outright run here.
    const policy = decide({ tool_name: tool.name, mcp_server: tool.mcp_server }, this.deps.governance);
    if (policy.effect !== 'allow')
      return reply(`Tool '${c.name}' needs ${policy.effect === 'ask' ? "a person's approval" : 'a policy exception'}; sub-agents may not call it.`);
    const valid = this.deps.tools.validate(c.name, c.arguments);
    if (!valid.ok) return reply(`Invalid arguments for ${c.name}: ${valid.message}`);
    const tspan = newId('span');
    void emit({
      event_type: 'tool_call',
      actor: { type: 'tool', id: c.name },
      span_id: tspan,
      parent_span_id: span,
      input: { arguments: valid.args },
      metadata: { subagent: spec.name, tool_call_id: c.id },
    });
    const ctx: ToolContext = {
      run_id: parent.run_id,
      session_id: parent.session_id,
      attempt: parent.attempt,
      lease_token: parent.lease_token,
      idempotency_key: `${parent.run_id}:${delegation.id}:${c.id}`,
      workspace_path: parent.workspace_path,
      signal,
    };
    try {
      const value = await tool.execute(valid.args, ctx);
      void emit({
        event_type: 'tool_result',
        actor: { type: 'tool', id: c.name },
        span_id: tspan,
        parent_span_id: span,
        output: value,
        metadata: { subagent: spec.name, tool_call_id: c.id },
      });
      return reply(formatObservation(value).content);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      void emit({
        event_type: 'tool_error',
        actor: { type: 'tool', id: c.name },
        span_id: tspan,
        parent_span_id: span,
        error: { type: 'error', message },
        metadata: { subagent: spec.name, tool_call_id: c.id },
      });
      if (signal.aborted) throw err;
      return reply(`Tool ${c.name} failed: ${message}`);
    }
  }
}
