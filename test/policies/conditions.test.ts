// Tool policies as code (docs/policies.md): CEL conditions over the call, its tenant and the run's
// spend; agents/tenants lists; fail closed on an evaluation error; parse errors name the rule.
import { describe, expect, it } from 'vitest';
import { decide, type GovernanceRule, type PolicyInput } from '../../machines/policies/governance.js';
import { compileConditions, conditionErrors, inputsDigest } from '../../src/agent/policy-conditions.js';
import { configFromObject } from '../../src/config.js';

const RULES: GovernanceRule[] = [
  { id: 'acme-reports-only', tools: ['workspace_write'], effect: 'deny', tenants: ['acme'], condition: '!args.path.startsWith("reports/")' },
  { id: 'big-payments', tools: ['pay'], effect: 'ask', condition: 'args.amount > 100', approvers: ['finance-*'] },
  { id: 'spend-cap', tools: ['*'], effect: 'deny', condition: 'spend.cost_usd > 2.5' },
  { id: 'ops-agent-only', tools: ['shell'], effect: 'allow', agents: ['ops-*'] },
  { id: 'shell-deny', tools: ['shell'], effect: 'deny' },
];
const gov = { rules: RULES, default_effect: 'allow' as const };
const conditions = compileConditions(RULES);
const base: PolicyInput = {
  tool: 'pay',
  args: { amount: 10 },
  agent_id: 'default',
  tenant: '',
  session_id: 's1',
  metadata: {},
  spend: { cost_usd: 0, tokens: 0, model_calls: 1, tool_calls: 0 },
};
const run = (input: Partial<PolicyInput>) => {
  const i = { ...base, ...input };
  return decide({ tool_name: i.tool }, gov, i, conditions);
};

describe('CEL conditions', () => {
  it('decide on arguments: ask above 100 only, with the rule approvers', () => {
    expect(run({ args: { amount: 150 } })).toMatchObject({ effect: 'ask', rule_id: 'big-payments', approvers: ['finance-*'] });
    expect(run({ args: { amount: 100 } })).toMatchObject({ effect: 'allow', rule_id: null });
  });

  it('decide on the tenant', () => {
    const write = (tenant: string, path: string) => run({ tool: 'workspace_write', tenant, args: { path } });
    expect(write('acme', 'secrets/x')).toMatchObject({ effect: 'deny', rule_id: 'acme-reports-only' });
    expect(write('acme', 'reports/q3.md')).toMatchObject({ effect: 'allow' });
    expect(write('beta', 'secrets/x')).toMatchObject({ effect: 'allow' });
    expect(write('', 'secrets/x')).toMatchObject({ effect: 'allow' });
  });

  it('decide on the spend so far', () => {
    expect(run({ tool: 'search', args: {}, spend: { ...base.spend, cost_usd: 3 } })).toMatchObject({ effect: 'deny', rule_id: 'spend-cap' });
    expect(run({ tool: 'search', args: {}, spend: { ...base.spend, cost_usd: 2 } })).toMatchObject({ effect: 'allow' });
  });

  it('match agents by glob', () => {
    expect(run({ tool: 'shell', args: {}, agent_id: 'ops-1' })).toMatchObject({ effect: 'allow', rule_id: 'ops-agent-only' });
    expect(run({ tool: 'shell', args: {}, agent_id: 'default' })).toMatchObject({ effect: 'deny', rule_id: 'shell-deny' });
  });

  it('deny when a condition fails to evaluate (a missing field), with the error', () => {
    const d = run({ args: {} });
    expect(d).toMatchObject({ effect: 'deny', rule_id: 'big-payments' });
    expect(d.error).toMatch(/amount/);
    // A condition that is not a boolean fails too.
    const odd: GovernanceRule[] = [{ id: 'odd', tools: ['*'], effect: 'allow', condition: 'args.amount' }];
    expect(decide({ tool_name: 'pay' }, { rules: odd }, { ...base, args: { amount: 1 } }, compileConditions(odd))).toMatchObject({
      effect: 'deny',
      rule_id: 'odd',
    });
  });

  it('digest the canonical inputs: key order does not matter, values do', () => {
    const a = inputsDigest({ ...base, args: { x: 1, y: 2 } });
    expect(inputsDigest({ ...base, args: { y: 2, x: 1 } })).toBe(a);
    expect(inputsDigest({ ...base, args: { x: 1, y: 3 } })).not.toBe(a);
    expect(a).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe('start-up validation', () => {
  it('names the rule and the parse error', () => {
    expect(conditionErrors([{ id: 'broken', condition: 'args.amount >' }])[0].message).toMatch(/^rule broken: condition does not parse: /);
    expect(conditionErrors([{ condition: 'ok == true' }, { condition: '((' }])[0]).toMatchObject({
      index: 1,
      message: expect.stringMatching(/^rule rules\[1\]/),
    });
  });

  it('refuses a config whose condition does not parse', () => {
    expect(() =>
      configFromObject({ governance: { rules: [{ id: 'broken', tools: ['*'], effect: 'deny', condition: 'args.amount >' }] } }, { dataDir: '/tmp/x', env: {} }),
    ).toThrow(/rule broken: condition does not parse/);
    expect(() =>
      configFromObject({ governance: { rules: [{ id: 'fine', tools: ['*'], effect: 'deny', condition: 'args.amount > 1' }] } }, { dataDir: '/tmp/x', env: {} }),
    ).not.toThrow();
  });
});
