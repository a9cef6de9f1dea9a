// `npm run bench [-- name ...]`: runs the benchmarks (all, or the named ones) one after the other,
// saves each result into test/bench/results.json as soon as it is measured and regenerates
// docs/benchmarks.md from that file.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BUILD_DIR, CLI, ROOT, SCALE, loadAverage, machine, nowMs, saveProfile, saveResult, type Benchmark } from './lib.js';
import { profileBackgroundDrain, profileRealPath } from './profile.js';
import { profileKeyCost } from './profile-key.js';
import { profileRunCost } from './profile-run.js';
import { healthBench } from './benchmarks/health.js';
import { startupBench } from './benchmarks/startup.js';
import { runBench } from './benchmarks/run-real.js';
import { streamsBench } from './benchmarks/streams.js';
import { telemetryBench } from './benchmarks/telemetry.js';
import { approvalsBench } from './benchmarks/approvals.js';
import { backgroundBench, backgroundScaleBench } from './benchmarks/background.js';
import { backgroundDrainBench } from './benchmarks/background-drain.js';
import { redactionBench } from './benchmarks/redaction.js';
import { postgresBench } from './benchmarks/postgres.js';
import { protocolsBench } from './benchmarks/protocols.js';
import { flowBench } from './benchmarks/flow.js';
import { policyBench } from './benchmarks/policy.js';
import { debugBench } from './benchmarks/debug.js';
import { tenantsBench } from './benchmarks/tenants.js';

const BENCHMARKS: Record<string, Benchmark> = {
  health: healthBench,
  startup: startupBench,
  run: runBench,
  streams: streamsBench,
  telemetry: telemetryBench,
  approvals: approvalsBench,
  background: backgroundBench,
  'background-scale': backgroundScaleBench,
  'background-drain': backgroundDrainBench,
  redaction: redactionBench,
  postgres: postgresBench,
  protocols: protocolsBench,
  flow: flowBench,
  policy: policyBench,
  debug: debugBench,
  tenants: tenantsBench,
};
const ORDER = Object.keys(BENCHMARKS);

function newest(dir: string): number {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}

/**
 * Everything runs from test/bench/dist/, rebuilt whenever src/, machines/, package.json or the
 * build script is newer: child servers import tsc's per-module output (tsconfig.build.json), and the
 * CLI is the same esbuild bundle `npm run build` makes for `npm start` (scripts/build.mjs). A
 * package.json copy there makes tsc's output ESM and gives its readVersion() the real version.
 */
function ensureBuild(): void {
  const sources = Math.max(
    newest(join(ROOT, 'src')),
    newest(join(ROOT, 'machines')),
    statSync(join(ROOT, 'package.json')).mtimeMs,
    statSync(join(ROOT, 'scripts', 'build.mjs')).mtimeMs,
  );
  const TSC_MARKER = join(BUILD_DIR, 'src', 'main.js');
  const fresh = (f: string) => existsSync(f) && statSync(f).mtimeMs >= sources;
  if (!fresh(TSC_MARKER)) {
    process.stderr.write('bench: building test/bench/dist (tsc -p tsconfig.build.json)...\n');
    const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', BUILD_DIR], { cwd: ROOT, stdio: 'inherit' });
    writeFileSync(join(BUILD_DIR, 'package.json'), readFileSync(join(ROOT, 'package.json')));
    // tsc copies no SQL: the PostgreSQL store finds its migrations next to its module.
    cpSync(join(ROOT, 'src', 'store', 'migrations'), join(BUILD_DIR, 'src', 'store', 'migrations'), { recursive: true });
    if (r.status !== 0) {
      if (!existsSync(TSC_MARKER)) throw new Error('the build failed and produced no JavaScript');
      process.stderr.write('bench: tsc reported type errors (work in progress elsewhere?); measuring the JavaScript it emitted\n');
    }
  }
  if (!fresh(CLI)) {
    process.stderr.write('bench: bundling the CLI into test/bench/dist (node scripts/build.mjs)...\n');
    const r = spawnSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs'), '--outdir', BUILD_DIR], { cwd: ROOT, stdio: 'inherit' });
    if (r.status !== 0 || !existsSync(CLI)) throw new Error('the bundle build (scripts/build.mjs) failed');
  }
}

async function main(): Promise<void> {
  const args = process.argv.slice(2).filter((a) => !a.startsWith('-'));
  if (args[0] === 'profile') {
    // `npm run bench -- profile <label> [--quick]`: see test/bench/profile.ts.
    ensureBuild();
    await profileRealPath(args[1] ?? 'after', ORDER, saveProfile);
    return;
  }
  if (args[0] === 'profile-key') {
    // `npm run bench -- profile-key [--quick]`: see test/bench/profile-key.ts.
    ensureBuild();
    await profileKeyCost();
    return;
  }
  if (args[0] === 'profile-run') {
    // `npm run bench -- profile-run [--quick]`: see test/bench/profile-run.ts.
    ensureBuild();
    await profileRunCost();
    return;
  }
  if (args[0] === 'profile-background') {
    // `npm run bench -- profile-background <label> [--quick]`: see test/bench/profile.ts.
    ensureBuild();
    await profileBackgroundDrain(args[1] ?? 'after', ORDER, saveProfile);
    return;
  }
  const unknown = args.filter((a) => !BENCHMARKS[a]);
  if (unknown.length) {
    process.stderr.write(`bench: unknown benchmark(s) ${unknown.join(', ')}; choose from ${ORDER.join(', ')}\n`);
    process.exitCode = 2;
    return;
  }
  const selected = args.length ? ORDER.filter((n) => args.includes(n)) : ORDER;
  ensureBuild();
  let failed = 0;
  for (const name of selected) {
    const load = loadAverage();
    process.stderr.write(`bench: ${name} (load average ${load})...\n`);
    const started = nowMs();
    const m = machine();
    try {
      const out = await BENCHMARKS[name]();
      if (SCALE !== 1) out.notes.unshift(`Smoke run with BENCH_SCALE=${SCALE}: durations and data sets scaled down; not a measurement.`);
      const result = {
        name,
        ...out,
        ran_at: new Date().toISOString(),
        duration_s: (nowMs() - started) / 1000,
        command: `npm run bench -- ${name}`,
        machine: m,
      };
      saveResult(result, ORDER);
      for (const r of out.rows) {
        const verdict = r.pass === undefined || r.pass === null ? '' : r.pass ? ' PASS' : ' FAIL';
        process.stderr.write(
          `  ${r.metric}: ${r.value} ${r.unit}${r.baseline !== undefined && r.baseline !== null ? ` (baseline ${r.baseline})` : ''}${r.ratio ? ` ratio ${r.ratio.toFixed(3)}` : ''}${verdict}\n`,
        );
      }
      for (const n of out.notes) process.stderr.write(`  note: ${n}\n`);
      process.stderr.write(`bench: ${name} done in ${((nowMs() - started) / 1000).toFixed(1)} s\n`);
    } catch (err) {
      failed++;
      process.stderr.write(`bench: ${name} failed: ${(err as Error)?.stack ?? String(err)}\n`);
    }
  }
  if (failed) process.exitCode = 1;
}

await main();
// Exit explicitly: a client library (Redis, keep-alive sockets) must not keep the runner alive.
process.exit(process.exitCode ?? 0);
