// A failed budget settle is no longer swallowed: logged with the run and reservation
// ids, and counted in agentd_budget_settle_failures_total; the run goes on.
import { describe, expect, it } from 'vitest';
import type { BudgetLedger } from '../../src/agent/budget-ledger.js';
import { settleHold } from '../../src/agent/budget-settle.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { captureLog } from '../helpers/log-capture.js';

const failures = async (metrics: Metrics, phase: string): Promise<number> => {
  const m = await metrics.registry.getSingleMetric('agentd_budget_settle_failures_total')!.get();
  return m.values.find((v) => v.labels.phase === phase)?.value ?? 0;
};

describe('settleHold', () => {
  it('logs and counts a settle that fails, without throwing', async () => {
    const metrics = new Metrics();
    const log = captureLog();
    const ledger = { settle: async () => Promise.reject(new Error('store down')) } as unknown as BudgetLedger;
    await settleHold({ ledger, metrics, logger: log.logger }, 'run_1', 'run_1:model:1', { model_calls: 1 }, 'model');
    expect(await failures(metrics, 'model')).toBe(1);
    const logs = log.entries();
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatchObject({ level: 'warn', run_id: 'run_1', reservation_id: 'run_1:model:1' });
    expect(String(logs[0].err)).toContain('store down');
  });

  it('a settle that works logs and counts nothing', async () => {
    const metrics = new Metrics();
    const log = captureLog();
    const calls: unknown[] = [];
    const ledger = { settle: async (...args: unknown[]) => void calls.push(args) } as unknown as BudgetLedger;
    await settleHold({ ledger, metrics, logger: log.logger }, 'run_1', 'run_1:tools:2', { tool_calls: 2 }, 'tools');
    expect(calls).toEqual([['run_1:tools:2', { tool_calls: 2 }]]);
    expect(await failures(metrics, 'tools')).toBe(0);
    expect(log.lines).toEqual([]);
  });
});
