// Tool policies as code (docs/policies.md): a governance rule's `condition` is a CEL expression
// (the language of Kubernetes' admission policies and Envoy's RBAC), parsed once at start-up by a
// CEL evaluator (@marcbachmann/cel-js: no `eval`, no I/O: an expression can only read the inputs
// it is given). machines/policies/governance.ts stays pure: it gets the compiled conditions as
// functions.
import { createHash } from 'node:crypto';
import { parse } from '@marcbachmann/cel-js';
import type { ConditionEvaluator, PolicyInput } from '../../machines/policies/governance.js';

interface RuleWithCondition {
  id?: string;
  condition?: string;
}

/** The name a rule is reported by: its id, else its place in the list. */
export const ruleLabel = (rule: { id?: string }, index: number): string => rule.id ?? `rules[${index}]`;

/** Parse errors of the rules' conditions, one line each naming the rule (empty: all parse). */
export function conditionErrors(rules: readonly RuleWithCondition[]): Array<{ index: number; message: string }> {
  const out: Array<{ index: number; message: string }> = [];
  rules.forEach((r, index) => {
    if (r.condition === undefined) return;
    try {
      parse(r.condition);
    } catch (err) {
      out.push({ index, message: `rule ${ruleLabel(r, index)}: condition does not parse: ${firstLine(err)}` });
    }
  });
  return out;
}

/** Start-up checks of the rules: conditions that do not parse, duplicate ids (paths under `rules`). */
export function ruleIssues(rules: readonly RuleWithCondition[]): Array<{ path: Array<string | number>; message: string }> {
  const out = conditionErrors(rules).map((e) => ({ path: [e.index, 'condition'], message: e.message }));
  const ids = new Set<string>();
  rules.forEach((r, i) => {
    if (r.id === undefined) return;
    if (ids.has(r.id)) out.push({ path: [i, 'id'], message: `duplicate rule id "${r.id}"` });
    ids.add(r.id);
  });
  return out;
}

/**
 * The rules' conditions compiled, for decide(). A condition whose value is not a boolean, or that
 * fails to evaluate (a missing field, a type error), is an error: decide() then denies (fail closed).
 */
export function compileConditions(rules: readonly RuleWithCondition[]): ConditionEvaluator {
  const compiled = rules.map((r) => (r.condition === undefined ? null : parse(r.condition)));
  return (index: number, input: PolicyInput) => {
    const fn = compiled[index];
    if (!fn) return true;
    try {
      const v: unknown = fn(input as unknown as Record<string, unknown>);
      return typeof v === 'boolean' ? v : new Error(`the condition gave ${typeof v}, not a boolean`);
    } catch (err) {
      return new Error(firstLine(err));
    }
  };
}

/** SHA-256 of the canonical JSON of a policy's inputs (keys sorted at every level), for the events. */
export function inputsDigest(input: PolicyInput): string {
  return createHash('sha256').update(canonicalJson(input)).digest('hex');
}

/**
 * Keys sorted, no whitespace, undefined members left out. Built with plain loops and one string:
 * it runs on every tool call (the map/filter/join chains it replaced cost ~4 µs of the call's
 * governance budget, test/bench/benchmarks/policy.ts); the output is the same, byte for byte.
 */
function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'null';
  if (Array.isArray(v)) {
    let out = '[';
    for (let i = 0; i < v.length; i++) out += (i === 0 ? '' : ',') + canonicalJson(v[i]);
    return `${out}]`;
  }
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o).sort();
  let out = '{';
  let first = true;
  for (const k of keys) {
    const x = o[k];
    if (x === undefined) continue;
    out += `${first ? '' : ','}${JSON.stringify(k)}:${canonicalJson(x)}`;
    first = false;
  }
  return `${out}}`;
}

const firstLine = (err: unknown): string => String((err as Error)?.message ?? err).split('\n')[0];
