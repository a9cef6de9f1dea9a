// Tool-call governance (docs/contract.md §4). Pure: given a tool and the config, which effect applies.
// Rules are checked in order and the FIRST matching rule wins, as in a firewall table: put narrow
// exceptions (`deny shell.rm`) above broad rules (`allow shell.*`). No match -> `default_effect`.

export type PolicyEffect = 'allow' | 'ask' | 'deny';

export interface GovernanceRule {
  /** Names the rule in decisions and events (docs/policies.md); default `rules[<index>]`. */
  id?: string;
  /** A CEL expression over PolicyInput; the rule applies only when it is true (docs/policies.md). */
  condition?: string;
  /** Who may decide the approval this rule asks for: roles, API key names or globs over them. */
  approvers?: string[];
  /** Globs over the agent id; omitted = every agent. */
  agents?: string[];
  /** Tenants the rule applies to (`""` = no tenant); omitted = every tenant. */
  tenants?: string[];
  /** Globs over the tool name: `*` any run of characters, `?` one character, all else literal. Omitted = every tool. */
  tools?: string[];
  /** When set, the rule only matches tools served by this MCP server. */
  mcp_server?: string | null;
  effect: PolicyEffect;
  reason?: string | null;
}

export interface GovernanceConfig {
  /** Default true. Disabled governance allows every call. */
  enabled?: boolean;
  /** Default `allow`. */
  default_effect?: PolicyEffect;
  /** Used by the approval flow, not by `decide`. */
  approval_expires_seconds?: number;
  rules?: GovernanceRule[];
}

export interface ToolRef {
  /** The name the model calls, e.g. `search` or, for MCP tools, `<server>.<tool>`. */
  tool_name: string;
  /** The MCP server serving the tool; null/undefined for local and built-in tools. */
  mcp_server?: string | null;
}

export interface PolicyDecision {
  effect: PolicyEffect;
  /** Index of the rule that decided, or null when the default (or disabled governance) did. */
  rule_index: number | null;
  /** The rule's id (`rules[<index>]` without one); null as rule_index. */
  rule_id: string | null;
  reason: string;
  /** Who may decide an `ask` (the rule's `approvers`); null: any approver. */
  approvers: string[] | null;
  /** Set when a condition failed to evaluate: the call is denied (fail closed). */
  error?: string;
}

/** What a condition sees (docs/policies.md): the call, who makes it, and the run so far. */
export interface PolicyInput {
  tool: string;
  args: Record<string, unknown>;
  agent_id: string;
  /** "" for none. */
  tenant: string;
  session_id: string;
  metadata: Record<string, unknown>;
  spend: { cost_usd: number; tokens: number; model_calls: number; tool_calls: number };
}

/** Rule `index`'s condition on `input`: true/false, or the error it failed with. */
export type ConditionEvaluator = (index: number, input: PolicyInput) => boolean | Error;

/** Separators between an MCP server name and its tool's own name in a qualified tool name. */
const MCP_SEPARATORS = ['.', '__', '/', ':'] as const;

const globCache = new Map<string, RegExp>();

export function globToRegExp(glob: string): RegExp {
  let re = globCache.get(glob);
  if (re) return re;
  let src = '^';
  for (const ch of glob) {
    if (ch === '*') src += '.*';
    else if (ch === '?') src += '.';
    // Only regex syntax characters are escaped: `u` mode rejects needless escapes such as `\-`.
    else src += /[.+^${}()|[\]\\/]/.test(ch) ? `\\${ch}` : ch;
  }
  // `s` so `*` also spans a newline; `u` so `?` is one code point, not half a surrogate pair.
  re = new RegExp(`${src}$`, 'su');
  if (globCache.size < 1000) globCache.set(glob, re);
  return re;
}

/** Whole-name, case-sensitive glob match. */
export function matchGlob(glob: string, name: string): boolean {
  return globToRegExp(glob).test(name);
}

/**
 * The names a tool can be matched by: its full name and, for an MCP tool whose name is qualified
 * with its server (`github.create_issue`, `github__create_issue`), also the bare tool name, so a
 * rule `{mcp_server: "github", tools: ["create_*"]}` works whichever way the tool is named.
 */
export function candidateNames(tool: ToolRef): string[] {
  const names = [tool.tool_name];
  const server = tool.mcp_server;
  if (server) {
    for (const sep of MCP_SEPARATORS) {
      const prefix = server + sep;
      if (tool.tool_name.startsWith(prefix) && tool.tool_name.length > prefix.length) {
        names.push(tool.tool_name.slice(prefix.length));
        break;
      }
    }
  }
  return names;
}

export function ruleMatches(rule: GovernanceRule, tool: ToolRef): boolean {
  if (rule.mcp_server && rule.mcp_server !== tool.mcp_server) return false;
  const globs = rule.tools ?? ['*'];
  const names = candidateNames(tool);
  return globs.some((g) => names.some((n) => matchGlob(g, n)));
}

/**
 * The first rule whose tool globs, agents and tenants match and whose condition (with `input` and
 * `conditions`) is true decides. Without `input`, conditions and agent/tenant lists are not
 * checked (a caller that knows only the tool). A condition that fails to evaluate denies.
 */
export function decide(tool: ToolRef, governance: GovernanceConfig | undefined, input?: PolicyInput, conditions?: ConditionEvaluator): PolicyDecision {
  if (governance?.enabled === false) return { effect: 'allow', rule_index: null, rule_id: null, reason: 'governance disabled', approvers: null };
  const rules = governance?.rules ?? [];
  for (let i = 0; i < rules.length; i++) {
    const rule = rules[i];
    if (!ruleMatches(rule, tool)) continue;
    const rule_id = rule.id ?? `rules[${i}]`;
    if (input) {
      if (rule.agents && !rule.agents.some((g) => matchGlob(g, input.agent_id))) continue;
      if (rule.tenants && !rule.tenants.includes(input.tenant)) continue;
      if (rule.condition !== undefined && conditions) {
        const v = conditions(i, input);
        if (v instanceof Error)
          return { effect: 'deny', rule_index: i, rule_id, reason: `rule ${rule_id}: the condition failed: ${v.message}`, approvers: null, error: v.message };
        if (!v) continue;
      }
    }
    return { effect: rule.effect, rule_index: i, rule_id, reason: rule.reason ?? `rule ${rule.id ?? i}: ${rule.effect}`, approvers: rule.approvers ?? null };
  }
  const effect = governance?.default_effect ?? 'allow';
  return { effect, rule_index: null, rule_id: null, reason: `default effect: ${effect}`, approvers: null };
}
