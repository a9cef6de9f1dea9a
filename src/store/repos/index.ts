// The typed repositories over a Store: one per record kind, built once per store. Code above the
// store reads and writes records through these (`repos(store).bgRuns.get(id)`), never with a
// string kind of its own; an atomic write across kinds is `store.commit` of the repos' ops
// (`repos(store).runs.updateOp(...)`).
import type { RecordKind, Store } from '../store.js';
import { BgRunRepo } from './bg-runs.js';
import { KindRepo } from './kind-repo.js';

/**
 * The property name of each plain repository and the record kind it holds. Listed once, so that a
 * new kind is one line here rather than a field and its constructor line.
 */
const KIND_REPOS = {
  runs: 'runs',
  /** A run's actor snapshot, id = run id (the conversation: never loaded by lists of runs). */
  snapshots: 'snapshots',
  sessions: 'sessions',
  traces: 'traces',
  runInbox: 'run_inbox',
  budgetLedger: 'budget_ledger',
  bgAgents: 'bg_agents',
  bgTasks: 'bg_tasks',
  bgSchedule: 'bg_schedule',
  bgAttempts: 'bg_attempts',
  bgOccurrences: 'bg_occurrences',
  /** Singletons and small coordination records (cursors, task gates), by well-known id. */
  meta: 'meta',
  idempotency: 'idempotency',
  webhookDeliveries: 'webhook_deliveries',
  webhookSubs: 'webhook_subs',
  evals: 'evals',
  evalItems: 'eval_items',
} as const satisfies Record<string, RecordKind>;

export type Repos = { readonly [P in keyof typeof KIND_REPOS]: KindRepo<(typeof KIND_REPOS)[P]> } & {
  /** Background runs: a plain repository plus the claim passes over the queue. */
  readonly bgRuns: BgRunRepo;
};

function buildRepos(store: Store): Repos {
  const plain = Object.fromEntries(Object.entries(KIND_REPOS).map(([name, kind]) => [name, new KindRepo(store, kind)]));
  return { ...plain, bgRuns: new BgRunRepo(store) } as Repos;
}

const built = new WeakMap<Store, Repos>();

/** The repositories of `store` (built on first use, then shared: they hold nothing but the store). */
export function repos(store: Store): Repos {
  let r = built.get(store);
  if (!r) built.set(store, (r = buildRepos(store)));
  return r;
}
