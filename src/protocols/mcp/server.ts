// The MCP server (docs/protocols/mcp.md): agentd's runs and decisions as MCP tools. One McpServer
// per HTTP request (stateless streamable HTTP): it knows the caller's key, so each tool checks the
// role its work needs (a reader starts no run, only approvers decide), and it holds nothing once
// the request is answered.
import { deciderOf } from '../../http/auth.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import { AppError, HttpValidationFailure } from '../../errors.js';
import { mayAccess } from '../../http/auth.js';
import type { AppDeps } from '../../http/deps.js';
import { mayDecide } from '../../runtime/run-decisions.js';
import { responseStatusOf, WAITING_RUN_STATUSES, type RunRecord } from '../../runtime/run-record.js';
import { BackgroundId, JsonObject, SafeId } from '../../schemas/common.js';
import { agentIdOf } from '../agents.js';
import { approverOf, pendingApprovalsOf, startProtocolRun, waitAfterDecision } from '../run-calls.js';

/** Pending approvals listed at most (the oldest waiting runs first). */
const MAX_LISTED_RUNS = 100;

const Approval = z.object({
  approval_id: z.string(),
  tool_name: z.string(),
  arguments: JsonObject,
  reason: z.string().nullable(),
  expires_at: z.string(),
});

/** structuredContent of run_agent and the decide tools: the run as RunResponse shows it. */
const RunResult = {
  run_id: z.string(),
  session_id: z.string(),
  status: z.string().describe('As in RunResponse: success, error, cancelled, awaiting_approval, awaiting_budget, interrupted, timeout.'),
  response: z.string().nullable(),
  approvals: z.array(Approval).describe('Pending approvals (status awaiting_approval).'),
  budget_request: JsonObject.nullable().describe('The pending budget request (status awaiting_budget).'),
};

export function buildMcpServer(deps: AppDeps, request: FastifyRequest): McpServer {
  const server = new McpServer({ name: 'agentd', version: deps.version }, { capabilities: { tools: {} } });
  const approver = approverOf(request, 'mcp-client');

  server.registerTool(
    'run_agent',
    {
      title: 'Run the agent',
      description:
        'Runs the agent on a query and answers with its response. A run that pauses for a person (an approval, a budget) answers at once with its status and what it waits for; decide it with decide_approval / decide_budget.',
      inputSchema: {
        query: z.string().min(1).max(1_000_000),
        session_id: SafeId.optional().describe('Continue this conversation (the server keeps its history).'),
        agent_id: BackgroundId.optional().describe('A registered agent; default: the served agent.'),
      },
      outputSchema: RunResult,
    },
    async (args) =>
      guarded(request, 'operate', 'run_agent', async () => {
        const run = await startProtocolRun(deps, request, 'mcpRunAgent', {
          query: args.query,
          session_id: args.session_id,
          agent_id: agentIdOf(args.agent_id),
          // The tool's arguments, not the JSON-RPC message: a retry comes with a new JSON-RPC id.
          idempotency_body: { tool: 'run_agent', arguments: args },
        });
        return resultOf(await run.settled);
      }),
  );

  server.registerTool(
    'list_pending_approvals',
    {
      title: 'List pending approvals',
      description: 'The tool calls and budget requests that runs are waiting for a person to decide.',
      inputSchema: {},
      outputSchema: {
        approvals: z.array(Approval.extend({ run_id: z.string(), session_id: z.string(), may_decide: z.boolean() })),
        budget_requests: z.array(z.object({ run_id: z.string(), session_id: z.string(), request: JsonObject })),
      },
    },
    async () =>
      guarded(request, 'read', 'list_pending_approvals', async () => {
        const [approvalRuns, budgetRuns] = await Promise.all([
          // The request's tenant's runs only (src/http/tenancy.ts).
          deps.runtime.runs.list({ status: 'awaiting_approval', limit: MAX_LISTED_RUNS }, request.tenantScope),
          deps.runtime.runs.list({ status: 'awaiting_budget', limit: MAX_LISTED_RUNS }, request.tenantScope),
        ]);
        // As the dashboard's inbox: a deciding key sees the approvals it may decide (a rule's
        // approvers, src/runtime/run-decisions.ts mayDecide), a reading key all of them, each
        // marked with may_decide.
        const decider = deciderOf(request);
        const decides = decider === null || decider.role === 'approver' || decider.role === 'admin';
        const approvals = approvalRuns.runs
          .flatMap((r) =>
            pendingApprovalsOf(r).map((a) => {
              const rule = r.approvals.find((x) => x.approval_id === a.approval_id) ?? {};
              return { ...a, run_id: r.run_id, session_id: r.session_id, may_decide: mayDecide(rule, decider) };
            }),
          )
          .filter((a) => !decides || a.may_decide);
        const budget_requests = budgetRuns.runs
          .filter((r) => r.budget_request?.status === 'pending')
          .map((r) => ({ run_id: r.run_id, session_id: r.session_id, request: r.budget_request as unknown as Record<string, unknown> }));
        const structured = { approvals, budget_requests };
        return { content: [{ type: 'text', text: JSON.stringify(structured) }], structuredContent: structured };
      }),
  );

  server.registerTool(
    'decide_approval',
    {
      title: 'Approve or deny a tool call',
      description:
        'Approves (optionally with edited arguments) or denies a pending tool call; the approver is the API key. Answers with the run once it went on (ended, or paused again).',
      inputSchema: {
        run_id: SafeId,
        approval_id: SafeId,
        decision: z.enum(['approve', 'deny']),
        arguments: JsonObject.optional().describe('approve only: the arguments the tool runs with instead.'),
        note: z.string().max(10_000).optional().describe('Told to the model (a deny reason).'),
      },
      outputSchema: RunResult,
    },
    async (args) =>
      guarded(request, 'decide', 'decide_approval', async () => {
        // Another tenant's run is not found, as one that does not exist.
        await deps.runtime.runs.get(args.run_id, request.tenantScope);
        await deps.runtime.runs.decisions.decideApproval(
          args.run_id,
          args.approval_id,
          {
            decision: args.decision,
            approver,
            arguments: args.arguments ?? null,
            note: args.note ?? null,
          },
          deciderOf(request),
        );
        return resultOf(await waitAfterDecision(deps, args.run_id));
      }),
  );

  server.registerTool(
    'decide_budget',
    {
      title: 'Grant or deny budget',
      description: 'Grants (by default the shortfall) or denies the budget a run waits for. Answers with the run once it went on.',
      inputSchema: {
        run_id: SafeId,
        decision: z.enum(['grant', 'deny']),
        amount: z.number().positive().optional(),
        note: z.string().max(10_000).optional(),
      },
      outputSchema: RunResult,
    },
    async (args) =>
      guarded(request, 'decide', 'decide_budget', async () => {
        await deps.runtime.runs.get(args.run_id, request.tenantScope);
        await deps.runtime.runs.decisions.decideBudget(args.run_id, {
          decision: args.decision,
          approver,
          amount: args.amount ?? null,
          note: args.note ?? null,
        });
        return resultOf(await waitAfterDecision(deps, args.run_id));
      }),
  );

  return server;
}

/** A tool's work under the role it needs; agentd's refusals become tool errors naming their AGT_ERR_* code. */
async function guarded(
  request: FastifyRequest,
  access: 'read' | 'operate' | 'decide',
  tool: string,
  work: () => Promise<CallToolResult>,
): Promise<CallToolResult> {
  if (!mayAccess(request, access)) return toolError('AGT_ERR_FORBIDDEN', `the '${request.apiKeyRole}' role may not call ${tool}`);
  try {
    return await work();
  } catch (err) {
    if (err instanceof AppError) return toolError(err.domainCode, err.message);
    // A 422 on the HTTP routes (an Idempotency-Key reused with other arguments): its code and reasons.
    if (err instanceof HttpValidationFailure) return toolError('AGT_ERR_VALIDATION', err.detail.map((d) => `${d.type}: ${d.msg}`).join('; '));
    throw err;
  }
}

function toolError(code: string, message: string): CallToolResult {
  return { isError: true, content: [{ type: 'text', text: `${code}: ${message}` }], _meta: { code } };
}

function resultOf(r: RunRecord): CallToolResult {
  const status = responseStatusOf(r.status);
  const approvals = pendingApprovalsOf(r);
  const structured = {
    run_id: r.run_id,
    session_id: r.session_id,
    status,
    response: WAITING_RUN_STATUSES.has(r.status) ? null : r.response,
    approvals,
    budget_request: r.status === 'awaiting_budget' ? (r.budget_request as unknown as Record<string, unknown>) : null,
  };
  const text =
    r.status === 'completed'
      ? (r.response ?? '')
      : r.status === 'awaiting_approval'
        ? `The run ${r.run_id} waits for approval of ${approvals.map((a) => `${a.tool_name} ${JSON.stringify(a.arguments)} (approval_id ${a.approval_id})`).join(', ')}.`
        : r.status === 'awaiting_budget'
          ? `The run ${r.run_id} waits for a budget decision (${r.budget_request?.meter ?? ''}, request ${r.budget_request?.request_id ?? ''}).`
          : `The run ${r.run_id} ended with ${status}${r.error ? `: ${r.error.message}` : ''}.`;
  return { content: [{ type: 'text', text }], structuredContent: structured };
}
