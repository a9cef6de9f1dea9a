// Shared shapes of the synchronous-run runtime (src/runtime/runs.ts and its run-*.ts parts): its settings and
// dependencies, the stored snapshot, session and trace values, and the small pure helpers they share.
import { bgIdOf } from './tenancy.js';
import type { Snapshot } from 'xstate';
import type { ChatMessage, ModelProvider } from '../agent/model/types.js';
import type { ConditionEvaluator, GovernanceConfig } from '../../machines/policies/governance.js';
import type { BudgetsConfig } from '../../machines/policies/budget.js';
import type { SessionPolicy } from '../../machines/policies/busy-session.js';
import type { ConcurrencyRequest, ConcurrencyRule } from '../../machines/policies/flow.js';
import type { BudgetLedger } from '../agent/budget-ledger.js';
import type { Pricing } from '../agent/pricing.js';
import type { CompiledGuardrails } from '../agent/guardrails.js';
import { isoAt, type Clock } from '../clock.js';
import type { LeaseClock } from '../lease-clock.js';
import type { Store, Versioned } from '../store/store.js';
import type { AgentSource } from '../agent/agent-profile.js';
import type { AgentToolSource } from '../agent/tools/types.js';
import type { TelemetryEmitter } from './emitter.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { Subagents } from '../agent/subagents.js';
import type { ActorSystem } from './system.js';
import type { RunRecord, RunRecordStatus } from './run-record.js';
import type { AppLogger } from '../telemetry/logger.js';
import type { RateLimiter } from '../flow/rate-limiter.js';
import type { Checkpoint } from '../../machines/policies/checkpoints.js';
import type { RunOrigin } from './debug/origin.js';

export interface RunSettings {
  agent_name: string;
  agent_id: string;
  system_instruction: string | null;
  max_steps: number;
  max_output_tokens: number;
  governance: GovernanceConfig;
  /** The governance rules' CEL conditions, compiled once (src/agent/policy-conditions.ts). */
  policy_conditions?: ConditionEvaluator;
  approval_expires_seconds: number;
  budgets: BudgetsConfig;
  pricing: Pricing;
  lease_seconds: number;
  max_concurrent_runs: number;
  admission_wait_ms: number;
  request_timeout_seconds: number;
  tool_timeout_ms: number;
  /** Synchronous runs get `<this>/<session id>` as their workspace (background runs get their own). */
  session_workspace_root: string | null;
  sweep: { enabled: boolean; interval_seconds: number; max_concurrent: number; max_recoveries: number; decided_grace_seconds: number };
  /** What a run does when its session already has one in flight (config `runs.session_policy`). */
  session_policy?: SessionPolicy;
  /** Whether runs keep checkpoints (config `runs.checkpoints`; default true). Off (a benchmark baseline): a run keeps none. */
  checkpoints?: boolean;
  /** Concurrency keys (config `flow`, docs/flow-control.md); absent: no config rules, the defaults. */
  flow?: { concurrency: readonly ConcurrencyRule[]; max_queued: number; poll_ms: number };
}

/** Session concurrency policy. */
export type { SessionPolicy } from '../../machines/policies/busy-session.js';

export interface RunServiceDeps {
  store: Store;
  system: ActorSystem;
  clock: Clock;
  /** The clock a run's lease is written and judged on (src/lease-clock.ts): one per process, shared with the background manager. */
  leases: LeaseClock;
  telemetry: TelemetryEmitter;
  metrics: Metrics;
  model: ModelProvider;
  tools: AgentToolSource;
  ledger: BudgetLedger;
  guardrails: CompiledGuardrails;
  settings: RunSettings;
  workerId: string;
  /** Sub-agents the model may delegate to (config `agent.subagents`). */
  subagents?: Subagents;
  /** Registered agents by id (src/agent/agent-registry.ts); without it every run is the served agent's. */
  agents?: AgentSource;
  /** The process's logger; a live run logs through its host's child (`RunHost.log`, bound to run_id). */
  logger: AppLogger;
  /** Model-provider rate limits and 429 pauses (src/flow/rate-limiter.ts); absent: calls are never held. */
  rateLimiter?: RateLimiter;
  /** How long a new run's creating write waits to fold with what follows (RunHost; default 10 ms). Tests that count commits hold it open. */
  createFoldMs?: number;
}

export interface StartOptions {
  /** The tenant the run belongs to (docs/multi-tenant.md): stamped on it, its session id in its namespace. */
  tenant?: string | null;
  /** The request's metadata, stored on the run; governance conditions see it (docs/policies.md). */
  metadata?: Record<string, unknown> | null;
  /**
   * A live text delta (never stored). `afterEvent` is the `sequence` of the last telemetry event
   * the run emitted before it: events are published when stored, deltas at once, so a stream
   * that wants them in the order they happened holds a delta until that event has gone out.
   */
  onDelta?: (text: string, sequence: number, afterEvent: number) => void;
  kind?: 'sync' | 'background';
  task_id?: string | null;
  agent_id?: string;
  workspace_path?: string | null;
  /** Overrides request_timeout_seconds (background runs use the task's timeout_seconds). */
  timeout_seconds?: number | null;
  /** A caller-chosen run id (background runs use their BackgroundRun id). */
  run_id?: string;
  /** `run_id` was made with newId() just now for this run, never handed to start() before (the store need not look it up). */
  run_id_is_new?: boolean;
  /**
   * The session is this run's alone (a background run's session_policy `run`): no other run
   * writes it while this one runs, so a completed run that found no session creates it in its
   * final commit instead of a commit of its own. A run whose caller named no session is so too.
   */
  session_is_private?: boolean;
  /**
   * Internal (src/background/agent-bridge.ts, a store other instances share): the run starts
   * before its background run's claim is stored, and nothing of it goes to the store before that
   * claim is (this promise resolves); a claim refused (it rejects) leaves nothing of the run
   * stored, and the run stops as fenced off (RecordWriter's create `after`).
   */
  after?: Promise<unknown>;
  /** Skip admission control (background workers have their own concurrency). */
  admitted?: boolean;
  /**
   * Called once the run is admitted and has its ids, before its first store round is durable and
   * before it waits for its turn in the session (POST /run sends its `session` frame here, so the
   * first frame does not wait for an fsync). If start() then fails, it still rejects; get() of the
   * run waits for that first round meanwhile, so an id handed out here always reads.
   */
  onAccepted?: (ids: { run_id: string; session_id: string }) => void;
  /**
   * A run of the same session whose turn this run takes the place of (a regenerated answer): its
   * query and answer leave the session's history before this run reads it, as policy `rollback` does.
   */
  replaces_run_id?: string;
  /** When the session has a run in flight in this process; default `settings.session_policy`. */
  session_policy?: SessionPolicy;
  /**
   * The conversation before `query`, given by the caller instead of a stored session's (the
   * OpenAI-compatible route without a session: the request's messages are the conversation).
   * Only with a session the caller did not name; never stored as the session's history.
   */
  history?: ChatMessage[];
  /**
   * What the caller's application says about its situation for this run (AG-UI's `context`):
   * the model sees it as a system message right before the query; it is not kept in the
   * session's history, and the run's user_message event carries it (redacted as input is).
   */
  context?: string;
  /**
   * The run's concurrency key (docs/contract.md §3.4): over its limit the run waits `queued`
   * (start() answers once it is stored so; `settled` waits for its admission and its end).
   */
  concurrency?: ConcurrencyRequest | null;
  /** −100..100 (default 0): among waiting runs, higher gets the next free slot. */
  priority?: number;
  /** Called once a run over its key's limit is stored `queued`, with its 1-based place among the key's waiting runs. */
  onQueued?: (q: { run_id: string; key: string; position: number }) => void;
  /** Internal (src/runtime/run-flow.ts): the stored `queued` record this start admits; its first write replaces it. */
  queued?: Versioned<RunRecord>;
  /** Internal: a run slot already held (a queued run waited for it without a deadline). */
  slot?: () => void;
  /**
   * Internal (src/runtime/run-flow.ts): called once the run's actor is spawned (its user_message
   * emitted, its first model call on its way), before its first commit is durable: the next run
   * its key admitted may start then (the key's FIFO holds up to the model without waiting a commit round).
   */
  onSpawned?: () => void;
  /**
   * Internal (src/runtime/run-flow.ts, a shared store): the run takes its key's slot in its
   * creating commit (a holders op) and nothing of it goes out before that commit is stored; start()
   * rejects with StoreError 'full' when the key is at its limit (the caller queues the run).
   */
  takeSlotInCreate?: { key: string; limit: number };
  /** Internal (src/runtime/run-flow.ts): when the queued run's key admitted it (ms; its user_message says so). */
  admitted_at?: number;
  /**
   * The conversation the run starts from (after the system instruction), instead of one built
   * from the session and `query` (a fork or replay: src/runtime/debug/). `query` is then only what
   * the run record shows.
   */
  conversation?: ChatMessage[];
  /** With `conversation`: the system instruction instead of the agent's (null: none). */
  system_instruction?: string | null;
  /** A fork's or replay's origin, kept with the snapshot. */
  origin?: RunOrigin;
  /** A restored run's checkpoints so far. */
  checkpoints?: readonly Checkpoint[];
}

export interface StartedRun {
  run_id: string;
  session_id: string;
  trace_id: string;
  /** Resolves when the run ends or waits for a person. Never rejects. */
  settled: Promise<RunRecord>;
  /**
   * The run waits `queued` for its concurrency key (src/runtime/run-flow.ts): its settled may be
   * far off (POST /run/sync answers the run-wait timeout at the request timeout). A run that
   * started has a timeout of its own.
   */
  queued?: true;
}

/** Kind `snapshots`: the run actor's persisted snapshot. */
export interface SnapshotValue {
  machine: 'run';
  machine_version: number;
  snapshot: Snapshot<unknown>;
  workspace_path: string | null;
  /** The run's checkpoints so far (docs/contract.md §3.4); absent in snapshots older than them. */
  checkpoints?: readonly Checkpoint[];
  /** A fork's or replay's origin (src/runtime/debug/origin.ts). */
  origin?: RunOrigin;
}

/** Kind `sessions`: a session's conversation. */
export interface SessionValue {
  session_id: string;
  messages: ChatMessage[];
  run_ids: string[];
  /** Messages each run of `run_ids` added (absent: 2 each), so a rollback can take a turn back out. */
  counts?: number[];
  created_at: string;
  updated_at: string;
}

/** Kind `traces`: one trace segment of a run (a new one per start or resume). */
export interface TraceValue {
  trace_id: string;
  parent_trace_id: string | null;
  run_id: string;
  session_id: string;
  /** The run's tenant (absent: none). */
  tenant?: string;
  task_id: string | null;
  agent_id: string;
  status: string;
  started_at: string;
  ended_at: string | null;
}

export type RecoveryCause = 'approval' | 'budget_grant' | 'budget_denied' | 'interrupted' | 'recovered_after_lapsed_lease';

/** An ISO-8601 UTC timestamp of `ms` (src/clock.ts isoAt: the last one is remembered). */
export const iso = isoAt;

export function traceValueOf(r: RunRecord, parent: string | null, status: string, nowMs: number): TraceValue {
  return {
    trace_id: r.trace_id,
    parent_trace_id: parent,
    run_id: r.run_id,
    session_id: r.session_id,
    ...(r.tenant ? { tenant: r.tenant } : {}),
    // As answers show them (src/background/tenancy.ts); the trace's task_id index holds the key.
    task_id: r.task_id === null ? null : bgIdOf(r.task_id),
    agent_id: bgIdOf(r.agent_id),
    status,
    started_at: iso(nowMs),
    ended_at: null,
  };
}

/** Messages each run of a session added (sessions written before `counts` existed: 2 per run). */
export function countsOf(v: SessionValue): number[] {
  return v.counts && v.counts.length === v.run_ids.length ? v.counts : v.run_ids.map(() => 2);
}

export function mergeById<T, K extends keyof T>(existing: T[], updates: T[], key: K): T[] {
  if (updates.length === 0) return existing;
  const byId = new Map(updates.map((u) => [u[key], u]));
  const merged = existing.map((e) => byId.get(e[key]) ?? e);
  for (const u of updates) if (!existing.some((e) => e[key] === u[key])) merged.push(u);
  return merged;
}

export function traceStatusOf(status: RunRecordStatus): string {
  switch (status) {
    case 'completed':
      return 'completed';
    case 'cancelled':
      return 'cancelled';
    case 'timeout':
      return 'timeout';
    case 'awaiting_approval':
    case 'awaiting_budget':
    case 'interrupted':
      return 'suspended';
    default:
      return 'failed';
  }
}
