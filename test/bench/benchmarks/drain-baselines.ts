// The baselines of the `background-drain` benchmark: BullMQ on its own redis-server with an
// append-only file fsync'd on every write (`appendfsync always`), and pg-boss on the benchmark's
// PostgreSQL, each with a worker of the same concurrency, in this process, whose handler calls the
// AI SDK's generateText per job against the same fake model server with the same `add` tool.
import { spawn, type ChildProcess } from 'node:child_process';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import PgBoss from 'pg-boss';
import pg from 'pg';
import { generateText, jsonSchema, stepCountIs, tool } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
// @ts-expect-error plain JS module shared with the child servers (no declaration file)
import { ADD } from '../bench-tools.mjs';
import { cpuSeconds, freePort, log, nowMs, removeDir, sleep, tempDir } from '../lib.js';
import { BULK_LIST, DRAIN_QUERY, DRAIN_TIMEOUT_MS } from './drain-agentd.js';
import { backendsOf, cpuOf, dbUrl, xactCommits } from './postgres.js';

/** What a baseline drain measured: first add to last completion recorded by the queue. */
export interface BaselineDrain {
  seconds: number;
  completed: number;
  failed: number;
  /** CPU of this process (the worker and its AI SDK calls, the adds included) over the drain. */
  workerCpuMs: number;
  /** CPU of the queue's server over the drain: redis-server, or the PostgreSQL backends of the queue's database. */
  serverCpuMs: number;
  /** PostgreSQL transactions committed in the queue's database over the drain (pg-boss only). */
  xacts: number | null;
}

/** One agent turn as the baselines run it: generateText with the `add` tool, up to 5 steps. */
function aiSdkAgent(modelUrl: string): (query: string) => Promise<string> {
  const model = createOpenAICompatible({ name: 'openai-compatible', baseURL: modelUrl, includeUsage: true }).chatModel('bench');
  const tools = {
    add: tool({
      description: ADD.description,
      inputSchema: jsonSchema<{ a: number; b: number }>(ADD.input_schema),
      execute: async ({ a, b }) => ({ sum: Number(a) + Number(b) }),
    }),
  };
  return async (query) => (await generateText({ model, system: 'You are a helpful assistant.', prompt: query, tools, stopWhen: stepCountIs(5) })).text;
}

// ---------------------------------------------------------------- BullMQ on an append-only Redis

export interface RedisServer {
  port: number;
  pid: number;
  /** CONFIG GET appendonly / appendfsync / save, as the server answered. */
  persistence: string;
  stop(): Promise<void>;
}

/**
 * A redis-server of its own (not the machine's shared one): a free port, a temporary dir, the
 * append-only file on and fsync'd before every write is acknowledged, no RDB snapshots. Checked
 * with CONFIG GET before use; stop() ends it and removes its dir.
 */
export async function startRedis(): Promise<RedisServer> {
  const dir = tempDir('redis');
  const port = await freePort();
  const proc: ChildProcess = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--appendonly', 'yes', '--appendfsync', 'always', '--save', '', '--daemonize', 'no'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const stop = async () => {
    if (proc.exitCode === null) {
      proc.kill('SIGTERM');
      await exited;
    }
    removeDir(dir);
  };
  try {
    const redis = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null });
    redis.on('error', () => undefined); // refused until redis-server listens: retried below
    const t0 = nowMs();
    for (;;) {
      try {
        await redis.connect();
        break;
      } catch (err) {
        if (proc.exitCode !== null || nowMs() - t0 > 10_000) throw new Error(`redis-server did not start on port ${port}: ${String(err)}`);
        await sleep(50);
      }
    }
    try {
      const get = async (key: string) => ((await redis.config('GET', key)) as string[])[1] ?? '?';
      const [appendonly, appendfsync, save] = [await get('appendonly'), await get('appendfsync'), await get('save')];
      if (appendonly !== 'yes' || appendfsync !== 'always') throw new Error(`redis-server runs with appendonly ${appendonly}, appendfsync ${appendfsync}`);
      return { port, pid: proc.pid!, persistence: `appendonly ${appendonly}, appendfsync ${appendfsync}, save "${save}"`, stop };
    } finally {
      redis.disconnect();
    }
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * BullMQ: a Worker of `concurrency` on a fresh queue, the jobs added with addBulk (1,000 per call),
 * first add to last `completed` event (BullMQ emits it once the job is moved to completed in Redis).
 */
export async function bullmqDrain(redis: RedisServer, modelUrl: string, concurrency: number, runs: number): Promise<BaselineDrain> {
  const connection = { host: '127.0.0.1', port: redis.port };
  const name = `agentd-bench-${process.pid}-${Date.now()}-${concurrency}`;
  const queue = new Queue(name, { connection });
  const agent = aiSdkAgent(modelUrl);
  let completed = 0;
  let failed = 0;
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  const worker = new Worker(name, (job) => agent(String(job.data.query)), { connection, concurrency, autorun: true });
  worker.on('completed', () => {
    if (++completed + failed === runs) done();
  });
  worker.on('failed', () => {
    if (completed + ++failed === runs) done();
  });
  try {
    await worker.waitUntilReady();
    const redis0 = cpuSeconds(redis.pid);
    const cpu0 = process.cpuUsage();
    const t0 = nowMs();
    for (let i = 0; i < runs; i += BULK_LIST) {
      await queue.addBulk(
        Array.from({ length: Math.min(BULK_LIST, runs - i) }, (_, j) => ({
          name: 'agent',
          data: { i: i + j, query: DRAIN_QUERY },
          opts: { removeOnComplete: true, removeOnFail: true },
        })),
      );
    }
    await Promise.race([finished, sleep(DRAIN_TIMEOUT_MS).then(() => Promise.reject(new Error('BullMQ did not drain')))]);
    const seconds = (nowMs() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    return { seconds, completed, failed, workerCpuMs: (cpu.user + cpu.system) / 1000, serverCpuMs: (cpuSeconds(redis.pid) - redis0) * 1000, xacts: null };
  } finally {
    await worker.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
  }
}

// ---------------------------------------------------------------- pg-boss on the same PostgreSQL

/** Jobs one pg-boss worker fetches at a time (work's batchSize), run one after the other by its handler. */
export const PGBOSS_BATCH = Number(process.env.BENCH_PGBOSS_BATCH ?? 10);

/**
 * pg-boss in database `db` (already created, empty): `concurrency` workers (work(), one generateText
 * in flight each, so `concurrency` at most), each fetching PGBOSS_BATCH jobs per poll and
 * completing them together; the jobs sent with insert() (1,000 per call); first insert to the last
 * job in state `completed` in the job table. pg-boss polls (every 0.5 s at the fastest), so a worker
 * is woken with notifyWorker() after the first insert and after every full batch (pg-boss's API for
 * skipping the wait when work is known to be there); it only waits out the interval on an empty queue.
 */
export async function pgBossDrain(db: string, modelUrl: string, concurrency: number, runsList: number[]): Promise<BaselineDrain[]> {
  const boss = new PgBoss({ connectionString: dbUrl(db), max: concurrency + 4, schedule: false, supervise: false });
  let stopping = false;
  // After stop(), the database is dropped WITH (FORCE): its connections' ends are expected then.
  boss.on('error', (err) => stopping || log(`pg-boss: ${String(err)}`));
  await boss.start();
  const agent = aiSdkAgent(modelUrl);
  const reader = new pg.Client({ connectionString: dbUrl(db) });
  await reader.connect();
  const out: BaselineDrain[] = [];
  try {
    for (const [k, runs] of runsList.entries()) {
      const name = `bench-${concurrency}-${k}`;
      await boss.createQueue(name);
      let handled = 0;
      let failed = 0;
      const ids: string[] = [];
      for (let w = 0; w < concurrency; w++) {
        const id: string = await boss.work<{ query: string }>(name, { batchSize: PGBOSS_BATCH, pollingIntervalSeconds: 0.5 }, async (jobs) => {
          for (const job of jobs) {
            try {
              await agent(job.data.query);
              handled++;
            } catch (err) {
              failed++;
              throw err;
            }
          }
          if (jobs.length === PGBOSS_BATCH) boss.notifyWorker(id);
        });
        ids.push(id);
      }
      // pg_stat_database is flushed by each backend at most once a second: the warm-up's count settles first.
      await sleep(1500);
      const backends0 = cpuOf(backendsOf(db));
      const x0 = await xactCommits(db);
      const cpu0 = process.cpuUsage();
      const t0 = nowMs();
      for (let i = 0; i < runs; i += BULK_LIST) {
        await boss.insert(Array.from({ length: Math.min(BULK_LIST, runs - i) }, () => ({ name, data: { query: DRAIN_QUERY } })));
        if (i === 0) for (const id of ids) boss.notifyWorker(id);
      }
      // Drained: every job recorded completed (the handler's completion is written after it returns).
      let completed = 0;
      for (;;) {
        if (handled + failed >= runs) {
          const r = await reader.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgboss.job WHERE name = $1 AND state = 'completed'`, [name]);
          completed = r.rows[0].n;
          if (completed + failed >= runs) break;
        }
        if (nowMs() - t0 > DRAIN_TIMEOUT_MS) throw new Error(`pg-boss did not drain: ${handled} handled, ${completed} completed`);
        await sleep(handled + failed >= runs ? 5 : 20);
      }
      const seconds = (nowMs() - t0) / 1000;
      const cpu = process.cpuUsage(cpu0);
      let serverCpu = 0;
      for (const [p, c] of cpuOf(backendsOf(db))) serverCpu += c - (backends0.get(p) ?? 0);
      await boss.offWork(name);
      // pg_stat_database is flushed by each backend at most once a second.
      await sleep(1500);
      out.push({ seconds, completed, failed, workerCpuMs: (cpu.user + cpu.system) / 1000, serverCpuMs: serverCpu * 1000, xacts: (await xactCommits(db)) - x0 });
    }
  } finally {
    stopping = true;
    await reader.end();
    await boss.stop({ graceful: false, wait: true }).catch(() => undefined);
  }
  return out;
}
