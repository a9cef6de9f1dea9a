// A synchronous (or background) agent run as a pure statechart. It names its effects; the runtime
// binds them with `runMachine.provide()` (src/runtime/run-effects.ts). Nothing here touches I/O,
// time or randomness: ids and timestamps arrive inside effect results and events.
//
// Every state the actor can rest in is JSON-serialisable context + state value, so the runtime
// can persist `getPersistedSnapshot()` after each transition and restore it after a crash. A
// promise effect that was active when the snapshot was saved runs again on restore (xstate
// fact 3): the effects are written to be safe under that (tool calls are fenced by their saved
// state, budget holds are keyed by step and attempt).
import { and, assign, fromPromise, not, setup } from 'xstate';
import type { ChatMessage, ModelCallResult, ToolCallRequest } from './model-types.js';

// v2: states `boundary`, `concluding` and `interrupted`, event RESUME, context
// `steered` / `interrupt_handled`. v1 snapshots restore (their states all still exist; the new
// context fields default when absent); a v1 server refuses v2 snapshots.
// v3: effects are invoked with the run id only (EffectInput), not the whole context:
// XState persists a promise child's input, so a snapshot in `calling` held the conversation
// twice. The runtime's effects read the context from the actor; v1/v2 inputs (`{ctx}`) still
// restore (legacyRunId), and a v2 server refuses v3 snapshots.
export const RUN_MACHINE_VERSION = 3;

export type TerminationReason = 'stop' | 'max_steps' | 'budget_exhausted' | 'guardrail' | 'provider_error' | 'internal_error' | 'cancelled' | 'timeout';

export interface Usage {
  requests: number;
  request_tokens: number;
  response_tokens: number;
  total_tokens: number;
  estimated_cost_usd: number;
}

export interface ApprovalState {
  approval_id: string;
  status: 'pending' | 'approved' | 'denied' | 'used' | 'expired';
  tool_name: string;
  tool_call_id: string;
  arguments: Record<string, unknown>;
  reason: string | null;
  created_at: string;
  expires_at: string;
  approver: string | null;
  note: string | null;
  decided_at: string | null;
  edited_arguments: Record<string, unknown> | null;
  /** The governance rule that asked (docs/policies.md). */
  rule_id?: string | null;
  /** Who may decide it (the rule's `approvers`); absent/null: any approver key. */
  approvers?: string[] | null;
  /** A global admin key decided it although the rule's approvers did not name it. */
  override?: boolean;
}

export interface PolicyDecision {
  tool_call_id: string;
  effect: 'allow' | 'deny' | 'ask';
  reason: string | null;
}

export interface BudgetRequest {
  request_id: string;
  key: string;
  scope: string;
  meter: string;
  limit: number;
  used: number;
  needed: number;
  shortfall: number;
  status: 'pending' | 'granted' | 'denied';
  asked_at: string;
  phase: 'model' | 'tools';
  approver?: string | null;
  note?: string | null;
  decided_at?: string | null;
  amount?: number | null;
}

export interface ToolOutcome {
  tool_call_id: string;
  tool_name: string;
  content: string;
  outcome: 'success' | 'error' | 'denied' | 'rejected' | 'timeout' | 'cancelled' | 'unknown';
  /** Model usage spent inside the call (a sub-agent's); it counts toward this run. */
  usage?: Usage;
}

export interface RunInput {
  run_id: string;
  session_id: string;
  agent_name: string;
  max_steps: number;
  /** System prompt + prior conversation + this run's user message. */
  messages: ChatMessage[];
  query: string;
  /** How many of `messages` came before this run's own turn (system prompt + history); absent in v1 snapshots. */
  history_length?: number;
}

export interface RunContext extends RunInput {
  step: number;
  /** Model call attempts of this run; part of budget hold and idempotency keys. */
  model_calls: number;
  pending: ToolCallRequest[];
  decisions: PolicyDecision[];
  approvals: ApprovalState[];
  budget_request: BudgetRequest | null;
  budget_phase: 'model' | 'tools';
  usage: Usage;
  response: string | null;
  termination_reason: TerminationReason | null;
  error: { type: string; message: string } | null;
  guardrail_result: { allowed: boolean; rule?: string; message?: string; matched?: string } | null;
  /**
   * Ids of the steer messages already added to `messages` (absent in v1 snapshots). Delivery is
   * exactly once because this list and the messages are saved in the same snapshot: an inbox
   * read replayed after a crash skips what the saved context already holds.
   */
  steered?: string[];
  /** The interrupt request this run already stopped for (absent in v1 snapshots). */
  interrupt_handled?: string | null;
}

/** A steer message as the run's inbox hands it over, already framed as a user message. */
export interface InboxMessage {
  message_id: string;
  content: string;
}

/** What the run finds in its inbox at a step boundary (only what it has not taken yet). */
export interface InboxRead {
  messages: InboxMessage[];
  /** An interrupt request this run has not stopped for yet, else null. */
  interrupt_id: string | null;
}

export type ReserveResult = { ok: true } | { ok: false; on_exhausted: 'pause' | 'terminate'; request: BudgetRequest };

export interface ModelStepResult {
  result: ModelCallResult;
  cost_usd: number;
}

export type RunEvent =
  | { type: 'CANCEL'; reason?: string }
  | { type: 'TIMEOUT' }
  /** An `interrupted` run continues (POST /runs/{id}/resume). */
  | { type: 'RESUME' }
  /** Every pending approval now carries a decision (sent by the runtime from the stored record). */
  | { type: 'APPROVALS_DECIDED'; approvals: ApprovalState[] }
  | { type: 'BUDGET_GRANTED'; request: BudgetRequest }
  | { type: 'BUDGET_DENIED'; request: BudgetRequest };

/**
 * What an effect is invoked with: the run's id, so the runtime finds the run and reads its
 * current context; never the context itself (it would be persisted a second time, see v3 above).
 */
export interface EffectInput {
  run_id: string;
}

/** The id of the run an effect input names, v1/v2 snapshots' `{ctx}` inputs included. */
export function effectRunId(input: EffectInput | { ctx: { run_id: string } }): string {
  return 'run_id' in input ? input.run_id : input.ctx.run_id;
}

const zeroUsage: Usage = { requests: 0, request_tokens: 0, response_tokens: 0, total_tokens: 0, estimated_cost_usd: 0 };

/** Effects, named here and bound by the runtime. The stand-ins fail loudly if left unbound. */
const unbound = (name: string) => () => {
  throw new Error(`run machine effect '${name}' is not provided`);
};

export const runMachine = setup({
  types: {
    context: {} as RunContext,
    events: {} as RunEvent,
    input: {} as RunInput,
  },
  actors: {
    checkInput: fromPromise<RunContext['guardrail_result'], { query: string; run_id: string }>(unbound('checkInput')),
    reserveBudget: fromPromise<ReserveResult, EffectInput & { phase: 'model' | 'tools' }>(unbound('reserveBudget')),
    callModel: fromPromise<ModelStepResult, EffectInput>(unbound('callModel')),
    governTools: fromPromise<{ decisions: PolicyDecision[]; approvals: ApprovalState[] }, EffectInput>(unbound('governTools')),
    executeTools: fromPromise<ToolOutcome[], EffectInput>(unbound('executeTools')),
    readInbox: fromPromise<InboxRead, EffectInput>(unbound('readInbox')),
  },
  actions: {
    /** Named side effect: the runtime records telemetry for state entries (agent_step, final_answer, ...). */
    notify: (_args, _params: { kind: string }) => {},
    /** Steer messages join the conversation as user messages, never as system messages. */
    takeSteers: assign(({ context }, out: InboxRead) => {
      const fresh = out.messages.filter((m) => !(context.steered ?? []).includes(m.message_id));
      if (fresh.length === 0) return {};
      return {
        messages: [...context.messages, ...fresh.map((m) => ({ role: 'user' as const, content: m.content }))],
        steered: [...(context.steered ?? []), ...fresh.map((m) => m.message_id)],
      };
    }),
    recordInternalError: assign({
      termination_reason: 'internal_error' as const,
      error: ({ event }) => ({ type: 'InternalError', message: errorMessage((event as { error?: unknown }).error) }),
    }),
    recordGuardrailBlock: assign((_, out: RunContext['guardrail_result']) => {
      return {
        guardrail_result: out,
        termination_reason: 'guardrail' as const,
        error: { type: 'GuardrailViolation', message: out?.message ?? 'input blocked' },
      };
    }),
    recordMaxSteps: assign({
      termination_reason: 'max_steps' as const,
      error: ({ context }) => ({ type: 'MaxStepsReached', message: `the run used all ${context.max_steps} steps without a final answer` }),
    }),
    markInterruptHandled: assign((_, out: InboxRead) => ({ interrupt_handled: out.interrupt_id })),
    beginStep: assign({ step: ({ context }) => context.step + 1, budget_phase: 'model' as const }),
    clearBudgetRequest: assign({ budget_request: null }),
    recordBudgetRequest: assign((_, out: ReserveResult) => ({ budget_request: out.ok ? null : out.request })),
    recordBudgetExhausted: assign((_, out: ReserveResult) => {
      if (out.ok) return {};
      const r = out.request;
      return {
        budget_request: r,
        termination_reason: 'budget_exhausted' as const,
        error: { type: 'BudgetExhausted', message: `budget ${r.key} (${r.meter}) is exhausted: needs ${r.needed}, ${r.limit - r.used} left` },
      };
    }),
    takeBudgetGrant: assign({ budget_request: ({ event }) => (event as Extract<RunEvent, { type: 'BUDGET_GRANTED' }>).request }),
    recordBudgetDenied: assign(({ event }) => {
      const request = (event as Extract<RunEvent, { type: 'BUDGET_DENIED' }>).request;
      return {
        budget_request: request,
        termination_reason: 'budget_exhausted' as const,
        error: {
          type: 'BudgetDenied',
          message: `budget request denied${request.approver ? ` by ${request.approver}` : ''}${request.note ? `: ${request.note}` : ''}`,
        },
      };
    }),
    recordToolCalls: assign(({ context }, out: ModelStepResult) => {
      return {
        ...modelStepRecorded(context, out, { role: 'assistant', content: out.result.text, tool_calls: out.result.tool_calls }),
        pending: out.result.tool_calls,
      };
    }),
    recordAnswer: assign(({ context }, out: ModelStepResult) => {
      return {
        ...modelStepRecorded(context, out, { role: 'assistant', content: out.result.text }),
        response: out.result.text,
        termination_reason: 'stop' as const,
      };
    }),
    recordModelError: assign(({ context, event }) => ({
      model_calls: context.model_calls + 1,
      termination_reason: 'provider_error' as const,
      error: { type: 'ModelError', message: errorMessage((event as { error?: unknown }).error) },
    })),
    /** A steer message after the final answer: the answer is withdrawn and the run takes another step. */
    reopenAnswer: assign({ response: null, termination_reason: null }),
    recordGovernance: assign((_, out: { decisions: PolicyDecision[]; approvals: ApprovalState[] }) => ({ decisions: out.decisions, approvals: out.approvals })),
    enterToolPhase: assign({ budget_phase: 'tools' as const }),
    takeApprovals: assign({
      approvals: ({ event }) => (event as Extract<RunEvent, { type: 'APPROVALS_DECIDED' }>).approvals,
      budget_phase: 'tools' as const,
    }),
    recordObservations: assign(({ context }, out: ToolOutcome[]) => {
      return {
        messages: [
          ...context.messages,
          ...out.map((o) => ({ role: 'tool' as const, tool_call_id: o.tool_call_id, tool_name: o.tool_name, content: o.content })),
        ],
        pending: [],
        decisions: [],
        approvals: context.approvals.map((a) => (a.status === 'approved' ? { ...a, status: 'used' as const } : a)),
        usage: out.reduce((u, o) => (o.usage ? sumUsage(u, o.usage) : u), context.usage),
      };
    }),
    recordCancelled: assign({ termination_reason: 'cancelled' as const, error: { type: 'Cancelled', message: 'the run was cancelled' } }),
    recordTimeout: assign({ termination_reason: 'timeout' as const, error: { type: 'Timeout', message: 'the run exceeded its time limit' } }),
  },
  guards: {
    hasToolCalls: (_, out: ModelStepResult) => out.result.tool_calls.length > 0,
    inputAllowed: (_, out: RunContext['guardrail_result']) => out?.allowed !== false,
    stepsLeft: ({ context }) => context.step < context.max_steps,
    reserveOk: (_, out: ReserveResult) => out.ok,
    reservePause: (_, out: ReserveResult) => !out.ok && out.on_exhausted === 'pause',
    needsApproval: (_, out: { approvals: ApprovalState[] }) => out.approvals.some((a) => a.status === 'pending'),
    isModelPhase: ({ context }) => context.budget_phase === 'model',
    /**
     * Whether the run's inbox may hold something it has not taken. Here always true (every
     * boundary reads); the runtime provides the real answer (src/runtime/run-inbox.ts mayHold),
     * which only it can know: false lets a boundary skip its read, the same as a read that found
     * nothing.
     */
    inboxMaybe: () => true,
    /**
     * Whether any budget is configured, so a step reserves before its model call or tool batch.
     * Here always true; the runtime provides the ledger's answer (src/agent/budget-ledger.ts
     * isBudgeted): false skips `budgeting`, whose reservation would hold nothing and pass.
     */
    budgeted: () => true,
    interruptRequested: ({ context }, out: InboxRead) => out.interrupt_id !== null && out.interrupt_id !== (context.interrupt_handled ?? null),
    /** New steer messages after a final answer, and a step left to answer them in. */
    steeredAfterAnswer: ({ context }, out: InboxRead) =>
      context.step < context.max_steps && out.messages.some((m) => !(context.steered ?? []).includes(m.message_id)),
  },
}).createMachine({
  id: 'run',
  context: ({ input }) => ({
    ...input,
    step: 0,
    model_calls: 0,
    pending: [],
    decisions: [],
    approvals: [],
    budget_request: null,
    budget_phase: 'model',
    usage: { ...zeroUsage },
    response: null,
    termination_reason: null,
    error: null,
    guardrail_result: null,
    steered: [],
    interrupt_handled: null,
  }),
  initial: 'checking',
  on: {
    CANCEL: { target: '.cancelled' },
    TIMEOUT: { target: '.timedOut' },
  },
  states: {
    checking: {
      invoke: {
        src: 'checkInput',
        input: ({ context }) => ({ query: context.query, run_id: context.run_id }),
        onDone: [
          { guard: { type: 'inputAllowed', params: ({ event }) => event.output }, target: 'stepping' },
          { target: 'blocked', actions: { type: 'recordGuardrailBlock', params: ({ event }) => event.output } },
        ],
        onError: { target: 'failed', actions: 'recordInternalError' },
      },
    },
    // An inbox the runtime knows is empty (`inboxMaybe` false) needs no read at the boundary: the
    // step begins at once, as after a read that found nothing (no effect, no extra transition);
    // with no budget configured (`budgeted` false) it needs no reservation either.
    stepping: {
      always: [
        {
          guard: and(['stepsLeft', not('inboxMaybe'), not('budgeted')]),
          target: 'calling',
          actions: ['beginStep', { type: 'notify', params: { kind: 'step' } }],
        },
        { guard: and(['stepsLeft', not('inboxMaybe')]), target: 'budgeting', actions: ['beginStep', { type: 'notify', params: { kind: 'step' } }] },
        { guard: 'stepsLeft', target: 'boundary' },
        { target: 'failed', actions: 'recordMaxSteps' },
      ],
    },
    // The step boundary: before each model call the run reads its inbox. Steer messages join the
    // conversation; an interrupt request parks the run here, with no call or tool in flight.
    boundary: {
      invoke: {
        src: 'readInbox',
        input: ({ context }) => ({ run_id: context.run_id }),
        onDone: [
          {
            guard: { type: 'interruptRequested', params: ({ event }) => event.output },
            target: 'interrupted',
            actions: [
              { type: 'takeSteers', params: ({ event }) => event.output },
              { type: 'markInterruptHandled', params: ({ event }) => event.output },
            ],
          },
          {
            guard: not('budgeted'),
            target: 'calling',
            actions: [{ type: 'takeSteers', params: ({ event }) => event.output }, 'beginStep', { type: 'notify', params: { kind: 'step' } }],
          },
          {
            target: 'budgeting',
            actions: [{ type: 'takeSteers', params: ({ event }) => event.output }, 'beginStep', { type: 'notify', params: { kind: 'step' } }],
          },
        ],
        onError: { target: 'failed', actions: 'recordInternalError' },
      },
    },
    /** Stopped at a step boundary on request; RESUME goes on from the same boundary. */
    interrupted: {
      on: {
        RESUME: { target: 'boundary', actions: { type: 'notify', params: { kind: 'resumed_interrupt' } } },
      },
    },
    budgeting: {
      invoke: {
        src: 'reserveBudget',
        input: ({ context }) => ({ run_id: context.run_id, phase: context.budget_phase }),
        onDone: [
          { guard: { type: 'reserveOk', params: ({ event }) => event.output }, target: 'afterBudget', actions: 'clearBudgetRequest' },
          {
            guard: { type: 'reservePause', params: ({ event }) => event.output },
            target: 'awaitingBudget',
            actions: { type: 'recordBudgetRequest', params: ({ event }) => event.output },
          },
          { target: 'failed', actions: { type: 'recordBudgetExhausted', params: ({ event }) => event.output } },
        ],
        onError: { target: 'failed', actions: 'recordInternalError' },
      },
    },
    afterBudget: {
      always: [{ guard: 'isModelPhase', target: 'calling' }, { target: 'executing' }],
    },
    awaitingBudget: {
      on: {
        BUDGET_GRANTED: { target: 'budgeting', actions: ['takeBudgetGrant', { type: 'notify', params: { kind: 'resumed_budget_grant' } }] },
        BUDGET_DENIED: { target: 'failed', actions: ['recordBudgetDenied', { type: 'notify', params: { kind: 'resumed_budget_denied' } }] },
      },
    },
    calling: {
      invoke: {
        src: 'callModel',
        input: ({ context }) => ({ run_id: context.run_id }),
        onDone: [
          {
            guard: { type: 'hasToolCalls', params: ({ event }) => event.output },
            target: 'governing',
            actions: { type: 'recordToolCalls', params: ({ event }) => event.output },
          },
          // Nothing can have been steered in: the answer is final (what `concluding` decides after a read).
          { guard: not('inboxMaybe'), target: 'completed', actions: { type: 'recordAnswer', params: ({ event }) => event.output } },
          { target: 'concluding', actions: { type: 'recordAnswer', params: ({ event }) => event.output } },
        ],
        onError: { target: 'failed', actions: 'recordModelError' },
      },
    },
    // A final answer: a steer message that arrived during the last model call still gets its
    // step (it was accepted while the run was running), if a step is left.
    concluding: {
      invoke: {
        src: 'readInbox',
        input: ({ context }) => ({ run_id: context.run_id }),
        onDone: [
          {
            guard: { type: 'steeredAfterAnswer', params: ({ event }) => event.output },
            target: 'stepping',
            actions: [{ type: 'takeSteers', params: ({ event }) => event.output }, 'reopenAnswer'],
          },
          { target: 'completed' },
        ],
        onError: { target: 'completed' },
      },
    },
    governing: {
      invoke: {
        src: 'governTools',
        input: ({ context }) => ({ run_id: context.run_id }),
        onDone: [
          {
            guard: { type: 'needsApproval', params: ({ event }) => event.output },
            target: 'awaitingApproval',
            actions: { type: 'recordGovernance', params: ({ event }) => event.output },
          },
          { guard: not('budgeted'), target: 'executing', actions: [{ type: 'recordGovernance', params: ({ event }) => event.output }, 'enterToolPhase'] },
          { target: 'budgeting', actions: [{ type: 'recordGovernance', params: ({ event }) => event.output }, 'enterToolPhase'] },
        ],
        onError: { target: 'failed', actions: 'recordInternalError' },
      },
    },
    awaitingApproval: {
      on: {
        APPROVALS_DECIDED: {
          target: 'budgeting',
          actions: ['takeApprovals', { type: 'notify', params: { kind: 'resumed_approval' } }],
        },
      },
    },
    executing: {
      invoke: {
        src: 'executeTools',
        input: ({ context }) => ({ run_id: context.run_id }),
        onDone: { target: 'stepping', actions: { type: 'recordObservations', params: ({ event }) => event.output } },
        onError: { target: 'failed', actions: 'recordInternalError' },
      },
    },
    completed: { type: 'final', entry: { type: 'notify', params: { kind: 'final' } } },
    failed: { type: 'final', entry: { type: 'notify', params: { kind: 'final' } } },
    blocked: { type: 'final', entry: { type: 'notify', params: { kind: 'final' } } },
    cancelled: {
      type: 'final',
      entry: ['recordCancelled', { type: 'notify', params: { kind: 'final' } }],
    },
    timedOut: {
      type: 'final',
      entry: ['recordTimeout', { type: 'notify', params: { kind: 'final' } }],
    },
  },
});

/** What every model step that returned records, whatever it asked for: one more call, its usage, its message. */
function modelStepRecorded(context: RunContext, out: ModelStepResult, message: ChatMessage): Pick<RunContext, 'model_calls' | 'usage' | 'messages'> {
  return { model_calls: context.model_calls + 1, usage: addUsage(context.usage, out), messages: [...context.messages, message] };
}

function addUsage(u: Usage, out: ModelStepResult): Usage {
  const r = out.result.usage;
  return {
    requests: u.requests + 1,
    request_tokens: u.request_tokens + r.input_tokens,
    response_tokens: u.response_tokens + r.output_tokens,
    total_tokens: u.total_tokens + r.total_tokens,
    estimated_cost_usd: u.estimated_cost_usd + out.cost_usd,
  };
}

function sumUsage(a: Usage, b: Usage): Usage {
  return {
    requests: a.requests + b.requests,
    request_tokens: a.request_tokens + b.request_tokens,
    response_tokens: a.response_tokens + b.response_tokens,
    total_tokens: a.total_tokens + b.total_tokens,
    estimated_cost_usd: a.estimated_cost_usd + b.estimated_cost_usd,
  };
}

function errorMessage(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

export const RUN_FINAL_STATES = ['completed', 'failed', 'blocked', 'cancelled', 'timedOut'] as const;

export type RunStateValue =
  | 'checking'
  | 'stepping'
  | 'boundary'
  | 'interrupted'
  | 'budgeting'
  | 'afterBudget'
  | 'awaitingBudget'
  | 'calling'
  | 'concluding'
  | 'governing'
  | 'awaitingApproval'
  | 'executing'
  | (typeof RUN_FINAL_STATES)[number];

/** The stored record status for a machine state (docs/contract.md §3.1). */
export function recordStatusOf(
  state: RunStateValue,
): 'running' | 'awaiting_approval' | 'awaiting_budget' | 'interrupted' | 'completed' | 'blocked' | 'failed' | 'cancelled' | 'timeout' {
  switch (state) {
    case 'awaitingApproval':
      return 'awaiting_approval';
    case 'awaitingBudget':
      return 'awaiting_budget';
    case 'interrupted':
      return 'interrupted';
    case 'completed':
      return 'completed';
    case 'failed':
      return 'failed';
    case 'blocked':
      return 'blocked';
    case 'cancelled':
      return 'cancelled';
    case 'timedOut':
      return 'timeout';
    default:
      return 'running';
  }
}
