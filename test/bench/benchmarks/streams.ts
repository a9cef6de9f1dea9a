// 1,000 concurrent POST /run streams with a slowly streaming model on the real path (the
// openai-compatible provider over HTTP to the fake server, which streams slowly): server RSS and
// errors, against a bare Fastify route streaming the same frames at the same pace.
import {
  realPathConfig,
  nowMs,
  openSse,
  peakRssMb,
  ratio,
  removeDir,
  round,
  rssMb,
  scaled,
  sleep,
  startChild,
  tempDir,
  type BenchOutput,
  type Child,
  type SseFrame,
} from '../lib.js';

const STREAMS = scaled(1000, 10);
const CHUNKS = 20;
const DELAY_MS = 100;
const HOLD_DELAY_MS = 1000;
const BODY = JSON.stringify({ query: 'Stream me a slow answer.' });

interface Wave {
  ok: number;
  errors: number;
  firstError: string | null;
  wallMs: number;
  peakMb: number;
  idleMb: number;
  maxLive: number;
}

/** Opens `STREAMS` streams at once (in bursts of 100) and samples the server's RSS until all end. */
async function wave(child: Child, isOk: (frames: SseFrame[]) => boolean, liveRuns: boolean): Promise<Wave> {
  await sleep(500);
  const idleMb = rssMb(child.pid);
  let peakMb = idleMb;
  let maxLive = 0;
  let running = true;
  const sampler = (async () => {
    while (running) {
      peakMb = Math.max(peakMb, rssMb(child.pid));
      if (liveRuns) maxLive = Math.max(maxLive, await child.call<number>({ cmd: 'liveRuns' }));
      await sleep(50);
    }
  })();
  const started = nowMs();
  let ok = 0;
  let errors = 0;
  let firstError: string | null = null;
  const streams: Promise<void>[] = [];
  for (let i = 0; i < STREAMS; i++) {
    const frames: SseFrame[] = [];
    const s = openSse(`${child.url}/run`, { method: 'POST', body: BODY, agent: false, onFrame: (f) => frames.push(f) });
    streams.push(
      s.done.then(
        ({ status }) => {
          if (status === 200 && isOk(frames)) ok++;
          else {
            errors++;
            firstError ??= describeFailure(status, frames);
          }
        },
        (e) => {
          errors++;
          firstError ??= String(e);
        },
      ),
    );
    if (i % 100 === 99) await sleep(10);
  }
  await Promise.all(streams);
  const wallMs = nowMs() - started;
  running = false;
  await sampler;
  peakMb = Math.max(peakMb, peakRssMb(child.pid));
  return { ok, errors, firstError, wallMs, peakMb, idleMb, maxLive };
}

function describeFailure(status: number, frames: SseFrame[]): string {
  const done = frames.find((f) => f.event === 'complete');
  const deltas = frames.filter((f) => f.event === 'delta').length;
  if (!done) return `HTTP ${status}, ${deltas} deltas, no complete frame; last: ${frames.at(-1)?.event ?? 'none'} ${frames.at(-1)?.data.slice(0, 200) ?? ''}`;
  const body = JSON.parse(done.data) as { status?: string; termination_reason?: string; error?: unknown };
  return `HTTP ${status}, ${deltas} deltas, complete status ${body.status} (${body.termination_reason}): ${JSON.stringify(body.error)}`;
}

const fullRun = (frames: SseFrame[]) => {
  const done = frames.find((f) => f.event === 'complete');
  return !!done && done.data.includes('"status":"success"') && frames.filter((f) => f.event === 'delta').length === CHUNKS;
};

export async function streamsBench(): Promise<BenchOutput> {
  const dir = tempDir('streams');
  const fake = await startChild({ mode: 'fake-openai' });
  // Every stream comes from this one client (one address, no key): the fair-use caps
  // (src/http/fair-use.ts) are raised to let it hold them all.
  const server = {
    server: {
      max_concurrent_runs: Math.max(1000, STREAMS + 50),
      max_streams_per_key: STREAMS + 50,
      max_connections_per_address: Math.max(1024, STREAMS + 200),
    },
  };
  // The fake server reads the pace from the model name: slow-<chunks>-<ms between chunks>.
  const config = realPathConfig(fake.url, `slow-${CHUNKS}-${DELAY_MS}`, server);
  const agentd = await startChild({ mode: 'agentd', dataDir: dir, config, model: { kind: 'config' } });
  let bare: Child | null = null;
  let hold: Child | null = null;
  const holdDir = tempDir('streams-hold');
  try {
    // One stream first: its frames are what the baseline replays at the same pace.
    const sampleFrames: SseFrame[] = [];
    const sample = openSse(`${agentd.url}/run`, { method: 'POST', body: BODY, onFrame: (f) => sampleFrames.push(f) });
    const sampleDone = await sample.done;
    if (!fullRun(sampleFrames)) throw new Error(`sample stream failed: ${sampleDone.raw.slice(0, 500)}`);
    const raw = sampleDone.raw
      .split('\n\n')
      .filter((f) => f.length > 0)
      .map((f) => `${f}\n\n`);
    const firstDelta = raw.findIndex((f) => f.startsWith('event: delta'));
    const lastDelta = raw.length - 1 - [...raw].reverse().findIndex((f) => f.startsWith('event: delta'));
    bare = await startChild({
      mode: 'bare-slow-sse',
      head: raw.slice(0, firstDelta),
      delta: raw[firstDelta],
      count: CHUNKS,
      delayMs: DELAY_MS,
      tail: raw.slice(lastDelta + 1),
    });

    const a = await wave(agentd, fullRun, true);
    const b = await wave(bare, (frames) => frames.some((f) => f.event === 'complete') && frames.filter((f) => f.event === 'delta').length === CHUNKS, false);
    await agentd.stop();
    await bare.stop();
    // Second wave: streams that last long enough (20 chunks 1 s apart) for all of them to be live at once.
    hold = await startChild({
      mode: 'agentd',
      dataDir: holdDir,
      config: realPathConfig(fake.url, `slow-${CHUNKS}-${HOLD_DELAY_MS}`, server),
      model: { kind: 'config' },
    });
    const h = await wave(hold, fullRun, true);
    return {
      title: `${STREAMS.toLocaleString('en-US')} concurrent POST /run streams, model streaming ${CHUNKS} chunks every ${DELAY_MS} ms`,
      method: [
        `Model path: agentd's configured \`openai-compatible\` provider over HTTP to the fake OpenAI-compatible server (its own process), which streams ${CHUNKS} chunks ${DELAY_MS} ms apart (model name \`slow-${CHUNKS}-${DELAY_MS}\`); local \`add\` tool declared, not called. The provider's streamed calls go through agentd's own Chat Completions client (src/agent/model/chat-completions-stream.ts), not the AI SDK's web-stream pipeline.`,
        `The server (max_concurrent_runs ${config.server && (config.server as { max_concurrent_runs: number }).max_concurrent_runs}) runs in a child process; its RSS is sampled from /proc/<pid>/status every 50 ms (VmRSS, and VmHWM at the end). The client opens the ${STREAMS} streams in bursts of 100 every 10 ms, each on its own connection, and reads every frame.`,
        `A stream counts as successful when it carries ${CHUNKS} delta frames and a \`complete\` frame with status success. Every run stores its events and snapshots as in production.`,
        `Baseline: a bare Fastify POST /run that writes the frames of one captured agentd stream at the same pace (head frames, ${CHUNKS} delta frames ${DELAY_MS} ms apart, tail frames).`,
        `Starting a run costs the server CPU, so with ${DELAY_MS} ms chunks the first streams end before the last ones start ("most runs live at once" shows how many overlapped). The hold wave repeats the test on a fresh server with chunks ${HOLD_DELAY_MS} ms apart (${(CHUNKS * HOLD_DELAY_MS) / 1000} s streams), long enough for every stream to be live at the same time.`,
      ],
      rows: [
        {
          metric: 'Peak server RSS',
          value: round(a.peakMb, 0),
          unit: 'MB',
          baseline: round(b.peakMb, 0),
          ratio: ratio(a.peakMb, b.peakMb),
          target: '<= 300 MB',
          pass: a.peakMb <= 300,
        },
        { metric: 'Idle server RSS before the wave', value: round(a.idleMb, 0), unit: 'MB', baseline: round(b.idleMb, 0), ratio: ratio(a.idleMb, b.idleMb) },
        {
          metric: 'RSS growth during the wave',
          value: round(a.peakMb - a.idleMb, 0),
          unit: 'MB',
          baseline: round(b.peakMb - b.idleMb, 0),
          ratio: ratio(a.peakMb - a.idleMb, b.peakMb - b.idleMb),
        },
        { metric: 'Streams failed', value: a.errors, unit: '', baseline: b.errors, target: '0', pass: a.errors === 0 && a.ok === STREAMS },
        {
          metric: `Wall time for all ${STREAMS} streams (model alone: ${(CHUNKS * DELAY_MS) / 1000} s)`,
          value: round(a.wallMs / 1000, 2),
          unit: 's',
          baseline: round(b.wallMs / 1000, 2),
          ratio: ratio(a.wallMs, b.wallMs),
        },
        { metric: 'Most runs live at once (sampled)', value: a.maxLive, unit: '' },
        {
          metric: `Hold wave (chunks ${HOLD_DELAY_MS} ms apart): peak server RSS`,
          value: round(h.peakMb, 0),
          unit: 'MB',
          baseline: round(b.peakMb, 0),
          ratio: ratio(h.peakMb, b.peakMb),
          target: '<= 300 MB',
          pass: h.peakMb <= 300,
        },
        { metric: 'Hold wave: most runs live at once (sampled)', value: h.maxLive, unit: '' },
        { metric: 'Hold wave: streams failed', value: h.errors, unit: '', target: '0', pass: h.errors === 0 && h.ok === STREAMS },
      ],
      notes: [a.firstError ? `First failure: ${a.firstError}` : '', h.firstError ? `First failure (hold wave): ${h.firstError}` : ''].filter(Boolean),
    };
  } finally {
    await agentd.stop();
    await bare?.stop();
    await hold?.stop();
    await fake.stop();
    removeDir(dir);
    removeDir(holdDir);
  }
}
