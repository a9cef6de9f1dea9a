// The domain types of a background run that machines/background-run.machine.ts works on. They
// live here, beside the machine (machines/ import nothing from src/); the zod schemas in
// src/schemas/background.ts build their enums from these lists and check at compile time that
// what they parse is exactly these types.
import type { OverlapPolicy } from './policies/overlap.js';

export type { OverlapPolicy };

export const BACKGROUND_RUN_STATUSES = [
  'queued',
  'claimed',
  'running',
  'retrying',
  'awaiting_approval',
  'awaiting_budget',
  'completed',
  'failed',
  'timeout',
  'cancelled',
  'skipped',
] as const;
export type BackgroundRunStatus = (typeof BACKGROUND_RUN_STATUSES)[number];

export const TRIGGER_TYPES = ['manual', 'once', 'interval', 'cron', 'retry', 'recovery'] as const;
export type TriggerType = (typeof TRIGGER_TYPES)[number];

export const ATTEMPT_STATUSES = ['running', 'completed', 'failed', 'timeout', 'cancelled', 'interrupted'] as const;
export type AttemptStatus = (typeof ATTEMPT_STATUSES)[number];

export const ATTEMPT_REASONS = ['initial', 'retry', 'recovery', 'lease_expired'] as const;
export type AttemptReason = (typeof ATTEMPT_REASONS)[number];

/** A background run as the API shows it (docs/contract.md §12.14); times are ISO-8601. */
export interface BackgroundRun {
  run_id: string;
  task_id: string;
  agent_id: string;
  query_snapshot: string;
  trigger_type: TriggerType;
  session_id: string;
  workspace_path: string;
  status: BackgroundRunStatus;
  attempt: number;
  max_attempts: number;
  lease_generation: number;
  lease_owner: string | null;
  lease_token: string | null;
  occurrence_id: string | null;
  error: string | null;
  result_preview: string | null;
  triggered_at: string;
  queued_at: string | null;
  claimed_at: string | null;
  started_at: string | null;
  heartbeat_at: string | null;
  lease_expires_at: string | null;
  finished_at: string | null;
  cancel_requested_at: string | null;
  due_at: string | null;
  metadata: Record<string, unknown>;
  trigger_metadata: Record<string, unknown>;
  /** The run's concurrency key (its task's, metadata filled in) and priority; absent: none, 0. */
  concurrency?: { key: string; limit: number } | null | undefined;
  priority?: number | null | undefined;
  /** Set in answers only (src/background/tenancy.ts): a stored run's tenant is its task key's. */
  tenant?: string | null | undefined;
}

/** One attempt of a background run (docs/contract.md §12.15). */
export interface BackgroundAttempt {
  attempt_id: string;
  run_id: string;
  attempt_number: number;
  worker_id: string;
  lease_token: string;
  status: AttemptStatus;
  reason: AttemptReason;
  started_at: string;
  finished_at: string | null;
  error: string | null;
  retry_delay_seconds: number | null;
}
