// Checkpoints and evaluations (docs/debugging.md): what checkpoints cost POST /run (runs/s against
// a server with runs.checkpoints off), the bytes a checkpoint stores, and the throughput of an
// evaluation's replays against POST /run/sync at the same concurrency, with the instant fake
// model, rounds interleaved (A B A B) so the shared machine's noise falls on both.
import {
  benchConfig,
  closedLoop,
  loadAverage,
  mergeLoops,
  nowMs,
  removeDir,
  request,
  round,
  scaled,
  sleep,
  startChild,
  tempDir,
  type BenchOutput,
  type LoopResult,
  type Row,
} from '../lib.js';

const CONCURRENCY = 8;
const EVAL_RUNS = scaled(1000, 100);
const ROUND_MS = scaled(4000, 1000);
const OVERHEAD_ROUNDS = 3;

/**
 * POST /run (the SSE stream, read to its end) in a closed loop on a server keeping checkpoints
 * and on one with runs.checkpoints off, rounds interleaved.
 */
async function checkpointOverhead(rows: Row[], notes: string[]): Promise<void> {
  const dirs = [tempDir('debug-cp-on'), tempDir('debug-cp-off')];
  const model = { kind: 'instant' as const, chunks: ['hello', ' world'] };
  const on = await startChild({ mode: 'agentd', dataDir: dirs[0], config: benchConfig(), model });
  const off = await startChild({ mode: 'agentd', dataDir: dirs[1], config: benchConfig({ runs: { checkpoints: false } }), model });
  try {
    const loop = (url: string) =>
      closedLoop({
        concurrency: CONCURRENCY,
        durationMs: ROUND_MS,
        send: (agent) =>
          request(`${url}/run`, { method: 'POST', body: JSON.stringify({ query: 'stream it' }), agent, headers: { 'content-type': 'application/json' } }),
        ok: (r) => r.status === 200 && r.body.includes('event: complete'),
      });
    const withCp: LoopResult[] = [];
    const withoutCp: LoopResult[] = [];
    // A B B A A B …: neither server always goes first (a warming machine would favour one).
    for (let i = 0; i < OVERHEAD_ROUNDS * 2; i++) {
      if ((i + Math.floor(i / 2)) % 2 === 0) withCp.push(await loop(on.url));
      else withoutCp.push(await loop(off.url));
    }
    const a = mergeLoops(withCp);
    const b = mergeLoops(withoutCp);
    const ratio = a.perSecond / b.perSecond;
    rows.push({
      metric: `POST /run with checkpoints, concurrency ${CONCURRENCY}`,
      value: round(a.perSecond, 1),
      unit: 'runs/s',
      baseline: round(b.perSecond, 1),
      baseline_label: 'runs.checkpoints: false',
      ratio: round(ratio, 3),
      target: '≥ 0.95x (overhead ≤ 5 %)',
      pass: ratio >= 0.95,
    });
    const errors = a.errors + b.errors;
    if (errors > 0) notes.push(`checkpoint overhead: ${errors} runs failed (first: ${a.firstError ?? b.firstError})`);
  } finally {
    await Promise.all([on.stop(), off.stop()]);
    dirs.forEach(removeDir);
  }
}

export async function debugBench(): Promise<BenchOutput> {
  const dir = tempDir('debug');
  const child = await startChild({ mode: 'agentd', dataDir: dir, config: benchConfig(), model: { kind: 'instant', chunks: ['hello', ' world'] } });
  const rows: Row[] = [];
  const notes: string[] = [];
  await checkpointOverhead(rows, notes);
  try {
    const post = (path: string, body: unknown) =>
      request(`${child.url}${path}`, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
    // Originals for the evaluations (and the checkpoint sizes).
    const ids: string[] = [];
    for (let i = 0; i < EVAL_RUNS; i += CONCURRENCY) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(CONCURRENCY, EVAL_RUNS - i) }, (_, k) => post('/run/sync', { query: `question ${i + k}` })),
      );
      for (const r of batch) ids.push((JSON.parse(r.body) as { run_id: string }).run_id);
    }
    const sizes: number[] = [];
    for (const id of ids.slice(0, 20)) {
      const list = JSON.parse((await request(`${child.url}/runs/${id}/checkpoints`)).body) as { checkpoints: unknown[] };
      for (const c of list.checkpoints) sizes.push(Buffer.byteLength(JSON.stringify(c)));
    }
    rows.push({
      metric: 'bytes stored per checkpoint (JSON, with the run snapshot)',
      value: round(sizes.reduce((a, b) => a + b, 0) / sizes.length, 0),
      unit: 'B',
    });

    const syncRounds: LoopResult[] = [];
    const evalRates: number[] = [];
    for (let round_ = 0; round_ < 2; round_++) {
      syncRounds.push(
        await closedLoop({
          concurrency: CONCURRENCY,
          durationMs: ROUND_MS,
          send: (agent) =>
            request(`${child.url}/run/sync`, {
              method: 'POST',
              body: JSON.stringify({ query: 'baseline' }),
              agent,
              headers: { 'content-type': 'application/json' },
            }),
          ok: (r) => r.status === 200,
        }),
      );
      const t = nowMs();
      const created = JSON.parse(
        (await post('/evals', { name: `bench ${round_}`, source: { run_ids: ids }, variant: { system_instruction: 'variant' }, concurrency: CONCURRENCY }))
          .body,
      ) as {
        eval_id: string;
      };
      for (;;) {
        const e = JSON.parse((await request(`${child.url}/evals?limit=5`)).body) as {
          evals: Array<{ eval_id: string; status: string; progress: { done: number; failed: number } }>;
        };
        const mine = e.evals.find((x) => x.eval_id === created.eval_id);
        if (mine && mine.status !== 'queued' && mine.status !== 'running') {
          if (mine.progress.failed > 0) notes.push(`round ${round_}: ${mine.progress.failed} replays failed`);
          break;
        }
        await sleep(50);
      }
      evalRates.push(ids.length / ((nowMs() - t) / 1000));
    }
    const sync = mergeLoops(syncRounds);
    const evalRate = evalRates.reduce((a, b) => a + b, 0) / evalRates.length;
    rows.push({ metric: `POST /run/sync, concurrency ${CONCURRENCY}`, value: round(sync.perSecond, 1), unit: 'runs/s' });
    const r = evalRate / sync.perSecond;
    rows.push({
      metric: `evaluation replays over ${ids.length} runs, concurrency ${CONCURRENCY}`,
      value: round(evalRate, 1),
      unit: 'runs/s',
      baseline: round(sync.perSecond, 1),
      baseline_label: 'POST /run/sync',
      ratio: round(r, 2),
      target: '≥ 0.8x',
      pass: r >= 0.8,
    });
    notes.push(`load average at the end: ${loadAverage()}`);
  } finally {
    await child.stop();
    removeDir(dir);
  }
  return {
    title: 'Checkpoints and evaluations',
    method: [
      `One agentd child on the embedded store, the instant fake model. ${EVAL_RUNS} runs made with POST /run/sync; the checkpoint size is the mean JSON size of the checkpoints of 20 of them (two each: before the model call and the end).`,
      `Then two rounds of: POST /run/sync in a closed loop (${CONCURRENCY} workers, ${ROUND_MS / 1000} s), and an evaluation over the ${EVAL_RUNS} runs (system_instruction variant, concurrency ${CONCURRENCY}) timed from POST /evals to completed (GET /evals polled every 50 ms).`,
      `Checkpoint overhead: two agentd children, one with runs.checkpoints: false (the baseline), POST /run (the SSE stream read to its end) in a closed loop (${CONCURRENCY} workers, ${ROUND_MS / 1000} s a round), ${OVERHEAD_ROUNDS} rounds on each, interleaved A B B A A B.`,
    ],
    rows,
    notes,
  };
}
