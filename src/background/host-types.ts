// What the parts of the background engine share, named in one leaf file so that none of them
// imports another for a type (as src/runtime/host-kernel.ts does for the run service): the
// engine's dependencies, a live run's handle, the input and result of a new run and of an event
// sent to a run, and the injected timers. engine.ts wires the parts (run-host.ts, claimer.ts,
// agent-bridge.ts, attempt-timers.ts, operator-actions.ts, retention.ts, prepare-run.ts); each
// takes what it needs of the others as a small interface of its own and imports only this file.
import type { Actor } from 'xstate';
import type { BackgroundRunContext, RecordParams, backgroundRunMachine } from '../../machines/background-run.machine.js';
import type { TaskOccurrence } from '../../machines/task.machine.js';
import type { Clock } from '../clock.js';
import type { LeaseClock } from '../lease-clock.js';
import type { Config } from '../config.js';
import type { TelemetryEmitter } from '../runtime/emitter.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { AgentRegistry } from '../agent/agent-registry.js';
import type { RunService } from '../runtime/runs.js';
import type { ActorSystem } from '../runtime/system.js';
import type { BackgroundRunStatus, TriggerType } from '../schemas/background.js';
import type { Store, Versioned, WriteOp } from '../store/store.js';
import type { AppLogger } from '../telemetry/logger.js';
import type { BgRunRow, LifecycleRecord, TaskRow } from './types.js';

export interface BackgroundDeps {
  store: Store;
  clock: Clock;
  /** The clock a background run's lease is written and judged on (src/lease-clock.ts): the run service's. */
  leases: LeaseClock;
  telemetry: TelemetryEmitter;
  metrics: Metrics;
  config: Config;
  system: ActorSystem;
  workerId: string;
  runs: RunService;
  /** Registered agents (src/agent/agent-registry.ts): a spec is built at registration, refused when it cannot be. */
  agents?: AgentRegistry;
  /** The process's logger; a live run's lines go through its child (run-host.ts `RunHosts.logOf`: bg_run_id, task_id). */
  logger: AppLogger;
  /** Timers of heartbeats, attempt timeouts and retries (default: Node's, unref'd). */
  timers?: Timers;
}

/** A run built and validated in memory, not yet written: its ops go into some commit. */
export interface PreparedRun {
  ctx: BackgroundRunContext;
  row: BgRunRow;
  lifecycle: LifecycleRecord[];
  ops: WriteOp[];
}

export interface CreateRunInput {
  task: TaskRow;
  trigger_type: TriggerType;
  occurrence: TaskOccurrence | null;
  query: string | null;
  /** Store the run `skipped` with this reason (the overlap policy said so). */
  skip: string | null;
  /** A caller-chosen id (a manual run with an Idempotency-Key reserved it); default a new one. */
  run_id?: string;
  /** Not claimed before this instant (a debounced trigger's window end: debounce.ts). */
  not_before?: string;
  /** More of the run's trigger_metadata (a debounced trigger's window: debounce.ts). */
  trigger_extra?: Record<string, unknown>;
  /** More writes of the run's commit, all or nothing with it (the debounce pointer: debounce.ts). */
  extra_ops?: WriteOp[];
}

export interface SendResult {
  accepted: boolean;
  status: BackgroundRunStatus | null;
}

export type RunActor = Actor<typeof backgroundRunMachine>;

export interface Handle {
  id: string;
  actor: RunActor | null;
  row: Versioned<BgRunRow>;
  chain: Promise<void>;
  pending: number;
  sends: number;
  dead: boolean;
  heartbeat: TimerRef | null;
  timeout: TimerRef | null;
  timeoutAttempt: number;
  /** This process stopped the attempt for its timeout: the agent run's cancellation means timeout. */
  timedOut: string | null;
  /** The chain's last job when it is a row write that has not started: later transitions join it. */
  tailWrite: WriteJob | null;
  /**
   * The row as the write handed to the store and not yet landed will leave it (its CAS is on the
   * version before): a commit issued after it, on a store that takes commits first in, first out,
   * may CAS on this (RunHosts.foldInto). Null while no row write is in flight.
   */
  ahead: Versioned<BgRunRow> | null;
  /**
   * Shared store only: the task's gate record as read before the claim's active-run count. The
   * claim's write CASes it, so two instances cannot both claim a run of a one-at-a-time task.
   */
  gate: { id: string; version: number | null } | null;
  /** The run's logger (bg_run_id, task_id bound), made on its first line (RunHosts.logOf). */
  log: AppLogger | null;
}

/** Transitions waiting to be written as one row write (e.g. CLAIM then START: one commit). */
export interface WriteJob {
  steps: Array<{ ctx: BackgroundRunContext; params: RecordParams }>;
  /** Called with the commit (its landing) right after the write is handed to the store (RunHosts.whenIssued). */
  issued?: Array<(landed: Promise<unknown>) => void>;
}

/** An opaque timer id from a Timers. */
export type TimerRef = unknown;

/** Timers that do not keep the process alive. */
export interface Timers {
  setTimeout(fn: () => void, ms: number): TimerRef;
  clearTimeout(t: TimerRef): void;
  setInterval(fn: () => void, ms: number): TimerRef;
  clearInterval(t: TimerRef): void;
}
