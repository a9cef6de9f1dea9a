// What a new run does when its session already has a run in flight in this process (the
// `session_policy` of POST /run and /run/sync; docs/runs.md "Busy sessions"), as a pure rule. The
// run service (src/runtime/runs.ts `RunService.start`) asks it and carries the plan out.

export type SessionPolicy = 'enqueue' | 'reject' | 'interrupt' | 'rollback';

export interface BusySessionPlan {
  /** Refuse the new run (409 AGT_ERR_SESSION_BUSY). */
  refuse: boolean;
  /** How the run in flight is stopped before the new one takes the session (null: it is waited for). */
  stop: 'interrupt' | 'cancel' | null;
  /** The conversation the new run starts from: the session's as stored, with the stopped run's turn carried over, or with its turn rolled back. */
  history: 'as_stored' | 'carry_over' | 'roll_back';
}

const WAIT: BusySessionPlan = { refuse: false, stop: null, history: 'as_stored' };

/** The plan for a new run under `policy` when run `busyWith` holds its session (null: the session is free). */
export function busySessionPlan(policy: SessionPolicy, busyWith: string | null): BusySessionPlan {
  if (busyWith === null) return WAIT;
  switch (policy) {
    case 'enqueue':
      return WAIT;
    case 'reject':
      return { refuse: true, stop: null, history: 'as_stored' };
    case 'interrupt':
      // It stops at its next step boundary; what it did so far joins the new run's conversation.
      return { refuse: false, stop: 'interrupt', history: 'carry_over' };
    case 'rollback':
      // It is cancelled, and its turn leaves the session's conversation.
      return { refuse: false, stop: 'cancel', history: 'roll_back' };
  }
}
