// Soak test (not in CI): `npm run soak [-- --minutes N]` (default 10).
//
// Starts a real agentd in its own process (the esbuild bundle built into test/soak/dist, LevelDB in
// a temp dir, fsync on; the model behind the scripted OpenAI-compatible server), then for the
// whole duration keeps:
//   - runs flowing on a few busy sessions (--sessions, 5) from --concurrency (8) clients, half
//     POST /run read to the end, half POST /run/sync; each run is a tool step with a 16 KB echo
//     and an answer (~15 events, ~70 KB of frames);
//   - --streams (500) SSE readers following those sessions (GET /events/{session_id}) over raw
//     sockets, reading everything (they count bytes and look for StreamOverflow; no parsing, so
//     the soak process stays light);
//   - --stalled (100) sockets that open the same streams (from the newest id a reader saw, so
//     they follow rather than replay) and never read a byte. The server drops each once it is
//     stream_max_queued_* behind (after the ~4 MB the kernel's socket buffers absorb); a paused
//     socket never learns that, so each is replaced after ~--stalled-seconds (90). They start
//     staggered over that time, so they do not fill up and get dropped all at once.
// A session is replaced by a fresh one after about --rotate (300) runs (its history goes to the model on
// every run, so one endless session would make every run slower); its readers and never-reading
// sockets move with it. Every 5 s it samples the server's RSS (/proc) and /metrics, and at the end
// reports RSS after warm-up vs at the end (means over a window of up to 60 s; must be flat within
// 10 %), failed runs (must be 0), readers dropped (must be 0: they read), what the server dropped
// and held for the never-reading sockets, and CPU.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startScriptedOpenAI } from '../fixtures/scripted-openai.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const v = Number(process.argv[i + 1]);
  if (!Number.isFinite(v) || v < 0) throw new Error(`--${name} needs a number >= 0`);
  return v;
}

const MINUTES = arg('minutes', 10);
const READERS = arg('streams', 500);
const STALLED = arg('stalled', 100);
const SESSIONS = arg('sessions', 5);
const CONCURRENCY = arg('concurrency', 8);
const ROTATE = arg('rotate', 300);
// A never-reading socket is replaced after this long: the server drops it once it is
// stream_max_queued_* behind (after the ~4 MB the kernel's socket buffers absorb), and a paused
// socket never learns that it was closed.
const STALLED_LIFETIME_MS = arg('stalled-seconds', 90) * 1000;
const WARMUP_MS = arg('warmup-minutes', Math.min(2, MINUTES / 3)) * 60_000;
const DURATION_MS = MINUTES * 60_000;
const SAMPLE_MS = 5_000;
const PRINT_EVERY = arg('print-every', 6);
const ECHO_BYTES = 16_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const mb = (bytes: number) => Math.round(bytes / 1024 / 1024);

function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as net.AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

async function metric(base: string, name: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics/prometheus`)).text();
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}

// ------------------------------------------------------------------------------- the server

console.log(
  `soak: ${MINUTES} min (warm-up ${WARMUP_MS / 60_000} min), ${READERS} readers + ${STALLED} never-reading sockets on ${SESSIONS} sessions, ${CONCURRENCY} run clients`,
);
const outdir = join(ROOT, 'test/soak/dist');
execFileSync(process.execPath, [join(ROOT, 'scripts/build.mjs'), '--outdir', outdir], { stdio: 'inherit' });

const model = await startScriptedOpenAI();
model.setDefault((req) =>
  req.messages.at(-1)?.role === 'tool'
    ? { text: 'The echo came back whole, so the tool works and the stream carried all of it.' }
    : { tool_calls: [{ name: 'echo', arguments: { text: 'e'.repeat(ECHO_BYTES) } }] },
);
const dataDir = mkdtempSync(join(tmpdir(), 'agentd-soak-'));
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const configFile = join(dataDir, 'agentd.json');
writeFileSync(
  configFile,
  JSON.stringify({
    // One client (one address, no key) holds every reader: the fair-use caps are raised for it.
    server: {
      host: '127.0.0.1',
      port,
      max_streams_per_key: READERS + STALLED + 100,
      max_connections_per_address: Math.max(1024, READERS + STALLED + CONCURRENCY + 200),
    },
    agent: { model: { provider: 'openai-compatible', base_url: model.url, model: 'scripted' }, tools: { local: join(ROOT, 'test/fixtures/run-tools.mjs') } },
  }),
);
const child = spawn(process.execPath, [join(outdir, 'agentd.js'), 'serve', '--config', configFile, '--data-dir', join(dataDir, 'data')], {
  stdio: ['ignore', 'ignore', 'inherit'],
});
let childExited = false;
child.on('exit', (code, signal) => {
  childExited = true;
  if (!stopping) console.error(`soak: agentd exited during the soak (code ${code}, signal ${signal})`);
});
let stopping = false;
for (let i = 0; ; i++) {
  try {
    if ((await fetch(`${base}/ready`)).ok) break;
  } catch {
    // not listening yet
  }
  if (i > 300 || childExited) throw new Error('agentd did not become ready');
  await sleep(100);
}

// ------------------------------------------------------------------------------- the load

const generation = new Array<number>(SESSIONS).fill(0);
const runsInSession = new Array<number>(SESSIONS).fill(0);
const sessionId = (slot: number) => `soak-${slot}-${generation[slot]}`;
/** The newest event id a reader of the slot saw: never-reading sockets start there (follow, no replay). */
const latestId = new Array<string | null>(SESSIONS).fill(null);
const counts = { runs: 0, failed: 0, failures: [] as string[], readerBytes: 0, readersDropped: 0, readerReopens: 0, stalledOpened: 0 };
const until = Date.now() + DURATION_MS;

/**
 * A reader that follows a slot's session and reads everything (raw socket: it counts bytes and
 * looks for a StreamOverflow frame; no parsing, so 500 of them cost the soak process little).
 * It moves when the session rotates. A stream the server ends on its own is a dropped reader.
 */
async function reader(slot: number): Promise<void> {
  while (!stopping) {
    const gen = generation[slot];
    await new Promise<void>((resolve) => {
      let byUs = false;
      const socket = net.connect(port, '127.0.0.1', () => {
        socket.write(`GET /events/${sessionId(slot)} HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\naccept: text/event-stream\r\n\r\n`);
      });
      socket.on('data', (chunk: Buffer) => {
        counts.readerBytes += chunk.length;
        if (chunk.indexOf('StreamOverflow') >= 0) counts.readersDropped++;
        const at = chunk.lastIndexOf('\nid: ');
        const id = at >= 0 ? chunk.toString('latin1', at + 5, at + 21) : '';
        if (/^\d{16}$/.test(id) && generation[slot] === gen) latestId[slot] = id;
      });
      socket.on('error', () => undefined);
      const moved = setInterval(() => {
        if (generation[slot] !== gen || stopping) {
          byUs = true;
          socket.destroy();
        }
      }, 500);
      socket.on('close', () => {
        clearInterval(moved);
        if (!byUs && !stopping) counts.readersDropped++;
        resolve();
      });
    });
    if (!stopping) counts.readerReopens++;
  }
}

/** A socket that opens a slot's stream and never reads; replaced when the session rotates. */
async function stalled(slot: number): Promise<void> {
  // Staggered: sockets opened together fill up and are dropped together, and the server's memory
  // would follow that wave instead of showing its steady state.
  await sleep(Math.random() * STALLED_LIFETIME_MS);
  while (!stopping) {
    const gen = generation[slot];
    const socket = net.connect(port, '127.0.0.1', () => {
      const from = latestId[slot] && generation[slot] === gen ? `last-event-id: ${latestId[slot]}\r\n` : '';
      socket.write(`GET /events/${sessionId(slot)} HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\naccept: text/event-stream\r\n${from}\r\n`);
      socket.pause();
    });
    socket.on('error', () => undefined);
    counts.stalledOpened++;
    const deadline = Date.now() + STALLED_LIFETIME_MS * (0.75 + Math.random() / 2);
    while (!stopping && generation[slot] === gen && Date.now() < deadline) await sleep(500);
    socket.destroy();
  }
}

async function runClient(id: number): Promise<void> {
  for (let n = 0; Date.now() < until && !childExited; n++) {
    const slot = (id + n) % SESSIONS;
    const body = JSON.stringify({ query: `soak run ${n} of client ${id}`, session_id: sessionId(slot) });
    try {
      if (n % 2 === 0) {
        const res = await fetch(`${base}/run/sync`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
        const json = (await res.json()) as { status?: string; error?: string };
        if (res.status !== 200 || json.status !== 'success') throw new Error(`sync ${res.status} ${json.status ?? json.error}`);
      } else {
        const res = await fetch(`${base}/run`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
        const text = await res.text();
        const last = text.slice(text.lastIndexOf('event: '));
        if (res.status !== 200 || !last.startsWith('event: complete') || !last.includes('"status":"success"'))
          throw new Error(`stream ${res.status} ${last.slice(0, 200)}`);
      }
      counts.runs++;
    } catch (err) {
      counts.failed++;
      if (counts.failures.length < 10) counts.failures.push(String((err as Error).message ?? err));
    }
    // Slots rotate at different counts, so their readers do not all reconnect at once.
    if (++runsInSession[slot] >= Math.round(ROTATE * (0.7 + (0.6 * slot) / Math.max(1, SESSIONS - 1)))) {
      runsInSession[slot] = 0;
      latestId[slot] = null;
      generation[slot]++;
    }
  }
}

const tasks: Array<Promise<void>> = [];
for (let i = 0; i < READERS; i++) tasks.push(reader(i % SESSIONS));
for (let i = 0; i < STALLED; i++) tasks.push(stalled(i % SESSIONS));
await sleep(2_000); // streams open before the first run

const started = Date.now();
const samples: Array<{ t: number; rss: number; heap: number; external: number; streams: number; buffered: number; dropped: number; runs: number }> = [];
let sampling = true;
const cpuTicks = (pid: number) => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return Number(f[11]) + Number(f[12]); // utime + stime, in clock ticks (100 per second)
};
const serverTicks0 = cpuTicks(child.pid!);
const soakCpu0 = process.cpuUsage();
// One sample at a time (a slow answer delays the next one instead of piling up).
const sampler = (async () => {
  for (let next = Date.now(); sampling && !childExited;) {
    next += SAMPLE_MS;
    try {
      const [streams, buffered, dropped, heap, external] = await Promise.all([
        metric(base, 'agentd_sse_streams'),
        metric(base, 'agentd_sse_buffered_bytes'),
        metric(base, 'agentd_sse_streams_dropped_total'),
        metric(base, 'nodejs_heap_size_used_bytes'),
        metric(base, 'nodejs_external_memory_bytes'),
      ]);
      const s = { t: Date.now() - started, rss: rssBytes(child.pid!), heap, external, streams, buffered, dropped, runs: counts.runs };
      samples.push(s);
      if (samples.length % PRINT_EVERY === 0) {
        console.log(
          `  ${(s.t / 60_000).toFixed(1)} min: RSS ${mb(s.rss)} MB (heap ${mb(s.heap)}, external ${mb(s.external)}), runs ${s.runs} (failed ${counts.failed}), streams open ${s.streams}, held ${mb(s.buffered)} MB, dropped ${s.dropped}`,
        );
      }
    } catch (err) {
      console.error(`soak: sample failed: ${String(err)}`);
    }
    await sleep(Math.max(0, next - Date.now()));
  }
})();
const housekeeping = setInterval(() => model.reset(), 10_000); // the fixture logs every request

const runners: Array<Promise<void>> = [];
for (let i = 0; i < CONCURRENCY; i++) runners.push(runClient(i));
await Promise.all(runners);
clearInterval(housekeeping);
sampling = false;
await sampler;
const elapsed = Date.now() - started;
const serverCpu = (cpuTicks(child.pid!) - serverTicks0) / 100 / (elapsed / 1000);
const soakUsage = process.cpuUsage(soakCpu0);
const soakCpu = (soakUsage.user + soakUsage.system) / 1e6 / (elapsed / 1000);

// ------------------------------------------------------------------------------- the report

const window = Math.min(60_000, (elapsed - WARMUP_MS) / 2);
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(xs.length, 1);
const warm = samples.filter((s) => s.t >= WARMUP_MS && s.t < WARMUP_MS + window);
const end = samples.filter((s) => s.t >= elapsed - window);
const rssWarm = mean(warm.map((s) => s.rss));
const rssEnd = mean(end.map((s) => s.rss));
const after = samples.filter((s) => s.t >= WARMUP_MS);
const change = (rssEnd - rssWarm) / rssWarm;
const last = samples.at(-1);
const report = {
  minutes: +(elapsed / 60_000).toFixed(2),
  warmup_minutes: WARMUP_MS / 60_000,
  runs: counts.runs,
  runs_per_second: +(counts.runs / (elapsed / 1000)).toFixed(1),
  failed_runs: counts.failed,
  rss_mb_after_warmup: mb(rssWarm),
  rss_mb_end: mb(rssEnd),
  rss_change_percent: +(change * 100).toFixed(1),
  rss_mb_min_max_after_warmup: [mb(Math.min(...after.map((s) => s.rss))), mb(Math.max(...after.map((s) => s.rss)))],
  rss_window_seconds: Math.round(window / 1000),
  reader_mb_received: mb(counts.readerBytes),
  readers_dropped: counts.readersDropped,
  reader_reconnects_on_rotation: counts.readerReopens,
  never_reading_sockets_opened: counts.stalledOpened,
  server_streams_dropped: last?.dropped,
  server_streams_open_at_end: last?.streams,
  server_held_mb_max: mb(Math.max(...samples.map((s) => s.buffered))),
  server_cpu_cores: +serverCpu.toFixed(2),
  soak_process_cpu_cores: +soakCpu.toFixed(2),
  load_average_at_end: +readFileSync('/proc/loadavg', 'utf8').split(' ')[0],
  failures: counts.failures,
};
console.log(JSON.stringify(report, null, 2));
const ok = counts.failed === 0 && counts.readersDropped === 0 && Math.abs(change) <= 0.1 && !childExited;
console.log(ok ? 'soak: PASS (RSS flat within 10 %, 0 failed runs, 0 readers dropped)' : 'soak: FAIL');

stopping = true;
child.kill('SIGTERM');
await new Promise<void>((r) => (childExited ? r() : child.once('exit', () => r())));
await Promise.race([Promise.all(tasks), sleep(3_000)]);
await model.close();
rmSync(dataDir, { recursive: true, force: true });
process.exit(ok ? 0 : 1);
