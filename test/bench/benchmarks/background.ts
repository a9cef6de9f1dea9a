// Background work on the real model path (the openai-compatible provider over HTTP to the fake
// server): manual runs drained through the full lifecycle against BullMQ jobs whose worker calls the
// AI SDK's generateText against the same server (concurrency 1 and 32), the idle cost of 10,000
// enabled cron tasks, and the dispatch lateness of 1,000 one-second interval tasks.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { Queue, Worker } from 'bullmq';
import { generateText, jsonSchema, stepCountIs, tool } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
// @ts-expect-error plain JS module shared with the child servers (no declaration file)
import { ADD } from '../bench-tools.mjs';
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
  ratio,
  removeDir,
  request,
  round,
  rssMb,
  scaled,
  sleep,
  startChild,
  tempDir,
  threadCpuMs,
  type BenchOutput,
  type Child,
  type Row,
} from '../lib.js';
import { treeStats } from '../tree-stats.js';

/** Runs per POST /background/tasks/{id}/runs in the bulk drain (the most one call takes; BullMQ's side adds 1,000 per addBulk). */
const BULK_LIST = 1000;
/** Runs drained per concurrency (each side), bounded so the benchmark stays short. */
const DRAIN_RUNS: Record<number, number> = QUICK ? { 1: 200, 32: 400 } : { 1: scaled(1500, 100), 32: scaled(5000, 200) };
const DRAIN_CONCURRENCY = [1, 32];
const DRAIN_QUERY = 'Say hello to the benchmark.';
const CRON_TASKS = scaled(10_000, 200);
const INTERVAL_TASKS = scaled(1000, 50);
const INTERVAL_WINDOW_S = 12;
/** The idle window spans a full retention sweep interval (background.run_retention.sweep_interval_seconds, 60), so it always holds one sweep. */
const CPU_WINDOW_S = QUICK ? 10 : 61;
/** The window before it: the creation's tail (LevelDB writing out its memtable). */
const SETTLING_WINDOW_S = 10;
const DRAIN_TIMEOUT_MS = 300_000;
/** Requests stop after this long, so a slow build cannot stretch `npm run bench` past its bound. */
const POST_BUDGET_MS = scaled(90_000, 5000);
const REDIS = { host: '127.0.0.1', port: 6379 };
/** Tasks are created with this many requests in flight (the store group-commits them). */
const CREATE_CONCURRENCY = 64;

type Json = Record<string, unknown>;

async function postJson(url: string, body: unknown, agent?: http.Agent): Promise<Json> {
  const r = await request(url, { method: 'POST', body: JSON.stringify(body), agent });
  if (r.status !== 200) throw new Error(`POST ${url} answered ${r.status}: ${r.body.slice(0, 300)}`);
  return JSON.parse(r.body) as Json;
}

/** Sends `n` requests with `concurrency` workers. */
async function fanOut(n: number, concurrency: number, send: (i: number, agent: http.Agent) => Promise<unknown>): Promise<void> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  let next = 0;
  try {
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < n) await send(next++, agent);
      }),
    );
  } finally {
    agent.destroy();
  }
}

const statusCounts = async (url: string, taskId: string): Promise<Record<string, number>> =>
  (JSON.parse((await request(`${url}/background/tasks/${taskId}/status`)).body) as { status_counts: Record<string, number> }).status_counts;

// ---------------------------------------------------------------- throughput

let drains = 0;
/**
 * Retention off for the drained task: by default a sweep every 60 s keeps a task's newest 1,000
 * ended runs, so a drain slower than a minute (a loaded machine) lost the rest from the status
 * counts and never looked drained.
 */
export const DRAIN_RETENTION = { max_runs_per_task: 1_000_000_000 };
/**
 * Creates a manual task and drains `runs` POST /background/tasks/{id}/run through it (32 requests
 * in flight). A run is drained once it is terminal and its workspace files (run.json with the
 * final status, events.jsonl) are on disk under `dataDir`: the mirror is part of a run's work, and
 * it can trail the runs by seconds (6,000 runs once ended with 866 folders written).
 */
export async function agentdDrain(
  child: Child,
  runs: number,
  dataDir: string,
  /** false: the task writes no workspace files (workspace_policy), a diagnostic of what they cost. */
  workspaceFiles = true,
  /** `bulk`: queued with POST /background/tasks/{id}/runs, lists of 1,000 one after the other (as the BullMQ side's addBulk); else one POST .../run per run, 32 in flight. */
  enqueue: 'single' | 'bulk' = 'single',
): Promise<{
  seconds: number;
  postS: number;
  requested: number;
  completed: number;
  other: Record<string, number>;
  cpuMs: number;
  /** CPU (ms) of the child's main thread and of its other threads over the drain. */
  threads: { main: number; others: number };
}> {
  const taskId = `bench-manual-${++drains}`;
  await postJson(`${child.url}/background/tasks`, {
    task_id: taskId,
    query: DRAIN_QUERY,
    schedule: { type: 'manual' },
    overlap_policy: 'allow_parallel',
    session_policy: { mode: 'run' },
    ...(workspaceFiles ? {} : { workspace_policy: { write_run_json: false, write_events_jsonl: false } }),
    // BENCH_BG_TASK: extra task fields (JSON) for an A/B drain, e.g. a workspace_policy.
    ...(process.env.BENCH_BG_TASK ? (JSON.parse(process.env.BENCH_BG_TASK) as Json) : {}),
  });
  const cpu0 = await child.call<{ user: number; system: number }>({ cmd: 'cpu' });
  const th0 = threadCpuMs(child.pid);
  const t0 = nowMs();
  let requested = 0;
  if (enqueue === 'bulk') {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      for (let i = 0; i < runs && nowMs() - t0 <= POST_BUDGET_MS; i += BULK_LIST) {
        const n = Math.min(BULK_LIST, runs - i);
        await postJson(`${child.url}/background/tasks/${taskId}/runs`, { runs: Array.from({ length: n }, () => ({})) }, agent);
        requested += n;
      }
    } finally {
      agent.destroy();
    }
  } else {
    await fanOut(runs, 32, async (i, agent) => {
      if (nowMs() - t0 > POST_BUDGET_MS) return;
      await postJson(`${child.url}/background/tasks/${taskId}/run`, {}, agent);
      requested++;
    });
  }
  const postS = (nowMs() - t0) / 1000;
  log(`${requested} runs requested in ${postS.toFixed(1)} s`);
  for (;;) {
    const counts = await statusCounts(child.url, taskId);
    const terminal = ['completed', 'failed', 'timeout', 'cancelled', 'skipped'].reduce((s, k) => s + (counts[k] ?? 0), 0);
    if (terminal >= requested) {
      if (workspaceFiles) await workspacesWritten(join(dataDir, 'workspaces', 'background', 'default', taskId), terminal - (counts.skipped ?? 0));
      const seconds = (nowMs() - t0) / 1000;
      const cpu1 = await child.call<{ user: number; system: number }>({ cmd: 'cpu' });
      const th1 = threadCpuMs(child.pid);
      const { completed = 0, ...other } = counts;
      const threads = { main: th1.main - th0.main, others: th1.others - th0.others };
      return { seconds, postS, requested, completed, other, cpuMs: (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / 1000, threads };
    }
    if (nowMs() - t0 > DRAIN_TIMEOUT_MS) throw new Error(`background runs not drained in ${DRAIN_TIMEOUT_MS / 1000} s: ${JSON.stringify(counts)}`);
    await sleep(100);
  }
}

/** Waits until `expected` run folders under `taskDir` hold events.jsonl and a run.json with a terminal status. */
async function workspacesWritten(taskDir: string, expected: number): Promise<void> {
  const t0 = nowMs();
  const unsure = new Set<string>();
  let listed = 0;
  for (;;) {
    if (listed < expected) {
      const names = existsSync(taskDir) ? readdirSync(taskDir) : [];
      if (names.length > listed) for (const n of names) unsure.add(n);
      listed = names.length;
    }
    // Files are read once every folder is there (a listing is cheap; reading thousands of files
    // each poll would take CPU from the server being measured).
    if (listed >= expected)
      for (const runId of unsure) {
        try {
          const run = JSON.parse(readFileSync(join(taskDir, runId, 'run.json'), 'utf8')) as { status?: string };
          if (['completed', 'failed', 'timeout', 'cancelled'].includes(run.status ?? '') && existsSync(join(taskDir, runId, 'events.jsonl')))
            unsure.delete(runId);
        } catch {
          // not written yet (or being renamed into place)
        }
      }
    if (listed >= expected && unsure.size === 0) return;
    if (nowMs() - t0 > DRAIN_TIMEOUT_MS)
      throw new Error(`workspace files of ${expected} runs not written in ${DRAIN_TIMEOUT_MS / 1000} s: ${listed} folders, ${unsure.size} not final`);
    await sleep(100);
  }
}

/** The local redis-server's pid (its CPU is BullMQ's queue work), null when it cannot be found. */
function redisServerPid(): number | null {
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'redis-server') return Number(pid);
    } catch {
      // the process ended meanwhile
    }
  }
  return null;
}

/**
 * The baseline: BullMQ on the local Redis, a Worker (in this process) of the same concurrency whose
 * processor calls the AI SDK's generateText against the same model server with the same tool, up
 * to 5 steps, per job; first add to last completion. CPU is this process's (the worker's) over the
 * drain, which includes addBulk.
 */
async function bullmqDrain(
  modelUrl: string,
  concurrency: number,
  runs: number,
): Promise<{ seconds: number; completed: number; failed: number; cpuMs: number; redisCpuMs: number | null }> {
  const name = `agentd-bench-${process.pid}-${Date.now()}-${concurrency}`;
  const queue = new Queue(name, { connection: REDIS });
  const model = createOpenAICompatible({ name: 'openai-compatible', baseURL: modelUrl, includeUsage: true }).chatModel('bench');
  const tools = {
    add: tool({
      description: ADD.description,
      inputSchema: jsonSchema<{ a: number; b: number }>(ADD.input_schema),
      execute: async ({ a, b }) => ({ sum: Number(a) + Number(b) }),
    }),
  };
  let completed = 0;
  let failed = 0;
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  const worker = new Worker(
    name,
    async (job) => {
      const r = await generateText({ model, system: 'You are a helpful assistant.', prompt: String(job.data.query), tools, stopWhen: stepCountIs(5) });
      return r.text;
    },
    { connection: REDIS, concurrency, autorun: true },
  );
  worker.on('completed', () => {
    if (++completed + failed === runs) done();
  });
  worker.on('failed', () => {
    if (completed + ++failed === runs) done();
  });
  try {
    await worker.waitUntilReady();
    const redis = redisServerPid();
    const redis0 = redis === null ? 0 : cpuSeconds(redis);
    const cpu0 = process.cpuUsage();
    const t0 = nowMs();
    for (let i = 0; i < runs; i += 1000) {
      await queue.addBulk(
        Array.from({ length: Math.min(1000, runs - i) }, (_, j) => ({
          name: 'agent',
          data: { i: i + j, query: DRAIN_QUERY },
          opts: { removeOnComplete: true, removeOnFail: true },
        })),
      );
    }
    await Promise.race([finished, sleep(DRAIN_TIMEOUT_MS).then(() => Promise.reject(new Error('BullMQ did not drain')))]);
    const cpu = process.cpuUsage(cpu0);
    const redisCpuMs = redis === null ? null : (cpuSeconds(redis) - redis0) * 1000;
    return { seconds: (nowMs() - t0) / 1000, completed, failed, cpuMs: (cpu.user + cpu.system) / 1000, redisCpuMs };
  } finally {
    await worker.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
  }
}

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
    for (const dir of drainDirs.splice(0)) removeDir(dir);
  }
}

/**
 * Data dirs of finished drains, removed at the end of the benchmark, not between drains: on the
 * benchmark VM's ext4 (no journal) the kernel skips recently deleted inodes when it allocates one,
 * so removing a drain's ~20,000 files made the next drain's workspace folders cost several times
 * more kernel CPU for the following 30 s (measured: 0.24 ms of system CPU per folder with no
 * deletions before, 1-2 ms after one).
 */
const drainDirs: string[] = [];

/** A warm-up drain, then the measured one, on a fresh server (`sync`: an fsync per store write batch, the default). */
async function drainOnFreshServer(
  modelUrl: string,
  concurrency: number,
  runs: number,
  sync: boolean,
  workspaceFiles = true,
  enqueue: 'single' | 'bulk' = 'single',
): Promise<Awaited<ReturnType<typeof agentdDrain>>> {
  const dir = tempDir('bg-drain');
  const child = await startChild({
    mode: 'agentd',
    dataDir: dir,
    config: realPathConfig(modelUrl, 'bench', { background: { enabled: true, concurrency, run_retention: DRAIN_RETENTION } }),
    model: { kind: 'config' },
    syncWrites: sync,
  });
  try {
    await agentdDrain(child, Math.min(runs, 500), dir, workspaceFiles, enqueue);
    return await agentdDrain(child, runs, dir, workspaceFiles, enqueue);
  } finally {
    await child.stop();
    drainDirs.push(dir);
  }
}

/** The local Redis's persistence settings (BullMQ's durability), or null when they cannot be read. */
async function redisPersistence(): Promise<string | null> {
  const { Redis } = await import('ioredis');
  const redis = new Redis({ ...REDIS, lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    const get = async (key: string) => ((await redis.config('GET', key)) as string[])[1] ?? '?';
    return `appendonly ${await get('appendonly')}, appendfsync ${await get('appendfsync')}, save "${await get('save')}"`;
  } catch {
    return null;
  } finally {
    redis.disconnect();
  }
}

/**
 * `npm run bench -- background-drain-bulk`: the drain of the `background` benchmark queued both
 * ways, one POST /background/tasks/{id}/run per run (32 in flight) and POST
 * /background/tasks/{id}/runs with lists of 1,000, against BullMQ + generateText (addBulk of
 * 1,000), at each concurrency, on fresh LevelDB servers (fsync on).
 */
export async function backgroundDrainBulkBench(): Promise<BenchOutput> {
  if (!existsSync(join(ROOT, 'src', 'background', 'manager.ts'))) throw new Error('src/background/ does not exist yet');
  const fake = await startChild({ mode: 'fake-openai' });
  const rows: Row[] = [];
  const notes: string[] = [`The baseline's Redis persistence (CONFIG GET at the start): ${(await redisPersistence()) ?? 'could not be read'}.`];
  try {
    for (const concurrency of DRAIN_CONCURRENCY) {
      const runs = DRAIN_RUNS[concurrency];
      const single = await drainOnFreshServer(fake.url, concurrency, runs, true, true, 'single');
      const bulk = await drainOnFreshServer(fake.url, concurrency, runs, true, true, 'bulk');
      await bullmqDrain(fake.url, concurrency, Math.min(runs, 500));
      const b = await bullmqDrain(fake.url, concurrency, runs);
      log(`concurrency ${concurrency}: single ${single.seconds.toFixed(1)} s, bulk ${bulk.seconds.toFixed(1)} s, BullMQ ${b.seconds.toFixed(1)} s`);
      const bRate = b.completed / b.seconds;
      for (const [how, d] of [
        ['one POST .../run per run, 32 in flight', single],
        ['POST .../runs, lists of 1,000', bulk],
      ] as const) {
        const rate = d.completed / d.seconds;
        rows.push(
          {
            metric: `Manual agent runs drained, concurrency ${concurrency}, queued with ${how} (${d.requested.toLocaleString('en-US')} runs)`,
            value: round(rate, 1),
            unit: 'runs/s',
            baseline: round(bRate, 1),
            baseline_label: 'BullMQ + generateText (addBulk of 1,000)',
            ratio: ratio(rate, bRate),
          },
          { metric: `Time to queue them, concurrency ${concurrency}, ${how}`, value: round(d.postS, 2), unit: 's' },
          {
            metric: `CPU per drained run, concurrency ${concurrency}, ${how} (server process)`,
            value: round(d.cpuMs / Math.max(1, d.requested), 2),
            unit: 'ms',
            baseline: round(b.cpuMs / Math.max(1, runs), 2),
            baseline_label: 'BullMQ worker process',
          },
        );
        if (d.completed !== d.requested) notes.push(`Statuses other than completed (concurrency ${concurrency}, ${how}): ${JSON.stringify(d.other)}`);
      }
    }
  } finally {
    await fake.stop();
    for (const dir of drainDirs.splice(0)) removeDir(dir);
  }
  return {
    title: 'Background drain queued one run per request and in lists of 1,000 (POST /background/tasks/{id}/runs), against BullMQ',
    method: [
      `The \`background\` benchmark's drain (${DRAIN_QUERY}: one model call on the real openai-compatible path to the fake model server, LevelDB with fsync on, workspace files on), each side warmed up with 500 runs on its fresh server first.`,
      'Queued two ways: one POST /background/tasks/{id}/run per run, 32 requests in flight; and POST /background/tasks/{id}/runs with lists of 1,000 runs, one list after the other (what BullMQ does with addBulk of 1,000).',
      'Rate: runs queued / seconds from the first request to the last run terminal with its workspace files written. CPU: the server process over the same span.',
    ],
    rows,
    notes,
  };
}

async function backgroundWithModel(modelUrl: string): Promise<BenchOutput> {
  const model = { kind: 'config' as const };
  const rows: Row[] = [];
  const notes: string[] = [];
  const persistence = await redisPersistence();
  notes.push(
    `The baseline's Redis persistence (CONFIG GET at the start of this benchmark): ${persistence ?? 'could not be read'}. With appendonly no and no save points, BullMQ's queue lives in memory only: a crash loses it. agentd's drain rows keep their durability (an fsync per store write batch); the "fsync off" diagnostic rows show the same drain without it.`,
  );
  // 1. Throughput against BullMQ + generateText, at each concurrency. A short warm-up drain on
  // each side first (the AI SDK and agentd's JIT both need a few hundred calls).
  for (const concurrency of DRAIN_CONCURRENCY) {
    const runs = DRAIN_RUNS[concurrency];
    const a = await drainOnFreshServer(modelUrl, concurrency, runs, true);
    log(`agentd drained ${a.completed} runs in ${a.seconds.toFixed(1)} s at concurrency ${concurrency}`);
    await bullmqDrain(modelUrl, concurrency, Math.min(runs, 500));
    const b = await bullmqDrain(modelUrl, concurrency, runs);
    log(`BullMQ + generateText drained ${b.completed} jobs in ${b.seconds.toFixed(1)} s at concurrency ${concurrency}`);
    const rate = a.completed / a.seconds;
    const bRate = b.completed / b.seconds;
    const r = ratio(rate, bRate);
    rows.push(
      {
        metric: `Manual agent runs drained, concurrency ${concurrency} (${a.requested.toLocaleString('en-US')} runs)`,
        value: round(rate, 1),
        unit: 'runs/s',
        baseline: round(bRate, 1),
        baseline_label: 'BullMQ + generateText',
        ratio: r,
        target: '>= 1.0x BullMQ + generateText',
        pass: r !== null && r >= 1.0,
      },
      {
        metric: `CPU per drained run, concurrency ${concurrency} (agentd: server process; BullMQ: its worker process)`,
        value: round(a.cpuMs / Math.max(1, a.requested), 2),
        unit: 'ms',
        baseline: round(b.cpuMs / Math.max(1, runs), 2),
        ratio: ratio(a.cpuMs / Math.max(1, a.requested), b.cpuMs / Math.max(1, runs)),
      },
      {
        metric: `CPU per drained run with the queue's server, concurrency ${concurrency} (agentd: server process, which holds its queue; BullMQ: worker process + redis-server)`,
        value: round(a.cpuMs / Math.max(1, a.requested), 2),
        unit: 'ms',
        baseline: b.redisCpuMs === null ? null : round((b.cpuMs + b.redisCpuMs) / Math.max(1, runs), 2),
        baseline_label: b.redisCpuMs === null ? 'redis-server not found' : 'BullMQ worker + Redis',
        ratio: b.redisCpuMs === null ? null : ratio(a.cpuMs / Math.max(1, a.requested), (b.cpuMs + b.redisCpuMs) / Math.max(1, runs)),
      },
      {
        metric: `agentd CPU per drained run by thread, concurrency ${concurrency}: main thread / other threads (libuv's pool: file calls, LevelDB writes and fsyncs; V8's GC workers; LevelDB compaction)`,
        value: `${round(a.threads.main / Math.max(1, a.requested), 2)} / ${round(a.threads.others / Math.max(1, a.requested), 2)}`,
        unit: 'ms',
      },
      {
        metric: `Runs not completed, concurrency ${concurrency}`,
        value: a.requested - a.completed,
        unit: '',
        baseline: b.failed,
        target: '0',
        pass: a.completed === a.requested,
      },
      {
        metric: `Enqueue rate, concurrency ${concurrency} (POST /background/tasks/{id}/run, 32 concurrent, runs executing meanwhile)`,
        value: round(a.requested / a.postS, 1),
        unit: 'requests/s',
      },
    );
    // Diagnostic: what durability costs. The baseline's Redis keeps its queue in memory (see the
    // notes for its persistence settings); agentd fsyncs every store write batch. Same drain with
    // the fsync off (store.sync false), not a target.
    const nosync = await drainOnFreshServer(modelUrl, concurrency, runs, false);
    rows.push({
      metric: `Diagnostic: the same drain with agentd's fsync off (store.sync false), concurrency ${concurrency}`,
      value: round(nosync.completed / nosync.seconds, 1),
      unit: 'runs/s',
      baseline: round(bRate, 1),
      baseline_label: 'BullMQ + generateText',
      ratio: ratio(nosync.completed / nosync.seconds, bRate),
    });
    // Diagnostic: what the workspace files cost (a folder and two new files per run; see
    // docs/operations.md, Capacity). Same drain, the task's workspace_policy writing neither file.
    const nofiles = await drainOnFreshServer(modelUrl, concurrency, runs, true, false);
    rows.push({
      metric: `Diagnostic: the same drain without workspace files (workspace_policy writes neither run.json nor events.jsonl), concurrency ${concurrency}`,
      value: round(nofiles.completed / nofiles.seconds, 1),
      unit: 'runs/s',
      baseline: round(bRate, 1),
      baseline_label: 'BullMQ + generateText',
      ratio: ratio(nofiles.completed / nofiles.seconds, bRate),
    });
    if (a.completed !== a.requested) notes.push(`Run statuses other than completed (concurrency ${concurrency}): ${JSON.stringify(a.other)}`);
  }
  // 2 and 3. Idle cron tasks, then interval dispatch, each on a fresh server.
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
    title: 'Background tasks: manual runs against BullMQ, idle cron tasks, interval dispatch lateness',
    method: [
      'Model path of every row: agentd configured with `agent.model.provider: "openai-compatible"` over HTTP to the fake OpenAI-compatible server (its own process; the run benchmark\'s), local `add` tool declared; the drained runs are the trivial workload (one model call).',
      `Throughput: one manual task (query "${DRAIN_QUERY}", overlap allow_parallel, session mode run, default workspace policy) and background.concurrency 1, then 32, each on a fresh server; the client POSTs /background/tasks/{id}/run (${Object.entries(
        DRAIN_RUNS,
      )
        .map(([c, n]) => `${n.toLocaleString('en-US')} times at concurrency ${c}`)
        .join(
          ', ',
        )}; 32 concurrent requests; it stops asking after ${POST_BUDGET_MS / 1000} s so the benchmark stays bounded) and polls the task status until every requested run is terminal, then the run folders until each holds events.jsonl and a run.json with the final status (the workspace mirror is part of a run's work: it trailed the runs by seconds, and before this rule most of its CPU fell after the measured window); the figure is completed runs / (first POST to the last run's folder written). Each drain's data dir is removed at the end of the benchmark, not before the next drain (removing ~20,000 files made the next drain's folders several times dearer in kernel CPU on this VM's ext4). A drain of up to 500 runs warms each side up first. The drain servers keep every run of the drained task (background.run_retention.max_runs_per_task 1,000,000,000): the default retention sweep keeps a task's newest 1,000 ended runs.`,
      "Baseline: BullMQ (Redis at 127.0.0.1:6379), a Worker of the same concurrency in the benchmark process whose processor calls the AI SDK's `generateText` (same server, same `add` tool, `stopWhen: stepCountIs(5)`) per job; the same number of jobs added with addBulk (1,000 per call); first add to last completion, after the same warm-up. Its CPU is the worker's (this process, addBulk included) and, in the row \"with the queue's server\", also the redis-server process's over the same drain (/proc/<pid>/stat), since agentd's CPU includes its own queue and store.",
      "Where a drained run's CPU goes: `npm run bench -- profile-background <label>` (test/bench/profile.ts; see Profiles): self time by origin and function per drained run, and per run the store commits, group-commit rounds (fsyncs), bytes written, events appended, reads, model requests and workspace files.",
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
