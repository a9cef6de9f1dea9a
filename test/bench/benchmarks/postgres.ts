// `npm run bench -- postgres`: POST /run on PostgreSQL with 1, 2 and 3 agentd instances
// on one database behind a round-robin client, against one instance on LevelDB; CPU per run of
// agentd and of PostgreSQL (its backends serving the benchmark database) separately; and the
// recovery time of a SIGKILLed instance's runs by the others. Every instance runs the path users
// run: the `openai-compatible` provider over HTTP to the fake model server (its own process, as in
// the `run` benchmark), with the local `add` tool declared.
import { readFileSync, readdirSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import {
  QUICK,
  SCALE,
  closedLoop,
  cpuSeconds,
  log,
  mergeLoops,
  nowMs,
  percentile,
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
  type LoopResult,
  type Row,
} from '../lib.js';

const ROUND_MS = scaled(4000, 300);
const ROUNDS = 2;
const CONCURRENCY = 32;
const BODY = JSON.stringify({ query: 'Say hello to the benchmark.' });
/** Runs each instance serves before it is measured (the AI SDK provider needs ~2,000 to be warm, see `run`). */
const WARMUP_RUNS = QUICK ? 300 : Math.max(500, Math.round(2000 * SCALE));
const ADMIN_URL = process.env.AGENTD_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const LEASE_S = 2;
const SWEEP_S = 1;

const okRun = (r: { status: number; body: string }) => r.status === 200 && r.body.includes('event: complete') && r.body.includes('"status":"success"');

export async function admin(sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: ADMIN_URL });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

export function dbUrl(name: string): string {
  const u = new URL(ADMIN_URL);
  u.pathname = `/${name}`;
  return u.toString();
}

/** PIDs of the PostgreSQL backends connected to `db` (their command line names the database). */
export function backendsOf(db: string): number[] {
  const out: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const cmd = readFileSync(`/proc/${e}/cmdline`, 'utf8');
      if (cmd.startsWith('postgres:') && cmd.includes(` ${db} `)) out.push(Number(e));
    } catch {
      // gone, or not ours to read
    }
  }
  return out;
}

/** CPU seconds of a set of processes, tolerating ones that exited. */
export function cpuOf(pids: number[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const p of pids) {
    try {
      m.set(p, cpuSeconds(p));
    } catch {
      // exited
    }
  }
  return m;
}

interface Measured {
  loop: LoopResult;
  agentdCpuPerRun: number;
  pgCpuPerRun: number | null;
  /** Transactions the benchmark database committed per run (pg_stat_database.xact_commit; every statement of agentd is one). */
  xactPerRun: number | null;
}

/**
 * The benchmark database's committed transactions so far. PostgreSQL 15 flushes a backend's
 * counts at most once a second, so a delta over a few seconds is right to about a second's worth.
 */
export async function xactCommits(db: string): Promise<number> {
  const c = new pg.Client({ connectionString: dbUrl(db) });
  await c.connect();
  try {
    const r = await c.query<{ n: string }>('SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()');
    return Number(r.rows[0].n);
  } finally {
    await c.end();
  }
}

/** Round-robin over the instances, `ROUNDS` rounds of ROUND_MS at CONCURRENCY; CPU of the instances and of the database's backends. */
async function measure(children: Child[], db: string | null): Promise<Measured> {
  let k = 0;
  const send = (agent: import('node:http').Agent) => request(`${children[k++ % children.length].url}/run`, { method: 'POST', body: BODY, agent });
  await closedLoop({ concurrency: CONCURRENCY, durationMs: 500, send, ok: okRun });
  const a0 = children.map((c) => cpuSeconds(c.pid));
  const x0 = db ? await xactCommits(db) : 0;
  const b0 = db ? cpuOf(backendsOf(db)) : new Map<number, number>();
  const rounds: LoopResult[] = [];
  for (let i = 0; i < ROUNDS; i++) rounds.push(await closedLoop({ concurrency: CONCURRENCY, durationMs: ROUND_MS, send, ok: okRun }));
  const loop = mergeLoops(rounds);
  const a1 = children.map((c) => cpuSeconds(c.pid));
  let pgCpu: number | null = null;
  if (db) {
    const b1 = cpuOf(backendsOf(db));
    pgCpu = 0;
    for (const [p, c] of b1) pgCpu += c - (b0.get(p) ?? 0);
  }
  const agentdCpu = a1.reduce((s, v, i) => s + v - a0[i], 0);
  const xactPerRun = db ? ((await xactCommits(db)) - x0) / Math.max(1, loop.count) : null;
  return {
    loop,
    agentdCpuPerRun: (agentdCpu / Math.max(1, loop.count)) * 1000,
    pgCpuPerRun: pgCpu === null ? null : (pgCpu / Math.max(1, loop.count)) * 1000,
    xactPerRun,
  };
}

/** Serves WARMUP_RUNS runs on one instance, c=32, unmeasured. */
async function warm(child: Child): Promise<void> {
  const send = (agent: import('node:http').Agent) => request(`${child.url}/run`, { method: 'POST', body: BODY, agent });
  await closedLoop({ concurrency: CONCURRENCY, durationMs: 120_000, maxCount: WARMUP_RUNS, send, ok: okRun });
}

export async function postgresBench(): Promise<BenchOutput> {
  const fake = await startChild({ mode: 'fake-openai' });
  const model = { kind: 'config' as const };
  const dirs: string[] = [];
  const dir = (p: string) => {
    const d = tempDir(p);
    dirs.push(d);
    return d;
  };
  const children: Child[] = [];
  const db = `agentd_bench_${randomBytes(5).toString('hex')}`;
  await admin(`CREATE DATABASE ${db}`);
  const pgConfig = realPathConfig(fake.url, 'bench', {
    store: { kind: 'postgres', url: dbUrl(db) },
    runs: { lease_seconds: LEASE_S, orphan_sweep: { interval_seconds: SWEEP_S } },
  });
  const rows: Row[] = [];
  const notes: string[] = [];
  try {
    log('LevelDB, one instance');
    const level = await startChild({ mode: 'agentd', dataDir: dir('pg-level'), config: realPathConfig(fake.url), model });
    await warm(level);
    const onLevel = await measure([level], null);
    await level.stop();

    const results: Measured[] = [];
    for (let n = 1; n <= 3; n++) {
      while (children.length < n) {
        const c = await startChild({ mode: 'agentd', dataDir: dir(`pg-${children.length}`), config: pgConfig, model });
        await warm(c);
        children.push(c);
      }
      log(`PostgreSQL, ${n} instance(s)`);
      results.push(await measure(children.slice(0, n), db));
    }
    const one = results[0].loop.perSecond;
    rows.push({ metric: 'POST /run, LevelDB, 1 instance, c=32', value: round(onLevel.loop.perSecond, 1), unit: 'runs/s' });
    rows.push({
      metric: 'POST /run, PostgreSQL, 1 instance, c=32',
      value: round(one, 1),
      unit: 'runs/s',
      baseline: round(onLevel.loop.perSecond, 1),
      baseline_label: 'LevelDB, 1 instance',
      ratio: one / onLevel.loop.perSecond,
      target: '≥ 70 %',
      pass: one / onLevel.loop.perSecond >= 0.7,
    });
    for (let n = 2; n <= 3; n++) {
      const v = results[n - 1].loop.perSecond;
      rows.push({
        metric: `POST /run, PostgreSQL, ${n} instances (round-robin), c=32`,
        value: round(v, 1),
        unit: 'runs/s',
        baseline: round(one, 1),
        baseline_label: 'PostgreSQL, 1 instance',
        ratio: v / one,
        target: n === 2 ? '≥ 1.2×' : null,
        pass: n === 2 ? v / one >= 1.2 : null,
      });
    }
    for (const [i, r] of results.entries()) {
      rows.push({
        metric: `p50 / p99 latency (ms), PostgreSQL, ${i + 1} instance(s)`,
        value: `${round(percentile(r.loop.latencies, 50), 1)} / ${round(percentile(r.loop.latencies, 99), 1)}`,
        unit: 'ms',
      });
      rows.push({
        metric: `CPU per run (ms), ${i + 1} instance(s): agentd / PostgreSQL`,
        value: `${round(r.agentdCpuPerRun, 2)} / ${round(r.pgCpuPerRun ?? 0, 2)}`,
        unit: 'ms',
      });
      rows.push({
        metric: `PostgreSQL transactions per run (statements: reads, group-commit rounds, notifications), ${i + 1} instance(s)`,
        value: round(r.xactPerRun ?? 0, 2),
        unit: '',
      });
      if (r.loop.errors) notes.push(`${i + 1} instance(s): ${r.loop.errors} failed requests (first: ${r.loop.firstError})`);
    }
    rows.push({ metric: 'CPU per run, LevelDB: agentd', value: round(onLevel.agentdCpuPerRun, 2), unit: 'ms' });

    // Recovery: 8 slow runs live on the last instance, SIGKILLed; the time until every one of them
    // is resumed by another instance (its run_resumed event stored).
    log('recovery of a SIGKILLed instance');
    const victim = children.pop()!;
    await victim.stop();
    const slowConfig = pgConfig;
    const slow = await startChild({ mode: 'agentd', dataDir: dir('pg-victim'), config: slowConfig, model: { kind: 'slow', chunks: 40, delayMs: 100 } });
    const sessions = Array.from({ length: 8 }, (_, i) => `recover-${randomBytes(3).toString('hex')}-${i}`);
    for (const s of sessions)
      void request(`${slow.url}/run/sync`, { method: 'POST', body: JSON.stringify({ query: 'slow', session_id: s }) }).catch(() => undefined);
    const survivor = children[0].url;
    const ids: string[] = [];
    for (const s of sessions) {
      for (;;) {
        const r = JSON.parse((await request(`${survivor}/runs?session_id=${s}`)).body) as { runs: Array<{ run_id: string }> };
        if (r.runs[0]) {
          ids.push(r.runs[0].run_id);
          break;
        }
        await sleep(20);
      }
    }
    await sleep(500);
    const killedAt = nowMs();
    slow.proc.kill('SIGKILL');
    const recovered = new Map<string, number>();
    const deadline = killedAt + 30_000;
    while (recovered.size < ids.length && nowMs() < deadline) {
      for (const id of ids) {
        if (recovered.has(id)) continue;
        const ev = JSON.parse((await request(`${survivor}/telemetry/events?run_id=${id}&event_type=run_resumed`)).body) as { events: unknown[] };
        if (ev.events.length > 0) recovered.set(id, nowMs() - killedAt);
      }
      await sleep(50);
    }
    const worst = Math.max(...recovered.values());
    const bound = (LEASE_S + SWEEP_S + 1) * 1000;
    rows.push({
      metric: `Recovery of a SIGKILLed instance's 8 live runs by the others (lease ${LEASE_S} s, sweep ${SWEEP_S} s)`,
      value: recovered.size === ids.length ? round(worst / 1000, 2) : `${recovered.size}/${ids.length} recovered`,
      unit: 's',
      target: `≤ lease + sweep + 1 s = ${bound / 1000} s`,
      pass: recovered.size === ids.length && worst <= bound,
    });
    notes.push(
      'Driver, the fake model server, PostgreSQL and every agentd instance share this 2-core machine: more instances here add CPU contention, not cores. CPU per run is reported for agentd (all instances) and for the PostgreSQL backends serving the benchmark database separately, so scaling on a larger machine can be projected: runs/s ≈ cores available to agentd / agentd CPU per run, while the database needs its own CPU per run times that rate.',
    );
    notes.push(
      "The PostgreSQL figure excludes the server's shared processes (WAL writer, checkpointer): only the backends connected to the benchmark database are counted.",
    );
  } finally {
    await Promise.all(children.map((c) => c.stop().catch(() => undefined)));
    await fake.stop().catch(() => undefined);
    await admin(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
    for (const d of dirs) removeDir(d);
  }
  return {
    title: 'Several instances on PostgreSQL (POST /run, c=32, round-robin)',
    method: [
      `Model path: the configured \`openai-compatible\` provider over HTTP to the fake model server (its own process), trivial answer (one model call), the local \`add\` tool declared; every instance first serves ${WARMUP_RUNS} unmeasured runs.`,
      `Closed loop of ${CONCURRENCY} concurrent POST /run streams, ${ROUNDS} rounds of ${ROUND_MS / 1000} s after a 0.5 s warm-up, spread round-robin over the instances.`,
      'LevelDB: one agentd on a fresh data dir (fsync per batch). PostgreSQL: 1, 2, then 3 agentd processes on one fresh database (the same processes, one more each step).',
      "Recovery: 8 runs of a slow in-process model (4 s) live on one more instance, which is SIGKILLed; measured from the kill to each run's `run_resumed` event, as the survivors see it (they go on with the configured provider).",
    ],
    rows,
    notes,
  };
}
