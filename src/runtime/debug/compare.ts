// GET /runs/{a}/compare/{b} (docs/contract.md §3.6): two runs side by side and what changed. Pure
// over what RunsDebug.read gives; the caller redacts nothing more (the record is stored redacted,
// tool arguments are redacted here with the answer's redactor).
import { canonicalArguments } from '../../../machines/policies/replay-match.js';
import type { StoredRun } from './runs-debug.js';

export interface RunSummary {
  run_id: string;
  status: string;
  response: string | null;
  steps: number;
  tokens: number;
  cost_usd: number;
  duration_ms: number | null;
  tool_calls: Array<{ name: string; arguments: Record<string, unknown>; outcome: string }>;
  outcomes: Array<{ label: string | null; reward: number | null; source: string }>;
}

export interface RunDiff {
  response_changed: boolean;
  response_diff: string;
  tool_calls: {
    added: RunSummary['tool_calls'];
    removed: RunSummary['tool_calls'];
    changed: Array<{ name: string; a: RunSummary['tool_calls'][number]; b: RunSummary['tool_calls'][number] }>;
  };
  steps_delta: number;
  tokens_delta: number;
  cost_delta_usd: number;
  duration_delta_ms: number | null;
}

export function summaryOf(run: StoredRun, redactArgs: (args: Record<string, unknown>) => Record<string, unknown>): RunSummary {
  const r = run.record;
  const outcomes = new Map(r.tool_calls.map((c) => [c.tool_call_id, c.outcome ?? 'unknown'] as const));
  const tool_calls: RunSummary['tool_calls'] = [];
  for (const m of run.messages.slice(run.history_length)) {
    if (m.role !== 'assistant' || !m.tool_calls) continue;
    for (const c of m.tool_calls) {
      // Only the calls this run made: a fork's conversation also holds those of the run it came from.
      const outcome = outcomes.get(c.id);
      if (outcome !== undefined) tool_calls.push({ name: c.name, arguments: redactArgs(c.arguments), outcome });
    }
  }
  const end = r.ended_at ?? null;
  return {
    run_id: r.run_id,
    status: r.status,
    response: r.response,
    steps: r.step,
    tokens: r.usage.total_tokens,
    cost_usd: r.usage.estimated_cost_usd,
    duration_ms: end ? Math.max(0, Date.parse(end) - Date.parse(r.created_at)) : null,
    tool_calls,
    outcomes: r.outcomes.map((o) => ({ label: o.label, reward: o.reward, source: o.source })),
  };
}

export function compareRuns(a: RunSummary, b: RunSummary): RunDiff {
  const added: RunDiff['tool_calls']['added'] = [];
  const removed: RunDiff['tool_calls']['removed'] = [];
  const changed: RunDiff['tool_calls']['changed'] = [];
  // The i-th call of a tool in one run is paired with the i-th call of that tool in the other.
  const byName = (calls: RunSummary['tool_calls']) => {
    const m = new Map<string, RunSummary['tool_calls']>();
    for (const c of calls) m.set(c.name, [...(m.get(c.name) ?? []), c]);
    return m;
  };
  const ma = byName(a.tool_calls);
  const mb = byName(b.tool_calls);
  for (const name of new Set([...ma.keys(), ...mb.keys()])) {
    const ca = ma.get(name) ?? [];
    const cb = mb.get(name) ?? [];
    for (let i = 0; i < Math.max(ca.length, cb.length); i++) {
      const x = ca[i];
      const y = cb[i];
      if (x && !y) removed.push(x);
      else if (!x && y) added.push(y);
      else if (x && y && (canonicalArguments(x.arguments) !== canonicalArguments(y.arguments) || x.outcome !== y.outcome)) changed.push({ name, a: x, b: y });
    }
  }
  return {
    response_changed: (a.response ?? '') !== (b.response ?? ''),
    response_diff: unifiedDiff(a.response ?? '', b.response ?? '', a.run_id, b.run_id),
    tool_calls: { added, removed, changed },
    steps_delta: b.steps - a.steps,
    tokens_delta: b.tokens - a.tokens,
    cost_delta_usd: b.cost_usd - a.cost_usd,
    duration_delta_ms: a.duration_ms !== null && b.duration_ms !== null ? b.duration_ms - a.duration_ms : null,
  };
}

/** Lines of texts this long or longer are compared as a whole (the LCS table is lines × lines). */
const MAX_DIFF_LINES = 2000;

/** A unified diff of two texts, line by line (one hunk, every line; empty when they are equal). */
export function unifiedDiff(a: string, b: string, nameA: string, nameB: string): string {
  if (a === b) return '';
  let la = a.split('\n');
  let lb = b.split('\n');
  if (la.length > MAX_DIFF_LINES || lb.length > MAX_DIFF_LINES) {
    la = [a];
    lb = [b];
  }
  // Longest common subsequence, then a walk that emits ' ', '-' and '+' lines.
  const n = la.length;
  const m = lb.length;
  const lcs: Uint32Array[] = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--) lcs[i][j] = la[i] === lb[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const lines: string[] = [`--- ${nameA}`, `+++ ${nameB}`, `@@ -1,${n} +1,${m} @@`];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (la[i] === lb[j]) {
      lines.push(` ${la[i]}`);
      i++;
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) lines.push(`-${la[i++]}`);
    else lines.push(`+${lb[j++]}`);
  }
  while (i < n) lines.push(`-${la[i++]}`);
  while (j < m) lines.push(`+${lb[j++]}`);
  return lines.join('\n');
}
