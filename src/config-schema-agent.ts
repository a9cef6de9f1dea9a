// The agent's sections of the config file's schema (src/config-schema.ts): the model, tools,
// sub-agents, guardrails, governance rules, budgets and prices.
import { z } from 'zod';
import { arr, bool, isValidRegex, nonEmpty, nonNegNumber, obj, oneOf, posInt, posNumber, str, strMap, url } from './config-fields.js';

export const MODEL_PROVIDERS = ['demo', 'openai-compatible', 'openai', 'anthropic'] as const;

const ModelConfig = obj({
  provider: oneOf(MODEL_PROVIDERS).default('demo').describe('demo is built in, offline and deterministic.'),
  base_url: url().optional().describe('API base URL (openai-compatible: required).'),
  model: nonEmpty().optional().describe('Model name; "demo" for the demo provider.'),
  api_key_env: nonEmpty().optional().describe('Name of an environment variable holding the API key.'),
  max_output_tokens: posInt().default(1024).describe('Most tokens one model call may answer; also what a call reserves against cost budgets.'),
  temperature: z
    .number({ error: 'expected a number between 0 and 2' })
    .min(0, { error: 'expected a number between 0 and 2' })
    .max(2, { error: 'expected a number between 0 and 2' })
    .optional()
    .describe("Sampling temperature 0-2 sent with every call; unset: the provider's default."),
  rate_limit: obj({
    requests_per_minute: posInt().optional().describe('Model calls per minute at most, over every run and instance on this provider key.'),
    tokens_per_minute: posInt().optional().describe('Prompt + output tokens per minute at most (estimated before the call, corrected by the reported usage).'),
  })
    .optional()
    .describe("The model provider's rate limit, keyed by provider + base URL + model (docs/flow-control.md): a call over it waits, never fails."),
});

// MCP tool names become `<server>__<tool>`, and model APIs accept only [a-zA-Z0-9_-] in names.
export const mcpServerName = () =>
  z
    .string({ error: 'expected a server name matching ^[a-zA-Z0-9_-]{1,48}$' })
    .regex(/^[a-zA-Z0-9_-]{1,48}$/, { error: 'expected a server name matching ^[a-zA-Z0-9_-]{1,48}$' });

const McpStdioServer = obj({
  name: mcpServerName().describe('Tool names become <name>__<tool>: letters, digits, _ and -.'),
  command: nonEmpty().describe('Program started for this server (stdio transport), run from the config, never from a request.'),
  args: arr(str()).default([]).describe('Arguments of the command.'),
  env: strMap().default({}).describe('Extra environment variables of the server process.'),
});
const McpHttpServer = obj({
  name: mcpServerName().describe('Tool names become <name>__<tool>: letters, digits, _ and -.'),
  url: url().describe('Streamable HTTP endpoint of the MCP server.'),
  headers: strMap().default({}).describe('Sent with every request (e.g. Authorization); redacted from everything answered or exported.'),
});
// Either a stdio server {name, command} or an HTTP one {name, url}; issueLines() reports the
// branch that came closest instead of both branches' complaints.
const McpServer = z.union([McpStdioServer, McpHttpServer], { error: 'expected {name, command, args, env} or {name, url, headers}' });

const BUILTIN_TOOLS = ['workspace', 'clock'] as const;

const ToolsConfig = obj({
  local: nonEmpty().optional().describe('Path of an ES module whose default export is an array of tools.'),
  mcp: arr(McpServer).default([]).describe('MCP servers whose tools the agent may call: {name, command, args, env} (stdio) or {name, url, headers} (HTTP).'),
  builtin: arr(oneOf(BUILTIN_TOOLS))
    .default([...BUILTIN_TOOLS])
    .describe('Built-in tools offered to the model: workspace (files of the run workspace), clock.'),
});

const SubagentConfig = obj({
  name: nonEmpty().describe('Tool name under which the agent delegates to this sub-agent.'),
  description: nonEmpty().describe('Tells the model when to delegate (the tool description).'),
  system_instruction: str().optional().describe("The sub-agent's system prompt; default: the agent's."),
  tools: arr(str()).default([]).describe('Tool names the sub-agent may use.'),
});

const GuardrailsConfig = obj({
  max_input_chars: posInt().default(100_000).describe('A query longer than this is blocked before any model call.'),
  deny_patterns: arr(str().refine(isValidRegex, { error: 'expected a valid regular expression' }))
    .default([])
    .describe('Regular expressions; a query matching one is blocked (status blocked, guardrail_violation).'),
  injection_check: bool().default(true).describe('Built-in prompt-injection heuristics (docs/budgets.md, guardrails).'),
});

export const AgentConfig = obj({
  name: nonEmpty().default('assistant').describe('Name of the served agent (agent_name of its runs, gen_ai.agent.name).'),
  system_instruction: str().default('You are a helpful assistant.').describe('System prompt of every run of the served agent.'),
  max_steps: posInt().default(10).describe('Model calls per run before it ends with max_steps.'),
  model: ModelConfig.prefault({}).describe('The model the agent calls.'),
  tools: ToolsConfig.prefault({}).describe('Tools the agent may call.'),
  subagents: arr(SubagentConfig).default([]).describe('Agents this one can delegate a sub-task to, each offered as a tool.'),
  guardrails: GuardrailsConfig.prefault({}).describe('Checks on the query before any model call.'),
});

const GovernanceRule = obj({
  id: nonEmpty().optional().describe('Names the rule in decisions and events; default rules[<index>].'),
  tools: arr(nonEmpty()).min(1, { error: 'expected at least one tool glob' }).describe('Tool name globs (* and ?) this rule applies to.'),
  mcp_server: nonEmpty().optional().describe('Only tools of this MCP server.'),
  effect: oneOf(['allow', 'ask', 'deny']).describe('allow: runs; ask: waits for a person (awaiting_approval); deny: refused, the model is told.'),
  condition: nonEmpty().optional().describe('A CEL expression over tool, args, agent_id, tenant, session_id, metadata, spend (docs/policies.md).'),
  approvers: arr(nonEmpty()).min(1).optional().describe('Who may decide the approval: roles, API key names or globs over them.'),
  agents: arr(nonEmpty()).min(1).optional().describe('Globs over the agent id.'),
  tenants: arr(str()).min(1).optional().describe('Tenants the rule applies to ("" = no tenant).'),
  reason: str().optional().describe('Shown on the approval and to the model on a denial.'),
});

export const GovernanceConfig = obj({
  enabled: bool().default(true).describe('false: every tool call runs without a policy check.'),
  default_effect: oneOf(['allow', 'ask', 'deny']).default('allow').describe('Effect of a call no rule matches.'),
  approval_expires_seconds: posInt().default(86_400).describe('A pending approval not decided within this time expires (the call is denied).'),
  rules: arr(GovernanceRule).default([]).describe('First matching rule wins.'),
});

const BudgetRule = obj({
  meter: oneOf(['cost_usd', 'tokens', 'model_calls', 'tool_calls']).describe('What is counted (cost_usd needs a price in pricing).'),
  limit: posNumber().describe('Most of the meter the scope may use in one window.'),
  window: oneOf(['total', 'day', 'month']).default('total').describe('total: never resets; day / month: resets at the UTC boundary.'),
  on_exhausted: oneOf(['pause', 'terminate']).default('pause').describe('pause: the run waits for a grant (awaiting_budget); terminate: it ends failed.'),
  warn_at: z
    .number({ error: 'expected a fraction between 0 and 1' })
    .gt(0, { error: 'expected a fraction between 0 and 1' })
    .max(1, { error: 'expected a fraction between 0 and 1' })
    .default(0.8)
    .describe('Fraction of the limit at which a budget_warning event is sent once.'),
});

export const BudgetsConfig = obj({
  run: arr(BudgetRule).default([]).describe('Limits of each run.'),
  session: arr(BudgetRule).default([]).describe('Limits of each session (all of its runs).'),
  agent: arr(BudgetRule).default([]).describe('Limits of each agent (all of its runs).'),
  tenant: arr(BudgetRule).default([]).describe("Per tenant: every run of a tenant's keys (docs/multi-tenant.md); runs of global keys have none."),
  eval: arr(BudgetRule)
    .default([])
    .describe(
      'Per evaluation: every replay run and judge run of one evaluation (docs/debugging.md); other runs have none. Ledger key eval:<eval_id>:<window>.',
    ),
  application: arr(BudgetRule).default([]).describe('Limits of the whole service.'),
  application_id: nonEmpty().default('default').describe('Identity of the application ledger keys.'),
});

export const PriceConfig = obj({
  input_per_million_usd: nonNegNumber().describe('US dollars per million input (prompt) tokens.'),
  output_per_million_usd: nonNegNumber().describe('US dollars per million output (completion) tokens.'),
});
