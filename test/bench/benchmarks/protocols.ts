// The chat protocol adapters against POST /run on the real model path (the same child setup as
// run-real.ts: agentd with `openai-compatible` pointed at the fake OpenAI server over HTTP, the
// `add` tool): runs/s of POST /ai-sdk/chat and POST /ag-ui relative to POST /run, on the trivial
// and one-tool workloads at concurrency 1 and 32, in alternating rounds against one server; and
// what one more streamed frame costs the server on each route (the per-frame rows, below).
//
// `npm run bench -- protocols --frames-only`: only the per-frame rounds (for iterating on a
// route's frame cost; the result lacks the runs/s rows).
import {
  QUICK,
  SCALE,
  closedLoop,
  cpuSeconds,
  log,
  mergeLoops,
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
  type HttpResult,
  type LoopResult,
  type Row,
} from '../lib.js';
import { WORKLOADS } from './run-real.js';

const WARMUP_RUNS = QUICK ? 200 : Math.max(300, Math.round(2000 * SCALE));
const ROUND_MS = QUICK ? 1000 : Math.max(500, Math.round(2000 * SCALE));
const ROUNDS = QUICK ? 1 : 4;
/** Runs per route in the counting pass (disk reads and rounds per run). */
const COUNTED_RUNS = QUICK ? 50 : 300;
const FRAMES_ONLY = process.argv.includes('--frames-only');
/**
 * The per-frame workloads: one model call answering in FEW or FEW + EXTRA one-word chunks
 * (test/bench/child-server.mjs's fake model answers "in <n> words" so); the runs differ only in
 * how many text deltas they stream, so the extra CPU over the extra frames is one frame's cost.
 */
const FEW = 5;
const EXTRA = 1000;
/** Per-frame rounds: shorter and more of them than the runs/s rounds, so load swings average out. */
const FRAME_ROUNDS = QUICK ? 2 : 8;
const FRAME_ROUND_MS = Math.max(500, Math.round(ROUND_MS / 2));
const FRAME_QUERY = { few: `Say hello to the benchmark in ${FEW} words.`, many: `Say hello to the benchmark in ${FEW + EXTRA} words.` } as const;
type Length = keyof typeof FRAME_QUERY;

interface StoreStats {
  rounds: number;
  diskReads?: Record<string, number>;
}

type Workload = keyof typeof WORKLOADS;
// `run-session`: POST /run naming a new session, as the chat protocols do (their chat / thread
// id is the session): it tells the adapters' own cost apart from that of a named session.
// `sync`: POST /run/sync (one JSON answer, no frames), in the per-frame rounds only: what one more
// text delta costs a run that streams none (the model's chunk, the run's own work on it).
type Route = 'run' | 'run-session' | 'ai-sdk' | 'ag-ui' | 'sync';
const ROUTES: Route[] = ['run', 'run-session', 'ai-sdk', 'ag-ui'];
/** The routes of the counting pass (store work per run). */
const COUNTED: Route[] = ['run', 'run-session', 'ai-sdk', 'ag-ui'];
/** The routes of the per-frame rounds. */
const FRAME_ROUTES = ['run', 'ai-sdk', 'ag-ui', 'sync'] as const;
type FrameRoute = (typeof FRAME_ROUTES)[number];
const PATH: Record<Route, string> = {
  run: '/run',
  'run-session': '/run',
  'ai-sdk': '/ai-sdk/chat',
  'ag-ui': '/ag-ui',
  sync: '/run/sync',
};
const routeRecord = <T>(f: (r: Route) => T): Record<Route, T> => Object.fromEntries(ROUTES.map((r) => [r, f(r)])) as Record<Route, T>;

let seq = 0;
/**
 * One request body. The chat protocols name their session (the chat id, the thread id): a fresh one
 * per request, as POST /run without session_id gets, so no request queues behind another.
 */
function bodyOf(route: Route, query: string): string {
  const id = `bench-${process.pid}-${++seq}`;
  switch (route) {
    case 'run':
    case 'sync':
      return JSON.stringify({ query });
    case 'run-session':
      return JSON.stringify({ query, session_id: id });
    case 'ai-sdk':
      return JSON.stringify({ id, trigger: 'submit-message', messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: query }] }] });
    case 'ag-ui':
      return JSON.stringify({ threadId: id, runId: `r-${seq}`, messages: [{ id: 'u1', role: 'user', content: query }], tools: [], context: [] });
  }
}

/** The answer is the whole run, successful (and for the tool workload, the tool's result is in it). */
function okOf(route: Route, workload: Workload | Length): (r: HttpResult) => boolean {
  const tool = (r: HttpResult) => workload !== 'tool' || r.body.includes('sum');
  switch (route) {
    case 'run':
    case 'run-session':
      return (r) => r.status === 200 && r.body.includes('event: complete') && r.body.includes('"status":"success"') && tool(r);
    case 'ai-sdk':
      return (r) => r.status === 200 && r.body.includes('"finishReason":"stop"') && r.body.includes('data: [DONE]') && tool(r);
    case 'ag-ui':
      return (r) => r.status === 200 && r.body.includes('"type":"RUN_FINISHED"') && r.body.includes('"outcome":{"type":"success"}') && tool(r);
    case 'sync':
      return (r) => r.status === 200 && r.body.includes('"status":"success"') && tool(r);
  }
}

function measure(
  child: Child,
  route: Route,
  workload: Workload | Length,
  concurrency: number,
  opts: { durationMs: number; maxCount?: number },
): Promise<LoopResult> {
  const query = workload === 'few' || workload === 'many' ? FRAME_QUERY[workload] : WORKLOADS[workload].query;
  return closedLoop({
    concurrency,
    durationMs: opts.durationMs,
    maxCount: opts.maxCount,
    send: (agent) => request(`${child.url}${PATH[route]}`, { method: 'POST', body: bodyOf(route, query), agent }),
    ok: okOf(route, workload),
  });
}

/** `data:` frames of an answer (SSE); POST /run/sync's JSON has none. */
const framesOf = (body: string): number => (body.match(/^data: /gm) ?? []).length;

interface Part {
  rows: Row[];
  errors: number;
  firstError: string | null;
}

/** Runs/s of the adapters against POST /run, server CPU per run, store work per run, frames per run. */
async function adapterRows(agentd: Child): Promise<Part> {
  // `data:` frames and response bytes of one run per workload and route.
  const frames: Record<string, Record<Route, number>> = {};
  const bytes: Record<string, Record<Route, number>> = {};
  for (const w of ['trivial', 'tool'] as const) {
    frames[w] = routeRecord(() => 0);
    bytes[w] = routeRecord(() => 0);
    for (const route of ROUTES) {
      const r = await request(`${agentd.url}${PATH[route]}`, { method: 'POST', body: bodyOf(route, WORKLOADS[w].query) });
      frames[w][route] = framesOf(r.body);
      bytes[w][route] = Buffer.byteLength(r.body);
    }
  }

  log(`warm-up: ${WARMUP_RUNS} runs per route (half each workload, c=32)`);
  for (const route of ROUTES)
    for (const w of ['trivial', 'tool'] as const) await measure(agentd, route, w, 32, { durationMs: QUICK ? 20_000 : 90_000, maxCount: WARMUP_RUNS / 2 });

  const results: Record<string, Record<Route, LoopResult>> = {};
  /** Server CPU seconds spent in each route's rounds (the agentd child's user + system time). */
  const cpu: Record<string, Record<Route, number>> = {};
  for (const w of ['trivial', 'tool'] as const) {
    for (const c of [1, 32]) {
      log(`measuring ${w}, c=${c}: ${ROUNDS} rounds of ${ROUND_MS} ms per route, order rotated each round`);
      const loops = routeRecord<LoopResult[]>(() => []);
      const spent = routeRecord(() => 0);
      for (let i = 0; i < ROUNDS; i++) {
        // Rotate which route goes first, so a trend in background load weighs on all alike.
        const order = [...ROUTES.slice(i % ROUTES.length), ...ROUTES.slice(0, i % ROUTES.length)];
        for (const route of order) {
          const before = cpuSeconds(agentd.pid);
          loops[route].push(await measure(agentd, route, w, c, { durationMs: ROUND_MS }));
          spent[route] += cpuSeconds(agentd.pid) - before;
        }
      }
      cpu[`${w}/${c}`] = spent;
      results[`${w}/${c}`] = routeRecord((r) => mergeLoops(loops[r]));
    }
  }

  // Store work per run, counted rather than timed (the same on a loaded machine): LevelDB's
  // asynchronous reads (each a trip through libuv's thread pool; child-server.mjs counts them on
  // the native binding) and group-commit rounds (one fsync each), trivial workload.
  const work: Record<string, { reads: number; rounds: number }> = {};
  for (const c of [1, 32])
    for (const route of COUNTED) {
      await agentd.call({ cmd: 'countBytes', on: true });
      const s0 = await agentd.call<StoreStats>({ cmd: 'storeStats' });
      const loop = await measure(agentd, route, 'trivial', c, { durationMs: 60_000, maxCount: COUNTED_RUNS });
      const s1 = await agentd.call<StoreStats>({ cmd: 'storeStats' });
      await agentd.call({ cmd: 'countBytes', on: false });
      const reads = (s: StoreStats) => Object.values(s.diskReads ?? {}).reduce((a, b) => a + b, 0);
      work[`${route}/${c}`] = { reads: (reads(s1) - reads(s0)) / loop.count, rounds: (s1.rounds - s0.rounds) / loop.count };
    }

  const rows: Row[] = [];
  let errors = 0;
  let firstError: string | null = null;
  for (const route of ['ai-sdk', 'ag-ui'] as const) {
    for (const w of ['trivial', 'tool'] as const) {
      for (const c of [1, 32]) {
        const res = results[`${w}/${c}`];
        const r = ratio(res[route].perSecond, res.run.perSecond);
        rows.push({
          metric: `Runs/s, POST ${PATH[route]}, ${WORKLOADS[w].label}, concurrency ${c}`,
          value: round(res[route].perSecond, 1),
          unit: 'runs/s',
          baseline: round(res.run.perSecond, 1),
          baseline_label: 'POST /run',
          ratio: r,
          target: '>= 0.9x POST /run',
          pass: r !== null && r >= 0.9,
        });
      }
    }
  }
  // Diagnostic: the adapters against POST /run with a named session, which they always have.
  for (const route of ['ai-sdk', 'ag-ui'] as const)
    for (const w of ['trivial', 'tool'] as const)
      for (const c of [1, 32]) {
        const res = results[`${w}/${c}`];
        rows.push({
          metric: `Diagnostic: runs/s, POST ${PATH[route]} vs POST /run with a new session_id, ${WORKLOADS[w].label}, concurrency ${c}`,
          value: round(res[route].perSecond, 1),
          unit: 'runs/s',
          baseline: round(res['run-session'].perSecond, 1),
          baseline_label: 'POST /run with session_id',
          ratio: ratio(res[route].perSecond, res['run-session'].perSecond),
        });
      }
  // Server CPU per run: what a run costs the server, less dragged by the rest of a shared
  // machine's load than runs/s (though contention still moves it by tens of percent there, so
  // it carries no target). The adapters write fewer frames per run than POST /run (row below).
  const cpuPerRun = (key: string, route: Route) => (cpu[key][route] * 1000) / Math.max(1, results[key][route].count);
  for (const route of ['run-session', 'ai-sdk', 'ag-ui'] as const)
    for (const w of ['trivial', 'tool'] as const)
      for (const c of [1, 32]) {
        const key = `${w}/${c}`;
        rows.push({
          metric: `Server CPU per run, POST ${PATH[route]}${route === 'run-session' ? ' with a new session_id' : ''}, ${WORKLOADS[w].label}, concurrency ${c}`,
          value: round(cpuPerRun(key, route), 2),
          unit: 'ms',
          baseline: round(cpuPerRun(key, 'run'), 2),
          baseline_label: 'POST /run',
          ratio: ratio(cpuPerRun(key, route), cpuPerRun(key, 'run')),
        });
      }
  for (const res of Object.values(results))
    for (const route of ROUTES) {
      errors += res[route].errors;
      firstError ??= res[route].firstError;
    }
  for (const c of [1, 32])
    rows.push({
      metric: `LevelDB disk reads per run (thread-pool trips), trivial answer, concurrency ${c}: POST /run / with a new session_id / POST /ai-sdk/chat / POST /ag-ui`,
      value: COUNTED.map((r) => round(work[`${r}/${c}`].reads, 2)).join(' / '),
      unit: '',
    });
  for (const c of [1, 32])
    rows.push({
      metric: `Group-commit rounds (fsyncs) per run, trivial answer, concurrency ${c}: POST /run / with a new session_id / POST /ai-sdk/chat / POST /ag-ui`,
      value: COUNTED.map((r) => round(work[`${r}/${c}`].rounds, 2)).join(' / '),
      unit: '',
    });
  const tf = frames.tool;
  rows.push({
    metric: 'data: frames per tool-workload run, POST /run / POST /ai-sdk/chat / POST /ag-ui',
    value: `${tf.run} / ${tf['ai-sdk']} / ${tf['ag-ui']}`,
    unit: '',
    target: 'adapters <= POST /run',
    pass: tf['ai-sdk'] <= tf.run && tf['ag-ui'] <= tf.run,
  });
  const STREAMED = ['run', 'ai-sdk', 'ag-ui'] as const;
  for (const w of ['trivial', 'tool'] as const)
    rows.push({
      metric: `Bytes per data: frame (response bytes / frames), ${WORKLOADS[w].label}: POST /run / POST /ai-sdk/chat / POST /ag-ui`,
      value: STREAMED.map((r) => round(bytes[w][r] / Math.max(1, frames[w][r]), 0)).join(' / '),
      unit: '',
    });
  return { rows, errors, firstError };
}

/**
 * What one more streamed frame costs the server, per route: the same run answering in FEW and in
 * FEW + EXTRA one-word chunks, alternated in rounds at concurrency 32; the slope (CPU per run of
 * the longer less the shorter, over the frames it has more) is the marginal cost of a text-delta
 * frame, the model chunk and the run's own work on it included. POST /run/sync's slope (no
 * frames) is that shared part, shown on its own.
 */
async function frameRows(agentd: Child): Promise<Part> {
  const framesPerRun = {} as Record<FrameRoute, Record<Length, number>>;
  for (const route of FRAME_ROUTES) {
    framesPerRun[route] = { few: 0, many: 0 };
    for (const len of ['few', 'many'] as const) {
      const r = await request(`${agentd.url}${PATH[route]}`, { method: 'POST', body: bodyOf(route, FRAME_QUERY[len]) });
      // POST /run/sync streams nothing: its "frames" are the text deltas the model sent.
      framesPerRun[route][len] = route === 'sync' ? (len === 'few' ? FEW : FEW + EXTRA) : framesOf(r.body);
    }
  }
  const warm = QUICK ? 100 : Math.max(100, Math.round(400 * SCALE));
  log(`per-frame: warm-up, ${warm} runs per route and length (c=32)`);
  for (const route of FRAME_ROUTES) for (const len of ['few', 'many'] as const) await measure(agentd, route, len, 32, { durationMs: 60_000, maxCount: warm });
  log(`per-frame: ${FRAME_ROUNDS} rounds of ${FRAME_ROUND_MS} ms per route and length (${FEW} and ${FEW + EXTRA} words), order rotated each round`);
  /** CPU ms of the agentd child's main thread and of all its threads, per route and length. */
  const cpu = {} as Record<FrameRoute, Record<Length, { main: number; all: number }>>;
  const loops = {} as Record<FrameRoute, Record<Length, LoopResult[]>>;
  for (const route of FRAME_ROUTES) {
    cpu[route] = { few: { main: 0, all: 0 }, many: { main: 0, all: 0 } };
    loops[route] = { few: [], many: [] };
  }
  const legs = FRAME_ROUTES.flatMap((route) => (['few', 'many'] as const).map((len) => ({ route, len })));
  for (let i = 0; i < FRAME_ROUNDS; i++) {
    const order = [...legs.slice((i * 3) % legs.length), ...legs.slice(0, (i * 3) % legs.length)];
    for (const { route, len } of order) {
      const before = threadCpuMs(agentd.pid);
      loops[route][len].push(await measure(agentd, route, len, 32, { durationMs: FRAME_ROUND_MS }));
      const after = threadCpuMs(agentd.pid);
      cpu[route][len].main += after.main - before.main;
      cpu[route][len].all += after.main + after.others - before.main - before.others;
    }
  }
  const merged = (route: FrameRoute, len: Length) => mergeLoops(loops[route][len]);
  const perRunUs = (route: FrameRoute, len: Length, t: 'main' | 'all') => (cpu[route][len][t] * 1000) / Math.max(1, merged(route, len).count);
  const slope = (route: FrameRoute, t: 'main' | 'all') =>
    (perRunUs(route, 'many', t) - perRunUs(route, 'few', t)) / Math.max(1, framesPerRun[route].many - framesPerRun[route].few);
  const rows: Row[] = [];
  const base = slope('run', 'main');
  for (const route of ['ai-sdk', 'ag-ui'] as const) {
    const v = slope(route, 'main');
    rows.push({
      metric: `Server CPU per data: frame, POST ${PATH[route]} (marginal: ${EXTRA} more text deltas in one answer, concurrency 32, the main thread; one adapter frame costs no more than one POST /run frame)`,
      value: round(v, 1),
      unit: 'us',
      baseline: round(base, 1),
      baseline_label: 'POST /run',
      ratio: base > 0 ? ratio(v, base) : null,
      target: '<= POST /run',
      pass: v <= base,
    });
  }
  rows.push({
    metric: `Diagnostic: server CPU per text delta with no stream (POST /run/sync, the same two answers, the main thread): the run's own share of each frame's cost above`,
    value: round(slope('sync', 'main'), 1),
    unit: 'us',
  });
  rows.push({
    metric:
      'Diagnostic: the same per data: frame, all threads (GC helpers and LevelDB threads too; noisier): POST /run / POST /ai-sdk/chat / POST /ag-ui / POST /run/sync',
    value: FRAME_ROUTES.map((r) => round(slope(r, 'all'), 1)).join(' / '),
    unit: 'us',
  });
  rows.push({
    metric: `Diagnostic: data: frames per run, ${FEW}-word / ${FEW + EXTRA}-word answer: POST /run / POST /ai-sdk/chat / POST /ag-ui`,
    value: (['run', 'ai-sdk', 'ag-ui'] as const).map((r) => `${framesPerRun[r].few}-${framesPerRun[r].many}`).join(' / '),
    unit: '',
  });
  rows.push({
    metric: `Diagnostic: server CPU per run (main thread), ${FEW}-word / ${FEW + EXTRA}-word answer, concurrency 32: POST /run / POST /ai-sdk/chat / POST /ag-ui / POST /run/sync`,
    value: FRAME_ROUTES.map((r) => `${round(perRunUs(r, 'few', 'main') / 1000, 2)}-${round(perRunUs(r, 'many', 'main') / 1000, 2)}`).join(' / '),
    unit: 'ms',
  });
  let errors = 0;
  let firstError: string | null = null;
  for (const { route, len } of legs) {
    errors += merged(route, len).errors;
    firstError ??= merged(route, len).firstError;
  }
  return { rows, errors, firstError };
}

export async function protocolsBench(): Promise<BenchOutput> {
  const dir = tempDir('protocols');
  const fake = await startChild({ mode: 'fake-openai' });
  let agentd: Child | null = null;
  try {
    agentd = await startChild({ mode: 'agentd', dataDir: dir, config: realPathConfig(fake.url), model: { kind: 'config' } });
    const parts = FRAMES_ONLY ? [await frameRows(agentd)] : [await adapterRows(agentd), await frameRows(agentd)];
    const rows = parts.flatMap((p) => p.rows);
    const errors = parts.reduce((n, p) => n + p.errors, 0);
    const firstError = parts.map((p) => p.firstError).find((e) => e !== null) ?? null;
    rows.splice(FRAMES_ONLY ? 0 : parts[0].rows.length, 0, {
      metric: 'Failed runs (non-200, or no successful end of the stream, or the tool workload without the tool result)',
      value: errors,
      unit: '',
      target: '0',
      pass: errors === 0,
    });
    return {
      title: 'Chat protocol adapters (POST /ai-sdk/chat, POST /ag-ui) against POST /run on the real model path',
      method: [
        'One agentd child configured as in the run benchmark (`openai-compatible` pointed at test/bench/child-server.mjs `fake-openai` over HTTP, the local `add` tool, LevelDB with fsync), the same trivial and one-tool workloads.',
        'Bodies: POST /run `{query}` (a new session per run; the diagnostic rows also `{query, session_id}` with a new id each time); POST /ai-sdk/chat the body `DefaultChatTransport` sends (`{id, messages: [one user message], trigger: "submit-message"}`), POST /ag-ui a `RunAgentInput` (`{threadId, runId, messages: [one user message]}`), each with a fresh chat / thread id per request, so each is a new named session.',
        `Counting pass (after the timed rounds, trivial workload): ${COUNTED_RUNS} runs per route at concurrency 1 and 32 with the child's counters on; LevelDB disk reads are the asynchronous read calls on classic-level's native binding (get, getMany, iterator pages), group-commit rounds the LevelDB store's own count.`,
        "Server CPU per run: the agentd child's user + system CPU (/proc/<pid>/stat) over each route's rounds, divided by the runs those rounds completed; less dragged down than runs/s by the rest of a shared machine's load, though contention still moves it by tens of percent between runs there (no target).",
        `Server CPU per frame (marginal): one model call whose answer comes in ${FEW} or in ${FEW + EXTRA} one-word chunks (the fake model answers "in <n> words" so), through POST /run, POST /ai-sdk/chat, POST /ag-ui and POST /run/sync, at concurrency 32, ${FRAME_ROUNDS} rounds of ${FRAME_ROUND_MS / 1000} s per route and length (order rotated each round) after a warm-up; a route's figure is the CPU per run of the agentd child's main thread (/proc/<pid>/task/<pid>/stat: JavaScript and the socket writes, where a frame's work is; LevelDB's compaction and GC helper threads, which land unevenly in rounds, are in a diagnostic row) for the long answer less that for the short one, over the \`data:\` frames the long answer has more (text deltas: ${EXTRA} on every route). It includes what every route spends on a delta before any frame (the model's chunk, the run's delta callback): POST /run/sync's CPU per extra delta, with no stream, is that share (diagnostic row). Two runs that differ only in their frames, so the row reads as what one frame costs, translation, serialisation and writes included, whatever the run around it costs; target: an adapter's frame costs no more than a POST /run frame.`,
        `Order: ${WARMUP_RUNS} warm-up runs per route (half per workload, concurrency 32), then per workload and concurrency ${ROUNDS} rounds of ${ROUND_MS / 1000} s per route, the route order rotated each round; the per-frame rounds last. Client: keep-alive HTTP workers in the parent process, each reading the full response before the next request. \`--frames-only\` runs only the per-frame rounds (for iterating; not a full result).`,
      ],
      rows,
      notes: [...(FRAMES_ONLY ? ['Run with --frames-only: the per-frame rows only.'] : []), ...(firstError ? [`First failure: ${firstError}`] : [])],
    };
  } finally {
    await agentd?.stop();
    await fake.stop();
    removeDir(dir);
  }
}
