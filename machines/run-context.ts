// The run machine's data (machines/run.machine.ts): its context, input, events and the records it
// keeps (approvals, budget requests, usage). Pure types, plus the one helper effects use to read
// their input; run.machine.ts re-exports them.
import type { ChatMessage, ModelCallResult, ToolCallRequest } from './model-types.js';

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
 * current context; never the context itself (it would be persisted a second time: RUN_MACHINE_VERSION v3 in run.machine.ts).
 */
export interface EffectInput {
  run_id: string;
}

/** The id of the run an effect input names, v1/v2 snapshots' `{ctx}` inputs included. */
export function effectRunId(input: EffectInput | { ctx: { run_id: string } }): string {
  return 'run_id' in input ? input.run_id : input.ctx.run_id;
}
