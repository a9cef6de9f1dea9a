// When a run keeps a checkpoint (machines/policies/checkpoints.ts).
import { describe, expect, it } from 'vitest';
import { nextCheckpoints, type Checkpoint } from '../../machines/policies/checkpoints.js';
import type { RunContext, RunStateValue } from '../../machines/run.machine.js';

const ctx = (step: number, messages: number, pendingApproval = false): RunContext =>
  ({
    step,
    messages: Array.from({ length: messages }, () => ({ role: 'user', content: 'x' })),
    usage: { requests: step, request_tokens: 0, response_tokens: 0, total_tokens: 0, estimated_cost_usd: 0 },
    approvals: pendingApproval ? [{ approval_id: 'ap1', status: 'pending' }] : [],
    budget_request: null,
  }) as unknown as RunContext;

function walk(states: Array<[RunStateValue, RunContext]>): readonly Checkpoint[] {
  let list: readonly Checkpoint[] = [];
  for (const [s, c] of states) list = nextCheckpoints(list, s, c, '2026-01-01T00:00:00.000Z');
  return list;
}

describe('checkpoints', () => {
  it('before each model call, at a pause and its resume, at the end; never twice for the same point', () => {
    const list = walk([
      ['checking', ctx(0, 2)],
      ['calling', ctx(1, 2)],
      ['calling', ctx(1, 2)], // a restored snapshot
      ['governing', ctx(1, 3)],
      ['awaitingApproval', ctx(1, 3, true)],
      ['budgeting', ctx(1, 3)],
      ['executing', ctx(1, 3)],
      ['calling', ctx(2, 4)],
      ['completed', ctx(2, 5)],
    ]);
    expect(list.map((c) => [c.checkpoint_id, c.state, c.step, c.message_count])).toEqual([
      ['cp_1', 'calling', 1, 2],
      ['cp_2', 'awaitingApproval', 1, 3],
      ['cp_3', 'budgeting', 1, 3],
      ['cp_4', 'calling', 2, 4],
      ['cp_5', 'completed', 2, 5],
    ]);
    expect(list[1].pending.approvals).toEqual(['ap1']);
  });
});
