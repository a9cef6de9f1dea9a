// POST /governance/evaluate (docs/policies.md): a dry run of the governance rules, with their
// CEL conditions, for a call a client describes. Nothing runs; the same decide() as a run's.
import { decide, type GovernanceConfig, type PolicyInput } from '../../machines/policies/governance.js';
import { compileConditions, inputsDigest } from '../agent/policy-conditions.js';
import { domainError } from '../errors.js';
import { ErrorResponse, GovernanceEvaluateRequest, GovernanceEvaluateResponse, HTTPValidationError } from '../schemas/index.js';
import type { AppDeps, ZodApp } from './deps.js';

export function governanceRoutes(app: ZodApp, deps: AppDeps): void {
  const governance = deps.config.governance as unknown as GovernanceConfig;
  const conditions = compileConditions(deps.config.governance.rules);
  app.post(
    '/governance/evaluate',
    {
      schema: {
        operationId: 'evaluateGovernance',
        tags: ['service'],
        summary: 'What the governance rules decide for a tool call, without running it',
        body: GovernanceEvaluateRequest,
        response: { 200: GovernanceEvaluateResponse, 403: ErrorResponse, 422: HTTPValidationError },
      },
    },
    async (request) => {
      const body = request.body;
      // A key acting in a tenant evaluates in that tenant only.
      const own = request.tenantScope.tenant;
      const tenant = body.tenant ?? own ?? '';
      if (own !== null && tenant !== own) throw domainError('AGT_ERR_TENANT_MISMATCH', [own, tenant]);
      const input: PolicyInput = {
        tool: body.tool,
        args: body.args,
        agent_id: body.agent_id ?? deps.config.background.agent_id,
        tenant,
        session_id: body.session_id ?? '',
        metadata: body.metadata ?? {},
        spend: body.spend ?? { cost_usd: 0, tokens: 0, model_calls: 0, tool_calls: 0 },
      };
      const tool = deps.runtime.tools.list().find((t) => t.name === body.tool);
      const d = decide({ tool_name: body.tool, mcp_server: tool?.mcp_server }, governance, input, conditions);
      return { effect: d.effect, rule_id: d.rule_id, reason: d.reason, approvers: d.approvers, error: d.error ?? null, inputs_sha256: inputsDigest(input) };
    },
  );
}
