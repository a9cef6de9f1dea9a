// `npm run bench -- profile-run [--quick]`: what one agent run costs the server, by counts rather
// than time (a loaded host blurs CPU timings): POST /run/sync of the drain's agent (one model call,
// the real path: openai-compatible over HTTP to the fake server) at concurrency 1 and 32, after a
// warm-up. Per run: the store's commits, rounds, reads, ops and bytes; the promises and other async
// resources made (node:async_hooks); the JSON.stringify / JSON.parse calls; and the bytes
// JavaScript allocated, in all and by function (V8's sampling heap profiler, collected objects
// included). Writes no results. BENCH_CHILD_SCRIPT measures another build (an A/B against a copy of
// child-server.mjs next to that build's dist/).
import { QUICK, closedLoop, log, realPathConfig, removeDir, request, startChild, tempDir } from './lib.js';
import { WORKLOADS } from './benchmarks/run-real.js';

type Tally = Record<string, number>;

interface StoreStats {
  commits: number;
  rounds: number;
  reads: number;
  ops: number;
  opBytes: number;
  events: number;
  eventBytes: number;
}

const WARMUP = QUICK ? 500 : 1500;
const COUNTED = QUICK ? 200 : 500;
const ALLOC_RUNS = QUICK ? 300 : 1000;

const minus = (a: Tally, b: Tally, n: number): Tally => Object.fromEntries(Object.keys(a).map((k) => [k, (a[k]! - (b[k] ?? 0)) / n]));

export async function profileRunCost(): Promise<void> {
  const fake = await startChild({ mode: 'fake-openai' });
  const dir = tempDir('profile-run');
  const body = JSON.stringify({ query: WORKLOADS.trivial.query });
  const out = (line: string) => process.stdout.write(`${line}\n`);
  try {
    const agentd = await startChild({ mode: 'agentd', dataDir: dir, config: realPathConfig(fake.url), model: { kind: 'config' } });
    try {
      const loop = (c: number, n: number) =>
        closedLoop({
          concurrency: c,
          durationMs: 600_000,
          maxCount: n,
          send: (agent) => request(`${agentd.url}/run/sync`, { method: 'POST', body, agent }),
          ok: (x) => x.status === 200 && x.body.includes('"status":"success"'),
        });
      log(`profile-run: warm-up, ${WARMUP} runs at concurrency 32`);
      await loop(32, WARMUP);
      for (const c of [1, 32]) {
        const s0 = await agentd.call<StoreStats>({ cmd: 'storeStats' });
        const a0 = await agentd.call<Tally>({ cmd: 'asyncCount', on: true });
        const j0 = await agentd.call<Tally>({ cmd: 'jsonCount', on: true });
        const r = await loop(c, COUNTED);
        const j1 = await agentd.call<Tally>({ cmd: 'jsonCount', on: false });
        const a1 = await agentd.call<Tally>({ cmd: 'asyncCount', on: false });
        const s1 = await agentd.call<StoreStats>({ cmd: 'storeStats' });
        const n = r.count + r.errors;
        if (r.errors) log(`  ${r.errors} failed: ${r.firstError}`);
        const pick = (s: StoreStats): Tally => ({
          commits: s.commits,
          rounds: s.rounds,
          reads: s.reads,
          ops: s.ops,
          op_bytes: s.opBytes,
          events: s.events,
          event_bytes: s.eventBytes,
        });
        const per: Tally = {
          ...minus(pick(s1), pick(s0), n),
          ...Object.fromEntries(Object.entries(minus(a1, a0, n)).map(([k, v]) => [`async ${k}`, v])),
          ...Object.fromEntries(Object.entries(minus(j1, j0, n)).map(([k, v]) => [`JSON.${k}`, v])),
        };
        out(`per /run/sync run at c=${c} (${n} runs):`);
        for (const [k, v] of Object.entries(per)) if (typeof v === 'number' && v !== 0) out(`  ${k}: ${v.toFixed(2)}`);
      }
      log(`profile-run: allocations over ${ALLOC_RUNS} runs at concurrency 32`);
      await agentd.call({ cmd: 'heapSampleStart', interval: 512 });
      const r = await loop(32, ALLOC_RUNS);
      const bytes = await agentd.call<Tally>({ cmd: 'heapSampleStop' });
      const n = r.count + r.errors;
      const perRun = Object.entries(bytes).map(([k, v]) => [k, v / n] as const);
      const total = perRun.reduce((s, [, v]) => s + v, 0);
      const ours = perRun.filter(([k]) => / (src|machines)\//.test(k));
      out(
        `JavaScript allocated per run (bytes; sampled every 512 B): ${total.toFixed(0)}, of it in src/ and machines/ ${ours.reduce((s, [, v]) => s + v, 0).toFixed(0)}`,
      );
      out('  largest by function in src/ and machines/ (inlining moves bytes between callers and callees)');
      for (const [k, v] of ours.sort((a, b) => b[1] - a[1]).slice(0, 25)) out(`    ${v.toFixed(0)} B  ${k}`);
      out('  largest by function elsewhere');
      for (const [k, v] of perRun
        .filter(([k]) => !/ (src|machines)\//.test(k))
        .sort((a, b) => b[1] - a[1])
        .slice(0, 10))
        out(`    ${v.toFixed(0)} B  ${k}`);
    } finally {
      await agentd.stop();
    }
  } finally {
    await fake.stop();
    removeDir(dir);
  }
}
