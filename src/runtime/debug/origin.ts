// Where a run came from when it is a fork or a counterfactual replay of another run (docs/contract.md
// §3.5), and what its replay plays back. Kept with the run's snapshot (SnapshotValue.origin), so a
// replay restored after a crash still takes its tool results from the recording: a non-idempotent
// tool never runs during a replay, whichever process continues it.
import type { RecordedCall, ReplayTools } from '../../../machines/policies/replay-match.js';

/** What a replay changes: another registered agent, a model config (checked as a registered agent's), an instruction. */
export interface ReplayVariant {
  agent_id?: string;
  model?: Record<string, unknown>;
  system_instruction?: string;
}

export interface RunOrigin {
  forked_from?: { run_id: string; checkpoint_id: string };
  replay_of?: { run_id: string; variant: ReplayVariant };
  /** The evaluation whose item this replay is. */
  eval_id?: string;
  /** Set on a replay: how its tool calls are answered. */
  replay?: { tools: ReplayTools; recorded: RecordedCall[] };
}

/** The origin as answers and events show it (the recording itself is left out). */
export function originView(o: RunOrigin | null | undefined): { forked_from?: RunOrigin['forked_from']; replay_of?: RunOrigin['replay_of']; eval_id?: string } {
  if (!o) return {};
  return {
    ...(o.forked_from ? { forked_from: o.forked_from } : {}),
    ...(o.replay_of ? { replay_of: o.replay_of } : {}),
    ...(o.eval_id ? { eval_id: o.eval_id } : {}),
  };
}
