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
import type { ChatMessage } from './model-types.js';
import type {
  Usage,
  ApprovalState,
  PolicyDecision,
  ToolOutcome,
  RunInput,
  RunContext,
  InboxRead,
  ReserveResult,
  ModelStepResult,
  RunEvent,
  EffectInput,
} from './run-context.js';
export type {
  TerminationReason,
  Usage,
  ApprovalState,
  PolicyDecision,
  BudgetRequest,
  ToolOutcome,
  RunInput,
  RunContext,
  InboxMessage,
  InboxRead,
  ReserveResult,
  ModelStepResult,
  RunEvent,
  EffectInput,
} from './run-context.js';
export { effectRunId } from './run-context.js';

// v2: states `boundary`, `concluding` and `interrupted`, event RESUME, context
// `steered` / `interrupt_handled`. v1 snapshots restore (their states all still exist; the new
// context fields default when absent); a v1 server refuses v2 snapshots.
// v3: effects are invoked with the run id only (EffectInput), not the whole context:
// XState persists a promise child's input, so a snapshot in `calling` held the conversation
// twice. The runtime's effects read the context from the actor; v1/v2 inputs (`{ctx}`) still
// restore (legacyRunId), and a v2 server refuses v3 snapshots.
export const RUN_MACHINE_VERSION = 3;

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
