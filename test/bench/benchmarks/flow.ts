// Flow control on the real model path (docs/flow-control.md): the cost of naming a concurrency key
// that never queues (POST /run with `concurrency: {key, limit: 10000}` against plain POST /run,
// interleaved rounds against one server), and how soon a saturated key's queue admits the next run
// once a slot frees (limit 1: the gap between a run's end and the next run's first event, from
// the stored records and events of the server itself).
import {
  QUICK,
  closedLoop,
  log,
  mergeLoops,
  percentile,
  ratio,
  realPathConfig,
  removeDir,
  request,
  round,
  startChild,
  tempDir,
  threadCpuMs,
  type BenchOutput,
  type Child,
  type LoopResult,
  type Row,
} from '../lib.js';
import { WORKLOADS } from './run-real.js';
import { bucketAccuracy } from './flow-bucket.js';

const ROUND_MS = QUICK ? 1000 : 3000;
const ROUNDS = QUICK ? 2 : 6;
const QUEUED_RUNS = QUICK ? 50 : 300;

type Route = 'plain' | 'keyed';

/** The agentd child's CPU (ms, every thread) per route, summed over the measured rounds, and the runs it served. */
const cpuSpent: Record<Route, { ms: number; runs: number }> = { plain: { ms: 0, runs: 0 }, keyed: { ms: 0, runs: 0 } };

async function measure(child: Child, route: Route, concurrency: number, durationMs: number): Promise<LoopResult> {
  const query = WORKLOADS.trivial.query;
  const body = route === 'plain' ? JSON.stringify({ query }) : JSON.stringify({ query, concurrency: { key: 'bench:unlimited', limit: 10_000 } });
  const before = threadCpuMs(child.pid);
  const r = await closedLoop({
    concurrency,
    durationMs,
    send: (agent) => request(`${child.url}/run`, { method: 'POST', body, agent }),
    ok: (r) => r.status === 200 && r.body.includes('event: complete') && r.body.includes('"status":"success"'),
  });
  const after = threadCpuMs(child.pid);
  cpuSpent[route].ms += after.main + after.others - before.main - before.others;
  cpuSpent[route].runs += r.count;
  return r;
}

/**
 * On a key of limit 1, per run after the first: from the previous run's end (the later of its last
 * event and its record's updated_at) to when the key admitted this one (`admitted`: its
 * user_message's `metadata.queue.admitted_at`, the moment the freed slot became its own) and to
 * its user_message (`started`: its run record exists and its actor is on its way to the model).
 * All from the server's own stored timestamps (ms resolution), none from client timing.
 */
async function admissionGaps(child: Child): Promise<{ admitted: number[]; started: number[] }> {
  const key = { key: 'bench:saturated', limit: 1 };
  const sessions: string[] = [];
  const all = [];
  for (let i = 0; i < QUEUED_RUNS; i++) {
    const session_id = `flow-bench-${process.pid}-${i}`;
    sessions.push(session_id);
    all.push(request(`${child.url}/run/sync`, { method: 'POST', body: JSON.stringify({ query: WORKLOADS.trivial.query, session_id, concurrency: key }) }));
  }
  await Promise.all(all);
  const spans: Array<{ admitted: number | null; start: number; end: number }> = [];
  for (const s of sessions) {
    const runs = JSON.parse((await request(`${child.url}/runs?session_id=${s}`)).body).runs as Array<{ run_id: string; updated_at: string }>;
    const ev = JSON.parse((await request(`${child.url}/telemetry/events?session_id=${s}&limit=100`)).body).events as Array<{
      event_type: string;
      timestamp: string;
      metadata?: { queue?: { admitted_at?: string } } | null;
    }>;
    const first = ev.find((e) => e.event_type === 'user_message')!;
    const admittedAt = first.metadata?.queue?.admitted_at;
    const start = Date.parse(first.timestamp);
    const end = Math.max(...ev.map((e) => Date.parse(e.timestamp)), Date.parse(runs[0]!.updated_at));
    spans.push({ admitted: admittedAt ? Date.parse(admittedAt) : null, start, end });
  }
  spans.sort((a, b) => a.start - b.start);
  const admitted: number[] = [];
  const started: number[] = [];
  for (let i = 1; i < spans.length; i++) {
    const prev = spans[i - 1]!;
    const cur = spans[i]!;
    started.push(Math.max(0, cur.start - prev.end));
    // A run that found the key free (the first, or one arriving after a gap) was never queued.
    if (cur.admitted !== null) admitted.push(Math.max(0, cur.admitted - prev.end));
  }
  return { admitted, started };
}

export async function flowBench(): Promise<BenchOutput> {
  const dir = tempDir('flow');
  const fake = await startChild({ mode: 'fake-openai' });
  let agentd: Child | null = null;
  try {
    agentd = await startChild({ mode: 'agentd', dataDir: dir, config: realPathConfig(fake.url), model: { kind: 'config' } });
    log('warm-up');
    for (const route of ['plain', 'keyed'] as const) await measure(agentd, route, 32, QUICK ? 1000 : 5000);
    const rows: Row[] = [];
    let errors = 0;
    cpuSpent.plain = { ms: 0, runs: 0 };
    cpuSpent.keyed = { ms: 0, runs: 0 };
    for (const c of [1, 32]) {
      log(`measuring c=${c}: ${ROUNDS} rounds of ${ROUND_MS} ms per route, alternating`);
      const loops: Record<Route, LoopResult[]> = { plain: [], keyed: [] };
      for (let i = 0; i < ROUNDS; i++) {
        const order: Route[] = i % 2 === 0 ? ['plain', 'keyed'] : ['keyed', 'plain'];
        for (const route of order) loops[route].push(await measure(agentd, route, c, ROUND_MS));
      }
      const plain = mergeLoops(loops.plain);
      const keyed = mergeLoops(loops.keyed);
      errors += plain.errors + keyed.errors;
      const r = ratio(keyed.perSecond, plain.perSecond);
      rows.push({
        metric: `Runs/s, POST /run with a concurrency key that never queues (limit 10000), trivial workload, concurrency ${c}`,
        value: round(keyed.perSecond, 1),
        unit: 'runs/s',
        baseline: round(plain.perSecond, 1),
        baseline_label: 'POST /run without a key',
        ratio: r,
        target: '>= 0.97x (overhead <= 3 %)',
        pass: r !== null && r >= 0.97,
      });
    }
    // CPU per run is what a busy machine distorts least (runs/s at concurrency 1 is latency-bound).
    const cpuPerRun = (r: Route) => cpuSpent[r].ms / Math.max(1, cpuSpent[r].runs);
    const cpuRatio = ratio(cpuPerRun('plain'), cpuPerRun('keyed'));
    rows.push({
      metric: 'agentd CPU per run (all threads), POST /run with a never-queuing key, over every overhead round (c=1 and c=32)',
      value: round(cpuPerRun('keyed'), 3),
      unit: 'ms/run',
      baseline: round(cpuPerRun('plain'), 3),
      baseline_label: 'POST /run without a key',
      ratio: cpuRatio,
      target: '>= 0.97x (plain/keyed: overhead <= 3 %)',
      pass: cpuRatio !== null && cpuRatio >= 0.97,
    });
    log(`admission latency: ${QUEUED_RUNS} runs on a key of limit 1`);
    const gaps = await admissionGaps(agentd);
    const p99 = percentile(gaps.admitted, 99);
    rows.push({
      metric: "Saturated key (limit 1): from a run's end to the key admitting the next queued run (its slot freed and taken), p99 (p50 in the baseline column)",
      value: round(p99, 1),
      unit: 'ms',
      baseline: round(percentile(gaps.admitted, 50), 1),
      baseline_label: 'p50',
      target: '<= 5 ms',
      pass: gaps.admitted.length > 0 && p99 <= 5,
    });
    rows.push({
      metric:
        "Saturated key (limit 1): from a run's end to the next queued run's start (its user_message: record made, model call on its way), p99 (p50 in the baseline column)",
      value: round(percentile(gaps.started, 99), 1),
      unit: 'ms',
      baseline: round(percentile(gaps.started, 50), 1),
      baseline_label: 'p50',
      target: null,
      pass: null,
    });
    rows.push({ metric: 'Failed runs (overhead rounds)', value: errors, unit: '', target: '0', pass: errors === 0 });
    rows.push(...(await bucketAccuracy(fake.url)));
    return {
      title: 'Flow control: the cost of a concurrency key, and how soon a saturated key admits the next run',
      method: [
        'One agentd child as in the run benchmark (`openai-compatible` against the fake OpenAI server over HTTP, LevelDB with fsync), the trivial workload.',
        `Overhead: POST /run with \`concurrency: {key: "bench:unlimited", limit: 10000}\` (one key for every run; on LevelDB its holders are kept in memory, so the key costs no store write; on PostgreSQL the take rides in the run's creating commit and the release in its end commit, both the store's holders op) against POST /run without a key, ${ROUNDS} alternating rounds of ${ROUND_MS / 1000} s each at concurrency 1 and 32; also the child's CPU (every thread, /proc) per run served, per route, over all those rounds.`,
        'Bucket accuracy: two agentd instances on one PostgreSQL database, the model limited to 600 requests per minute, each driven by a closed loop of 8 POST /run/sync (trivial, one model call per run) for the window (BENCH_FLOW_BUCKET_SECONDS, default 60 s, 10 s with --quick) after a 3 s warm-up; the runs completed by both over the window, per minute, against 600.',
        `Admission: ${QUEUED_RUNS} POST /run/sync at once on a key of limit 1; for each run its end (the later of its last event and its record's updated_at), when its key admitted it (its user_message's \`metadata.queue.admitted_at\`: the freed slot became its own) and its start (its user_message event: its record made, its first model call on its way); the gaps from the previous run's end to the next run's admission (the target row) and to its start, ms clock resolution of the stored timestamps.`,
      ],
      rows,
      notes: [],
    };
  } finally {
    await agentd?.stop();
    await fake.stop();
    removeDir(dir);
  }
}
