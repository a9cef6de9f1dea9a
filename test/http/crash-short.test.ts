// The crash harness, short form, in every `npm test`: 10 runs through 3 SIGKILLs of the agentd
// child (the long form is `npm run test:crash`, test/crash/crash.test.ts). Same invariants: every
// run at rest, no non-idempotent call twice, no approved call lost, no budget overspent.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { killAllChildren, runCrashHarness } from '../crash/harness.js';

let model: ScriptedOpenAI;
beforeAll(async () => {
  model = await startScriptedOpenAI();
});
afterAll(async () => {
  await killAllChildren();
  await model.close();
});

it('10 runs survive 3 SIGKILLs at seeded random moments', async () => {
  const report = await runCrashHarness(model, { cycles: 3, runs: 10, seed: 7, lifeMs: [500, 2000], settleTimeoutMs: 30_000 });
  expect(report.violations).toEqual([]);
  expect(report.kills).toBe(3);
  expect(Object.values(report.outcomes).reduce((a, b) => a + b, 0)).toBe(10);
  // The workload really exercised what it claims to.
  expect(report.tool_calls.non_idempotent_executed).toBeGreaterThan(0);
  expect(report.approvals.approved + report.approvals.denied).toBeGreaterThan(0);
  expect(report.budgets.requests).toBeGreaterThan(0);
}, 60_000);
