// The per-run host: what this process holds for one live background run (its actor, the row as
// last written, the serial chain of its effects, its attempt timers).
import type { Actor } from 'xstate';
import type { backgroundRunMachine, BackgroundRunContext, RecordParams } from '../../machines/background-run.machine.js';
import type { Versioned } from '../store/store.js';
import type { BgRunRow } from './types.js';
import type { TimerRef } from './attempt-timers.js';

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
   * Shared store only: the task's gate record as read before the claim's active-run count. The
   * claim's write CASes it, so two instances cannot both claim a run of a one-at-a-time task.
   */
  gate: { id: string; version: number | null } | null;
}

/** Transitions waiting to be written as one row write (e.g. CLAIM then START: one commit). */
export interface WriteJob {
  steps: Array<{ ctx: BackgroundRunContext; params: RecordParams }>;
}

