// When a run keeps a checkpoint (docs/contract.md §3.4): before every model call (its start, and
// after each tool batch), at each pause (a person's approval or budget decision, an interrupt), at
// the resume that follows one, and where the run ends. Pure: the caller gives the state, context
// and time after a transition and stores what this answers with the run's snapshot.
//
// A checkpoint is cheap: within a run the conversation only grows, so the checkpoint keeps the
// length of the conversation's prefix (`message_count`) and the machine state, never messages.
import type { RunContext, RunStateValue, Usage } from '../run.machine.js';

export interface Checkpoint {
  /** `cp_<n>`, n from 1 in the order they were taken: stable, so a restored run re-takes none. */
  checkpoint_id: string;
  step: number;
  /** The run machine's state value there. */
  state: RunStateValue;
  created_at: string;
  /** How many messages the model would see there (system instruction included). */
  message_count: number;
  usage: Usage;
  pending: { approvals: string[]; budget_request: string | null };
}

const PAUSES: ReadonlySet<RunStateValue> = new Set(['awaitingApproval', 'awaitingBudget', 'interrupted']);
const ENDS: ReadonlySet<RunStateValue> = new Set(['completed', 'failed', 'blocked', 'cancelled', 'timedOut']);

/** Whether the run's state after a transition is a checkpoint, given the last one taken. */
function isCheckpoint(last: Checkpoint | undefined, state: RunStateValue): boolean {
  if (state === 'calling' || PAUSES.has(state) || ENDS.has(state)) return true;
  // The resume after a pause: the first state the run is in once it left it.
  return last !== undefined && PAUSES.has(last.state) && !ENDS.has(state);
}

/**
 * The checkpoints after the run reached `state` with `ctx` at `now`: `list` itself when this is
 * no checkpoint or the same one as the last (a restored snapshot, a transition seen twice), else
 * `list` plus one.
 */
export function nextCheckpoints(list: readonly Checkpoint[], state: RunStateValue, ctx: RunContext, now: string): readonly Checkpoint[] {
  const last = list[list.length - 1];
  if (!isCheckpoint(last, state)) return list;
  if (last && last.state === state && last.step === ctx.step && last.message_count === ctx.messages.length) return list;
  return [
    ...list,
    {
      checkpoint_id: `cp_${list.length + 1}`,
      step: ctx.step,
      state,
      created_at: now,
      message_count: ctx.messages.length,
      usage: ctx.usage,
      pending: {
        approvals: ctx.approvals.filter((a) => a.status === 'pending').map((a) => a.approval_id),
        budget_request: ctx.budget_request?.status === 'pending' ? ctx.budget_request.request_id : null,
      },
    },
  ];
}
