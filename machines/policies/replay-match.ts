// Which recorded tool result a call of a counterfactual replay gets (docs/contract.md §3.5). Pure:
// the replay's conversation decides, so a replay restored after a crash matches exactly as before.
//
// A call matches the first recorded call not matched yet with the same tool name and the same
// arguments after canonicalisation (keys sorted at every depth), taken in the order the replay
// made its calls. What an unmatched call gets depends on the replay's tool mode and the tool.
import type { ChatMessage, ToolCallRequest } from '../model-types.js';
import type { ToolOutcome } from '../run.machine.js';

/** One tool call of the original run, with what the model was told. */
export interface RecordedCall {
  tool_name: string;
  /** canonicalArguments() of the call's arguments. */
  arguments_key: string;
  content: string;
  outcome: ToolOutcome['outcome'];
}

export type ReplayTools = 'recorded' | 'live';

/** What the model reads for an unmatched call in `recorded` mode. */
export const NO_RECORDED_RESULT = 'no recorded result';
/** What the model reads for an unmatched call to a non-idempotent tool in `live` mode. */
export const NOT_EXECUTED_IN_REPLAY = 'not executed during a replay';

/** JSON of `value` with object keys sorted at every depth: equal arguments, equal text. */
export function canonicalArguments(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return Object.fromEntries(
      Object.keys(o)
        .sort()
        .map((k) => [k, sortKeys(o[k])]),
    );
  }
  return v;
}

/** Every call the conversation holds (assistant tool calls, in order) → the recorded call it matched. */
export function matchRecorded(recorded: readonly RecordedCall[], messages: readonly ChatMessage[]): Map<string, RecordedCall> {
  const used = new Set<number>();
  const matched = new Map<string, RecordedCall>();
  for (const m of messages) {
    if (m.role !== 'assistant' || !m.tool_calls) continue;
    for (const call of m.tool_calls) {
      const key = canonicalArguments(call.arguments);
      const i = recorded.findIndex((r, j) => !used.has(j) && r.tool_name === call.name && r.arguments_key === key);
      if (i < 0) continue;
      used.add(i);
      matched.set(call.id, recorded[i]);
    }
  }
  return matched;
}

/** What a replay's call gets instead of running; null: it runs (and is governed) as usual. */
export type ReplayAnswer = { content: string; outcome: ToolOutcome['outcome']; matched: boolean } | null;

export function replayAnswer(
  call: ToolCallRequest,
  matched: ReadonlyMap<string, RecordedCall>,
  tools: ReplayTools,
  idempotent: boolean | undefined,
): ReplayAnswer {
  const hit = matched.get(call.id);
  if (hit) return { content: hit.content, outcome: hit.outcome, matched: true };
  if (tools === 'recorded') return { content: `Tool ${call.name} failed (error): ${NO_RECORDED_RESULT}`, outcome: 'error', matched: false };
  // A non-idempotent tool never runs during a replay, whatever the mode; an unknown tool counts as one.
  if (idempotent !== true) return { content: `Tool ${call.name} failed (error): ${NOT_EXECUTED_IN_REPLAY}`, outcome: 'error', matched: false };
  return null;
}
