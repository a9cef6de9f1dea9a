// Background tasks on the real model path (the openai-compatible provider over HTTP to the fake
// server): the idle cost of 10,000 enabled cron tasks, and the dispatch lateness of 1,000
// one-second interval tasks. The drain of manual runs against BullMQ and pg-boss is
// background-drain.ts.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { LevelStore } from '../../../src/store/level.js';
import type { Page } from '../../../src/store/store.js';
import {
  QUICK,
  ROOT,
  realPathConfig,
  cpuSeconds,
  log,
  nowMs,
  percentile,
  removeDir,
  request,
  round,
  rssMb,
  scaled,
  sleep,
  startChild,
  tempDir,
  type BenchOutput,
  type Child,
  type Row,
} from '../lib.js';
import { treeStats } from '../tree-stats.js';
import { fanOut, postJson } from './drain-agentd.js';

const CRON_TASKS = scaled(10_000, 200);
const INTERVAL_TASKS = scaled(1000, 50);
const INTERVAL_WINDOW_S = 12;
/** The idle window spans a full retention sweep interval (background.run_retention.sweep_interval_seconds, 60), so it always holds one sweep. */
const CPU_WINDOW_S = QUICK ? 10 : 61;
/** The window before it: the creation's tail (LevelDB writing out its memtable). */
const SETTLING_WINDOW_S = 10;
/** Tasks are created with this many requests in flight (the store group-commits them). */
const CREATE_CONCURRENCY = 64;

// ---------------------------------------------------------------- idle cron tasks

async function cronIdle(child: Child): Promise<{ createS: number; cpuPct: number; settlingPct: number; rss: number }> {
  const t0 = nowMs();
  await fanOut(CRON_TASKS, CREATE_CONCURRENCY, (i, agent) =>
    postJson(
      `${child.url}/background/tasks`,
      { task_id: `cron-${i}`, query: 'yearly report', schedule: { type: 'cron', expression: `${i % 60} ${i % 24} 1 1 *` } },
      agent,
    ),
  );
  const createS = (nowMs() - t0) / 1000;
  await sleep(2000);
  const window = async (seconds: number) => {
    const c0 = cpuSeconds(child.pid);
    const w0 = nowMs();
    await sleep(seconds * 1000);
    return ((cpuSeconds(child.pid) - c0) / ((nowMs() - w0) / 1000)) * 100;
  };
  // The first window may still hold the creation's tail (LevelDB writing out what it left in the
  // 32 MB memtable, src/store/level.ts). The idle figure is the next window, a whole retention
  // sweep interval long, so the sweep (every 60 s) is always in it; the first is shown too.
  const settlingPct = await window(SETTLING_WINDOW_S);
  const cpuPct = await window(CPU_WINDOW_S);
  return { createS, cpuPct, settlingPct, rss: rssMb(child.pid) };
}

// ---------------------------------------------------------------- interval dispatch lateness

/**
 * Creates the interval tasks, lets them dispatch for the window, stops the server and reads every
 * BackgroundRun straight from its store (a server saturated by dispatching would answer the reads late).
 */
async function intervalLateness(
  child: Child,
  dir: string,
): Promise<{ lateness: number[]; runs: number; statuses: Record<string, number>; createS: number; windowS: number }> {
  const t0 = nowMs();
  await fanOut(INTERVAL_TASKS, CREATE_CONCURRENCY, (i, agent) =>
    postJson(
      `${child.url}/background/tasks`,
      { task_id: `every-${i}`, query: 'tick', schedule: { type: 'interval', seconds: 1 }, session_policy: { mode: 'run' } },
      agent,
    ),
  );
  const createS = (nowMs() - t0) / 1000;
  const steadyFrom = Date.now() + 2000; // occurrences due after every task exists and the first burst passed
  await sleep((INTERVAL_WINDOW_S + 2) * 1000);
  const until = Date.now() - 1000;
  await child.stop();
  const store = new LevelStore({ path: dir, sync: false });
  await store.open();
  const lateness: number[] = [];
  const statuses: Record<string, number> = {};
  let runs = 0;
  try {
    let cursor: string | null = null;
    do {
      const page: Page<Record<string, unknown>> = await store.listRecords<Record<string, unknown>>('bg_runs', { limit: 1000, cursor });
      for (const { value } of page.items) {
        const r = (value.run ?? value) as { due_at?: string | null; triggered_at?: string; queued_at?: string | null; status?: string; trigger_type?: string };
        if (r.trigger_type !== 'interval' || !r.due_at) continue;
        const due = Date.parse(r.due_at);
        if (due < steadyFrom || due > until) continue;
        runs++;
        statuses[r.status ?? '?'] = (statuses[r.status ?? '?'] ?? 0) + 1;
        lateness.push(Date.parse(r.queued_at ?? r.triggered_at ?? r.due_at) - due);
      }
      cursor = page.next_cursor;
    } while (cursor);
  } finally {
    await store.close();
  }
  return { lateness, runs, statuses, createS, windowS: (until - steadyFrom) / 1000 };
}

export async function backgroundBench(): Promise<BenchOutput> {
  if (!existsSync(join(ROOT, 'src', 'background', 'manager.ts'))) throw new Error('src/background/ does not exist yet');
  const fake = await startChild({ mode: 'fake-openai' });
  try {
    return await backgroundWithModel(fake.url);
  } finally {
    await fake.stop();
  }
}

async function backgroundWithModel(modelUrl: string): Promise<BenchOutput> {
  const model = { kind: 'config' as const };
  const rows: Row[] = [];
  const notes: string[] = [];
  // Idle cron tasks, then interval dispatch, each on a fresh server.
  const dir2 = tempDir('bg-cron');
  const c2 = await startChild({ mode: 'agentd', dataDir: dir2, config: realPathConfig(modelUrl, 'bench', { background: { enabled: true } }), model });
  try {
    const idle = await cronIdle(c2);
    log(`cron: created ${CRON_TASKS} tasks in ${idle.createS.toFixed(1)} s, idle CPU ${idle.cpuPct.toFixed(2)} %`);
    rows.push({
      metric: `CPU of the idle server with ${CRON_TASKS.toLocaleString('en-US')} enabled cron tasks (${CPU_WINDOW_S} s window)`,
      value: round(idle.cpuPct, 2),
      unit: '% of a core',
      target: '<= 2 %',
      pass: idle.cpuPct <= 2,
    });
    rows.push({
      metric: `CPU in the ${SETTLING_WINDOW_S} s before that window (from 2 s after the last creation)`,
      value: round(idle.settlingPct, 2),
      unit: '% of a core',
    });
    rows.push({ metric: `RSS with ${CRON_TASKS.toLocaleString('en-US')} cron tasks`, value: round(idle.rss, 0), unit: 'MB' });
    rows.push({
      metric: `Creating ${CRON_TASKS.toLocaleString('en-US')} tasks (POST /background/tasks, ${CREATE_CONCURRENCY} concurrent)`,
      value: round(CRON_TASKS / idle.createS, 0),
      unit: 'tasks/s',
    });
    // Shutdown and start-up with that many tasks: each enabled task is an actor, stopped at
    // shutdown and spawned again at start-up (src/runtime/system.ts, SupervisorGroup shards).
    const stopT0 = nowMs();
    await c2.stop();
    const stopMs = nowMs() - stopT0;
    const startT0 = nowMs();
    const again = await startChild({ mode: 'agentd', dataDir: dir2, config: realPathConfig(modelUrl, 'bench', { background: { enabled: true } }), model });
    const restartMs = nowMs() - startT0;
    await again.stop();
    log(`cron: SIGTERM to exit ${stopMs.toFixed(0)} ms, restart to ready ${restartMs.toFixed(0)} ms`);
    rows.push(
      {
        metric: `SIGTERM to exit, ${CRON_TASKS.toLocaleString('en-US')} cron tasks (graceful shutdown, 5 s grace)`,
        value: round(stopMs, 0),
        unit: 'ms',
        target: '<= 5000 ms',
        pass: stopMs <= 5000,
      },
      {
        metric: `Restart with ${CRON_TASKS.toLocaleString('en-US')} cron tasks, spawn to listening (every task's actor started)`,
        value: round(restartMs, 0),
        unit: 'ms',
        target: '<= 3000 ms',
        pass: restartMs <= 3000,
      },
    );
  } finally {
    await c2.stop();
    removeDir(dir2);
  }

  const dir3 = tempDir('bg-interval');
  const c3 = await startChild({ mode: 'agentd', dataDir: dir3, config: realPathConfig(modelUrl, 'bench', { background: { enabled: true } }), model });
  try {
    const iv = await intervalLateness(c3, dir3);
    const p99 = percentile(iv.lateness, 99);
    rows.push(
      {
        metric: `Dispatch lateness p99, ${INTERVAL_TASKS.toLocaleString('en-US')} interval tasks every 1 s (${iv.runs.toLocaleString('en-US')} occurrences)`,
        value: round(p99, 1),
        unit: 'ms',
        target: '<= 50 ms',
        pass: iv.runs > 0 && p99 <= 50,
      },
      { metric: 'Dispatch lateness p50', value: round(percentile(iv.lateness, 50), 1), unit: 'ms' },
      {
        metric: 'Occurrences due in the steady window that were dispatched / expected',
        value: `${iv.runs.toLocaleString('en-US')} / ${Math.round(INTERVAL_TASKS * iv.windowS).toLocaleString('en-US')}`,
        unit: '',
      },
    );
    notes.push(`Interval runs by status at the end of the window: ${JSON.stringify(iv.statuses)}.`);
  } finally {
    await c3.stop();
    removeDir(dir3);
  }

  return {
    title: 'Background tasks: idle cron tasks, interval dispatch lateness',
    method: [
      'Model path of every row: agentd configured with `agent.model.provider: "openai-compatible"` over HTTP to the fake OpenAI-compatible server (its own process; the run benchmark\'s), local `add` tool declared; the drained runs are the trivial workload (one model call).',
      "The drain of manual runs against BullMQ and pg-boss is the `background-drain` benchmark; where a drained run's CPU goes, `npm run bench -- profile-background <label>` (test/bench/profile.ts; see Profiles).",
      `Idle cron: ${CRON_TASKS.toLocaleString('en-US')} tasks with yearly cron expressions, created over HTTP (${CREATE_CONCURRENCY} requests in flight); CPU is /proc/<pid>/stat utime+stime over ${CPU_WINDOW_S} s, from ${SETTLING_WINDOW_S + 2} s after the last creation (the ${SETTLING_WINDOW_S} s before it are shown too: they may hold the creation's tail, LevelDB writing out what it left in its 32 MB memtable). The window is longer than the retention sweep interval (background.run_retention.sweep_interval_seconds, 60 s), so it always holds one sweep; a sweep counts the runs of only the tasks with a run ended since the last one, none here. Then the server is stopped (SIGTERM; the harness's child closes with a 5 s grace) and started again on the same data dir: SIGTERM to exit, and spawn to listening (the child reports ready once start-up, which starts every enabled task's actor, is done).`,
      `Interval: ${INTERVAL_TASKS.toLocaleString('en-US')} tasks with interval 1 s (default overlap skip_if_running, background.concurrency 4), observed for ${INTERVAL_WINDOW_S} s after creation; lateness = queued_at (else triggered_at) - due_at of each interval BackgroundRun due in the steady window (from 2 s after the last task was created to 1 s before the end), read from the store after the server stopped. An occurrence not dispatched by then is missing from the count.`,
    ],
    rows,
    notes,
  };
}

// ---------------------------------------------------------------- at scale: skipped occurrences, deletion

const SCALE_TASKS = scaled(1000, 50);
const SCALE_WARMUP_S = 15;
const SCALE_WINDOW_S = Number(process.env.BENCH_BG_WINDOW_S ?? scaled(60, 10));
/** Each run takes this long (zero-work model that streams slowly), so nearly every occurrence finds its task busy. */
const SCALE_RUN_S = 10;

/**
 * Issue 10 finding 10: 1,000 interval tasks every 1 s with overlap skip_if_running and runs long
 * enough that almost every occurrence is skipped; the data dir's growth and the server's CPU over
 * a window, then DELETE of every task with delete_runs=true (timed) and what is left on disk.
 */
export async function backgroundScaleBench(): Promise<BenchOutput> {
  const rows: Row[] = [];
  const notes: string[] = [];
  const dir = tempDir('bg-scale');
  const fake = await startChild({ mode: 'fake-openai' });
  const config = realPathConfig(fake.url, `slow-${SCALE_RUN_S * 10}-100`, { background: { enabled: true, concurrency: 4 } });
  const child = await startChild({ mode: 'agentd', dataDir: dir, config, model: { kind: 'config' } });
  try {
    const t0 = nowMs();
    await fanOut(SCALE_TASKS, CREATE_CONCURRENCY, (i, agent) =>
      postJson(`${child.url}/background/tasks`, { task_id: `tick-${i}`, query: 'tick', schedule: { type: 'interval', seconds: 1 } }, agent),
    );
    log(`created ${SCALE_TASKS} interval tasks in ${((nowMs() - t0) / 1000).toFixed(1)} s; warming up ${SCALE_WARMUP_S} s`);
    await sleep(SCALE_WARMUP_S * 1000);
    const status = async () =>
      JSON.parse((await request(`${child.url}/background/status`)).body) as {
        runs: number;
        skipped_occurrences?: number;
        status_counts: Record<string, number>;
      };
    // Live data at both ends of the window (read outside the CPU window): the bytes of every key and
    // value the store holds (a full scan) plus the workspace files. The files of the data dir also
    // hold LevelDB's write-ahead log and memtable (up to 32 MB: src/store/level.ts) and overwritten
    // rows until a compaction drops them, so over 60 s they measure that buffering, not growth.
    const liveBytes = async () => (await child.call<number>({ cmd: 'liveStoreBytes' })) + treeStats(join(dir, 'workspaces'), { bytes: true }).bytes;
    const live0 = await liveBytes();
    const s0 = await status();
    const d0 = treeStats(dir, { bytes: true });
    const c0 = cpuSeconds(child.pid);
    const w0 = nowMs();
    // The raw size too (a diagnostic): LevelDB grows its log and then compacts it away, so it is
    // summarised as the least-squares slope of the size sampled every 2 s over the window.
    const samples: Array<[number, number]> = [[0, d0.bytes]];
    while (nowMs() - w0 < SCALE_WINDOW_S * 1000) {
      await sleep(Math.min(2000, SCALE_WINDOW_S * 1000 - (nowMs() - w0)));
      samples.push([(nowMs() - w0) / 1000, treeStats(dir, { bytes: true }).bytes]);
    }
    const windowS = (nowMs() - w0) / 1000;
    const cpuPct = ((cpuSeconds(child.pid) - c0) / windowS) * 100;
    const d1 = treeStats(dir, { bytes: true });
    const s1 = await status();
    const live1 = await liveBytes();
    const liveMbMin = ((live1 - live0) / 1e6) * (60 / windowS);
    const mx = samples.reduce((a, [x]) => a + x, 0) / samples.length;
    const my = samples.reduce((a, [, y]) => a + y, 0) / samples.length;
    const slope = samples.reduce((a, [x, y]) => a + (x - mx) * (y - my), 0) / samples.reduce((a, [x]) => a + (x - mx) ** 2, 0);
    const growthMbMin = (slope / 1e6) * 60;
    const endToEndMbMin = ((d1.bytes - d0.bytes) / 1e6) * (60 / windowS);
    const skippedPerS = ((s1.skipped_occurrences ?? 0) - (s0.skipped_occurrences ?? 0)) / windowS;
    const runsPerS = (s1.runs - s0.runs) / windowS;
    log(
      `window ${windowS.toFixed(0)} s: data ${(d0.bytes / 1e6).toFixed(1)} -> ${(d1.bytes / 1e6).toFixed(1)} MB, CPU ${cpuPct.toFixed(1)} %, ${skippedPerS.toFixed(0)} skipped/s, ${runsPerS.toFixed(2)} runs/s`,
    );
    rows.push(
      {
        metric: `Data dir growth, ${SCALE_TASKS.toLocaleString('en-US')} interval tasks every 1 s (skip_if_running, runs of ${SCALE_RUN_S} s), ${SCALE_WINDOW_S} s window (live data: stored keys and values plus workspace files)`,
        value: round(liveMbMin, 2),
        unit: 'MB/min',
        target: '<= 5 MB/min',
        pass: liveMbMin <= 5,
      },
      {
        metric:
          "Apparent size slope over the window (least squares, every 2 s; includes LevelDB's write-ahead log, which grows up to the 32 MB memtable before a flush)",
        value: round(growthMbMin, 2),
        unit: 'MB/min',
      },
      {
        metric: 'Live data at the start / end of the window (stored keys and values, uncompressed, plus workspace files)',
        value: `${round(live0 / 1e6, 1)} / ${round(live1 / 1e6, 1)}`,
        unit: 'MB',
      },
      { metric: 'agentd CPU over the same window', value: round(cpuPct, 1), unit: '% of a core', target: '<= 30 %', pass: cpuPct <= 30 },
      { metric: 'Occurrences skipped by the overlap policy (counted on the schedule rows)', value: round(skippedPerS, 0), unit: 'per s' },
      { metric: 'Run rows created (runs that were really queued)', value: round(runsPerS, 2), unit: 'per s' },
      { metric: 'Data dir growth, end minus start of the window', value: round(endToEndMbMin, 2), unit: 'MB/min' },
      { metric: 'Data dir size at the start / end of the window', value: `${round(d0.bytes / 1e6, 1)} / ${round(d1.bytes / 1e6, 1)}`, unit: 'MB' },
    );

    const ws = join(dir, 'workspaces', 'background');
    const before = treeStats(ws, { bytes: true });
    const tDel = nowMs();
    await fanOut(SCALE_TASKS, CREATE_CONCURRENCY, async (i, agent) => {
      const r = await request(`${child.url}/background/tasks/tick-${i}?delete_runs=true`, { method: 'DELETE', agent });
      if (r.status !== 200) throw new Error(`DELETE tick-${i} answered ${r.status}: ${r.body.slice(0, 200)}`);
    });
    const delS = (nowMs() - tDel) / 1000;
    const after = treeStats(ws, { bytes: true });
    const left = await status();
    log(`deleted ${SCALE_TASKS} tasks with their runs in ${delS.toFixed(1)} s; workspace files ${before.files} -> ${after.files}; runs left ${left.runs}`);
    rows.push(
      {
        metric: `Deleting ${SCALE_TASKS.toLocaleString('en-US')} tasks with delete_runs=true (${CREATE_CONCURRENCY} concurrent DELETEs)`,
        value: round(delS, 2),
        unit: 's',
        target: '<= 10 s',
        pass: delS <= 10,
      },
      {
        metric: 'Workspace files before / after the deletion',
        value: `${before.files.toLocaleString('en-US')} / ${after.files.toLocaleString('en-US')}`,
        unit: '',
        pass: after.files === 0,
      },
      { metric: 'Run rows left after the deletion', value: left.runs, unit: '', pass: left.runs === 0 },
    );
    notes.push(`Run statuses at the end of the window: ${JSON.stringify(Object.fromEntries(Object.entries(s1.status_counts).filter(([, n]) => n > 0)))}.`);
  } finally {
    await child.stop();
    await fake.stop();
    removeDir(dir);
  }
  return {
    title: 'Background tasks at scale: skipped occurrences and task deletion',
    method: [
      `${SCALE_TASKS.toLocaleString('en-US')} tasks with schedule interval 1 s, default overlap skip_if_running, background.concurrency 4, created over HTTP (${CREATE_CONCURRENCY} in flight); the model (the fake OpenAI-compatible server over HTTP through agentd's openai-compatible provider, model \`slow-${SCALE_RUN_S * 10}-100\`) streams for ${SCALE_RUN_S} s per run, so a task's run stays queued or running for many occurrences and almost every occurrence is skipped.`,
      `After ${SCALE_WARMUP_S} s of warm-up: data growth = the live data added over a ${SCALE_WINDOW_S} s window, per minute: the bytes of every key and value the store holds (a full scan in the server process through the bench's command channel, outside the CPU window) plus the apparent size of the workspace files, at the start and at the end of the window. The data dir's files also hold LevelDB's write-ahead log, which grows up to the 32 MB memtable before a flush, and overwritten rows until a compaction drops them, so their size over 60 s measures that buffering, not growth; its least-squares slope (sampled every 2 s) and end points are still shown; CPU = /proc/<pid>/stat utime+stime over the same window. Skipped occurrences per second from GET /background/status skipped_occurrences.`,
      `Then every task is deleted with DELETE /background/tasks/{id}?delete_runs=true (${CREATE_CONCURRENCY} concurrent), timed from the first request to the last answer; files left under workspaces/background/ and run rows left are counted after.`,
    ],
    rows,
    notes,
  };
}
