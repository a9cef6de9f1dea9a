// The crash harness, long form (`npm run test:crash`): a mixed workload of runs while the agentd
// child is SIGKILLed at seeded random moments and restarted on the same data dir. Size and seed
// come from AGENTD_CRASH_CYCLES, AGENTD_CRASH_RUNS and AGENTD_CRASH_SEED (defaults 20, 50, 1);
// AGENTD_CRASH_SIGTERM_EVERY=n makes every n-th cycle a graceful SIGTERM instead (default never).
// `npm run test:crash -- --store postgres` (AGENTD_CRASH_STORE=postgres): AGENTD_CRASH_INSTANCES
// (default 3) agentd processes on one private PostgreSQL database, one of them SIGKILLed and
// restarted per cycle, AGENTD_CRASH_RUNS default 500 and AGENTD_CRASH_TASKS (default 50) interval
// background tasks whose occurrences must each be dispatched once.
// The short form runs in every `npm test` (test/http/crash-short.test.ts).
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { killAllChildren, runCrashHarness } from './harness.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

const int = (name: string, fallback: number) => {
  const v = Number(process.env[name]);
  return Number.isInteger(v) && v > 0 ? v : fallback;
};
const postgres = process.env.AGENTD_CRASH_STORE === 'postgres';
const cycles = int('AGENTD_CRASH_CYCLES', 20);
const runs = int('AGENTD_CRASH_RUNS', postgres ? 500 : 50);
const instances = int('AGENTD_CRASH_INSTANCES', 3);
const tasks = postgres ? Number(process.env.AGENTD_CRASH_TASKS ?? 50) : 0;
const seed = int('AGENTD_CRASH_SEED', 1);
const sigtermEvery = int('AGENTD_CRASH_SIGTERM_EVERY', 0);

let model: ScriptedOpenAI;
let db: TestDatabase | null = null;
beforeAll(async () => {
  model = await startScriptedOpenAI();
  if (postgres) db = await createTestDatabase('agentd_crash');
});
afterAll(async () => {
  await killAllChildren();
  await model.close();
  await db?.drop();
});

it(`${runs} runs survive ${cycles} ${sigtermEvery ? 'kills and stops' : 'SIGKILLs'} (seed ${seed}${postgres ? `, ${instances} instances on PostgreSQL, ${tasks} tasks` : ''})`, async () => {
  const report = await runCrashHarness(model, {
    cycles,
    runs,
    seed,
    sigtermEvery,
    settleTimeoutMs: postgres ? 300_000 : 120_000,
    log: (m) => process.stderr.write(`[crash] ${m}\n`),
    ...(postgres ? { postgres: { url: db!.url, instances }, tasks, lifeMs: [2_000, 5_000] as [number, number] } : {}),
  });
  process.stderr.write(`[crash] report ${JSON.stringify(report, null, 2)}\n`);
  expect(report.violations).toEqual([]);
  expect(report.kills + report.stops).toBe(cycles);
  expect(Object.values(report.outcomes).reduce((a, b) => a + b, 0)).toBe(runs);
  expect(report.tool_calls.non_idempotent_executed).toBeGreaterThan(0);
  expect(report.approvals.approved).toBeGreaterThan(0);
  expect(report.budgets.granted).toBeGreaterThan(0);
  if (postgres && tasks > 0) {
    expect(report.background?.double_dispatches).toBe(0);
    expect(report.background?.runs).toBeGreaterThan(0);
  }
});
