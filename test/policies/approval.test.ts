// machines/policies/approval.ts: which decision on a tool-call approval may be taken, and what it makes.
import { describe, expect, it } from 'vitest';
import { decideApproval } from '../../machines/policies/approval.js';
import type { ApprovalState } from '../../machines/run.machine.js';

const T0 = Date.parse('2030-01-01T00:00:00.000Z');
const iso = (ms: number) => new Date(ms).toISOString();

function approval(id: string, over: Partial<ApprovalState> = {}): ApprovalState {
  return {
    approval_id: id,
    status: 'pending',
    tool_name: 'send_email',
    tool_call_id: `call_${id}`,
    arguments: { to: 'a@example.com' },
    reason: null,
    created_at: iso(T0),
    expires_at: iso(T0 + 60_000),
    approver: null,
    note: null,
    decided_at: null,
    edited_arguments: null,
    ...over,
  };
}

const approve = { decision: 'approve' as const, approver: 'ops' };

describe('decideApproval', () => {
  it('decides a pending approval; all decided only when none is pending', () => {
    const list = [approval('a'), approval('b')];
    const first = decideApproval(list, true, 'a', { ...approve, arguments: { to: 'b@example.com' }, note: 'ok' }, T0 + 1000, iso(T0 + 1000));
    expect(first).toMatchObject({ kind: 'decided', allDecided: false });
    if (first.kind !== 'decided') return;
    expect(first.decided).toMatchObject({
      status: 'approved',
      approver: 'ops',
      note: 'ok',
      decided_at: iso(T0 + 1000),
      edited_arguments: { to: 'b@example.com' },
    });
    expect(list[0].status).toBe('pending'); // the input is not changed
    const second = decideApproval(first.approvals, true, 'b', { decision: 'deny', approver: 'ops' }, T0 + 2000, iso(T0 + 2000));
    expect(second).toMatchObject({ kind: 'decided', allDecided: true, decided: { status: 'denied', edited_arguments: null } });
  });

  it('refuses an unknown approval, an expired one (marking it expired), a decided one, and one of a run not waiting', () => {
    expect(decideApproval([approval('a')], true, 'zz', approve, T0, iso(T0))).toEqual({ kind: 'unknown' });
    const expired = decideApproval([approval('a'), approval('b')], true, 'a', approve, T0 + 60_000, iso(T0 + 60_000));
    expect(expired).toMatchObject({ kind: 'expired', expires_at: iso(T0 + 60_000) });
    if (expired.kind === 'expired') expect(expired.approvals.map((x) => x.status)).toEqual(['expired', 'pending']);
    expect(decideApproval([approval('a', { status: 'denied' })], true, 'a', approve, T0, iso(T0))).toEqual({ kind: 'already_decided', status: 'denied' });
    // Expiry is checked before the run's state: an expired approval reads as expired on any run.
    expect(decideApproval([approval('a')], false, 'a', approve, T0 + 60_000, iso(T0 + 60_000)).kind).toBe('expired');
    expect(decideApproval([approval('a')], false, 'a', approve, T0, iso(T0))).toEqual({ kind: 'run_not_waiting' });
  });
});
