// The typed repositories over a Store: one per record kind, built once per store. Code above the
// store reads and writes records through these (`repos(store).bgRuns.get(id)`), never with a
// string kind of its own; an atomic write across kinds is `store.commit` of the repos' ops
// (`repos(store).runs.updateOp(...)`).
import type { Store } from '../store.js';
import { BgRunRepo } from './bg-runs.js';
import { KindRepo } from './kind-repo.js';

export class Repos {
  readonly runs: KindRepo<'runs'>;
  /** A run's actor snapshot, id = run id (the conversation: never loaded by lists of runs). */
  readonly snapshots: KindRepo<'snapshots'>;
  readonly sessions: KindRepo<'sessions'>;
  readonly traces: KindRepo<'traces'>;
  readonly runInbox: KindRepo<'run_inbox'>;
  readonly budgetLedger: KindRepo<'budget_ledger'>;
  readonly bgAgents: KindRepo<'bg_agents'>;
  readonly bgTasks: KindRepo<'bg_tasks'>;
  readonly bgSchedule: KindRepo<'bg_schedule'>;
  readonly bgRuns: BgRunRepo;
  readonly bgAttempts: KindRepo<'bg_attempts'>;
  readonly bgOccurrences: KindRepo<'bg_occurrences'>;
  /** Singletons and small coordination records (cursors, task gates), by well-known id. */
  readonly meta: KindRepo<'meta'>;
  readonly idempotency: KindRepo<'idempotency'>;
  readonly webhookDeliveries: KindRepo<'webhook_deliveries'>;
  readonly webhookSubs: KindRepo<'webhook_subs'>;

  constructor(store: Store) {
    this.runs = new KindRepo(store, 'runs');
    this.snapshots = new KindRepo(store, 'snapshots');
    this.sessions = new KindRepo(store, 'sessions');
    this.traces = new KindRepo(store, 'traces');
    this.runInbox = new KindRepo(store, 'run_inbox');
    this.budgetLedger = new KindRepo(store, 'budget_ledger');
    this.bgAgents = new KindRepo(store, 'bg_agents');
    this.bgTasks = new KindRepo(store, 'bg_tasks');
    this.bgSchedule = new KindRepo(store, 'bg_schedule');
    this.bgRuns = new BgRunRepo(store);
    this.bgAttempts = new KindRepo(store, 'bg_attempts');
    this.bgOccurrences = new KindRepo(store, 'bg_occurrences');
    this.meta = new KindRepo(store, 'meta');
    this.idempotency = new KindRepo(store, 'idempotency');
    this.webhookDeliveries = new KindRepo(store, 'webhook_deliveries');
    this.webhookSubs = new KindRepo(store, 'webhook_subs');
  }
}

const built = new WeakMap<Store, Repos>();

/** The repositories of `store` (built on first use, then shared: they hold nothing but the store). */
export function repos(store: Store): Repos {
  let r = built.get(store);
  if (!r) built.set(store, (r = new Repos(store)));
  return r;
}
