// Shared benchmark plumbing: child servers, HTTP/SSE clients, statistics, results and report.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { cpus, freemem, totalmem, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const BENCH_DIR = dirname(fileURLToPath(import.meta.url));
export const ROOT = join(BENCH_DIR, '..', '..');
export const RESULTS_FILE = join(BENCH_DIR, 'results.json');
export const REPORT_FILE = join(ROOT, 'docs', 'benchmarks.md');
/** BENCH_CHILD_SCRIPT points at a copy (next to a patched build) to measure a proposed fix. */
export const CHILD_SCRIPT = process.env.BENCH_CHILD_SCRIPT ?? join(BENCH_DIR, 'child-server.mjs');
/**
 * A private build (git-ignored like every dist/): other work in the tree may delete or rebuild the
 * shared dist/ while a benchmark runs. It holds two things: tsc's per-module output
 * (tsc -p tsconfig.build.json --outDir test/bench/dist) that child-server.mjs imports, and the
 * bundle `npm run build` makes (node scripts/build.mjs --outdir test/bench/dist), which is the CLI.
 */
export const BUILD_DIR = join(BENCH_DIR, 'dist');
/** The bundled CLI: the same file `npm start` runs (dist/agentd.js), built into BUILD_DIR. */
export const CLI = join(BUILD_DIR, 'agentd.js');

// ------------------------------------------------------------------ time and statistics

/** Monotonic milliseconds (CLOCK_MONOTONIC: comparable between processes of this machine). */
export const nowMs = (): number => Number(process.hrtime.bigint()) / 1e6;

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

export const median = (values: number[]): number => percentile(values, 50);

export const round = (n: number, digits = 2): number => (Number.isFinite(n) ? Number(n.toFixed(digits)) : n);

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `agentd-bench-${prefix}-`));
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

// ------------------------------------------------------------------ /proc readings

function procStatus(pid: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of readFileSync(`/proc/${pid}/status`, 'utf8').split('\n')) {
    const i = line.indexOf(':');
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  return out;
}

const kbToMb = (v: string | undefined): number => (v ? Number.parseInt(v, 10) / 1024 : NaN);

/** Current resident set size of a process, MB. */
export const rssMb = (pid: number): number => kbToMb(procStatus(pid).VmRSS);
/** Peak resident set size since the process started (VmHWM), MB. */
export const peakRssMb = (pid: number): number => kbToMb(procStatus(pid).VmHWM);

const CLK_TCK = 100; // USER_HZ on Linux

/** User + system CPU seconds a process used so far (/proc/<pid>/stat fields 14 and 15). */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

/**
 * CPU (ms) of a process's main thread (tid == pid: JavaScript, the event loop) and of its other
 * threads together (libuv's pool: file system calls, LevelDB reads and writes and their fsyncs;
 * V8's platform workers: concurrent and parallel GC; LevelDB's compaction thread).
 */
export function threadCpuMs(pid: number): { main: number; others: number } {
  let main = 0;
  let others = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    } catch {
      continue; // the thread ended meanwhile
    }
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ms = ((Number(fields[11]) + Number(fields[12])) / CLK_TCK) * 1000;
    if (Number(tid) === pid) main += ms;
    else others += ms;
  }
  return { main, others };
}

export function loadAverage(): number {
  return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
}

// ------------------------------------------------------------------ child servers

export type ModelSpec =
  { kind: 'instant'; chunks: string[] } | { kind: 'slow'; chunks: number; delayMs: number } | { kind: 'demo'; chunkDelayMs: number } | { kind: 'config' };

export type ChildSpec =
  | { mode: 'agentd'; dataDir: string; config: Record<string, unknown>; model: ModelSpec; syncWrites?: boolean }
  | { mode: 'bare-health' }
  | { mode: 'bare-sse'; frames: string[]; durable?: { dir: string; ops: Array<[string, string]> } }
  | { mode: 'bare-slow-sse'; head: string[]; delta: string; count: number; delayMs: number; tail: string[] }
  | { mode: 'bare-json'; body: string }
  | { mode: 'bare-stream' }
  /** The real-path model: a fast OpenAI-compatible server (child-server.mjs startFakeOpenAI). */
  | { mode: 'fake-openai' }
  /** The baseline of the real path: Fastify + the AI SDK's streamText against `baseUrl`. */
  | { mode: 'hand-rolled'; baseUrl: string; model: string };

export interface Child {
  pid: number;
  url: string;
  proc: ChildProcess;
  /** Sends a command and resolves with the child's answer to it. */
  call<T = unknown>(cmd: Record<string, unknown>): Promise<T>;
  stop(): Promise<void>;
  stderr(): string;
}

/** Extra node flags for agentd children, e.g. BENCH_NODE_FLAGS="--cpu-prof --cpu-prof-dir=/tmp/prof". */
export const agentdNodeFlags = (): string[] => (process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean);

/** Starts child-server.mjs (plain JS over the build in test/bench/dist/) and waits for it to listen. */
export async function startChild(spec: ChildSpec, timeoutMs = 60_000): Promise<Child> {
  const flags = spec.mode === 'agentd' ? agentdNodeFlags() : [];
  // Read at each start, so one process can run two builds side by side (an interleaved A/B).
  // BENCH_CHILD_STDOUT=1: the child's stdout is the benchmark's, for V8's traces (e.g.
  // BENCH_NODE_FLAGS="--trace-opt --trace-deopt": what it still compiles during a measurement).
  const proc = spawn(process.execPath, [...flags, process.env.BENCH_CHILD_SCRIPT ?? CHILD_SCRIPT], {
    cwd: ROOT,
    env: { ...process.env, BENCH_CHILD: JSON.stringify(spec) },
    stdio: ['ignore', process.env.BENCH_CHILD_STDOUT ? 'inherit' : 'ignore', 'pipe', 'ipc'],
  });
  let err = '';
  proc.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
    if (err.length > 20_000) err = err.slice(-10_000);
  });
  let nextId = 1;
  const waiting = new Map<number, (v: unknown) => void>();
  const ready = new Promise<{ url: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`child ${spec.mode} did not start in ${timeoutMs} ms: ${err}`)), timeoutMs);
    proc.on('message', (m: { type: string; id?: number; url?: string; value?: unknown }) => {
      if (m.type === 'ready') {
        clearTimeout(timer);
        resolve({ url: m.url! });
      } else if (m.type === 'reply' && m.id !== undefined) {
        waiting.get(m.id)?.(m.value);
        waiting.delete(m.id);
      }
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`child ${spec.mode} exited with ${code}: ${err}`));
    });
  });
  const { url } = await ready;
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  return {
    pid: proc.pid!,
    url,
    proc,
    call<T>(cmd: Record<string, unknown>): Promise<T> {
      const id = nextId++;
      return new Promise<T>((resolve) => {
        waiting.set(id, resolve as (v: unknown) => void);
        proc.send({ ...cmd, id });
      });
    },
    async stop() {
      if (proc.exitCode !== null) return;
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(t);
    },
    stderr: () => err,
  };
}

// ------------------------------------------------------------------ HTTP clients

export interface HttpResult {
  status: number;
  body: string;
  ms: number;
  /** Milliseconds to the first byte of the body (an SSE response: its first frame). */
  firstMs?: number;
}

/** One request with a full read of the body; latency is to the last byte. */
export function request(url: string, opts: { method?: string; body?: string; agent?: http.Agent; headers?: Record<string, string> } = {}): Promise<HttpResult> {
  const started = nowMs();
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      {
        method: opts.method ?? 'GET',
        agent: opts.agent,
        headers: {
          ...(opts.body !== undefined ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(opts.body)) } : {}),
          ...(opts.headers ?? {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        let firstMs: number | undefined;
        res.on('data', (c: Buffer) => {
          firstMs ??= nowMs() - started;
          chunks.push(c);
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), ms: nowMs() - started, firstMs }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (opts.body !== undefined) req.write(opts.body);
    req.end();
  });
}

export interface LoopResult {
  count: number;
  errors: number;
  seconds: number;
  perSecond: number;
  latencies: number[];
  /** Time to the first body byte of each counted response (SSE: the first frame). */
  firstFrames: number[];
  firstError: string | null;
}

/**
 * `concurrency` workers each send `make()` requests back to back for `durationMs`; a response
 * counts only when `ok(body)` holds.
 */
export async function closedLoop(opts: {
  concurrency: number;
  durationMs: number;
  send: (agent: http.Agent) => Promise<HttpResult>;
  ok: (r: HttpResult) => boolean;
  /** Stop once this many responses were counted (durationMs still bounds the loop). */
  maxCount?: number;
}): Promise<LoopResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: opts.concurrency });
  const latencies: number[] = [];
  const firstFrames: number[] = [];
  const maxCount = opts.maxCount ?? Infinity;
  let errors = 0;
  let firstError: string | null = null;
  const started = nowMs();
  const deadline = started + opts.durationMs;
  const worker = async () => {
    while (nowMs() < deadline && latencies.length < maxCount) {
      try {
        const r = await opts.send(agent);
        if (opts.ok(r)) {
          latencies.push(r.ms);
          if (r.firstMs !== undefined) firstFrames.push(r.firstMs);
        } else {
          errors++;
          firstError ??= `HTTP ${r.status}: ${r.body.slice(0, 300)}`;
        }
      } catch (e) {
        errors++;
        firstError ??= String(e);
      }
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency }, worker));
  const seconds = (nowMs() - started) / 1000;
  agent.destroy();
  return { count: latencies.length, errors, seconds, perSecond: latencies.length / seconds, latencies, firstFrames, firstError };
}

/** Merges loop rounds (alternating A/B rounds share out background noise between both sides). */
export function mergeLoops(rounds: LoopResult[]): LoopResult {
  const count = rounds.reduce((s, r) => s + r.count, 0);
  const seconds = rounds.reduce((s, r) => s + r.seconds, 0);
  return {
    count,
    errors: rounds.reduce((s, r) => s + r.errors, 0),
    seconds,
    perSecond: count / seconds,
    latencies: rounds.flatMap((r) => r.latencies),
    firstFrames: rounds.flatMap((r) => r.firstFrames),
    firstError: rounds.find((r) => r.firstError)?.firstError ?? null,
  };
}

export interface SseFrame {
  event: string;
  id?: string;
  data: string;
  /** nowMs() when the frame's last byte arrived. */
  at: number;
}

/**
 * Opens an SSE stream (GET or POST) and calls `onFrame` for each frame as it arrives. Resolves
 * when the response ends; `close()` ends it early.
 */
export function openSse(
  url: string,
  opts: { method?: string; body?: string; agent?: http.Agent | false; onFrame: (f: SseFrame) => void; onOpen?: (status: number) => void },
): { done: Promise<{ status: number; raw: string }>; close(): void } {
  let req: http.ClientRequest;
  const done = new Promise<{ status: number; raw: string }>((resolve, reject) => {
    req = http.request(
      url,
      {
        method: opts.method ?? 'GET',
        agent: opts.agent,
        headers:
          opts.body !== undefined
            ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(opts.body)), accept: 'text/event-stream' }
            : { accept: 'text/event-stream' },
      },
      (res) => {
        opts.onOpen?.(res.statusCode ?? 0);
        let buf = '';
        let raw = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          const at = nowMs();
          raw += chunk.length < 1_000_000 && raw.length < 1_000_000 ? chunk : '';
          buf += chunk;
          let idx: number;
          while ((idx = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, idx);
            buf = buf.slice(idx + 2);
            let event = 'message';
            let id: string | undefined;
            const data: string[] = [];
            for (const line of block.split('\n')) {
              if (line.startsWith(':')) continue;
              if (line.startsWith('event:')) event = line.slice(6).trim();
              else if (line.startsWith('id:')) id = line.slice(3).trim();
              else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
            }
            if (data.length === 0 && event === 'message') continue;
            opts.onFrame({ event, id, data: data.join('\n'), at });
          }
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, raw }));
        res.on('error', reject);
        res.on('aborted', () => resolve({ status: res.statusCode ?? 0, raw }));
      },
    );
    req.on('error', (e) => ((e as NodeJS.ErrnoException).code === 'ECONNRESET' ? resolve({ status: 0, raw: '' }) : reject(e)));
    if (opts.body !== undefined) req.write(opts.body);
    req.end();
  });
  return { done, close: () => req.destroy() };
}

/** Polls `url` until `test(body)` holds; returns nowMs() of the first success. */
export async function pollUntil(
  url: string,
  test: (body: string) => boolean,
  opts: { timeoutMs?: number; stepMs?: number; alive?: () => boolean } = {},
): Promise<number> {
  const deadline = nowMs() + (opts.timeoutMs ?? 60_000);
  const agent = new http.Agent({ keepAlive: false });
  for (;;) {
    try {
      const r = await request(url, { agent });
      if (r.status === 200 && test(r.body)) return nowMs();
    } catch {
      // not listening yet
    }
    if (opts.alive && !opts.alive()) throw new Error(`process died while waiting for ${url}`);
    if (nowMs() > deadline) throw new Error(`${url} not ready in time`);
    await sleep(opts.stepMs ?? 5);
  }
}

// ------------------------------------------------------------------ results and report

export interface Row {
  metric: string;
  value: number | string;
  unit: string;
  baseline?: number | string | null;
  baseline_label?: string | null;
  /** value / baseline, as a fraction (the report prints it as x or %). */
  ratio?: number | null;
  target?: string | null;
  pass?: boolean | null;
}

export interface BenchResult {
  name: string;
  title: string;
  ran_at: string;
  duration_s: number;
  command: string;
  machine: Machine;
  /** How the baseline was measured and what the rows mean. */
  method: string[];
  rows: Row[];
  notes: string[];
}

export interface Machine {
  nproc: number;
  cpu: string;
  memory_gb: number;
  free_memory_gb: number;
  node: string;
  platform: string;
  load_average_at_start: number;
}

export function machine(): Machine {
  return {
    nproc: cpus().length,
    cpu: cpus()[0]?.model ?? 'unknown',
    memory_gb: round(totalmem() / 2 ** 30, 1),
    free_memory_gb: round(freemem() / 2 ** 30, 1),
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
    load_average_at_start: loadAverage(),
  };
}

/** A CPU profile of the agentd child on the real path, summarised (test/bench/profile.ts). */
export interface ProfileResult {
  /** e.g. "before" / "after": one entry per label is kept. */
  label: string;
  ran_at: string;
  commit: string;
  command: string;
  description: string;
  runs: number;
  /** Server CPU per run while profiled (the profiler adds its own cost). */
  cpu_per_run_ms: number;
  /** Self time by origin, ms per run. */
  groups: Array<{ name: string; ms_per_run: number; share: number }>;
  /** Top functions by self time. */
  top: Array<{ fn: string; where: string; ms_per_run: number; share: number }>;
}

interface ResultsFile {
  benchmarks: Record<string, BenchResult>;
  profiles?: ProfileResult[];
}

export function loadResults(): ResultsFile {
  if (!existsSync(RESULTS_FILE)) return { benchmarks: {} };
  return JSON.parse(readFileSync(RESULTS_FILE, 'utf8')) as ResultsFile;
}

export function saveProfile(p: ProfileResult, order: string[]): void {
  const all = loadResults();
  all.profiles = [...(all.profiles ?? []).filter((x) => x.label !== p.label), p];
  writeFileSync(RESULTS_FILE, `${JSON.stringify(all, null, 2)}\n`);
  writeFileSync(REPORT_FILE, renderReport(all, order));
}

export function saveResult(result: BenchResult, order: string[]): void {
  const all = loadResults();
  all.benchmarks[result.name] = result;
  writeFileSync(RESULTS_FILE, `${JSON.stringify(all, null, 2)}\n`);
  writeFileSync(REPORT_FILE, renderReport(all, order));
}

const fmt = (v: number | string | null | undefined, unit = ''): string => {
  if (v === null || v === undefined) return '';
  if (typeof v === 'string') return v;
  if (!Number.isFinite(v)) return String(v);
  const digits = Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : 2;
  const text = v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 });
  return unit ? `${text} ${unit}` : text;
};

const fmtRatio = (r: number | null | undefined): string =>
  r === null || r === undefined || !Number.isFinite(r) ? '' : r < 10 ? `${(r * 100).toFixed(0)} %` : `${r.toFixed(1)}x`;

export function renderReport(all: ResultsFile, order: string[]): string {
  const names = [...order.filter((n) => all.benchmarks[n]), ...Object.keys(all.benchmarks).filter((n) => !order.includes(n))];
  const out: string[] = [];
  out.push('# Benchmarks', '');
  out.push(
    'Generated by `npm run bench` (all) or `npm run bench -- <name>` (one: ' +
      order.map((n) => `\`${n}\``).join(', ') +
      ') from `test/bench/results.json`; running one benchmark rewrites its section and keeps the others. For iterating (not a measurement): `--quick` (short rounds and warm-ups, any benchmark) and `npm run bench -- protocols --frames-only` (only the protocols per-frame rounds). Each benchmark starts real servers on 127.0.0.1 and measures a baseline in the same run; **ratio** is agentd / baseline.',
    '',
  );
  out.push(
    'Servers run as child processes (`test/bench/child-server.mjs`, plain JS over the compiled build in `test/bench/dist/`: `tsc -p tsconfig.build.json --outDir test/bench/dist`, rebuilt when src/ is newer; a private copy because other work may delete the shared `dist/` mid-run) so their RSS and CPU can be read from `/proc/<pid>`, and the load generator runs in the parent process. Start-up is timed on `node test/bench/dist/agentd.js serve`, the esbuild bundle `npm run build` writes to `dist/agentd.js` and `npm start` runs (`node scripts/build.mjs --outdir test/bench/dist`). The LevelDB store runs with its default `sync: true` (fsync per write batch) unless a row says otherwise.',
    '',
  );
  out.push('| Benchmark | Ran at (UTC) | Machine | Load avg at start | Pass |', '|---|---|---|---|---|');
  for (const n of names) {
    const b = all.benchmarks[n];
    const judged = b.rows.filter((r) => r.pass !== null && r.pass !== undefined);
    const passed = judged.filter((r) => r.pass).length;
    out.push(
      `| [${b.name}](#${b.name}) | ${b.ran_at.replace('T', ' ').slice(0, 19)} | ${b.machine.nproc} cores, ${b.machine.memory_gb} GB, node ${b.machine.node} | ${b.machine.load_average_at_start} | ${passed}/${judged.length} |`,
    );
  }
  out.push('');
  out.push('## Targets', '', '| Benchmark | Metric | agentd | Ratio to baseline | Target | Result |', '|---|---|---|---|---|---|');
  for (const n of names) {
    for (const r of all.benchmarks[n].rows) {
      if (r.pass === null || r.pass === undefined) continue;
      out.push(`| [${n}](#${n}) | ${r.metric} | ${fmt(r.value, r.unit)} | ${fmtRatio(r.ratio)} | ${r.target ?? ''} | ${r.pass ? 'pass' : '**FAIL**'} |`);
    }
  }
  out.push('');
  for (const n of names) {
    const b = all.benchmarks[n];
    out.push(`## ${b.name}`, '', `**${b.title}**`, '');
    out.push(`- Command: \`${b.command}\``);
    out.push(
      `- Machine: \`nproc\` ${b.machine.nproc} (${b.machine.cpu}), memory ${b.machine.memory_gb} GB (${b.machine.free_memory_gb} GB free), node ${b.machine.node}, ${b.machine.platform}, load average ${b.machine.load_average_at_start} at start`,
    );
    out.push(`- Date: ${b.ran_at} (took ${b.duration_s.toFixed(0)} s)`);
    for (const m of b.method) out.push(`- ${m}`);
    out.push('');
    out.push('| Metric | agentd | Baseline | Ratio | Target | Result |', '|---|---|---|---|---|---|');
    for (const r of b.rows) {
      const baseline = r.baseline === null || r.baseline === undefined ? '' : `${fmt(r.baseline, r.unit)}${r.baseline_label ? ` (${r.baseline_label})` : ''}`;
      const result = r.pass === null || r.pass === undefined ? '' : r.pass ? 'pass' : '**FAIL**';
      out.push(`| ${r.metric} | ${fmt(r.value, r.unit)} | ${baseline} | ${fmtRatio(r.ratio)} | ${r.target ?? ''} | ${result} |`);
    }
    out.push('');
    if (b.notes.length) {
      for (const note of b.notes) out.push(`> ${note}`, '>');
      out.pop();
      out.push('');
    }
  }
  if (all.profiles?.length) {
    out.push('## Profiles', '');
    out.push(
      'CPU profiles of the agentd server process on the real path (`node --cpu-prof` on the child; `npm run bench -- profile <label>` writes them here, test/bench/profile.ts), summarised by self time. `npm run bench -- profile-background <label>` profiles the background drain instead (labels `background-c1-<label>`, `background-c32-<label>`: one child per background.concurrency; its description also gives, per drained run, store commits, group-commit rounds (one fsync each), ops and their JSON bytes, events appended and their bytes, reads, model requests, and workspace files and folders). The profiler adds its own cost, so its CPU per run is above the run benchmark\'s. `writev` is mostly the loopback peer being woken inside the syscall (wall time the profiler charges to it), not this process\'s CPU. "before" is the tree this work started from (89256c6), built into a copy and run by the same harness (`BENCH_CHILD_SCRIPT=<copy>/test/bench/child-server.mjs npm run bench -- profile before`).',
      '',
    );
    for (const p of all.profiles) {
      out.push(`### ${p.label}`, '');
      out.push(`- Command: \`${p.command}\` at commit ${p.commit}, ${p.ran_at}`);
      out.push(`- ${p.description}`);
      out.push(`- ${p.runs.toLocaleString('en-US')} runs; server CPU ${p.cpu_per_run_ms.toFixed(2)} ms per run while profiled`, '');
      out.push('| Self time by origin | ms per run | share |', '|---|---|---|');
      for (const g of p.groups) out.push(`| ${g.name} | ${g.ms_per_run.toFixed(3)} | ${(g.share * 100).toFixed(1)} % |`);
      out.push('', '| Function (top self time) | where | ms per run | share |', '|---|---|---|---|');
      for (const t of p.top) out.push(`| \`${t.fn}\` | ${t.where} | ${t.ms_per_run.toFixed(3)} | ${(t.share * 100).toFixed(1)} % |`);
      out.push('');
    }
  }
  return out.join('\n');
}

export function ratio(value: number, baseline: number): number | null {
  return baseline > 0 && Number.isFinite(value) && Number.isFinite(baseline) ? value / baseline : null;
}

/** What one benchmark module returns; run.ts adds the name, date, command and machine. */
export interface BenchOutput {
  title: string;
  method: string[];
  rows: Row[];
  notes: string[];
}

export type Benchmark = () => Promise<BenchOutput>;

/** Runs `fn` with a child, always stopping the child. */
export async function withChild<T>(spec: ChildSpec, fn: (c: Child) => Promise<T>): Promise<T> {
  const child = await startChild(spec);
  try {
    return await fn(child);
  } finally {
    await child.stop();
  }
}

/** Agentd config shared by the benchmarks: no tools, no periodic sweep, no background work. */
export function benchConfig(extra: Record<string, unknown> = {}): Record<string, unknown> {
  const base: Record<string, any> = {
    agent: { tools: { builtin: [] } },
    runs: { orphan_sweep: { interval_seconds: 3600 } },
    background: { enabled: false },
  };
  for (const [k, v] of Object.entries(extra)) {
    base[k] = typeof v === 'object' && v && !Array.isArray(v) && typeof base[k] === 'object' ? { ...base[k], ...(v as object) } : v;
  }
  return base;
}

/** The local tool module of the real-path benchmarks (one `add` tool). */
export const BENCH_TOOLS = join(BENCH_DIR, 'bench-tools.mjs');

/**
 * agentd as its docs configure it for a real model: `agent.model.provider: "openai-compatible"`
 * pointed at `baseUrl` (the fake OpenAI-compatible server), the local `add` tool, no built-ins.
 */
export function realPathConfig(baseUrl: string, model = 'bench', extra: Record<string, unknown> = {}): Record<string, unknown> {
  const { agent: extraAgent, ...rest } = extra as { agent?: Record<string, unknown> };
  return benchConfig({
    agent: { model: { provider: 'openai-compatible', base_url: baseUrl, model }, tools: { builtin: [], local: BENCH_TOOLS }, ...(extraAgent ?? {}) },
    ...rest,
  });
}

/** `npm run bench -- <name> --quick`: short rounds and warm-ups, for iterating (not a measurement). */
export const QUICK = process.argv.includes('--quick') || process.env.BENCH_QUICK === '1';

/**
 * BENCH_SCALE (default 1) shrinks durations and data sets for a quick smoke run of the harness
 * itself; results measured with a scale other than 1 say so in their notes.
 */
export const SCALE = Number(process.env.BENCH_SCALE ?? 1) > 0 ? Number(process.env.BENCH_SCALE ?? 1) : 1;
export const scaled = (n: number, min = 1): number => Math.max(min, Math.round(n * SCALE));

/** Progress on stderr, so a long benchmark shows where it is. */
export function log(msg: string): void {
  process.stderr.write(`    ${new Date().toISOString().slice(11, 19)} ${msg}\n`);
}
