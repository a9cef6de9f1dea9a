// `npm run bench -- profile <label>`: a CPU profile (node --cpu-prof) of the agentd server process on
// the real model path (openai-compatible over HTTP against the fake server, local `add` tool),
// summarised by self time per run and saved under `profiles` in results.json (one per label), which
// docs/benchmarks.md shows.
import { execSync } from 'node:child_process';
import { copyFileSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { QUICK, ROOT, closedLoop, log, nowMs, realPathConfig, removeDir, request, startChild, tempDir, threadCpuMs, type ProfileResult } from './lib.js';
import { WORKLOADS } from './benchmarks/run-real.js';
import { treeStats } from './tree-stats.js';

interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }>;
  /** Microseconds on the monotonic clock (the one nowMs() reads). */
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

function origin(url: string, fn: string): string {
  if (fn === '(garbage collector)') return 'garbage collector';
  if (fn === '(program)' || fn === '(idle)' || fn === '(root)') return 'V8 / native (program)';
  if (url.includes('/test/bench/dist/src/') || url.includes('/test/bench/dist/machines/')) return 'agentd (src/, machines/)';
  if (url.includes('node_modules/ai/')) return "AI SDK core ('ai')";
  if (url.includes('node_modules/@ai-sdk/')) return 'AI SDK providers (@ai-sdk/*)';
  if (url.includes('node_modules/xstate')) return 'XState';
  if (
    url.includes('node_modules/fastify') ||
    url.includes('node_modules/@fastify') ||
    url.includes('node_modules/find-my-way') ||
    url.includes('node_modules/avvio') ||
    url.includes('node_modules/light-my-request')
  )
    return 'Fastify';
  if (
    url.includes('node_modules/level') ||
    url.includes('node_modules/classic-level') ||
    url.includes('node_modules/abstract-level') ||
    url.includes('node_modules/module-error')
  )
    return 'LevelDB bindings';
  if (url.includes('node_modules/zod')) return 'zod';
  if (url.includes('node_modules/pino') || url.includes('node_modules/prom-client') || url.includes('@opentelemetry'))
    return 'pino / prom-client / OpenTelemetry';
  if (url.includes('node_modules/undici') || url.includes('internal/deps/undici')) return 'fetch (undici)';
  if (url.includes('internal/webstreams')) return 'Node web streams';
  if (url.startsWith('node:') || url.includes('internal/')) return 'Node core (other)';
  if (url.includes('node_modules/')) return 'other dependencies';
  return url ? 'other' : 'V8 builtins / native';
}

/**
 * The main thread's profile in `dir`: worker threads (the workspace mirror's writer) write their own,
 * named CPU.<date>.<time>.<pid>.<thread id>.<seq>.cpuprofile, and the main thread's id is 0.
 */
function mainThreadProfile(dir: string): string | undefined {
  return readdirSync(dir).find((f) => /^CPU\.\d+\.\d+\.\d+\.0\.\d+\.cpuprofile$/.test(f));
}

/** Self time per function over the samples taken within [fromMs, toMs] (nowMs() clock). */
export function summarise(profile: CpuProfile, runs: number, fromMs = -Infinity, toMs = Infinity): Pick<ProfileResult, 'groups' | 'top'> {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<number, number>();
  let t = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i] ?? 0;
    if (t / 1000 < fromMs || t / 1000 > toMs) continue;
    selfUs.set(profile.samples[i], (selfUs.get(profile.samples[i]) ?? 0) + (profile.timeDeltas[i] ?? 0));
  }
  let total = 0;
  const groups = new Map<string, number>();
  const fns = new Map<string, { fn: string; where: string; us: number }>();
  for (const [id, us] of selfUs) {
    const n = byId.get(id)!;
    const { functionName, url, lineNumber } = n.callFrame;
    if (functionName === '(idle)') continue;
    total += us;
    const g = origin(url, functionName);
    groups.set(g, (groups.get(g) ?? 0) + us);
    const file = url.replace(/^.*\/(node_modules\/|test\/bench\/dist\/)/, '').replace(/^file:\/\//, '');
    const key = `${functionName}|${file}|${lineNumber}`;
    const e = fns.get(key) ?? { fn: functionName || '(anonymous)', where: file ? `${file}:${lineNumber + 1}` : '', us: 0 };
    e.us += us;
    fns.set(key, e);
  }
  const per = (us: number) => us / 1000 / runs;
  return {
    groups: [...groups].sort((a, b) => b[1] - a[1]).map(([name, us]) => ({ name, ms_per_run: per(us), share: us / total })),
    top: [...fns.values()]
      .sort((a, b) => b.us - a.us)
      .slice(0, 25)
      .map((e) => ({ fn: e.fn, where: e.where, ms_per_run: per(e.us), share: e.us / total })),
  };
}

export async function profileRealPath(label: string, order: string[], save: (p: ProfileResult, order: string[]) => void): Promise<void> {
  const dir = tempDir('profile');
  const profDir = tempDir('cpuprof');
  const runsPerWorkload = QUICK ? 400 : 1000;
  const fake = await startChild({ mode: 'fake-openai' });
  const prev = process.env.BENCH_NODE_FLAGS;
  process.env.BENCH_NODE_FLAGS = `${prev ?? ''} --cpu-prof --cpu-prof-dir=${profDir}`;
  let served = 0;
  let cpuMs = 0;
  let fromMs = 0;
  let toMs = 0;
  const WARMUP = QUICK ? 300 : 1500;
  try {
    const agentd = await startChild({ mode: 'agentd', dataDir: dir, config: realPathConfig(fake.url), model: { kind: 'config' } });
    process.env.BENCH_NODE_FLAGS = prev ?? '';
    try {
      const loop = (w: 'trivial' | 'tool', c: number, n: number) =>
        closedLoop({
          concurrency: c,
          durationMs: 300_000,
          maxCount: n,
          send: (agent) => request(`${agentd.url}/run`, { method: 'POST', body: JSON.stringify({ query: WORKLOADS[w].query }), agent }),
          ok: (x) => x.status === 200 && x.body.includes('"status":"success"'),
        });
      log(`profiling: warm-up, ${WARMUP} runs of each workload at concurrency 32 (not counted)`);
      for (const w of ['trivial', 'tool'] as const) await loop(w, 32, WARMUP);
      fromMs = nowMs();
      const c0 = await agentd.call<{ user: number; system: number }>({ cmd: 'cpu' });
      for (const w of ['trivial', 'tool'] as const) {
        for (const c of [1, 32]) {
          log(`profiling: ${runsPerWorkload / 2} ${w} runs at concurrency ${c}`);
          const body = JSON.stringify({ query: WORKLOADS[w].query });
          const r = await closedLoop({
            concurrency: c,
            durationMs: 300_000,
            maxCount: runsPerWorkload / 2,
            send: (agent) => request(`${agentd.url}/run`, { method: 'POST', body, agent }),
            ok: (x) => x.status === 200 && x.body.includes('"status":"success"'),
          });
          served += r.count + r.errors;
          if (r.errors) log(`  ${r.errors} failed: ${r.firstError}`);
        }
      }
      const c1 = await agentd.call<{ user: number; system: number }>({ cmd: 'cpu' });
      toMs = nowMs();
      cpuMs = (c1.user + c1.system - c0.user - c0.system) / 1000;
    } finally {
      await agentd.stop();
    }
    const file = mainThreadProfile(profDir);
    if (!file) throw new Error(`no .cpuprofile written in ${profDir}`);
    const profile = JSON.parse(readFileSync(join(profDir, file), 'utf8')) as CpuProfile;
    // BENCH_KEEP_PROFILE=<file>: keep the raw profile (for Chrome DevTools or a closer look).
    if (process.env.BENCH_KEEP_PROFILE) copyFileSync(join(profDir, file), process.env.BENCH_KEEP_PROFILE);
    let commit = 'unknown';
    try {
      commit = execSync('git rev-parse --short HEAD', { cwd: ROOT }).toString().trim();
    } catch {
      // not a git checkout
    }
    const summary = summarise(profile, served, fromMs, toMs);
    save(
      {
        label,
        ran_at: new Date().toISOString(),
        commit,
        command: `npm run bench -- profile ${label}`,
        description: `agentd child under \`node --cpu-prof\` on the real path (openai-compatible provider over HTTP to the fake server, local \`add\` tool, LevelDB with fsync); after ${WARMUP} warm-up runs of each workload (not counted), ${runsPerWorkload / 2} runs each of trivial/tool at concurrency 1 and 32; self time of the samples taken during those, divided by the runs served.`,
        runs: served,
        cpu_per_run_ms: cpuMs / served,
        ...summary,
      },
      order,
    );
    process.stderr.write(`profile ${label}: ${served} runs, ${(cpuMs / served).toFixed(2)} ms CPU per run\n`);
    for (const g of summary.groups) process.stderr.write(`  ${g.name}: ${g.ms_per_run.toFixed(3)} ms/run (${(g.share * 100).toFixed(1)} %)\n`);
    for (const t of summary.top) process.stderr.write(`  ${t.fn} ${t.where}: ${t.ms_per_run.toFixed(3)} ms/run (${(t.share * 100).toFixed(1)} %)\n`);
  } finally {
    process.env.BENCH_NODE_FLAGS = prev ?? '';
    await fake.stop();
    removeDir(dir);
    removeDir(profDir);
  }
}

type StoreStats = {
  commits: number;
  appends: number;
  rounds: number;
  reads: number;
  ops: number;
  opBytes: number;
  events: number;
  eventBytes: number;
  /** Read calls by `method:kind` (cache hits included). */
  readsBy?: Record<string, number>;
  /** Commits and appends by shape (the kinds of their ops, the events they carry). */
  shapes?: Record<string, number>;
  /** LevelDB's asynchronous reads (thread-pool trips) by binding call and key kind. */
  diskReads?: Record<string, number>;
  /** Record ops and their value bytes by `op:kind` (while countBytes is on). */
  byKind?: Record<string, { ops: number; bytes: number }>;
  /** Worker.postMessage calls (the workspace mirror's hand-offs to its writer thread) and the string bytes they carried. */
  workerPosts?: number;
  workerPostBytes?: number;
};

/** A PostgreSQL statement or an outgoing HTTP request (a model call) of the child: start and end (ms), label. */
type Span = [number, number, string];

/**
 * BENCH_PG_TRACE: the serial round trips of the counting drain. PostgreSQL statements that overlap
 * count as one trip (they wait together): at concurrency 1 the trips per run are the store waits on
 * one run's path. Also statements per run by label, the time per run with a statement in flight, a
 * model call in flight, or neither (the process's own work), and the timeline of one run mid-drain.
 */
function roundTripReport(spans: Span[]): string {
  const merge = (list: Span[]) => {
    const out: Array<[number, number]> = [];
    for (const [a, b] of [...list].sort((x, y) => x[0] - y[0])) {
      const last = out[out.length - 1];
      if (last && a <= last[1]) last[1] = Math.max(last[1], b);
      else out.push([a, b]);
    }
    return out;
  };
  // The window: from the model call of the run 30 % into the drain to that of the run 90 % in,
  // after the runs were all queued (their POSTs' statements are not a drained run's).
  const calls = spans.filter((s) => s[2] === 'http').sort((x, y) => x[0] - y[0]);
  const i0 = Math.floor(calls.length * 0.3);
  const i1 = Math.floor(calls.length * 0.9);
  if (i1 <= i0 + 2) return '  (too few model calls traced)\n';
  const runs = i1 - i0;
  const from = calls[i0][0];
  const to = calls[i1][0];
  const inWindow = spans.filter((s) => s[0] >= from && s[0] < to);
  const pg = inWindow.filter((s) => s[2] !== 'http');
  const http = inWindow.filter((s) => s[2] === 'http');
  const trips = merge(pg);
  const busy = (m: Array<[number, number]>) => m.reduce((t, [a, b]) => t + Math.min(b, to) - a, 0);
  const byLabel: Record<string, number> = {};
  // A write round's label names its commits after a tab: counted by statement name.
  for (const s of pg) byLabel[s[2].split('\t')[0]] = (byLabel[s[2].split('\t')[0]] ?? 0) + 1;
  for (const k of Object.keys(byLabel)) byLabel[k] = Math.round((byLabel[k] / runs) * 100) / 100;
  const sample = inWindow
    .filter((s) => s[0] >= calls[i0 + 1][0] && s[0] < calls[i0 + 3][0])
    .sort((x, y) => x[0] - y[0])
    .map((s) => `    +${(s[0] - calls[i0 + 1][0]).toFixed(2)} .. +${(s[1] - calls[i0 + 1][0]).toFixed(2)} ms ${s[2].replace('\t', ' ')}`)
    .join('\n');
  const per = (n: number) => (n / runs).toFixed(2);
  return (
    `  ${runs} runs mid-drain: serial PostgreSQL round trips per run ${per(trips.length)} (statements ${per(pg.length)}; model calls ${per(http.length)})\n` +
    `  statements per run by name: ${JSON.stringify(byLabel)}\n` +
    `  ms per run: wall ${per(to - from)}, a statement in flight ${per(busy(trips))}, a model call ${per(busy(merge(http)))}, neither ${per(to - from - busy(merge(inWindow)))}\n` +
    `  two runs (from a model call's start):\n${sample}\n`
  );
}

/** Per drained run, by key: what changed between two tallies (keys that did not move are left out). */
function perRunBy(a: Record<string, number> | undefined, b: Record<string, number> | undefined, runs: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of Object.keys(b ?? {}).sort()) {
    const d = (b?.[k] ?? 0) - (a?.[k] ?? 0);
    if (d) out[k] = Math.round((d / runs) * 100) / 100;
  }
  return out;
}

/** JavaScript allocated per run (BENCH_PROFILE_ALLOC=1): the total, by origin, and the top functions of src/ and machines/. */
function allocReport(allocBy: Record<string, number>): string {
  const rows = Object.entries(allocBy);
  if (rows.length === 0) return '';
  const total = rows.reduce((n, [, v]) => n + v, 0);
  const ours = rows.filter(([k]) => /^\S+ (src|machines)\//.test(k) || / (src|machines)\//.test(k)).sort((a, b) => b[1] - a[1]);
  const top = ours.slice(0, 25).map(([k, v]) => `    ${k}: ${v.toFixed(0)} B`);
  return `  JavaScript allocated per run (sampled every 512 B): ${total.toFixed(0)} B, of which src/ and machines/ ${ours.reduce((n, [, v]) => n + v, 0).toFixed(0)} B\n${top.join('\n')}\n`;
}

/**
 * `npm run bench -- profile-background <label>`: the background drain (manual agent runs of one
 * task, POST /background/tasks/{id}/run, on the real model path) under `node --cpu-prof`, at
 * background.concurrency 1 and 32, one child each. After a warm-up drain, one drain is profiled
 * (self time per drained run), then a counting drain gives, per run: store commits, group-commit
 * rounds (one fsync each), ops and their JSON bytes, events appended and their bytes, reads, model
 * HTTP requests, and files/directories left under workspaces/background/.
 * BENCH_PROFILE_STORE=postgres: on a PostgreSQL database of its own (created and dropped per
 * concurrency) instead of LevelDB; BENCH_DRAIN_CONCURRENCY=1 (or 32): only that concurrency.
 */
export async function profileBackgroundDrain(label: string, order: string[], save: (p: ProfileResult, order: string[]) => void): Promise<void> {
  const { agentdDrain, DRAIN_RETENTION } = await import('./benchmarks/drain-agentd.js');
  const runs = QUICK ? 300 : 1000;
  // BENCH_PROFILE_BULK=1: the runs are queued by POST .../runs, lists of 1,000 (all queued before the drain), as background-drain's bulk rows.
  const enqueue = process.env.BENCH_PROFILE_BULK ? 'bulk' : 'single';
  const WARMUP = QUICK ? 300 : 1000;
  const COUNTED = 200;
  const fake = await startChild({ mode: 'fake-openai' });
  const prev = process.env.BENCH_NODE_FLAGS;
  let commit = 'unknown';
  try {
    commit = execSync('git rev-parse --short HEAD', { cwd: ROOT }).toString().trim();
  } catch {
    // not a git checkout
  }
  try {
    const onPostgres = process.env.BENCH_PROFILE_STORE === 'postgres';
    const { admin, dbUrl } = await import('./benchmarks/postgres.js');
    for (const concurrency of process.env.BENCH_DRAIN_CONCURRENCY ? process.env.BENCH_DRAIN_CONCURRENCY.split(',').map(Number) : [1, 32]) {
      const dir = tempDir('profile-bg');
      const db = onPostgres ? `agentd_bench_profile_${Date.now().toString(36)}` : null;
      if (db) await admin(`CREATE DATABASE ${db}`);
      const profDir = tempDir('cpuprof');
      process.env.BENCH_NODE_FLAGS = `${prev ?? ''} --cpu-prof --cpu-prof-dir=${profDir}`;
      let cpuMs = 0;
      let fromMs = 0;
      let toMs = 0;
      let counts: Record<string, number> = {};
      let threads = { main: 0, others: 0 };
      let readsBy: Record<string, number> = {};
      let diskReads: Record<string, number> = {};
      let shapes: Record<string, number> = {};
      let opsByKind: Record<string, number> = {};
      let bytesByKind: Record<string, number> = {};
      let asyncBy: Record<string, number> = {};
      let allocBy: Record<string, number> = {};
      let syncAsyncBy: Record<string, number> = {};
      let syncAllocBy: Record<string, number> = {};
      try {
        const child = await startChild({
          mode: 'agentd',
          dataDir: dir,
          config: realPathConfig(fake.url, 'bench', {
            background: { enabled: true, concurrency, run_retention: DRAIN_RETENTION },
            ...(db ? { store: { kind: 'postgres', url: dbUrl(db) } } : {}),
          }),
          model: { kind: 'config' },
        });
        process.env.BENCH_NODE_FLAGS = prev ?? '';
        try {
          log(`profile-background c=${concurrency}: warm-up drain of ${WARMUP} runs`);
          await agentdDrain(child, WARMUP, dir, true, enqueue);
          fromMs = nowMs();
          log(`profile-background c=${concurrency}: profiled drain of ${runs} runs`);
          const th0 = threadCpuMs(child.pid);
          const d = await agentdDrain(child, runs, dir, true, enqueue).catch((err: unknown) => {
            throw new Error(`${String(err)}; child stderr: ${child.stderr().slice(-3000)}`);
          });
          const th1 = threadCpuMs(child.pid);
          threads = { main: (th1.main - th0.main) / runs, others: (th1.others - th0.others) / runs };
          toMs = nowMs();
          cpuMs = d.cpuMs;
          // The counting pass (outside the profiled window): what one drained run writes and creates.
          await child.call({ cmd: 'countBytes', on: true });
          const s0 = await child.call<StoreStats>({ cmd: 'storeStats' });
          const f0 = await fake.call<{ requests?: number }>({ cmd: 'fakeStats' });
          const t0 = treeStats(join(dir, 'workspaces', 'background'));
          const tracing = db !== null && !!process.env.BENCH_PG_TRACE;
          if (tracing) await child.call({ cmd: 'pgTrace', on: true });
          // Async resources made per run (promises, ticks, timers) and, with BENCH_PROFILE_ALLOC=1, the
          // bytes JavaScript allocated per run by function (V8's sampling heap profiler, collected
          // objects included): child-server.mjs's asyncCount / heapSample commands.
          const a0 = await child.call<Record<string, number>>({ cmd: 'asyncCount', on: true });
          const sampling = !!process.env.BENCH_PROFILE_ALLOC;
          if (sampling) await child.call({ cmd: 'heapSampleStart', interval: 512 });
          await agentdDrain(child, COUNTED, dir, true, enqueue);
          if (tracing) process.stderr.write(roundTripReport(await child.call<Span[]>({ cmd: 'pgTrace', on: false })));
          if (sampling) allocBy = perRunBy({}, await child.call<Record<string, number>>({ cmd: 'heapSampleStop' }), COUNTED);
          asyncBy = perRunBy(a0, await child.call<Record<string, number>>({ cmd: 'asyncCount', on: false }), COUNTED);
          const s1 = await child.call<StoreStats>({ cmd: 'storeStats' });
          const f1 = await fake.call<{ requests?: number }>({ cmd: 'fakeStats' });
          const t1 = treeStats(join(dir, 'workspaces', 'background'));
          const per = (a: number, b: number) => Math.round(((b - a) / COUNTED) * 100) / 100;
          counts = {
            commits: per(s0.commits, s1.commits),
            group_commit_rounds: per(s0.rounds, s1.rounds),
            ops: per(s0.ops, s1.ops),
            op_value_bytes: per(s0.opBytes, s1.opBytes),
            event_appends: per(s0.appends, s1.appends),
            events: per(s0.events, s1.events),
            event_bytes: per(s0.eventBytes, s1.eventBytes),
            reads: per(s0.reads, s1.reads),
            model_requests: per(f0.requests ?? 0, f1.requests ?? 0),
            workspace_files: per(t0.files, t1.files),
            workspace_dirs: per(t0.dirs, t1.dirs),
            mirror_posts: per(s0.workerPosts ?? 0, s1.workerPosts ?? 0),
            mirror_post_bytes: per(s0.workerPostBytes ?? 0, s1.workerPostBytes ?? 0),
          };
          // The same counts for POST /run/sync of the task's query (the same agent) at the same
          // concurrency, on this server after its drains: what a drained run makes on top of it.
          {
            const { DRAIN_QUERY } = await import('./benchmarks/drain-agentd.js');
            const body = JSON.stringify({ query: DRAIN_QUERY });
            const loop = (n: number) =>
              closedLoop({
                concurrency,
                durationMs: 60_000,
                maxCount: n,
                send: (agent) => request(`${child.url}/run/sync`, { method: 'POST', body, agent }),
                ok: (r) => r.status === 200,
              });
            await loop(WARMUP);
            const sa0 = await child.call<Record<string, number>>({ cmd: 'asyncCount', on: true });
            if (sampling) await child.call({ cmd: 'heapSampleStart', interval: 512 });
            const r = await loop(COUNTED);
            if (sampling) syncAllocBy = perRunBy({}, await child.call<Record<string, number>>({ cmd: 'heapSampleStop' }), r.count);
            syncAsyncBy = perRunBy(sa0, await child.call<Record<string, number>>({ cmd: 'asyncCount', on: false }), r.count);
          }
          readsBy = perRunBy(s0.readsBy, s1.readsBy, COUNTED);
          diskReads = perRunBy(s0.diskReads, s1.diskReads, COUNTED);
          shapes = perRunBy(s0.shapes, s1.shapes, COUNTED);
          const pick = (s: StoreStats, f: 'ops' | 'bytes') => Object.fromEntries(Object.entries(s.byKind ?? {}).map(([k, v]) => [k, v[f]]));
          opsByKind = perRunBy(pick(s0, 'ops'), pick(s1, 'ops'), COUNTED);
          bytesByKind = perRunBy(pick(s0, 'bytes'), pick(s1, 'bytes'), COUNTED);
        } finally {
          await child.stop();
        }
        const file = mainThreadProfile(profDir);
        if (!file) throw new Error(`no .cpuprofile written in ${profDir}`);
        if (process.env.BENCH_KEEP_PROFILE) {
          copyFileSync(join(profDir, file), `${process.env.BENCH_KEEP_PROFILE}.c${concurrency}`);
          // The profiled drain's window on the profile's clock (µs), for summaries of that window alone.
          writeFileSync(`${process.env.BENCH_KEEP_PROFILE}.c${concurrency}.window`, JSON.stringify({ fromUs: fromMs * 1000, toUs: toMs * 1000, runs }));
        }
        const profile = JSON.parse(readFileSync(join(profDir, file), 'utf8')) as CpuProfile;
        const summary = summarise(profile, runs, fromMs, toMs);
        const name = `background-c${concurrency}${db ? '-postgres' : ''}-${label}`;
        save(
          {
            label: name,
            ran_at: new Date().toISOString(),
            commit,
            command: `npm run bench -- profile-background ${label}`,
            description: `Background drain of manual agent runs (POST /background/tasks/{id}/run, 32 requests in flight) at background.concurrency ${concurrency}, agentd child under \`node --cpu-prof\` on the real path (openai-compatible over HTTP to the fake server, ${db ? 'PostgreSQL' : 'LevelDB with fsync'}); after a ${WARMUP}-run warm-up drain, ${runs} runs profiled; self time divided by the runs drained. CPU per drained run by thread over the profiled drain: main thread ${threads.main.toFixed(2)} ms (JavaScript, under the profiler), other threads ${threads.others.toFixed(2)} ms (libuv's pool: file calls, LevelDB writes, reads and fsyncs; V8's GC workers; LevelDB compaction). Per drained run (a further ${COUNTED}-run drain): ${JSON.stringify(counts)}.`,
            runs,
            cpu_per_run_ms: cpuMs / runs,
            ...summary,
          },
          order,
        );
        process.stderr.write(
          `profile ${name}: ${runs} runs, ${(cpuMs / runs).toFixed(2)} ms CPU per run (main thread ${threads.main.toFixed(2)}, other threads ${threads.others.toFixed(2)})\n  per run: ${JSON.stringify(counts)}\n  reads by call: ${JSON.stringify(readsBy)}\n  disk reads (LevelDB pool trips): ${JSON.stringify(diskReads)}\n  commits and appends by shape: ${JSON.stringify(shapes, null, 1)}\n  record ops by op:kind: ${JSON.stringify(opsByKind)}\n  their value bytes: ${JSON.stringify(bytesByKind)}\n  async resources made: ${JSON.stringify(asyncBy)}\n${allocReport(allocBy)}  POST /run/sync of the same agent at the same concurrency, async resources made per run: ${JSON.stringify(syncAsyncBy)}\n${allocReport(syncAllocBy)}`,
        );
        for (const g of summary.groups) process.stderr.write(`  ${g.name}: ${g.ms_per_run.toFixed(3)} ms/run (${(g.share * 100).toFixed(1)} %)\n`);
        for (const t of summary.top) process.stderr.write(`  ${t.fn} ${t.where}: ${t.ms_per_run.toFixed(3)} ms/run (${(t.share * 100).toFixed(1)} %)\n`);
      } finally {
        removeDir(dir);
        removeDir(profDir);
        if (db) await admin(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
      }
    }
  } finally {
    process.env.BENCH_NODE_FLAGS = prev ?? '';
    await fake.stop();
  }
}
