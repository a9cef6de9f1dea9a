// The cost of naming a concurrency key that never queues (test/bench/benchmarks/flow.ts), measured
// so that a 3 % difference is resolvable on a loaded 2-core host. A run costs ~1-3 ms of CPU here,
// so 3 % is 30-90 us per run: separate 2 s rounds per route (the previous method) let the host's
// other work and the server's own GC or compaction drift by more than that between rounds.
//
// One closed loop against one server runs without a pause while the route its workers send
// switches every phase (a fraction of a second), in ABBA blocks (plain keyed keyed plain, then
// keyed plain plain keyed): a linear drift over a block cancels inside it, the blocks are
// independent samples, and both routes share the process's heap, JIT state and connections. Each
// phase counts only the runs of its own route that complete after a guard (the previous route's
// runs still in flight drain meanwhile) and the server's CPU over that same span
// (/proc/<pid>/task/<tid>/schedstat: ns on CPU, every thread). The result is the median of the
// per-block ratios with a bootstrap 95 % interval, so the row says whether it resolves 3 %.
import http from 'node:http';
import { readFileSync, readdirSync } from 'node:fs';
import { nowMs, request, sleep } from '../lib.js';

export type Route = 'plain' | 'keyed';

/** One phase's measured span: its route's runs completed in it, its length, the server's CPU. */
export interface Phase {
  route: Route;
  count: number;
  seconds: number;
  cpuMs: number;
  /** The server's event loop runnable but without a CPU (ms): the host's other work. */
  waitMs: number;
}

/** One ABBA block: keyed runs/s over plain runs/s, and plain CPU per run over keyed CPU per run. */
export interface Block {
  ratio: number;
  cpuRatio: number;
}

export interface Interleaved {
  phases: Phase[];
  blocks: Block[];
  errors: number;
  firstError: string | null;
}

/**
 * CPU time (ms) of every thread of `pid` so far, ns resolution (schedstat: time on CPU), and how
 * long its main thread (the event loop) has been runnable but waiting for a CPU (schedstat's
 * run-queue time: the host's other work, not the server's).
 */
export function cpuMsOf(pid: number): { cpu: number; mainWait: number } {
  let ns = 0;
  let wait = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const f = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ');
      ns += Number(f[0]);
      if (Number(tid) === pid) wait = Number(f[1]);
    } catch {
      // the thread ended meanwhile
    }
  }
  return { cpu: ns / 1e6, mainWait: wait / 1e6 };
}

const ABBA: Route[][] = [
  ['plain', 'keyed', 'keyed', 'plain'],
  ['keyed', 'plain', 'plain', 'keyed'],
];

const sum = (xs: number[]): number => xs.reduce((s, x) => s + x, 0);

function blockOf(phases: Phase[]): Block {
  const of = (route: Route) => phases.filter((p) => p.route === route);
  const rate = (ps: Phase[]) => sum(ps.map((p) => p.count)) / Math.max(1e-9, sum(ps.map((p) => p.seconds)));
  const cpuPerRun = (ps: Phase[]) => sum(ps.map((p) => p.cpuMs)) / Math.max(1, sum(ps.map((p) => p.count)));
  return { ratio: rate(of('keyed')) / rate(of('plain')), cpuRatio: cpuPerRun(of('plain')) / cpuPerRun(of('keyed')) };
}

/**
 * Up to `blocks` ABBA blocks of phases against the server at `url` (pid `pid`), `concurrency`
 * workers, within `budgetMs` (whole blocks; at least `minBlocks`); each phase measured once its
 * guard is over. A busy host stretches a run at concurrency 32 from tens to hundreds of ms: with
 * a span of a few runs' latency the count is mostly where the span happens to cut the runs in
 * flight, so a block's guard and span grow with the median latency of the runs so far.
 */
export async function interleaved(opts: {
  url: string;
  pid: number;
  concurrency: number;
  blocks: number;
  minBlocks?: number;
  budgetMs?: number;
  /** The least guard after a switch, and the least span measured after it. */
  guardMs: number;
  measureMs: number;
  body: Record<Route, string>;
  ok: (status: number, body: string) => boolean;
}): Promise<Interleaved> {
  const schedule = Array.from({ length: opts.blocks }, (_, b) => ABBA[b % 2]!).flat();
  const budgetEnd = nowMs() + (opts.budgetMs ?? Infinity);
  // The latest runs' latencies (ms), for the next block's guard and span.
  const recent: number[] = [];
  const agent = new http.Agent({ keepAlive: true, maxSockets: opts.concurrency });
  const phases: Phase[] = [];
  let current = 0;
  let measuring: Phase | null = null;
  let done = false;
  let errors = 0;
  let firstError: string | null = null;
  const inFlight: Record<Route, number> = { plain: 0, keyed: 0 };
  // The route rides in a header too, so the child can tell them apart without parsing the body
  // (BENCH_FLOW_BURN_US, test/bench/burn-keyed.mjs); plain and keyed carry it alike.
  const send = async () => {
    while (!done) {
      const route = schedule[current]!;
      inFlight[route]++;
      try {
        const r = await request(`${opts.url}/run`, { method: 'POST', body: opts.body[route], agent, headers: { 'x-bench-route': route } });
        recent.push(r.ms);
        if (recent.length > 200) recent.shift();
        if (!opts.ok(r.status, r.body)) {
          errors++;
          firstError ??= `HTTP ${r.status}: ${r.body.slice(0, 300)}`;
        } else if (measuring) measuring.count++; // the guard drained the other route: this is the phase's own
      } catch (e) {
        errors++;
        firstError ??= String(e);
      } finally {
        inFlight[route]--;
      }
    }
  };
  const workers = Array.from({ length: opts.concurrency }, send);
  try {
    let guardMs = opts.guardMs;
    let measureMs = opts.measureMs;
    for (let i = 0; i < schedule.length; i++) {
      if (i % 4 === 0) {
        // A new block: stop when the budget cannot take it; its four phases alike (ABBA's symmetry).
        const latency = median(recent) || 0;
        guardMs = Math.max(opts.guardMs, 2 * latency);
        measureMs = Math.max(opts.measureMs, 10 * latency);
        if (i / 4 >= (opts.minBlocks ?? 1) && nowMs() + 4 * (guardMs + measureMs) > budgetEnd) break;
      }
      current = i;
      // The guard: at least guardMs, and until the previous route's last run has answered.
      await sleep(guardMs);
      const other: Route = schedule[i] === 'plain' ? 'keyed' : 'plain';
      while (inFlight[other] > 0) await sleep(2);
      const phase: Phase = { route: schedule[i]!, count: 0, seconds: 0, cpuMs: 0, waitMs: 0 };
      const t0 = nowMs();
      const cpu0 = cpuMsOf(opts.pid);
      measuring = phase;
      await sleep(measureMs);
      measuring = null;
      const cpu1 = cpuMsOf(opts.pid);
      phase.cpuMs = cpu1.cpu - cpu0.cpu;
      phase.waitMs = cpu1.mainWait - cpu0.mainWait;
      phase.seconds = (nowMs() - t0) / 1000;
      phases.push(phase);
    }
  } finally {
    done = true;
    await Promise.all(workers);
    agent.destroy();
  }
  const blocks = Array.from({ length: phases.length / 4 }, (_, b) => blockOf(phases.slice(4 * b, 4 * b + 4)));
  return { phases, blocks, errors, firstError };
}

/** The median of `values` (NaN when empty). */
export function median(values: number[]): number {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/**
 * The 95 % percentile-bootstrap interval of the median of `values` (resampling the independent
 * blocks; a fixed seed, so one result always prints the same interval).
 */
export function medianInterval(values: number[], resamples = 4000, of: (xs: number[]) => number = median): [number, number] {
  if (values.length === 0) return [NaN, NaN];
  let seed = 0x9e3779b9;
  const random = () => {
    // mulberry32
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const medians: number[] = [];
  for (let i = 0; i < resamples; i++) medians.push(of(values.map(() => values[Math.floor(random() * values.length)]!)));
  medians.sort((a, b) => a - b);
  return [medians[Math.floor(resamples * 0.025)]!, medians[Math.ceil(resamples * 0.975) - 1]!];
}
