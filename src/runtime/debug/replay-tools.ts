// How a replay's tool call is answered from the recording (machines/policies/replay-match.ts
// decides; docs/contract.md §3.5): the run effects ask here before governing or running a call.
import type { ToolCallRequest } from '../../../machines/model-types.js';
import { matchRecorded, replayAnswer, type ReplayAnswer } from '../../../machines/policies/replay-match.js';
import type { RunContext } from '../../../machines/run.machine.js';
import type { AgentProfile } from '../../agent/agent-profile.js';
import type { RunOrigin } from './origin.js';

/** What `call` of the run gets instead of running; null when the run is no replay or the call runs live. */
export function replayedCall(live: { origin: RunOrigin | null; agent: AgentProfile }, ctx: RunContext, call: ToolCallRequest): ReplayAnswer {
  const plan = live.origin?.replay;
  if (!plan) return null;
  // Matched from the conversation itself, so a replay restored after a crash matches as before.
  const matched = matchRecorded(plan.recorded, ctx.messages);
  return replayAnswer(call, matched, plan.tools, live.agent.tools.get(call.name)?.idempotent);
}
