// POST /governance/evaluate (docs/policies.md): what the governance rules decide for a call,
// without running anything.
import { z } from 'zod';
import { JsonObject, SafeId } from './common.js';

export const GovernanceEvaluateRequest = z
  .strictObject({
    tool: z.string().min(1).max(256).describe('The tool name, as the model would call it.'),
    args: JsonObject.default({}).describe("The call's arguments (`args` in conditions)."),
    agent_id: z.string().min(1).max(128).nullish().describe('Default: the served agent.'),
    tenant: z.string().max(64).nullish().describe('"" or absent: no tenant. A key acting in a tenant evaluates in its own.'),
    session_id: SafeId.nullish(),
    metadata: JsonObject.nullish(),
    spend: z
      .strictObject({
        cost_usd: z.number().nonnegative().default(0),
        tokens: z.number().int().nonnegative().default(0),
        model_calls: z.number().int().nonnegative().default(0),
        tool_calls: z.number().int().nonnegative().default(0),
      })
      .nullish()
      .describe('The run so far; default all zero.'),
  })
  .meta({ id: 'GovernanceEvaluateRequest' });
export type GovernanceEvaluateRequest = z.infer<typeof GovernanceEvaluateRequest>;

export const GovernanceEvaluateResponse = z
  .object({
    effect: z.enum(['allow', 'ask', 'deny']),
    rule_id: z.string().nullable().describe('The rule that decided; null: the default effect.'),
    reason: z.string(),
    approvers: z.array(z.string()).nullable().describe("Who may decide an `ask` (the rule's `approvers`); null: any approver."),
    error: z.string().nullish().describe('Why a condition failed to evaluate (the call is then denied).'),
    inputs_sha256: z.string().describe('SHA-256 of the canonical JSON of the inputs, as the policy events record it.'),
  })
  .meta({ id: 'GovernanceEvaluateResponse' });
