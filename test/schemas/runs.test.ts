import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  ApprovalDecisionRequest,
  ApprovalView,
  BudgetDecisionRequest,
  BudgetDecisionResponse,
  BudgetEntry,
  OutcomeRequest,
  OutcomeResponse,
  RunApprovalParams,
  RunBudgetResponse,
  RunIdParams,
  RunRequest,
  RunResponse,
  RunView,
  RunsListQuery,
  SessionIdParams,
} from '../../src/schemas/index.js';

const ok = (s: z.ZodType, v: unknown) => s.safeParse(v).success;
const paths = (s: z.ZodType, v: unknown) => {
  const r = s.safeParse(v);
  return r.success ? [] : r.error.issues.map((i) => i.path.join('.'));
};

describe('RunRequest', () => {
  it('query required, session_id optional and safe, no other fields', () => {
    expect(RunRequest.parse({ query: 'hi' })).toEqual({ query: 'hi' });
    expect(RunRequest.parse({ query: 'hi', session_id: null })).toEqual({ query: 'hi', session_id: null });
    expect(paths(RunRequest, {})).toEqual(['query']);
    expect(paths(RunRequest, { query: 'hi', stream: true })).toEqual(['']);
    expect(paths(RunRequest, { query: 'hi', session_id: 'a/b' })).toEqual(['session_id']);
    expect(paths(RunRequest, { query: 'hi', session_id: 'x..y' })).toEqual(['session_id']);
    expect(ok(RunRequest, { query: 'hi', session_id: 'background:default:t1' })).toBe(true);
  });
});

describe('RunResponse', () => {
  const minimal = { agent_name: 'assistant', response: 'hello', run_id: 'run_1', session_id: 's', trace_id: 'trace_1' };

  it('fills defaults so every key of the result is present', () => {
    const r = RunResponse.parse(minimal);
    expect(r).toEqual({
      ...minimal,
      approvals: null,
      budget_request: null,
      guardrail_result: null,
      metric: null,
      status: 'success',
      termination_reason: null,
      side_effects: null,
    });
    expect(z.encode(RunResponse, r)).toEqual(r);
  });

  it('statuses of decisions §3.1 and termination reasons', () => {
    for (const status of ['success', 'error', 'cancelled', 'awaiting_approval', 'awaiting_budget', 'interrupted', 'timeout']) {
      expect(ok(RunResponse, { ...minimal, status })).toBe(true);
    }
    expect(paths(RunResponse, { ...minimal, status: 'paused' })).toEqual(['status']);
    expect(ok(RunResponse, { ...minimal, status: 'error', termination_reason: 'max_steps' })).toBe(true);
    expect(paths(RunResponse, { ...minimal, termination_reason: 'bored' })).toEqual(['termination_reason']);
  });

  it('carries approvals and side effects', () => {
    const approval = {
      approval_id: 'approval_1',
      status: 'pending',
      tool_name: 'send_email',
      tool_call_id: 'call_1',
      arguments: { to: 'a@b.c' },
      reason: 'policy asks',
      created_at: '2026-01-01T00:00:00Z',
      expires_at: '2026-01-02T00:00:00Z',
      approver: null,
      note: null,
      decided_at: null,
      edited_arguments: null,
    };
    expect(ApprovalView.parse(approval)).toEqual(approval);
    const r = RunResponse.parse({
      ...minimal,
      response: null,
      status: 'awaiting_approval',
      approvals: [approval],
      side_effects: [{ tool_call_id: 'call_0', tool_name: 'charge', outcome: 'unknown' }],
    });
    expect(r.approvals).toHaveLength(1);
    expect(paths(ApprovalView, { ...approval, status: 'maybe' })).toEqual(['status']);
  });
});

describe('run view and listing', () => {
  const view = {
    run_id: 'run_1',
    session_id: 's',
    agent_name: 'assistant',
    agent_id: 'default',
    status: 'completed',
    step: 2,
    attempt: 1,
    trace_ids: ['trace_1'],
    tool_calls: [
      {
        tool_call_id: 'call_1',
        tool_name: 'clock',
        source: 'builtin',
        idempotent: true,
        step: 1,
        state: 'completed',
        outcome: 'success',
        started_at: '2026-01-01T00:00:00Z',
        ended_at: '2026-01-01T00:00:01Z',
      },
    ],
    usage: { requests: 2, request_tokens: 10, response_tokens: 5, total_tokens: 15, estimated_cost_usd: 0 },
    approvals: [],
    budget_requests: [],
    outcomes: [],
    error: null,
    created_at: '2026-01-01T00:00:00Z',
    updated_at: '2026-01-01T00:00:02Z',
    heartbeat_at: null,
    lease_seconds: 60,
  };

  it('accepts the §3.3 view', () => {
    expect(ok(RunView, view)).toBe(true);
    expect(paths(RunView, { ...view, status: 'success' })).toEqual(['status']);
    expect(paths(RunView, { ...view, tool_calls: [{ ...view.tool_calls[0], state: 'pending' }] })).toEqual(['tool_calls.0.state']);
  });

  it('list query: status enum, limit 1..500 default 100', () => {
    expect(RunsListQuery.parse({})).toEqual({ order: 'asc', limit: 100 });
    expect(RunsListQuery.parse({ status: 'awaiting_budget', limit: '20', cursor: 'c' })).toEqual({
      status: 'awaiting_budget',
      order: 'asc',
      limit: 20,
      cursor: 'c',
    });
    expect(paths(RunsListQuery, { status: 'waiting' })).toEqual(['status']);
    expect(paths(RunsListQuery, { limit: '0' })).toEqual(['limit']);
    expect(paths(RunsListQuery, { limit: '501' })).toEqual(['limit']);
  });

  it('path params refuse "/" and ".."', () => {
    expect(ok(RunIdParams, { run_id: 'run_abc' })).toBe(true);
    expect(paths(RunIdParams, { run_id: 'a/b' })).toEqual(['run_id']);
    expect(paths(RunIdParams, { run_id: '..' })).toEqual(['run_id']);
    expect(paths(RunIdParams, { run_id: '' })).toEqual(['run_id']);
    expect(paths(RunApprovalParams, { run_id: 'r', approval_id: '../x' })).toEqual(['approval_id']);
    expect(paths(SessionIdParams, { session_id: 'a\\b' })).toEqual(['session_id']);
  });
});

describe('decisions', () => {
  it('ApprovalDecisionRequest: approver minLength 1, decision enum, strict', () => {
    expect(ApprovalDecisionRequest.parse({ decision: 'approve', approver: 'ann' })).toEqual({ decision: 'approve', approver: 'ann' });
    expect(paths(ApprovalDecisionRequest, { decision: 'approve', approver: '' })).toEqual(['approver']);
    expect(paths(ApprovalDecisionRequest, { decision: 'yes', approver: 'ann' })).toEqual(['decision']);
    expect(paths(ApprovalDecisionRequest, { decision: 'deny', approver: 'ann', reason: 'x' })).toEqual(['']);
    expect(ok(ApprovalDecisionRequest, { decision: 'approve', approver: 'ann', arguments: { to: 'x' }, note: 'edited' })).toBe(true);
    expect(paths(ApprovalDecisionRequest, { decision: 'approve', approver: 'ann', arguments: 'x' })).toEqual(['arguments']);
  });

  it('BudgetDecisionRequest: amount > 0, optional request_id', () => {
    expect(ok(BudgetDecisionRequest, { decision: 'grant', approver: 'ann' })).toBe(true);
    expect(ok(BudgetDecisionRequest, { decision: 'grant', approver: 'ann', amount: 0.01, request_id: 'budgetreq_1' })).toBe(true);
    expect(ok(BudgetDecisionRequest, { decision: 'grant', approver: 'ann', amount: null })).toBe(true);
    expect(paths(BudgetDecisionRequest, { decision: 'grant', approver: 'ann', amount: 0 })).toEqual(['amount']);
    expect(paths(BudgetDecisionRequest, { decision: 'grant', approver: 'ann', amount: -5 })).toEqual(['amount']);
    expect(paths(BudgetDecisionRequest, { decision: 'grant', approver: '' })).toEqual(['approver']);
    expect(paths(BudgetDecisionRequest, { decision: 'approve', approver: 'ann' })).toEqual(['decision']);
    expect(paths(BudgetDecisionRequest, { decision: 'grant', approver: 'ann', scope: 'run' })).toEqual(['']);
  });

  it('budget answers', () => {
    const entry = {
      scope: 'session',
      meter: 'tokens',
      window: 'total',
      key: 'session:s_1:total',
      limit: 1000,
      granted: 0,
      spent: 900,
      reserved: 50,
      remaining: 50,
    };
    expect(BudgetEntry.parse(entry)).toEqual(entry);
    expect(paths(BudgetEntry, { ...entry, scope: 'team' })).toEqual(['scope']);
    const request = {
      request_id: 'budgetreq_1',
      key: 'run:run_1:total',
      scope: 'run',
      meter: 'tokens',
      limit: 100,
      used: 90,
      needed: 30,
      shortfall: 20,
      status: 'pending',
      asked_at: '2026-01-01T00:00:00Z',
    };
    expect(ok(RunBudgetResponse, { run_id: 'run_1', budgets: [entry], requests: [request] })).toBe(true);
    expect(ok(RunBudgetResponse, { run_id: 'run_1', budgets: [], requests: [] })).toBe(true);
    expect(
      ok(BudgetDecisionResponse, {
        run_id: 'run_1',
        request_id: 'budgetreq_1',
        status: 'granted',
        scope: 'run',
        meter: 'tokens',
        amount: 20,
        approver: 'ann',
        note: null,
      }),
    ).toBe(true);
    expect(
      paths(BudgetDecisionResponse, {
        run_id: 'run_1',
        request_id: 'budgetreq_1',
        status: 'pending',
        scope: 'run',
        meter: 'tokens',
        amount: 20,
        approver: 'ann',
        note: null,
      }),
    ).toEqual(['status']);
  });

  it('OutcomeRequest: source minLength 1, strict', () => {
    expect(OutcomeRequest.parse({ source: 'grader', reward: 0.5, label: 'good', detail: { k: 1 } })).toEqual({
      source: 'grader',
      reward: 0.5,
      label: 'good',
      detail: { k: 1 },
    });
    expect(paths(OutcomeRequest, { source: '' })).toEqual(['source']);
    expect(paths(OutcomeRequest, {})).toEqual(['source']);
    expect(paths(OutcomeRequest, { source: 'x', score: 1 })).toEqual(['']);
    expect(paths(OutcomeRequest, { source: 'x', reward: 'high' })).toEqual(['reward']);
    expect(ok(OutcomeResponse, { outcome_id: 'outcome_1', source: 'x', label: null, reward: null, detail: null, recorded_at: '2026-01-01T00:00:00Z' })).toBe(
      true,
    );
  });
});
