// The pure projections of src/runtime/run-projection.ts: snapshot → record, and the event a
// resumed run continues with (the four branches at the end of a resume).
import { describe, expect, it } from 'vitest';
import type { ApprovalState, BudgetRequest, RunContext } from '../../machines/run.machine.js';
import { currentBatch, phaseOf, recordFromSnapshot, resumeEventFor } from '../../src/runtime/run-projection.js';
import { newRunRecord, type RunRecord } from '../../src/runtime/run-record.js';

const NOW = Date.parse('2026-01-01T00:00:00.000Z');
const iso = (ms: number) => new Date(ms).toISOString();
const identity = { redactText: <T>(t: T) => t, redactValue: <T>(v: T) => v };

function record(over: Partial<RunRecord> = {}): RunRecord {
  const started = newRunRecord({
    run_id: 'run_1',
    session_id: 'session_1',
    agent_name: 'a',
    agent_id: 'a',
    kind: 'sync',
    task_id: null,
    query: 'q',
    trace_id: 't',
    now: iso(NOW),
    lease_seconds: 60,
    lease_expires_at: iso(NOW + 60_000),
    owner: 'w1',
  });
  return { ...started, ...over };
}

function context(over: Partial<RunContext> = {}): RunContext {
  return {
    run_id: 'run_1',
    session_id: 'session_1',
    agent_name: 'a',
    max_steps: 5,
    messages: [],
    query: 'q',
    step: 1,
    model_calls: 1,
    pending: [],
    decisions: [],
    approvals: [],
    budget_request: null,
    budget_phase: 'model',
    usage: { requests: 1, request_tokens: 3, response_tokens: 4, total_tokens: 7, estimated_cost_usd: 0.01 },
    response: null,
    termination_reason: null,
    error: null,
    guardrail_result: null,
    ...over,
  };
}

function approval(id: string, status: ApprovalState['status'], expiresMs = NOW + 1000): ApprovalState {
  return {
    approval_id: id,
    status,
    tool_name: 'x',
    tool_call_id: `call_${id}`,
    arguments: {},
    reason: null,
    created_at: iso(NOW - 1000),
    expires_at: iso(expiresMs),
    approver: null,
    note: null,
    decided_at: null,
    edited_arguments: null,
  };
}

const budget = (status: BudgetRequest['status']): BudgetRequest => ({
  request_id: 'br_1',
  key: 'k',
  scope: 'session',
  meter: 'model_calls',
  limit: 1,
  used: 1,
  needed: 1,
  shortfall: 1,
  status,
  asked_at: iso(NOW),
  phase: 'model',
});

describe('recordFromSnapshot', () => {
  it('a completed run: status, answer, usage, end time, lease let go', () => {
    const phase = phaseOf('completed', false);
    const r = recordFromSnapshot(record(), 'completed', context({ response: 'hi', termination_reason: 'stop' }), phase, 'T', identity);
    expect(r).toMatchObject({
      status: 'completed',
      machine_state: 'completed',
      response: 'hi',
      step: 1,
      ended_at: 'T',
      updated_at: 'T',
      owner: null,
      lease_expires_at: null,
    });
    expect(r.usage.total_tokens).toBe(7);
  });

  it('a running step keeps its owner and lease; redaction applies to what the record serves', () => {
    const phase = phaseOf('calling', false);
    const redact = { redactText: <T>(t: T) => (typeof t === 'string' ? ('***' as T) : t), redactValue: <T>(v: T) => v };
    const r = recordFromSnapshot(record(), 'calling', context({ response: 'secret' }), phase, 'T', redact);
    expect(r).toMatchObject({ status: 'running', owner: 'w1', ended_at: null, response: '***' });
    expect(phase.ending).toBe(false);
  });

  it('merges approvals and budget requests by id, and a wait clears decided_at', () => {
    const old = approval('a1', 'used');
    const pending = approval('a2', 'pending');
    const phase = phaseOf('awaitingApproval', false);
    const r = recordFromSnapshot(record({ approvals: [old], decided_at: 'D' }), 'awaitingApproval', context({ approvals: [pending] }), phase, 'T', identity);
    expect(r.approvals.map((a) => a.approval_id)).toEqual(['a1', 'a2']);
    expect(r).toMatchObject({ status: 'awaiting_approval', decided_at: null, owner: null });
    const b = recordFromSnapshot(
      record({ budget_requests: [budget('pending')] }),
      'budgeting',
      context({ budget_request: budget('granted') }),
      phaseOf('budgeting', false),
      'T',
      identity,
    );
    expect(b.budget_requests).toEqual([budget('granted')]);
  });

  it("stores approvals' arguments redacted, an approver's edits only once the call no longer needs them, and tool results once the run ended", () => {
    const mark = { redactText: <T>(t: T) => (typeof t === 'string' ? (`R(${t})` as T) : t), redactValue: <T>(v: T) => (v === null ? v : ({ r: v } as T)) };
    const edited = { text: 'edited' };
    const approvals = (['approved', 'used', 'denied', 'pending'] as const).map((s, i) => ({
      ...approval(`a${i}`, s),
      arguments: { text: 'raw' },
      edited_arguments: s === 'pending' ? null : edited,
    }));
    const call = {
      tool_call_id: 'c1',
      tool_name: 't',
      source: 'local' as const,
      idempotent: true,
      step: 1,
      state: 'completed' as const,
      outcome: 'success' as const,
      started_at: 'S',
      ended_at: 'E',
      result_content: 'out',
    };
    const waiting = recordFromSnapshot(
      record({ tool_calls: [call] }),
      'awaitingApproval',
      context({ approvals }),
      phaseOf('awaitingApproval', false),
      'T',
      mark,
    );
    expect(waiting.approvals.map((a) => [a.arguments, a.edited_arguments])).toEqual([
      [{ r: { text: 'raw' } }, edited], // approved: the call has not run yet with the edit
      [{ r: { text: 'raw' } }, { r: edited }],
      [{ r: { text: 'raw' } }, { r: edited }],
      [{ r: { text: 'raw' } }, null],
    ]);
    expect(waiting.tool_calls[0].result_content).toBe('out');
    const ended = recordFromSnapshot(
      record({ tool_calls: [call] }),
      'completed',
      context({ termination_reason: 'stop' }),
      phaseOf('completed', false),
      'T',
      mark,
    );
    expect(ended.tool_calls[0].result_content).toBe('R(out)');
  });

  it('a shutdown stops a run at its budgeting boundary as interrupted', () => {
    const phase = phaseOf('budgeting', true);
    expect(phase).toMatchObject({ interrupt: true, ending: true, terminal: false });
    const r = recordFromSnapshot(record(), 'budgeting', context(), phase, 'T', identity);
    expect(r).toMatchObject({ status: 'interrupted', machine_state: 'budgeting', owner: null, lease_expires_at: null });
    expect(phaseOf('calling', true).interrupt).toBe(false);
  });
});

describe('resumeEventFor', () => {
  it('an interrupted snapshot resumes with RESUME', () => {
    expect(resumeEventFor(record({ status: 'interrupted' }), 'interrupted', NOW)).toEqual({ type: 'RESUME' });
  });

  it('a decided approval batch; a lapsed pending approval reads expired', () => {
    const r = record({ status: 'awaiting_approval', approvals: [approval('a0', 'used'), approval('a1', 'approved'), approval('a2', 'pending', NOW - 1)] });
    const ev = resumeEventFor(r, 'awaitingApproval', NOW);
    expect(ev).toEqual({ type: 'APPROVALS_DECIDED', approvals: [approval('a1', 'approved'), { ...approval('a2', 'pending', NOW - 1), status: 'expired' }] });
    expect(currentBatch(r, NOW)).toHaveLength(2);
  });

  it('a budget decision: granted or denied', () => {
    expect(resumeEventFor(record({ status: 'awaiting_budget', budget_request: budget('granted') }), 'awaitingBudget', NOW)).toEqual({
      type: 'BUDGET_GRANTED',
      request: budget('granted'),
    });
    expect(resumeEventFor(record({ status: 'awaiting_budget', budget_request: budget('denied') }), 'awaitingBudget', NOW)).toEqual({
      type: 'BUDGET_DENIED',
      request: budget('denied'),
    });
  });

  it('a claimed decided run whose snapshot still waits gets its decision again', () => {
    expect(resumeEventFor(record({ status: 'running', approvals: [approval('a1', 'denied')] }), 'awaitingApproval', NOW)).toEqual({
      type: 'APPROVALS_DECIDED',
      approvals: [approval('a1', 'denied')],
    });
    expect(resumeEventFor(record({ status: 'running', approvals: [approval('a1', 'pending')] }), 'awaitingApproval', NOW)).toBeUndefined();
    expect(resumeEventFor(record({ status: 'running', budget_request: budget('granted') }), 'awaitingBudget', NOW)).toEqual({
      type: 'BUDGET_GRANTED',
      request: budget('granted'),
    });
    expect(resumeEventFor(record({ status: 'running', budget_request: budget('pending') }), 'awaitingBudget', NOW)).toBeUndefined();
  });

  it('an orphan mid-step goes on from its snapshot as it is', () => {
    expect(resumeEventFor(record({ status: 'running' }), 'calling', NOW)).toBeUndefined();
  });
});
