import { describe, it, expect } from 'vitest';
import {
  budgetConfigProblems,
  checkReserve,
  coveringBudgets,
  crossesWarn,
  findLimit,
  ledgerKey,
  parseLedgerKey,
  remainingOf,
  usageRatio,
  windowPeriod,
  type BudgetsConfig,
  type CheckEntry,
} from '../../machines/policies/budget.js';

const NOW = Date.parse('2026-11-05T23:59:59.999Z');
const subject = { run_id: 'run_1', session_id: 's_1', agent_id: 'assistant', nowMs: NOW };

describe('windows and keys', () => {
  it('resolves UTC periods', () => {
    expect(windowPeriod('total', NOW)).toBe('total');
    expect(windowPeriod('day', NOW)).toBe('2026-11-05');
    expect(windowPeriod('month', NOW)).toBe('2026-11');
    // one millisecond later is the next day (UTC, not local time)
    expect(windowPeriod('day', NOW + 1)).toBe('2026-11-06');
    expect(windowPeriod('month', Date.parse('2026-12-31T23:59:59Z') + 1000)).toBe('2027-01');
  });

  it('builds and parses keys, identities with colons included', () => {
    expect(ledgerKey('session', 's_1', 'total')).toBe('session:s_1:total');
    expect(parseLedgerKey('agent:assistant:2026-11')).toEqual({ scope: 'agent', identity: 'assistant', period: '2026-11', window: 'month' });
    expect(parseLedgerKey('session:background:a:t:2026-11-05')).toEqual({
      scope: 'session',
      identity: 'background:a:t',
      period: '2026-11-05',
      window: 'day',
    });
    expect(parseLedgerKey('galaxy:x:total')).toBeNull();
    expect(parseLedgerKey('run:x:yesterday')).toBeNull();
    expect(parseLedgerKey('run::total')).toBeNull();
    expect(parseLedgerKey('run:total')).toBeNull();
  });
});

describe('coveringBudgets', () => {
  const config: BudgetsConfig = {
    run: [{ meter: 'tokens', limit: 1000 }],
    session: [{ meter: 'cost_usd', limit: 2, on_exhausted: 'terminate', warn_at: 0.5 }],
    agent: [{ meter: 'model_calls', limit: 100, window: 'month' }],
    application: [{ meter: 'tool_calls', limit: 50, window: 'day' }],
  };

  it('lists every scope narrowest first with §5 keys and defaults', () => {
    const c = coveringBudgets(config, subject);
    expect(c.map((e) => e.key)).toEqual(['run:run_1:total', 'session:s_1:total', 'agent:assistant:2026-11', 'application:default:2026-11-05']);
    expect(c.map((e) => e.id)).toEqual([
      'run:run_1:total|tokens',
      'session:s_1:total|cost_usd',
      'agent:assistant:2026-11|model_calls',
      'application:default:2026-11-05|tool_calls',
    ]);
    expect(c[0]).toMatchObject({ scope: 'run', identity: 'run_1', window: 'total', on_exhausted: 'pause', warn_at: 0.8, limit: 1000 });
    expect(c[1]).toMatchObject({ on_exhausted: 'terminate', warn_at: 0.5 });
  });

  it('uses application_id and tolerates a missing config', () => {
    expect(coveringBudgets({ ...config, application_id: 'acme' }, subject)[3].key).toBe('application:acme:2026-11-05');
    expect(coveringBudgets(undefined, subject)).toEqual([]);
    expect(coveringBudgets({}, subject)).toEqual([]);
  });

  it('merges duplicate (key, meter) lines keeping the strictest; distinct windows stay apart', () => {
    const c = coveringBudgets(
      {
        session: [
          { meter: 'tokens', limit: 500 },
          { meter: 'tokens', limit: 300, on_exhausted: 'terminate' },
          { meter: 'tokens', limit: 900 },
          { meter: 'tokens', limit: 100, window: 'day' },
        ],
      },
      subject,
    );
    expect(c.map((e) => [e.key, e.limit, e.on_exhausted])).toEqual([
      ['session:s_1:total', 300, 'terminate'],
      ['session:s_1:2026-11-05', 100, 'pause'],
    ]);
    expect(
      findLimit(
        {
          session: [
            { meter: 'tokens', limit: 500 },
            { meter: 'tokens', limit: 300 },
          ],
        },
        'session',
        'total',
        'tokens',
      )?.limit,
    ).toBe(300);
    expect(findLimit({ session: [{ meter: 'tokens', limit: 500 }] }, 'session', 'day', 'tokens')).toBeNull();
  });

  it('reports config problems', () => {
    expect(budgetConfigProblems(config)).toEqual([]);
    const problems = budgetConfigProblems({
      run: [
        { meter: 'tokens', limit: -1 },
        { meter: 'tokens', limit: 5, warn_at: 1.5 },
      ],
    });
    expect(problems).toHaveLength(3);
    expect(problems.join('\n')).toMatch(/budgets\.run\[0\]\.limit/);
    expect(problems.join('\n')).toMatch(/budgets\.run\[1\]\.warn_at/);
  });
});

describe('arithmetic', () => {
  const entry = (over: Partial<CheckEntry> = {}): CheckEntry => ({
    key: 'session:s_1:total',
    scope: 'session',
    meter: 'tokens',
    limit: 100,
    granted: 0,
    spent: 0,
    reserved: 0,
    ...over,
  });

  it('remaining = limit + granted - spent - reserved', () => {
    expect(remainingOf({ limit: 100, granted: 20, spent: 30, reserved: 40 })).toBe(50);
  });

  it('an exact fit passes; one more is a shortfall with the effective limit', () => {
    const e = entry({ granted: 10, spent: 50, reserved: 20 });
    expect(checkReserve([e], { tokens: 40 })).toEqual({ ok: true });
    expect(checkReserve([e], { tokens: 41 })).toEqual({
      ok: false,
      index: 0,
      shortfall: { key: 'session:s_1:total', scope: 'session', meter: 'tokens', limit: 110, used: 70, needed: 41, shortfall: 1 },
    });
  });

  it('ignores meters not asked for or asked for as 0, even on an overrun entry', () => {
    const over = entry({ spent: 150 });
    expect(checkReserve([over], { cost_usd: 5 })).toEqual({ ok: true });
    expect(checkReserve([over], { tokens: 0 })).toEqual({ ok: true });
    expect(checkReserve([over], { tokens: 1 })).toMatchObject({ ok: false, shortfall: { shortfall: 51 } });
  });

  it('tolerates float noise on cost_usd but not a real overrun', () => {
    const e = entry({ meter: 'cost_usd', limit: 0.3, spent: 0.1 });
    expect(checkReserve([e], { cost_usd: 0.2 })).toEqual({ ok: true }); // 0.1 + 0.2 > 0.3 in floats
    expect(checkReserve([e], { cost_usd: 0.2001 }).ok).toBe(false);
  });

  it('reports the first shortfall, a terminate one taking precedence', () => {
    const a = entry({ key: 'run:r:total', scope: 'run', limit: 10, on_exhausted: 'pause' });
    const b = entry({ key: 'session:s:total', limit: 5, on_exhausted: 'pause' });
    const c = entry({ key: 'agent:x:total', scope: 'agent', limit: 1, on_exhausted: 'terminate' });
    const r1 = checkReserve([a, b], { tokens: 20 });
    expect(r1.ok === false && r1.shortfall.key).toBe('run:r:total');
    const r2 = checkReserve([a, b, c], { tokens: 20 });
    expect(r2.ok === false && [r2.index, r2.shortfall.key]).toEqual([2, 'agent:x:total']);
  });

  it('detects the warn crossing only on the transition', () => {
    const at = (spent: number, reserved = 0, granted = 0) => ({ limit: 100, granted, spent, reserved });
    expect(crossesWarn(at(70), at(70, 10))).toBe(true); // 0.7 -> 0.8
    expect(crossesWarn(at(80), at(90))).toBe(false); // already above
    expect(crossesWarn(at(10), at(79))).toBe(false);
    expect(crossesWarn(at(10), at(50), 0.5)).toBe(true);
    expect(crossesWarn(at(70, 0, 100), at(90, 0, 100))).toBe(false); // grants raise the bar
    expect(usageRatio({ limit: 0, granted: 0, spent: 0, reserved: 0 })).toBe(0);
    expect(usageRatio({ limit: 0, granted: 0, spent: 1, reserved: 0 })).toBe(Infinity);
  });
});
