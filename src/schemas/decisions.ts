// What a person decides about a paused run (approvals, budgets) and what is reported after a run
// ended (outcomes): docs/contract.md §12, §1, §4, §5.
import { z } from 'zod';
import { IsoDateTime, JsonObject } from './common.js';

// --- approvals ---------------------------------------------------------------------------------

export const ApprovalStatus = z.enum(['pending', 'approved', 'denied', 'used', 'expired']).meta({ id: 'ApprovalStatus' });
export type ApprovalStatus = z.infer<typeof ApprovalStatus>;

/** Public view of one approval (docs/contract.md §4); also the 200 answer of a decision. */
export const ApprovalView = z
  .object({
    approval_id: z.string(),
    run_id: z.string().optional(),
    status: ApprovalStatus,
    tool_name: z.string(),
    tool_call_id: z.string(),
    arguments: JsonObject.nullable(),
    reason: z.string().nullable(),
    created_at: IsoDateTime,
    expires_at: IsoDateTime.nullable(),
    approver: z.string().nullable(),
    note: z.string().nullable(),
    decided_at: IsoDateTime.nullable(),
    edited_arguments: JsonObject.nullable(),
    rule_id: z.string().nullish().describe('The governance rule that asked (docs/policies.md).'),
    approvers: z.array(z.string()).nullish().describe("Who may decide it: roles, API key names or globs (the rule's `approvers`); absent: any approver."),
    override: z.boolean().optional().describe("True when a global admin key decided it outside the rule's approvers."),
    may_decide: z
      .boolean()
      .optional()
      .describe("On a pending approval in GET /runs and GET /runs/{id}: whether the asking key may decide it (its role and the rule's approvers)."),
  })
  .meta({ id: 'Approval' });
export type ApprovalView = z.infer<typeof ApprovalView>;

export const ApprovalDecisionRequest = z
  .strictObject({
    decision: z.enum(['approve', 'deny']),
    approver: z.string().min(1).describe('Who decided.'),
    arguments: JsonObject.nullish().describe('Approve this edited call instead of the requested one (not allowed with deny).'),
    note: z.string().nullish().describe("Reason; a denial's note reaches the model."),
  })
  .meta({ id: 'ApprovalDecisionRequest' });
export type ApprovalDecisionRequest = z.infer<typeof ApprovalDecisionRequest>;

// --- budgets -----------------------------------------------------------------------------------

export const BudgetScope = z.enum(['run', 'session', 'eval', 'agent', 'tenant', 'application']).meta({ id: 'BudgetScope' });
export type BudgetScope = z.infer<typeof BudgetScope>;

export const BudgetMeter = z.enum(['cost_usd', 'tokens', 'model_calls', 'tool_calls']).meta({ id: 'BudgetMeter' });
export type BudgetMeter = z.infer<typeof BudgetMeter>;

export const BudgetWindow = z.enum(['total', 'day', 'month']).meta({ id: 'BudgetWindow' });
export type BudgetWindow = z.infer<typeof BudgetWindow>;

/** One ledger key covering a run (docs/contract.md §5). */
export const BudgetEntry = z
  .object({
    scope: BudgetScope,
    meter: BudgetMeter,
    window: BudgetWindow,
    key: z.string().describe('Ledger key `<scope>:<identity>:<window>`, e.g. `session:s_1:total`.'),
    limit: z.number(),
    granted: z.number(),
    spent: z.number(),
    reserved: z.number(),
    remaining: z.number(),
  })
  .meta({ id: 'BudgetEntry' });
export type BudgetEntry = z.infer<typeof BudgetEntry>;

export const BudgetRequestStatus = z.enum(['pending', 'granted', 'denied']).meta({ id: 'BudgetRequestStatus' });
export type BudgetRequestStatus = z.infer<typeof BudgetRequestStatus>;

/** The budget a waiting run ran out of and what it needs. */
export const BudgetRequestView = z
  .object({
    request_id: z.string(),
    key: z.string(),
    scope: BudgetScope,
    meter: BudgetMeter,
    limit: z.number(),
    used: z.number(),
    needed: z.number(),
    shortfall: z.number(),
    status: BudgetRequestStatus,
    asked_at: IsoDateTime,
    decided_at: IsoDateTime.nullish(),
    approver: z.string().nullish(),
    amount: z.number().nullish(),
    note: z.string().nullish(),
  })
  .meta({ id: 'BudgetRequest' });
export type BudgetRequestView = z.infer<typeof BudgetRequestView>;

/** GET /runs/{run_id}/budget. */
export const RunBudgetResponse = z
  .object({
    run_id: z.string(),
    budgets: z.array(BudgetEntry),
    requests: z.array(BudgetRequestView),
  })
  .meta({ id: 'RunBudgetResponse' });
export type RunBudgetResponse = z.infer<typeof RunBudgetResponse>;

export const BudgetDecisionRequest = z
  .strictObject({
    decision: z.enum(['grant', 'deny']),
    approver: z.string().min(1),
    amount: z.number().positive().nullish().describe("Amount to add; when omitted, the run's shortfall."),
    note: z.string().nullish(),
    request_id: z.string().min(1).nullish().describe('The budget request decided; defaults to the pending one.'),
  })
  .meta({ id: 'BudgetDecisionRequest' });
export type BudgetDecisionRequest = z.infer<typeof BudgetDecisionRequest>;

/** POST /runs/{run_id}/budget. */
export const BudgetDecisionResponse = z
  .object({
    run_id: z.string(),
    request_id: z.string(),
    status: z.enum(['granted', 'denied']),
    scope: BudgetScope,
    meter: BudgetMeter,
    amount: z.number().nullable(),
    approver: z.string(),
    note: z.string().nullable(),
  })
  .meta({ id: 'BudgetDecisionResponse' });
export type BudgetDecisionResponse = z.infer<typeof BudgetDecisionResponse>;

// --- outcomes ----------------------------------------------------------------------------------

export const OutcomeRequest = z
  .strictObject({
    source: z.string().min(1).describe('Who reports it.'),
    label: z.string().nullish(),
    reward: z.number().nullish().describe('Number used by a trainer or evaluator.'),
    detail: JsonObject.nullish(),
  })
  .meta({ id: 'OutcomeRequest' });
export type OutcomeRequest = z.infer<typeof OutcomeRequest>;

export const OutcomeResponse = z
  .object({
    outcome_id: z.string(),
    source: z.string(),
    label: z.string().nullable(),
    reward: z.number().nullable(),
    detail: JsonObject.nullable(),
    recorded_at: IsoDateTime,
  })
  .meta({ id: 'Outcome' });
export type OutcomeResponse = z.infer<typeof OutcomeResponse>;
