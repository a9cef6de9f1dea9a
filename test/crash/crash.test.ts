// The crash harness, long form (`npm run test:crash`): a mixed workload of runs while the agentd
// child is SIGKILLed at seeded random moments and restarted on the same data dir. Size and seed
// come from AGENTD_CRASH_CYCLES, AGENTD_CRASH_RUNS and AGENTD_CRASH_SEED (defaults 20, 50, 1);
// AGENTD_CRASH_SIGTERM_EVERY=n makes every n-th cycle a graceful SIGTERM instead (default never).
// The short form runs in every `npm test` (test/http/crash-short.test.ts).
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { killAllChildren, runCrashHarness } from './harness.js';

const int = (name: string, fallback: number) => {
  const v = Number(process.env[name]);
  return Number.isInteger(v) && v > 0 ? v : fallback;
};
const cycles = int('AGENTD_CRASH_CYCLES', 20);
const runs = int('AGENTD_CRASH_RUNS', 50);
const seed = int('AGENTD_CRASH_SEED', 1);
const sigtermEvery = int('AGENTD_CRASH_SIGTERM_EVERY', 0);

let model: ScriptedOpenAI;
beforeAll(async () => {
  model = await startScriptedOpenAI();
});
afterAll(async () => {
  await killAllChildren();
  await model.close();
});

it(`${runs} runs survive ${cycles} ${sigtermEvery ? 'kills and stops' : 'SIGKILLs'} (seed ${seed})`, async () => {
  const report = await runCrashHarness(model, { cycles, runs, seed, sigtermEvery, settleTimeoutMs: 120_000, log: (m) => process.stderr.write(`[crash] ${m}\n`) });
  process.stderr.write(`[crash] report ${JSON.stringify(report, null, 2)}\n`);
  expect(report.violations).toEqual([]);
  expect(report.kills + report.stops).toBe(cycles);
  expect(Object.values(report.outcomes).reduce((a, b) => a + b, 0)).toBe(runs);
  expect(report.tool_calls.non_idempotent_executed).toBeGreaterThan(0);
  expect(report.approvals.approved).toBeGreaterThan(0);
  expect(report.budgets.granted).toBeGreaterThan(0);
});
