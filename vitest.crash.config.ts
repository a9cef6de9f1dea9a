import { defineConfig } from 'vitest/config';

// `npm run test:crash`: the long crash harness (test/crash/crash.test.ts). Its size comes from
// AGENTD_CRASH_CYCLES / AGENTD_CRASH_RUNS / AGENTD_CRASH_SEED (defaults 20 / 50 / 1).
export default defineConfig({
  test: {
    include: ['test/crash/**/*.test.ts'],
    testTimeout: 30 * 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});
