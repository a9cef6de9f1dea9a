// POST /run on the path users run: agentd configured with `agent.model.provider: "openai-compatible"`
// pointed at a fast OpenAI-compatible server over HTTP (its own process), with the local `add` tool.
// Baseline, in the same run: what a user writes instead, a Fastify route calling the AI SDK's
// streamText against the same server with the same tool (up to 5 steps, SSE, nothing stored), in
// its own process like agentd. The in-process-model rows of the old benchmark follow as diagnostics.
import {
  QUICK,
  SCALE,
  closedLoop,
  log,
  median,
  mergeLoops,
  percentile,
  ratio,
  realPathConfig,
  removeDir,
  request,
  round,
  startChild,
  tempDir,
  type BenchOutput,
  type Child,
  type HttpResult,
  type LoopResult,
  type Row,
} from '../lib.js';
import { inProcessRunBench } from './run-inprocess.js';

/** Runs each side serves after start-up before anything is measured (the AI SDK needs ~1,800 to be warm). */
const WARMUP_RUNS = QUICK ? 300 : Math.max(2000, Math.round(2000 * SCALE));
/** The cold rows: the first runs after start-up, concurrency 1. */
const COLD_RUNS = QUICK ? 200 : 1000;
const ROUND_MS = QUICK ? 1000 : Math.max(500, Math.round(2000 * SCALE));
// Four rounds per side, alternating which goes first (AB BA AB BA): with two, one noisy round on this shared 2-core VM moved
// trivial c=1 by +-15 % between runs of the same build.
const ROUNDS = QUICK ? 1 : 4;

export const WORKLOADS = {
  trivial: { label: 'trivial answer (one model call)', query: 'Say hello to the benchmark.' },
  tool: { label: 'one tool call (add), two model calls', query: 'What is 2 + 3? Use the add tool.' },
} as const;
type Workload = keyof typeof WORKLOADS;

const okAgentd = (r: HttpResult) => r.status === 200 && r.body.includes('event: complete') && r.body.includes('"status":"success"');
const okHand = (r: HttpResult) => r.status === 200 && r.body.includes('event: complete') && !r.body.includes('event: error\n');
/**
 * The tool workload really ran the tool and answered after it: the tool's result is in the stream,
 * and so is the second call's answer (agentd: its final_answer; hand-rolled: the last word's delta).
 */
const okTool = (ok: (r: HttpResult) => boolean) => (r: HttpResult) =>
  ok(r) && r.body.includes('"sum":5') && (r.body.includes('The sum is 5.') || r.body.includes('"text":"5."'));

type Cpu = { user: number; system: number };
interface Measured {
  loop: LoopResult;
  cpuMs: number;
}

async function measure(
  child: Child,
  workload: Workload,
  concurrency: number,
  ok: (r: HttpResult) => boolean,
  opts: { durationMs: number; maxCount?: number },
): Promise<Measured> {
  const body = JSON.stringify({ query: WORKLOADS[workload].query });
  const check = workload === 'tool' ? okTool(ok) : ok;
  const c0 = await child.call<Cpu>({ cmd: 'cpu' });
  const loop = await closedLoop({
    concurrency,
    durationMs: opts.durationMs,
    maxCount: opts.maxCount,
    send: (agent) => request(`${child.url}/run`, { method: 'POST', body, agent }),
    ok: check,
  });
  const c1 = await child.call<Cpu>({ cmd: 'cpu' });
  return { loop, cpuMs: (c1.user + c1.system - c0.user - c0.system) / 1000 };
}

function merge(ms: Measured[]): Measured {
  return { loop: mergeLoops(ms.map((m) => m.loop)), cpuMs: ms.reduce((s, m) => s + m.cpuMs, 0) };
}

const cpuPerRun = (m: Measured) => m.cpuMs / Math.max(1, m.loop.count + m.loop.errors);

export async function runBench(): Promise<BenchOutput> {
  const dir = tempDir('run-real');
  const fake = await startChild({ mode: 'fake-openai' });
  let agentd: Child | null = null;
  let hand: Child | null = null;
  try {
    agentd = await startChild({ mode: 'agentd', dataDir: dir, config: realPathConfig(fake.url), model: { kind: 'config' } });
    hand = await startChild({ mode: 'hand-rolled', baseUrl: fake.url, model: 'bench' });
    const sides = { agentd: { child: agentd, ok: okAgentd }, hand: { child: hand, ok: okHand } };

    // One sample of each side's stream, for the method notes.
    const frameNames = async (c: Child, w: Workload) => {
      const r = await request(`${c.url}/run`, { method: 'POST', body: JSON.stringify({ query: WORKLOADS[w].query }) });
      return [...r.body.matchAll(/^event: (.*)$/gm)].map((m) => m[1]);
    };
    // Cold: the first runs after start-up (the samples above not counted... they run after).
    log(`cold: first ${COLD_RUNS} runs per side (trivial, c=1)`);
    const cold = {
      agentd: await measure(agentd, 'trivial', 1, okAgentd, { durationMs: 120_000, maxCount: COLD_RUNS }),
      hand: await measure(hand, 'trivial', 1, okHand, { durationMs: 120_000, maxCount: COLD_RUNS }),
    };
    const samples = {
      agentd: { trivial: await frameNames(agentd, 'trivial'), tool: await frameNames(agentd, 'tool') },
      hand: { trivial: await frameNames(hand, 'trivial'), tool: await frameNames(hand, 'tool') },
    };

    log(`warm-up: ${WARMUP_RUNS} more runs per side (half each workload, c=32)`);
    for (const side of Object.values(sides)) {
      for (const w of ['trivial', 'tool'] as const)
        await measure(side.child, w, 32, side.ok, { durationMs: QUICK ? 20_000 : 90_000, maxCount: WARMUP_RUNS / 2 });
    }

    const results: Record<string, { agentd: Measured; hand: Measured }> = {};
    for (const w of ['trivial', 'tool'] as const) {
      for (const c of [1, 32]) {
        log(`measuring ${w}, c=${c}: ${ROUNDS} alternating rounds of ${ROUND_MS} ms per side`);
        const a: Measured[] = [];
        const h: Measured[] = [];
        for (let i = 0; i < ROUNDS; i++) {
          // Alternate which side goes first, so a trend in background load weighs on both alike.
          if (i % 2 === 0) {
            a.push(await measure(agentd, w, c, okAgentd, { durationMs: ROUND_MS }));
            h.push(await measure(hand, w, c, okHand, { durationMs: ROUND_MS }));
          } else {
            h.push(await measure(hand, w, c, okHand, { durationMs: ROUND_MS }));
            a.push(await measure(agentd, w, c, okAgentd, { durationMs: ROUND_MS }));
          }
        }
        results[`${w}/${c}`] = { agentd: merge(a), hand: merge(h) };
      }
    }
    const requestsPerRun = async () => {
      const s0 = await fake.call<{ requests: number }>({ cmd: 'fakeStats' });
      await request(`${agentd!.url}/run`, { method: 'POST', body: JSON.stringify({ query: WORKLOADS.tool.query }) });
      const s1 = await fake.call<{ requests: number }>({ cmd: 'fakeStats' });
      return s1.requests - s0.requests;
    };
    const toolModelCalls = await requestsPerRun();
    // Store work per run, counted in the server process: write rounds (one LevelDB batch and fsync
    // each) and calls, 20 runs one after another.
    type Stats = Record<'commits' | 'appends' | 'rounds' | 'reads', number>;
    const storePer = async (w: Workload) => {
      const s0 = await agentd!.call<Stats>({ cmd: 'storeStats' });
      for (let i = 0; i < 20; i++) await request(`${agentd!.url}/run`, { method: 'POST', body: JSON.stringify({ query: WORKLOADS[w].query }) });
      const s1 = await agentd!.call<Stats>({ cmd: 'storeStats' });
      return (k: keyof Stats) => round((s1[k] - s0[k]) / 20, 2);
    };
    const storeTrivial = await storePer('trivial');
    const storeTool = await storePer('tool');

    const rows: Row[] = [];
    let errors = 0;
    for (const w of ['trivial', 'tool'] as const) {
      for (const c of [1, 32]) {
        const { agentd: a, hand: h } = results[`${w}/${c}`];
        errors += a.loop.errors;
        const r = ratio(a.loop.perSecond, h.loop.perSecond);
        rows.push({
          metric: `Runs/s, ${WORKLOADS[w].label}, concurrency ${c}`,
          value: round(a.loop.perSecond, 1),
          unit: 'runs/s',
          baseline: round(h.loop.perSecond, 1),
          baseline_label: 'hand-rolled Fastify + streamText',
          ratio: r,
          target: '>= 1.0x hand-rolled (>= 0.8x at least)',
          pass: r !== null && r >= 1.0,
        });
      }
    }
    for (const w of ['trivial', 'tool'] as const) {
      for (const c of [1, 32]) {
        const { agentd: a, hand: h } = results[`${w}/${c}`];
        const cpu = cpuPerRun(a);
        rows.push({
          metric: `Server CPU per run (process.cpuUsage / runs), ${WORKLOADS[w].label}, concurrency ${c}`,
          value: round(cpu, 2),
          unit: 'ms',
          baseline: round(cpuPerRun(h), 2),
          ratio: ratio(cpu, cpuPerRun(h)),
          ...(w === 'trivial' ? { target: '<= 3 ms', pass: cpu <= 3 } : {}),
        });
      }
    }
    for (const w of ['trivial', 'tool'] as const) {
      const { agentd: a, hand: h } = results[`${w}/1`];
      const fa = median(a.loop.firstFrames);
      const fh = median(h.loop.firstFrames);
      rows.push({
        metric: `First SSE frame p50, ${WORKLOADS[w].label}, concurrency 1`,
        value: round(fa, 2),
        unit: 'ms',
        baseline: round(fh, 2),
        ratio: ratio(fa, fh),
        ...(w === 'trivial' ? { target: "<= hand-rolled's + 1 ms", pass: fa <= fh + 1 } : {}),
      });
    }
    for (const w of ['trivial', 'tool'] as const) {
      for (const c of [1, 32]) {
        const { agentd: a, hand: h } = results[`${w}/${c}`];
        rows.push({
          metric: `Latency p50 / p99, ${WORKLOADS[w].label}, concurrency ${c}`,
          value: `${round(median(a.loop.latencies), 2)} / ${round(percentile(a.loop.latencies, 99), 2)}`,
          unit: 'ms',
          baseline: `${round(median(h.loop.latencies), 2)} / ${round(percentile(h.loop.latencies, 99), 2)}`,
        });
      }
    }
    const cr = ratio(cold.agentd.loop.perSecond, cold.hand.loop.perSecond);
    rows.push({
      metric: `First ${COLD_RUNS} runs after start-up (trivial, concurrency 1): runs/s`,
      value: round(cold.agentd.loop.perSecond, 1),
      unit: 'runs/s',
      baseline: round(cold.hand.loop.perSecond, 1),
      ratio: cr,
    });
    rows.push({
      metric: `First ${COLD_RUNS} runs after start-up: server CPU per run`,
      value: round(cpuPerRun(cold.agentd), 2),
      unit: 'ms',
      baseline: round(cpuPerRun(cold.hand), 2),
      ratio: ratio(cpuPerRun(cold.agentd), cpuPerRun(cold.hand)),
    });
    rows.push({
      metric: `First ${COLD_RUNS} runs after start-up: first SSE frame p50`,
      value: round(median(cold.agentd.loop.firstFrames), 2),
      unit: 'ms',
      baseline: round(median(cold.hand.loop.firstFrames), 2),
    });
    errors += cold.agentd.loop.errors;
    rows.push({
      metric: 'Failed runs (non-200, no successful `complete` frame, or tool workload without the tool result)',
      value: errors,
      unit: '',
      target: '0',
      pass: errors === 0,
    });
    rows.push({ metric: 'Model calls (HTTP requests to the model server) per tool-workload run', value: toolModelCalls, unit: '' });
    rows.push({
      metric: 'Store write rounds per run, concurrency 1 (one LevelDB batch and fsync each), trivial / tool',
      value: `${storeTrivial('rounds')} / ${storeTool('rounds')}`,
      unit: '',
    });
    rows.push({
      metric: 'Store calls per run (commit / appendEvents / reads), trivial; tool',
      value: `${storeTrivial('commits')} / ${storeTrivial('appends')} / ${storeTrivial('reads')}; ${storeTool('commits')} / ${storeTool('appends')} / ${storeTool('reads')}`,
      unit: '',
    });

    // The old benchmark, model object injected into the process (free model call): diagnostics only.
    // (Skipped by --quick, which is for iterating on the real path.)
    log('diagnostic: in-process model against a bare route replaying its frames');
    const inProc = QUICK ? { rows: [], method: [] } : await inProcessRunBench();
    for (const r of inProc.rows)
      rows.push({ ...r, metric: `Diagnostic, in-process model: ${r.metric.replace(/^Diagnostic,? ?:? ?/, '')}`, target: null, pass: null });

    const firstErr =
      [results['trivial/1'], results['trivial/32'], results['tool/1'], results['tool/32']]
        .map((x) => x.agentd.loop.firstError ?? x.hand.loop.firstError)
        .find(Boolean) ?? cold.agentd.loop.firstError;
    return {
      title: 'POST /run on the real model path (openai-compatible over HTTP) against a hand-rolled Fastify + AI SDK route',
      method: [
        "Model path of every row not marked diagnostic: agentd configured as its docs say, `agent.model.provider: \"openai-compatible\"` with `base_url` pointing at a fast OpenAI-compatible Chat Completions server over HTTP (test/bench/child-server.mjs `fake-openai`, its own process, so its CPU is not counted as either side's) and `agent.tools.local` holding one `add` tool (test/bench/bench-tools.mjs); `builtin: []`, everything else default (LevelDB with fsync, every event stored, every snapshot saved). The provider's streamed calls go through agentd's own Chat Completions client (src/agent/model/chat-completions-stream.ts), not the AI SDK's doStream.",
        `Workloads: trivial (the model streams a 5-word answer: one model call) and one tool (the model calls \`add\`, agentd runs it, a second model call answers: ${toolModelCalls} model requests per run).`,
        "Baseline: a Fastify POST /run route calling the AI SDK's `streamText` against the same server with the same `add` tool (executed by the SDK), `stopWhen: stepCountIs(5)`, each `fullStream` part written as one SSE frame, nothing stored; in its own child process like agentd.",
        `Frames per run: agentd trivial ${samples.agentd.trivial.length} (${samples.agentd.trivial.join(', ')}); tool ${samples.agentd.tool.length}. Hand-rolled trivial ${samples.hand.trivial.length} (${samples.hand.trivial.join(', ')}); tool ${samples.hand.tool.length}.`,
        `Order: the first ${COLD_RUNS} runs after start-up of each side (trivial, concurrency 1: the cold rows), then ${WARMUP_RUNS} warm-up runs per side (half per workload, concurrency 32), then per workload and concurrency ${ROUNDS} alternating rounds of ${ROUND_MS / 1000} s per side.`,
        'CPU per run: process.cpuUsage() of the server process (user + system) over each round, divided by the runs it served in it, so other load on the shared machine does not count. First frame: time from sending the request to the first body byte (agentd: the `session` frame; hand-rolled: the `start` part). Client: keep-alive HTTP workers in the parent process, each reading the full response before the next request.',
        'Diagnostic rows ("in-process model"): the previous form of this benchmark, a ModelProvider object inside the server that answers at once (no HTTP, no AI SDK) against a bare route replaying the same frames; not the path users run.',
        ...inProc.method.map((m) => `In-process diagnostic: ${m}`),
      ],
      rows,
      notes: firstErr ? [`First failure: ${firstErr}`] : [],
    };
  } finally {
    await agentd?.stop();
    await hand?.stop();
    await fake.stop();
    removeDir(dir);
  }
}
