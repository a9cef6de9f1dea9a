// Start-up to ready: `node test/bench/dist/agentd.js serve` (the bundle `npm start` runs, built into the
// bench's private dist) on an empty data dir and on one holding 100,000 run records, against a bare
// Fastify process started the same way.
import { spawn } from 'node:child_process';
import { CLI, ROOT, freePort, log, scaled, median, nowMs, pollUntil, ratio, removeDir, round, tempDir, type BenchOutput } from '../lib.js';
import { populateCompletedRuns } from '../datagen.js';

const EMPTY_REPEATS = scaled(5);
const FULL_REPEATS = scaled(3);
const RECORDS = scaled(100_000);

/** Environment without AGENTD_* variables, so the CLI uses only its flags and defaults. */
function cleanEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('AGENTD_') && k !== 'OPENAI_API_KEY'));
}

export interface Timed {
  /** Spawn to the first /ready answering ready:true, ms. */
  readyMs: number;
  /** Spawn to the CLI's "listening on" line (printed after start-up recovery finished), ms. */
  logMs: number;
  pid: number;
}

/** Spawns a server process, polls `readyPath`, then stops it (SIGTERM) unless `keep`. */
export async function timeStart(
  args: string[],
  port: number,
  opts: { readyPath?: string; test?: (b: string) => boolean; keep?: boolean; cwd?: string; waitLog?: boolean } = {},
): Promise<Timed & { stop(): Promise<void> }> {
  const t0 = nowMs();
  const proc = spawn(process.execPath, args, { cwd: opts.cwd ?? ROOT, env: cleanEnv(), stdio: ['ignore', 'ignore', 'pipe'] });
  let logMs = NaN;
  let err = '';
  proc.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
    if (Number.isNaN(logMs) && /listening on/.test(err)) logMs = nowMs() - t0;
  });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const stop = async () => {
    if (proc.exitCode !== null) return;
    proc.kill('SIGTERM');
    const t = setTimeout(() => proc.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(t);
  };
  try {
    const at = await pollUntil(`http://127.0.0.1:${port}${opts.readyPath ?? '/ready'}`, opts.test ?? ((b) => JSON.parse(b).ready === true), {
      timeoutMs: 120_000,
      stepMs: 5,
      alive: () => proc.exitCode === null,
    });
    const readyMs = at - t0;
    // The log line follows the start-up sweep; wait for it (bounded) before stopping.
    const deadline = nowMs() + 120_000;
    while (opts.waitLog && Number.isNaN(logMs) && proc.exitCode === null && nowMs() < deadline) await new Promise((r) => setTimeout(r, 5));
    const out = { readyMs, logMs, pid: proc.pid!, stop };
    if (!opts.keep) await stop();
    return out;
  } catch (e) {
    await stop();
    throw new Error(`${String(e)}\n${err.slice(-2000)}`);
  }
}

export const cliArgs = (port: number, dataDir: string, extra: string[] = []): string[] => [
  CLI,
  'serve',
  '--host',
  '127.0.0.1',
  '--port',
  String(port),
  '--data-dir',
  dataDir,
  ...extra,
];

/** Starts the CLI on a free port, times it to ready, stops it (unless keep). */
export async function startCli(dataDir: string, opts: { extra?: string[]; keep?: boolean } = {}): Promise<Timed & { stop(): Promise<void>; port: number }> {
  const port = await freePort();
  const t = await timeStart(cliArgs(port, dataDir, opts.extra), port, { keep: opts.keep, waitLog: true });
  return { ...t, port };
}

const BARE = `import Fastify from 'fastify';
const app = Fastify();
app.get('/ready', async () => ({ ready: true }));
await app.listen({ host: '127.0.0.1', port: Number(process.env.BENCH_PORT) });
process.on('SIGTERM', () => app.close().then(() => process.exit(0)));`;

async function bareStart(): Promise<number> {
  const port = await freePort();
  process.env.BENCH_PORT = String(port);
  try {
    const t = await timeStart(['--input-type=module', '-e', BARE], port);
    return t.readyMs;
  } finally {
    delete process.env.BENCH_PORT;
  }
}

export async function startupBench(): Promise<BenchOutput> {
  const bare: number[] = [];
  const empty: number[] = [];
  for (let i = 0; i < EMPTY_REPEATS; i++) {
    bare.push(await bareStart());
    const dir = tempDir('startup-empty');
    try {
      empty.push((await startCli(dir)).readyMs);
    } finally {
      removeDir(dir);
    }
  }

  log(`empty: ${empty.map((v) => v.toFixed(0)).join(', ')} ms; bare: ${bare.map((v) => v.toFixed(0)).join(', ')} ms`);
  const full = tempDir('startup-100k');
  const genStart = nowMs();
  await populateCompletedRuns(full, RECORDS);
  const genS = (nowMs() - genStart) / 1000;
  log(`wrote ${RECORDS} run records in ${genS.toFixed(1)} s`);
  const fullReady: number[] = [];
  const fullLog: number[] = [];
  try {
    for (let i = 0; i < FULL_REPEATS; i++) {
      const t = await startCli(full);
      fullReady.push(t.readyMs);
      fullLog.push(t.logMs);
      log(`100k start ${i + 1}: ready ${t.readyMs.toFixed(0)} ms, log line ${t.logMs.toFixed(0)} ms`);
    }
  } finally {
    removeDir(full);
  }
  const bareMed = median(bare);
  const emptyMed = median(empty);
  const fullMed = median(fullReady);
  return {
    title: 'Start-up: spawning `node test/bench/dist/agentd.js serve` to GET /ready answering ready:true',
    method: [
      `Each start spawns \`node test/bench/dist/agentd.js serve --host 127.0.0.1 --port <free> --data-dir <dir>\` (the esbuild bundle of src/cli.ts that \`npm start\` runs as dist/agentd.js; default config: demo model, built-in tools) and polls GET /ready every 5 ms; figures are medians (empty: ${EMPTY_REPEATS} starts, each on a fresh dir; 100k: ${FULL_REPEATS} starts on one dir).`,
      `100k data dir: ${RECORDS.toLocaleString('en-US')} completed run records (about 1.2 KB of JSON each, with their status/session indexes) written through LevelStore.commit in batches of 1,000, then closed (took ${genS.toFixed(1)} s).`,
      'Baseline: `node --input-type=module -e` with a bare Fastify app serving GET /ready, spawned and polled the same way.',
    ],
    rows: [
      {
        metric: 'Empty data dir, spawn to ready (median)',
        value: round(emptyMed, 0),
        unit: 'ms',
        baseline: round(bareMed, 0),
        ratio: ratio(emptyMed, bareMed),
        target: '<= 1000 ms',
        pass: emptyMed <= 1000,
      },
      {
        metric: 'Empty data dir, worst start',
        value: round(Math.max(...empty), 0),
        unit: 'ms',
        baseline: round(Math.max(...bare), 0),
        ratio: ratio(Math.max(...empty), Math.max(...bare)),
      },
      {
        metric: `${RECORDS.toLocaleString('en-US')} records, spawn to ready (median)`,
        value: round(fullMed, 0),
        unit: 'ms',
        baseline: round(bareMed, 0),
        ratio: ratio(fullMed, bareMed),
        target: '<= 3000 ms',
        pass: fullMed <= 3000,
      },
      { metric: `${RECORDS.toLocaleString('en-US')} records, first start (LevelDB replays its log)`, value: round(fullReady[0], 0), unit: 'ms' },
      { metric: `${RECORDS.toLocaleString('en-US')} records, spawn to "listening" log line (median)`, value: round(median(fullLog), 0), unit: 'ms' },
    ],
    notes: [],
  };
}
