// Settling a budget hold with what a call really used. A failed settle does not fail the run (the
// hold stays, and finish() releases the run's leftover holds), but it is no longer swallowed: it
// is logged with the run and reservation ids and counted (agentd_budget_settle_failures_total).
import type { MeterAmounts } from '../../machines/policies/budget.js';
import type { BudgetLedger } from './budget-ledger.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { AppLogger } from '../telemetry/logger.js';

export interface SettleDeps {
  ledger: BudgetLedger;
  metrics?: Metrics;
  logger?: AppLogger;
}

/** Settles `reservationId` of run `runId`; never rejects. `phase`: model, tools or subagent (the metric's label). */
export async function settleHold(
  deps: SettleDeps,
  runId: string,
  reservationId: string,
  amounts: MeterAmounts,
  phase: 'model' | 'tools' | 'subagent',
): Promise<void> {
  try {
    await deps.ledger.settle(reservationId, amounts);
  } catch (err) {
    deps.metrics?.settleFailed(phase);
    deps.logger?.warn(
      {
        run_id: runId,
        reservation_id: reservationId,
        err: String(err),
      },
      'budget hold could not be settled; it stays held until the run releases its holds',
    );
  }
}
