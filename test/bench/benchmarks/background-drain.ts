// `npm run bench -- background-drain`: background runs drained on the real model path (one manual
// task, each run one agent run with one model call through the openai-compatible provider over
// HTTP to the fake server), against queue baselines measured in the same run: on LevelDB (fsync
// on) against BullMQ on its own redis-server with `appendfsync always`, on PostgreSQL against
// pg-boss on the same PostgreSQL, at background.concurrency 1 and 32; and the CPU per drained run
// against the CPU per POST /run/sync run of the same agent on the same server at the same
// concurrency (what the background bookkeeping costs). Targets: docs/benchmarks.md, issue 30.
import { randomBytes } from 'node:crypto';
import {
  QUICK,
  closedLoop,
  cpuSeconds,
  log,
  ratio,
  realPathConfig,
  removeDir,
  request,
  round,
  scaled,
  sleep,
  startChild,
  tempDir,
  type BenchOutput,
  type Child,
  type Row,
} from '../lib.js';
import { DRAIN_QUERY, DRAIN_RETENTION, POST_BUDGET_MS, agentdDrain, type DrainResult } from './drain-agentd.js';
import { PGBOSS_BATCH, bullmqDrain, pgBossDrain, startRedis, type BaselineDrain, type RedisServer } from './drain-baselines.js';
import { admin, backendsOf, cpuOf, dbUrl, xactCommits } from './postgres.js';
import { ROLE_LABELS, THREAD_ROLES } from '../threads.js';
import { FOLDER_WRITER_THREAD } from '../../../src/background/folder-writer.js';

/** The roles of the threads other than the main one (test/bench/threads.ts), in the by-role row. */
const OTHER_ROLES = THREAD_ROLES.filter((r) => r !== 'main');

/** Runs drained per concurrency (each side); the full counts are the (1,500 / 5,000). */
const RUNS: Record<number, number> = QUICK ? { 1: 150, 32: 400 } : { 1: scaled(1500, 100), 32: scaled(5000, 200) };
/** BENCH_DRAIN_CONCURRENCY=1 (or 32): only that concurrency, for a narrow run. */
const CONCURRENCY = process.env.BENCH_DRAIN_CONCURRENCY ? process.env.BENCH_DRAIN_CONCURRENCY.split(',').map(Number) : [1, 32];
/** BENCH_DRAIN_STORES=postgres (or leveldb): only that store's sides (agentd and its baseline), for a narrow run. */
const STORES = (process.env.BENCH_DRAIN_STORES ?? 'leveldb,postgres').split(',');
/**
 * Each side drains this many first on its fresh server / queue. V8 keeps compiling for thousands of
 * runs: over consecutive 1,000-run drains of one agentd server (concurrency 1), its platform
 * workers' CPU per run (test/bench/threads.ts, concurrent JIT most of it) went 2.8, 1.4, 0.7, 0.5,
 * 0.4 ms and the main thread's 5.9, 4.6, 4.2, 3.8, 3.8 ms (a loaded machine), while the
 * POST /run/sync baseline is measured on the server after all its drains. After 500 runs the
 * drain's CPU still held about 1 ms per run of compilation that the baseline no longer pays.
 */
const WARMUP = QUICK ? 100 : 4000;
const warmup = (runs: number) => (QUICK ? Math.min(runs, WARMUP) : WARMUP);
/** POST /run/sync runs measured on the same server after its drains, after a warm-up of SYNC_WARMUP. */
const SYNC_RUNS: Record<number, number> = QUICK ? { 1: 150, 32: 400 } : { 1: scaled(1000, 100), 32: scaled(3000, 200) };
const SYNC_WARMUP = QUICK ? 100 : 300;

type StoreKind = 'leveldb' | 'postgres';
type Enqueue = 'single' | 'bulk';
const HOW: Record<Enqueue, string> = { bulk: 'POST .../runs, lists of 1,000', single: 'one POST .../run per run, 32 in flight' };

interface SyncResult {
  perSecond: number;
  cpuMsPerRun: number;
  count: number;
}

/** POST /run/sync of the task's query (the same agent) at `concurrency`, after a warm-up; the server's CPU per run. */
async function runSync(child: Child, concurrency: number, n: number): Promise<SyncResult> {
  const body = JSON.stringify({ query: DRAIN_QUERY });
  const loop = (maxCount: number) =>
    closedLoop({
      concurrency,
      durationMs: POST_BUDGET_MS,
      maxCount,
      send: (agent) => request(`${child.url}/run/sync`, { method: 'POST', body, agent }),
      ok: (r) => r.status === 200,
    });
  await loop(SYNC_WARMUP);
  const c0 = cpuSeconds(child.pid);
  const r = await loop(n);
  if (r.errors) throw new Error(`POST /run/sync failed ${r.errors} times: ${r.firstError}`);
  return { perSecond: r.perSecond, cpuMsPerRun: ((cpuSeconds(child.pid) - c0) * 1000) / Math.max(1, r.count), count: r.count };
}

interface AgentdSide {
  drain: DrainResult;
  /** PostgreSQL only: CPU of the agentd database's backends and its committed transactions over the drain. */
  pgCpuMs: number | null;
  xacts: number | null;
  sync: SyncResult | null;
}

/**
 * The sides' data dirs, removed when the benchmark ends. Removed after each side, the next side
 * paid for it: on a file system that skips recently freed inodes when it makes a file (ext4 without
 * a journal, as on the benchmark VM, skips those freed in the last 1 to 6 minutes, and looks at
 * each), every file the next side's workspace writer made scanned past the thousands the removal
 * had just freed. Measured with the writer's file calls in a loop (mkdir, append, write, rename;
 * 3,000 folders): 100 µs of CPU per folder in a fresh directory, 400 to 475 µs right after 6,000
 * folders were removed next to it.
 */
const keptDirs: string[] = [];

/** A fresh server (LevelDB with fsync, or its own PostgreSQL database), a warm-up drain, the measured drain, then POST /run/sync when `sync`. */
async function agentdSide(modelUrl: string, store: StoreKind, concurrency: number, runs: number, enqueue: Enqueue, sync: boolean): Promise<AgentdSide> {
  const dir = tempDir('bg-drain');
  const db = store === 'postgres' ? `agentd_bench_drain_${randomBytes(4).toString('hex')}` : null;
  if (db) await admin(`CREATE DATABASE ${db}`);
  try {
    const child = await startChild({
      mode: 'agentd',
      dataDir: dir,
      config: realPathConfig(modelUrl, 'bench', {
        background: { enabled: true, concurrency, run_retention: DRAIN_RETENTION },
        ...(db ? { store: { kind: 'postgres', url: dbUrl(db) } } : {}),
      }),
      model: { kind: 'config' },
      syncWrites: true,
    });
    try {
      await agentdDrain(child, warmup(runs), dir, true, enqueue);
      // pg_stat_database is flushed by each backend at most once a second: the warm-up's count settles first.
      if (db) await sleep(1500);
      const b0 = db ? cpuOf(backendsOf(db)) : null;
      const x0 = db ? await xactCommits(db) : 0;
      const drain = await agentdDrain(child, runs, dir, true, enqueue);
      let pgCpuMs: number | null = null;
      if (db && b0) {
        pgCpuMs = 0;
        for (const [p, c] of cpuOf(backendsOf(db))) pgCpuMs += (c - (b0.get(p) ?? 0)) * 1000;
      }
      let xacts: number | null = null;
      if (db) {
        // pg_stat_database is flushed by each backend at most once a second.
        await sleep(1500);
        xacts = (await xactCommits(db)) - x0;
      }
      log(`agentd ${store} c=${concurrency} ${enqueue}: ${drain.completed}/${drain.requested} runs in ${drain.seconds.toFixed(1)} s`);
      return { drain, pgCpuMs, xacts, sync: sync ? await runSync(child, concurrency, SYNC_RUNS[concurrency]) : null };
    } finally {
      await child.stop();
    }
  } finally {
    // Removed once the benchmark ends (backgroundDrainBench), not now: see `keptDirs`.
    keptDirs.push(dir);
    if (db) await admin(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
  }
}

async function bullmqSide(redis: RedisServer, modelUrl: string, concurrency: number, runs: number): Promise<BaselineDrain> {
  await bullmqDrain(redis, modelUrl, concurrency, warmup(runs));
  const b = await bullmqDrain(redis, modelUrl, concurrency, runs);
  log(`BullMQ c=${concurrency}: ${b.completed} jobs in ${b.seconds.toFixed(1)} s`);
  return b;
}

async function pgBossSide(modelUrl: string, concurrency: number, runs: number): Promise<BaselineDrain> {
  const db = `agentd_bench_pgboss_${randomBytes(4).toString('hex')}`;
  await admin(`CREATE DATABASE ${db}`);
  try {
    const [, b] = await pgBossDrain(db, modelUrl, concurrency, [warmup(runs), runs]);
    log(`pg-boss c=${concurrency}: ${b.completed} jobs in ${b.seconds.toFixed(1)} s`);
    return b;
  } finally {
    await admin(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
  }
}

const per = (total: number, runs: number, digits = 2) => round(total / Math.max(1, runs), digits);

/** The rows of one agentd drain against its baseline. */
function drainRows(store: StoreKind, concurrency: number, enqueue: Enqueue, a: AgentdSide, sync: SyncResult, b: BaselineDrain): Row[] {
  const d = a.drain;
  const n = d.requested;
  const label = store === 'leveldb' ? 'LevelDB' : 'PostgreSQL';
  const base = store === 'leveldb' ? 'BullMQ + generateText, Redis appendfsync always' : 'pg-boss + generateText, same PostgreSQL';
  const min = store === 'leveldb' && concurrency > 1 ? 0.8 : 1.0;
  const rate = d.completed / d.seconds;
  const bRate = b.completed / b.seconds;
  const r = ratio(rate, bRate);
  const cpu = d.cpuMs / Math.max(1, n);
  const cpuRatio = ratio(cpu, sync.cpuMsPerRun);
  const what = `${label}, concurrency ${concurrency}, ${HOW[enqueue]}`;
  const writes =
    store === 'leveldb'
      ? {
          metric: "commits / fsync'd group-commit rounds / event appends",
          value: `${per(d.store.commits, n)} / ${per(d.store.rounds, n)} / ${per(d.store.appends, n)}`,
        }
      : {
          metric:
            "commits / transactions committed in agentd's database (pg_stat_database.xact_commit: every statement outside a transaction is one, reads included) / event appends",
          value: `${per(d.store.commits, n)} / ${a.xacts === null ? '?' : per(a.xacts, n)} / ${per(d.store.appends, n)}`,
        };
  const withServer = (d.cpuMs + (a.pgCpuMs ?? 0)) / Math.max(1, n);
  const bWithServer = (b.workerCpuMs + b.serverCpuMs) / Math.max(1, b.completed);
  return [
    {
      metric: `Background runs drained, ${what} (${n.toLocaleString('en-US')} runs)`,
      value: round(rate, 1),
      unit: 'runs/s',
      baseline: round(bRate, 1),
      baseline_label: base,
      ratio: r,
      target: `>= ${min.toFixed(1)}x ${store === 'leveldb' ? 'BullMQ' : 'pg-boss'}`,
      pass: r !== null && r >= min,
    },
    {
      metric: `CPU per drained run against CPU per POST /run/sync run of the same agent, ${what} (server process, all threads)`,
      value: round(cpu, 2),
      unit: 'ms',
      baseline: round(sync.cpuMsPerRun, 2),
      baseline_label: `POST /run/sync, same server, concurrency ${concurrency}`,
      ratio: cpuRatio,
      target: '<= 1.2x /run/sync',
      pass: cpuRatio !== null && cpuRatio <= 1.2,
    },
    { metric: `Store writes per drained run, ${what}: ${writes.metric}`, value: writes.value, unit: '' },
    {
      metric: `CPU per drained run with the queue's server, ${what} (agentd: server process${store === 'postgres' ? " + its database's backends" : ''}; baseline: worker process + ${store === 'leveldb' ? 'redis-server' : "the pg-boss database's backends"})`,
      value: round(withServer, 2),
      unit: 'ms',
      baseline: round(bWithServer, 2),
      baseline_label: base,
      ratio: ratio(withServer, bWithServer),
    },
    {
      metric: `agentd CPU per drained run by thread, ${what}: main thread / other threads`,
      value: `${per(d.threads.main, n)} / ${per(d.threads.others, n)}`,
      unit: 'ms',
    },
    {
      metric: `agentd CPU per drained run of the other threads, ${what}: ${OTHER_ROLES.map((r) => ROLE_LABELS[r]).join(' / ')}`,
      value: OTHER_ROLES.map((r) => per(d.threads.roles[r], n)).join(' / '),
      unit: 'ms',
    },
    { metric: `Time to queue them, ${what}`, value: round(d.postS, 2), unit: 's' },
    { metric: `Runs not completed, ${what}`, value: n - d.completed, unit: '', baseline: b.failed, target: '0', pass: d.completed === n },
  ];
}

/** The baseline's own figures per job: worker CPU, queue server CPU, and (pg-boss) transactions. */
function baselineRow(store: StoreKind, concurrency: number, b: BaselineDrain): Row {
  const n = Math.max(1, b.completed);
  return store === 'leveldb'
    ? {
        metric: `BullMQ per job, concurrency ${concurrency}: worker process CPU / redis-server CPU (appendfsync always)`,
        value: `${per(b.workerCpuMs, n)} / ${per(b.serverCpuMs, n)}`,
        unit: 'ms',
      }
    : {
        metric: `pg-boss per job, concurrency ${concurrency}: worker process CPU / its database's backends' CPU / transactions committed`,
        value: `${per(b.workerCpuMs, n)} / ${per(b.serverCpuMs, n)} / ${b.xacts === null ? '?' : per(b.xacts, n)}`,
        unit: '',
      };
}

export async function backgroundDrainBench(): Promise<BenchOutput> {
  const fake = await startChild({ mode: 'fake-openai' });
  const redis = await startRedis();
  const rows: Row[] = [];
  const notes: string[] = [`The BullMQ baseline's own redis-server (CONFIG GET before use): ${redis.persistence}.`];
  try {
    for (const concurrency of CONCURRENCY) {
      const runs = RUNS[concurrency];
      // LevelDB against BullMQ: queued in lists of 1,000, and at concurrency 32 also one request per run.
      let level: AgentdSide | null = null;
      let levelSingle: AgentdSide | null = null;
      if (STORES.includes('leveldb')) {
        level = await agentdSide(fake.url, 'leveldb', concurrency, runs, 'bulk', true);
        levelSingle = concurrency > 1 ? await agentdSide(fake.url, 'leveldb', concurrency, runs, 'single', false) : null;
        const bull = await bullmqSide(redis, fake.url, concurrency, runs);
        rows.push(...drainRows('leveldb', concurrency, 'bulk', level, level.sync!, bull));
        if (levelSingle) rows.push(...drainRows('leveldb', concurrency, 'single', levelSingle, level.sync!, bull));
        rows.push(baselineRow('leveldb', concurrency, bull), {
          metric: `POST /run/sync of the same agent, LevelDB, concurrency ${concurrency} (the CPU rows' baseline)`,
          value: round(level.sync!.perSecond, 1),
          unit: 'runs/s',
        });
      }
      // PostgreSQL against pg-boss on the same server.
      let pgSide: AgentdSide | null = null;
      if (STORES.includes('postgres')) {
        pgSide = await agentdSide(fake.url, 'postgres', concurrency, runs, 'bulk', true);
        const boss = await pgBossSide(fake.url, concurrency, runs);
        rows.push(...drainRows('postgres', concurrency, 'bulk', pgSide, pgSide.sync!, boss), baselineRow('postgres', concurrency, boss), {
          metric: `POST /run/sync of the same agent, PostgreSQL, concurrency ${concurrency} (the CPU rows' baseline)`,
          value: round(pgSide.sync!.perSecond, 1),
          unit: 'runs/s',
        });
      }
      for (const [what, s] of [
        ['LevelDB bulk', level],
        ['LevelDB single', levelSingle],
        ['PostgreSQL bulk', pgSide],
      ] as const)
        if (s && s.drain.completed !== s.drain.requested)
          notes.push(`Statuses other than completed (${what}, concurrency ${concurrency}): ${JSON.stringify(s.drain.other)}`);
    }
  } finally {
    await redis.stop();
    await fake.stop();
    for (const dir of keptDirs.splice(0)) removeDir(dir);
  }
  return {
    title: 'Background drain on the real model path: LevelDB against BullMQ (appendfsync always), PostgreSQL against pg-boss, CPU against POST /run/sync',
    method: backgroundDrainMethod(),
    rows,
    notes,
  };
}

/** The method text (docs/benchmarks.md), from the counts this run uses. */
export function backgroundDrainMethod(): string[] {
  const counts = Object.entries(RUNS)
    .map(([c, n]) => `${n.toLocaleString('en-US')} runs at concurrency ${c}`)
    .join(', ');
  return [
    `The drained work: one manual task (query "${DRAIN_QUERY}", overlap allow_parallel, session mode run, default workspace policy), each run one agent run with one model call on the real path (agent.model.provider "openai-compatible" over HTTP to the fake OpenAI-compatible server, its own process; local \`add\` tool declared); ${counts} (\`--quick\`: fewer), each side warmed up first with a drain of ${WARMUP.toLocaleString('en-US')} runs on its fresh server or queue (V8 is still compiling after a few hundred; the POST /run/sync baseline is measured on the server after its drains). agentd runs as a child process, one fresh server per drain, background.concurrency 1 or 32, retention off for the task (background.run_retention.max_runs_per_task 1,000,000,000).`,
    `agentd queues with POST /background/tasks/{id}/runs in lists of 1,000 (one list after the other), and on LevelDB at concurrency 32 also with one POST /background/tasks/{id}/run per run (32 requests in flight; a separate fresh server); requests stop after ${POST_BUDGET_MS / 1000} s. A run is drained when the task status counts it terminal and its workspace folder holds events.jsonl and a run.json with the final status; rate = runs / (first request to the last run drained).`,
    'Stores: LevelDB with fsync on (store.sync true, the default), and PostgreSQL 127.0.0.1:5432 (store.kind postgres) in a database of its own created and dropped by the benchmark.',
    `Baselines, in the benchmark process, worker of the same concurrency whose handler calls the AI SDK's \`generateText\` per job (same server, same \`add\` tool, \`stopWhen: stepCountIs(5)\`), jobs added 1,000 per call, first add to the last completion, after the same warm-up: BullMQ (Queue.addBulk, Worker concurrency) on a redis-server the benchmark starts for itself (free port, temporary dir, \`--appendonly yes --appendfsync always --save ""\`, checked with CONFIG GET, stopped and removed at the end); pg-boss 10 (insert(), \`work()\` called once per unit of concurrency with batchSize ${PGBOSS_BATCH}, each handler running its batch's jobs one after the other, a worker woken with notifyWorker() after the first insert and after a full batch instead of waiting out its 0.5 s polling interval) in its own database on the same PostgreSQL, drained when every job's row is in state completed.`,
    `CPU: /proc/<pid>/stat utime+stime of the agentd server process (all threads) over the drain, per run queued; its baseline in the target row is the CPU per POST /run/sync run of the same agent (task query) on the same server right after its drains, at the same concurrency (the one-request-per-run drain is set against the list drain's server's figure) (${SYNC_RUNS[1].toLocaleString('en-US')} runs at 1, ${SYNC_RUNS[32].toLocaleString('en-US')} at 32, after ${SYNC_WARMUP}). The baselines' CPU is the benchmark process's (worker, AI SDK calls and adds) and their queue server's: redis-server's process, or the PostgreSQL backends connected to the queue's database (/proc cmdline), over the same span; on PostgreSQL agentd's database's backends are added likewise in the "with the queue's server" row.`,
    `CPU by thread: /proc/<pid>/task/<tid>/stat of each agentd thread over the drain, by role (test/bench/threads.ts): the main thread; the workspace writer (the mirror's worker thread, which names itself ${FOLDER_WRITER_THREAD}); V8's platform workers (GC helpers, concurrent JIT), libuv's pool (LevelDB's writes, reads and fsyncs) and LevelDB's compaction thread, told apart by the condition variable each waits on when idle (Node names them all node). Every side's data dir is kept until the benchmark ends: on a file system that skips recently freed inodes when it makes a file (ext4 without a journal, as on the benchmark VM), a removal just before a side made every workspace file of that side cost several times more.`,
    "A narrower run (not for the published figures): BENCH_DRAIN_STORES=postgres (or leveldb) runs only that store's sides, BENCH_DRAIN_CONCURRENCY=1 (or 32) only that concurrency.",
    "Store writes per drained run: the child's store counters (test/bench/child-server.mjs storeStats: store commits, event appends, LevelDB's fsync'd group-commit rounds) over the drain; on PostgreSQL the transactions committed in agentd's database (pg_stat_database.xact_commit, reads included: every statement outside a transaction counts; read 1.5 s before and after the drain since backends flush it at most once a second), and likewise per pg-boss job in its database.",
  ];
}
