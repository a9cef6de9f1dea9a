// Governance cost per tool call (docs/policies.md): decide() over 50 rules with CEL conditions, as
// a run's govern() calls it, against the same 50 rules without conditions (the glob-only
// governance agentd had before), interleaved in rounds so machine load hits both sides alike.
import { decide, type GovernanceRule, type PolicyInput } from '../../../machines/policies/governance.js';
import { compileConditions, inputsDigest } from '../../../src/agent/policy-conditions.js';
import { loadAverage, nowMs, round, scaled, type BenchOutput } from '../lib.js';

const ITERATIONS = scaled(100_000, 2000);
const ROUNDS = 4;

/** 50 rules: 49 that do not match the call (tools, tenants or a false condition), then one that asks. */
function rules(withConditions: boolean): GovernanceRule[] {
  const out: GovernanceRule[] = [];
  for (let i = 0; i < 49; i++) {
    const kind = i % 3;
    if (kind === 0) out.push({ id: `r${i}`, tools: [`tool_${i}_*`], effect: 'deny' });
    else if (kind === 1)
      out.push({ id: `r${i}`, tools: ['pay*'], effect: 'deny', tenants: [`t${i}`], ...(withConditions ? { condition: `args.amount > ${1000 + i}` } : {}) });
    else
      out.push({
        id: `r${i}`,
        tools: ['*'],
        effect: 'deny',
        ...(withConditions ? { condition: `tenant == "t${i}" && spend.cost_usd > 1.0` } : { tools: [`other_${i}`] }),
      });
  }
  out.push({
    id: 'big-payments',
    tools: ['pay'],
    effect: 'ask',
    ...(withConditions ? { condition: 'args.amount > 100 && !args.to.endsWith("@example.com")' } : {}),
  });
  return out;
}

const input: PolicyInput = {
  tool: 'pay',
  args: { amount: 250, to: 'ann@acme.test', memo: 'invoice 42' },
  agent_id: 'default',
  tenant: 'acme',
  session_id: 'session_1',
  metadata: {},
  spend: { cost_usd: 0.4, tokens: 12000, model_calls: 3, tool_calls: 2 },
};

function measure(fn: () => void): number {
  const t0 = nowMs();
  for (let i = 0; i < ITERATIONS; i++) fn();
  return ((nowMs() - t0) * 1000) / ITERATIONS; // µs per call
}

export async function policyBench(): Promise<BenchOutput> {
  const cel = { rules: rules(true) };
  const plain = { rules: rules(false) };
  const conditions = compileConditions(cel.rules);
  const withCel = () => {
    const d = decide({ tool_name: 'pay' }, cel, input, conditions);
    if (d.rule_id !== 'big-payments') throw new Error(`unexpected rule ${d.rule_id}`);
  };
  const withDigest = () => {
    withCel();
    inputsDigest(input);
  };
  const globOnly = () => {
    decide({ tool_name: 'pay' }, plain);
  };
  for (const f of [withCel, withDigest, globOnly]) measure(f); // warm-up
  const load = loadAverage();
  const a: number[] = [];
  const b: number[] = [];
  const c: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    a.push(measure(withCel));
    b.push(measure(withDigest));
    c.push(measure(globOnly));
  }
  const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
  const cel50 = median(a);
  return {
    title: 'Governance: CEL policy evaluation per tool call',
    method: [
      `decide() over 50 rules (49 not matching: tool globs, tenant lists, false CEL conditions; the 50th asks), ${ITERATIONS} calls per round, ${ROUNDS} interleaved rounds, median.`,
      'Baseline: the same 50 rules with globs only (no conditions), in the same rounds.',
    ],
    rows: [
      { metric: 'decide, 50 rules with CEL conditions', value: round(cel50, 2), unit: 'µs/call', target: '≤ 20 µs', pass: cel50 <= 20 },
      {
        metric: 'decide + SHA-256 of the canonical inputs (what a run does)',
        value: round(median(b), 2),
        unit: 'µs/call',
        target: '≤ 20 µs',
        pass: median(b) <= 20,
      },
      { metric: 'decide, 50 glob-only rules (baseline)', value: round(median(c), 2), unit: 'µs/call' },
    ],
    notes: [`load average at start: ${load}`],
  };
}
