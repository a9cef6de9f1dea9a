// The stored shapes of an evaluation (kind `evals`) and of its items (kind `eval_items`, one per
// evaluated run), and the pure parts: scoring a replay, the aggregates (docs/contract.md §3.7).
import type { ReplayTools } from '../../../machines/policies/replay-match.js';
import type { ReplayVariant } from '../debug/origin.js';

export type EvalStatus = 'queued' | 'running' | 'completed' | 'cancelled' | 'failed';
export type EvalItemStatus = 'pending' | 'running' | 'done' | 'failed' | 'cancelled';

export type Scorer = { type: 'exact' } | { type: 'contains'; text: string } | { type: 'judge'; agent_id: string };

export interface EvalRecord {
  eval_id: string;
  name: string;
  status: EvalStatus;
  variant: ReplayVariant;
  tools: ReplayTools;
  concurrency: number;
  scorer: Scorer | null;
  total: number;
  created_at: string;
  updated_at: string;
  ended_at: string | null;
  /** The instance driving it and until when (a lapsed lease lets another take over). */
  owner: string | null;
  lease_expires_at: string | null;
  error: string | null;
  /** The tenant of the key that created it (absent: none): it replays only that tenant's runs. */
  tenant?: string;
}

export interface EvalItem {
  eval_id: string;
  index: number;
  run_id: string;
  /** Fixed when the item is made: the one replay run this item may ever have (its create fails a second time). */
  replay_run_id: string;
  status: EvalItemStatus;
  changed: boolean | null;
  score: number | null;
  token_delta: number | null;
  cost_delta_usd: number | null;
  original_outcomes: Array<{ label: string | null; reward: number | null }>;
  replay_status: string | null;
  error: string | null;
}

export const itemId = (evalId: string, index: number) => `${evalId}:${String(index).padStart(5, '0')}`;
export const replayRunId = (evalId: string, index: number) => `evalrun_${evalId}_${index}`;
/**
 * The one judge run an item may have (scorer `judge`): fixed like its replay's, so a driver that
 * takes the item over after a crash awaits the judge run already started instead of a second one.
 * Which evaluation a run belongs to is its origin's `eval_id` (kept with its snapshot), not its id.
 */
export const judgeRunId = (evalId: string, index: number) => `${replayRunId(evalId, index)}_judge`;
/** An evaluation's own runs (replays, judges: ids from replayRunId) are never selected as an evaluation's source. */
export const isEvalReplayRun = (runId: string) => runId.startsWith('evalrun_');

export function itemIndexes(i: EvalItem): Record<string, string> {
  return { eval_id: i.eval_id, eval_status: `${i.eval_id}:${i.status}` };
}

/** By status (the sweep), and a tenant's by tenant (its lists walk its own; others pay nothing). */
export const evalIndexes = (e: EvalRecord): Record<string, string | null> => ({ status: e.status, tenant: e.tenant ?? null });

/** 0..1, from the scorer; null when there is no scorer or the replay has no answer to score. */
export function scoreOf(scorer: Scorer | null, original: string | null, replay: string | null): number | null {
  if (!scorer || scorer.type === 'judge' || replay === null) return null;
  if (scorer.type === 'exact') return replay === (original ?? '') ? 1 : 0;
  return replay.includes(scorer.text) ? 1 : 0;
}

/** The first number in a judge's answer, as a score 0..1 (null: none). */
export function judgeScore(answer: string | null): number | null {
  const m = /-?\d+(?:\.\d+)?/.exec(answer ?? '');
  if (!m) return null;
  const n = Number(m[0]);
  return Number.isFinite(n) ? Math.min(1, Math.max(0, n)) : null;
}

export interface EvalAggregates {
  items: number;
  changed_pct: number;
  mean_score: number | null;
  token_delta: number;
  cost_delta_usd: number;
  /** By the original run's reported outcome label: how those runs fared in the replay. */
  outcomes: Record<string, { items: number; changed: number; mean_score: number | null }>;
}

export function aggregatesOf(items: EvalItem[]): EvalAggregates {
  const done = items.filter((i) => i.status === 'done');
  const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
  const scores = (xs: EvalItem[]) => xs.map((i) => i.score).filter((s): s is number => s !== null);
  const outcomes: EvalAggregates['outcomes'] = {};
  for (const i of done) {
    for (const o of i.original_outcomes) {
      const label = o.label ?? (o.reward !== null ? `reward:${o.reward}` : 'reported');
      const cur = (outcomes[label] ??= { items: 0, changed: 0, mean_score: null });
      cur.items++;
      if (i.changed) cur.changed++;
    }
  }
  for (const label of Object.keys(outcomes)) {
    outcomes[label].mean_score = mean(
      scores(done.filter((i) => i.original_outcomes.some((o) => (o.label ?? (o.reward !== null ? `reward:${o.reward}` : 'reported')) === label))),
    );
  }
  return {
    items: done.length,
    changed_pct: done.length ? (100 * done.filter((i) => i.changed).length) / done.length : 0,
    mean_score: mean(scores(done)),
    token_delta: done.reduce((a, i) => a + (i.token_delta ?? 0), 0),
    cost_delta_usd: done.reduce((a, i) => a + (i.cost_delta_usd ?? 0), 0),
    outcomes,
  };
}

declare module '../../store/repos/values.js' {
  interface RecordValues {
    evals: EvalRecord;
    eval_items: EvalItem;
  }
}
