#!/usr/bin/env node
// `npm run test:crash [-- --store postgres] [vitest args]`: the long crash harness
// (test/crash/crash.test.ts). `--store postgres` runs it with several agentd instances on one
// PostgreSQL database (AGENTD_CRASH_STORE=postgres); every other argument goes to vitest.
import { spawn } from 'node:child_process';

const args = process.argv.slice(2);
const env = { ...process.env };
const rest = [];
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '--store' || a.startsWith('--store=')) {
    const v = a === '--store' ? args[++i] : a.slice('--store='.length);
    if (v !== 'postgres' && v !== 'level') {
      console.error(`test:crash: --store must be 'level' or 'postgres' (got '${v ?? ''}')`);
      process.exit(2);
    }
    env.AGENTD_CRASH_STORE = v;
  } else rest.push(a);
}
const child = spawn(process.execPath, ['node_modules/vitest/vitest.mjs', 'run', '--config', 'vitest.crash.config.ts', ...rest], { stdio: 'inherit', env });
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
