// Diagnostic (not the real path): POST /run (SSE) with a zero-latency model object injected into the
// server process, so the model call costs nothing: every event stored, every snapshot saved.
// Compared with a bare Fastify route that writes the same SSE frames (same number, same sizes).
// run-real.ts (the `run` benchmark) runs this too, and reports its rows as diagnostics.
import {
  QUICK,
  benchConfig,
  closedLoop,
  scaled,
  mergeLoops,
  median,
  percentile,
  ratio,
  removeDir,
  request,
  round,
  startChild,
  tempDir,
  type BenchOutput,
  type Child,
  type LoopResult,
  type Row,
} from '../lib.js';

const ROUND_MS = QUICK ? 300 : scaled(2000, 200);
const ROUNDS = 1;
const BODY = JSON.stringify({ query: 'Say hello to the benchmark.' });
const CHUNKS = ['Hello', ' from', ' the', ' benchmark', ' model.'];

const okRun = (r: { status: number; body: string }) => r.status === 200 && r.body.includes('event: complete') && r.body.includes('"status":"success"');
const okBare = (r: { status: number; body: string }) => r.status === 200 && r.body.includes('event: complete');

function loop(child: Child, concurrency: number, durationMs: number, ok: (r: { status: number; body: string }) => boolean): Promise<LoopResult> {
  return closedLoop({ concurrency, durationMs, send: (agent) => request(`${child.url}/run`, { method: 'POST', body: BODY, agent }), ok });
}

/** Alternating rounds: agentd, bare, agentd, bare (background load then weighs on both alike). */
async function compare(a: Child, b: Child, concurrency: number): Promise<{ a: LoopResult; b: LoopResult }> {
  await loop(a, concurrency, 500, okRun);
  await loop(b, concurrency, 500, okBare);
  const ra: LoopResult[] = [];
  const rb: LoopResult[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    ra.push(await loop(a, concurrency, ROUND_MS, okRun));
    rb.push(await loop(b, concurrency, ROUND_MS, okBare));
  }
  return { a: mergeLoops(ra), b: mergeLoops(rb) };
}

export async function inProcessRunBench(): Promise<BenchOutput> {
  const dir = tempDir('run');
  const dirNoSync = tempDir('run-nosync');
  const model = { kind: 'instant' as const, chunks: CHUNKS };
  const agentd = await startChild({ mode: 'agentd', dataDir: dir, config: benchConfig(), model });
  let bare: Child | null = null;
  let noSync: Child | null = null;
  let durable: Child | null = null;
  const dirDurable = tempDir('run-durable');
  try {
    // One real response gives the frames the baseline replays.
    const sample = await request(`${agentd.url}/run`, { method: 'POST', body: BODY });
    if (!okRun(sample)) throw new Error(`sample run failed: ${sample.status} ${sample.body.slice(0, 500)}`);
    const frames = sample.body
      .split('\n\n')
      .filter((f) => f.length > 0)
      .map((f) => `${f}\n\n`);
    const eventTypes = frames.map((f) => /^event: (.*)$/m.exec(f)?.[1] ?? '?');
    bare = await startChild({ mode: 'bare-sse', frames });

    // Store work per run, counted in the server process (wrappers around the store's methods).
    type Stats = Record<'commits' | 'appends' | 'rounds' | 'reads', number>;
    const s0 = await agentd.call<Stats>({ cmd: 'storeStats' });
    for (let i = 0; i < 20; i++) await request(`${agentd.url}/run`, { method: 'POST', body: BODY });
    const s1 = await agentd.call<Stats>({ cmd: 'storeStats' });
    const per = (k: keyof Stats) => (s1[k] - s0[k]) / 20;

    // Diagnostic baseline with agentd's durability: before streaming, each request writes one
    // fsynced LevelDB batch shaped like agentd's one store round per run: the stored events
    // (taken from the frames), the run record (as GET /runs/{id} shows it), a snapshot-sized blob
    // (twice the record), a trace and a session row, and a posting per indexed event field.
    const runId = /"run_id":"([^"]+)"/.exec(sample.body)?.[1] ?? '';
    const runJson = (await request(`${agentd.url}/runs/${runId}`)).body;
    const eventData = frames.filter((f) => /^id: /m.test(f)).map((f) => /^data: (.*)$/m.exec(f)?.[1] ?? '');
    const ops: Array<[string, string]> = [
      ...eventData.map((d, i): [string, string] => [`e${i}:`, d]),
      ...eventData.flatMap((_, i): Array<[string, string]> => [
        [`x:run:${i}:`, ''],
        [`x:session:${i}:`, ''],
        [`x:trace:${i}:`, ''],
      ]),
      ['r:run:', runJson],
      ['r:snapshot:', runJson + runJson],
      ['r:trace:', 'x'.repeat(300)],
      ['r:session:', 'x'.repeat(300)],
      ['m:cursor:', '1'],
    ];
    durable = await startChild({ mode: 'bare-sse', frames, durable: { dir: dirDurable, ops } });
    await loop(durable, 1, 500, okBare);
    const d1 = await loop(durable, 1, ROUND_MS, okBare);
    const d32 = await loop(durable, 32, ROUND_MS, okBare);
    await durable.stop();
    durable = null;

    const c1 = await compare(agentd, bare, 1);
    // Server CPU per run: the child's CPU time over the concurrency-32 rounds (warm-up included,
    // so slightly high), divided by the runs it served in them.
    type Cpu = { user: number; system: number };
    const cpu0 = await agentd.call<Cpu>({ cmd: 'cpu' });
    const c32 = await compare(agentd, bare, 32);
    const cpu1 = await agentd.call<Cpu>({ cmd: 'cpu' });

    // Diagnostic: the same server with a store that does not fsync each batch.
    noSync = await startChild({ mode: 'agentd', dataDir: dirNoSync, config: benchConfig(), model, syncWrites: false });
    await loop(noSync, 1, 500, okRun);
    const n1 = await loop(noSync, 1, ROUND_MS, okRun);
    const n32 = await loop(noSync, 32, ROUND_MS, okRun);

    const p50 = (r: LoopResult) => median(r.latencies);
    const cpuPerRunMs = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / 1000 / (c32.a.count + c32.a.errors);
    const added = p50(c1.a) - p50(c1.b);
    const addedNoSync = p50(n1) - p50(c1.b);
    const r1 = ratio(c1.a.perSecond, c1.b.perSecond);
    const r32 = ratio(c32.a.perSecond, c32.b.perSecond);
    const errors = c1.a.errors + c32.a.errors;
    const rows: Row[] = [
      {
        metric: 'Runs/s, concurrency 1',
        value: round(c1.a.perSecond, 1),
        unit: 'runs/s',
        baseline: round(c1.b.perSecond, 0),
        ratio: r1,
        target: '>= 50 % of bare',
        pass: r1 !== null && r1 >= 0.5,
      },
      {
        metric: 'Runs/s, concurrency 32',
        value: round(c32.a.perSecond, 1),
        unit: 'runs/s',
        baseline: round(c32.b.perSecond, 0),
        ratio: r32,
        target: '>= 50 % of bare',
        pass: r32 !== null && r32 >= 0.5,
      },
      { metric: 'Latency p50, concurrency 1', value: round(p50(c1.a), 2), unit: 'ms', baseline: round(p50(c1.b), 2), ratio: ratio(p50(c1.a), p50(c1.b)) },
      { metric: 'Added p50 latency, concurrency 1 (agentd p50 - bare p50)', value: round(added, 2), unit: 'ms', target: '<= 2 ms', pass: added <= 2 },
      { metric: 'Latency p99, concurrency 1', value: round(percentile(c1.a.latencies, 99), 2), unit: 'ms', baseline: round(percentile(c1.b.latencies, 99), 2) },
      { metric: 'Latency p50, concurrency 32', value: round(p50(c32.a), 1), unit: 'ms', baseline: round(p50(c32.b), 2), ratio: ratio(p50(c32.a), p50(c32.b)) },
      {
        metric: 'Latency p99, concurrency 32',
        value: round(percentile(c32.a.latencies, 99), 1),
        unit: 'ms',
        baseline: round(percentile(c32.b.latencies, 99), 2),
      },
      { metric: 'Failed runs (non-200 or no successful `complete` frame)', value: errors, unit: '', target: '0', pass: errors === 0 },
      {
        metric: 'Diagnostic: store write rounds per run at concurrency 1 (one LevelDB batch and fsync each, one after another)',
        value: per('rounds'),
        unit: '',
      },
      { metric: 'Diagnostic: server CPU per run at concurrency 32 (process CPU time / runs)', value: round(cpuPerRunMs, 2), unit: 'ms' },
      { metric: 'Diagnostic: store calls per run (commit / appendEvents / reads)', value: `${per('commits')} / ${per('appends')} / ${per('reads')}`, unit: '' },
      {
        metric: 'Diagnostic, store without fsync: runs/s, concurrency 1',
        value: round(n1.perSecond, 1),
        unit: 'runs/s',
        baseline: round(c1.b.perSecond, 0),
        ratio: ratio(n1.perSecond, c1.b.perSecond),
      },
      {
        metric: 'Diagnostic, store without fsync: runs/s, concurrency 32',
        value: round(n32.perSecond, 1),
        unit: 'runs/s',
        baseline: round(c32.b.perSecond, 0),
        ratio: ratio(n32.perSecond, c32.b.perSecond),
      },
      { metric: 'Diagnostic, store without fsync: added p50 latency, concurrency 1', value: round(addedNoSync, 2), unit: 'ms' },
      {
        metric: 'Diagnostic, against a bare route that also writes one fsynced LevelDB batch of the same shape per request: runs/s, concurrency 1',
        value: round(c1.a.perSecond, 1),
        unit: 'runs/s',
        baseline: round(d1.perSecond, 0),
        ratio: ratio(c1.a.perSecond, d1.perSecond),
      },
      {
        metric: 'Diagnostic, same durable baseline: runs/s, concurrency 32',
        value: round(c32.a.perSecond, 1),
        unit: 'runs/s',
        baseline: round(d32.perSecond, 0),
        ratio: ratio(c32.a.perSecond, d32.perSecond),
      },
      {
        metric: 'Diagnostic, same durable baseline: added p50 latency, concurrency 1',
        value: round(p50(c1.a) - p50(d1), 2),
        unit: 'ms',
        baseline: round(p50(d1), 2),
      },
    ];
    return {
      title: 'POST /run (SSE) with a zero-latency model, concurrency 1 and 32',
      method: [
        `Model: a ModelProvider that answers at once with ${CHUNKS.length} text deltas (no tools: \`agent.tools.builtin: []\`). Every event is stored and every snapshot saved, as in production.`,
        `Each run streams ${frames.length} SSE frames, ${sample.body.length.toLocaleString('en-US')} bytes: ${eventTypes.join(', ')}.`,
        'Baseline: a bare Fastify POST /run route (JSON body parsed) that writes the same frames captured from one agentd response, one write per frame, then ends.',
        `Client: keep-alive HTTP workers in the parent process, each reading the full response before the next request; ${ROUNDS} alternating rounds of ${ROUND_MS / 1000} s per side after a 0.5 s warm-up. A run counts only if its \`complete\` frame says success.`,
        `Durable baseline (diagnostic rows): the bare route, but each request first writes one fsynced LevelDB batch of ${ops.length} keys shaped like agentd's single store round per run (the ${eventData.length} stored events, a posting per indexed field, the run record, a snapshot-sized value, trace and session rows), measured once per concurrency before the main rounds.`,
        'Diagnostic rows: the same server with `store.sync: false` (no fsync per write batch; writes still survive a killed process), to isolate the fsync cost.',
      ],
      rows,
      notes: c1.a.firstError || c32.a.firstError ? [`First failure: ${c1.a.firstError ?? c32.a.firstError}`] : [],
    };
  } finally {
    await agentd.stop();
    await bare?.stop();
    await noSync?.stop();
    await durable?.stop();
    removeDir(dir);
    removeDir(dirDurable);
    removeDir(dirNoSync);
  }
}
