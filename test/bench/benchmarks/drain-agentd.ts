// agentd's side of the background drain benchmarks (`background-drain`, `profile-background`):
// manual runs of one task queued over HTTP (one POST .../run per run, or POST .../runs with lists
// of 1,000) and drained by the server, timed to the last run's workspace files on disk, with the
// server's CPU and its store's counters over the drain. Shared with `background` (fanOut, postJson).
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { QUICK, log, nowMs, request, scaled, sleep, type Child } from '../lib.js';
import { cpuByRole, threadSnapshot, type ThreadRole } from '../threads.js';

/** Runs per POST /background/tasks/{id}/runs in the bulk drain (the most one call takes; the baselines add 1,000 per call too). */
export const BULK_LIST = 1000;
export const DRAIN_QUERY = 'Say hello to the benchmark.';
export const DRAIN_TIMEOUT_MS = 300_000;
/** Requests stop after this long, so a slow build cannot stretch `npm run bench` past its bound. */
export const POST_BUDGET_MS = QUICK ? 30_000 : scaled(90_000, 5000);

type Json = Record<string, unknown>;

export async function postJson(url: string, body: unknown, agent?: http.Agent): Promise<Json> {
  const r = await request(url, { method: 'POST', body: JSON.stringify(body), agent });
  if (r.status !== 200) throw new Error(`POST ${url} answered ${r.status}: ${r.body.slice(0, 300)}`);
  return JSON.parse(r.body) as Json;
}

/** Sends `n` requests with `concurrency` workers. */
export async function fanOut(n: number, concurrency: number, send: (i: number, agent: http.Agent) => Promise<unknown>): Promise<void> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  let next = 0;
  try {
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < n) await send(next++, agent);
      }),
    );
  } finally {
    agent.destroy();
  }
}

const statusCounts = async (url: string, taskId: string): Promise<Record<string, number>> =>
  (JSON.parse((await request(`${url}/background/tasks/${taskId}/status`)).body) as { status_counts: Record<string, number> }).status_counts;

/** The store counters test/bench/child-server.mjs keeps (storeStats): commits, event appends, fsync'd group-commit rounds (LevelDB only). */
type StoreCounters = { commits: number; appends: number; rounds: number };
const storeCounters = (child: Child): Promise<StoreCounters> => child.call<StoreCounters>({ cmd: 'storeStats' });

let drains = 0;
/**
 * Retention off for the drained task: by default a sweep every 60 s keeps a task's newest 1,000
 * ended runs, so a drain slower than a minute (a loaded machine) lost the rest from the status
 * counts and never looked drained.
 */
export const DRAIN_RETENTION = { max_runs_per_task: 1_000_000_000 };

export interface DrainResult {
  seconds: number;
  postS: number;
  requested: number;
  completed: number;
  other: Record<string, number>;
  cpuMs: number;
  /** CPU (ms) of the child's main thread and of its other threads over the drain, and by role (test/bench/threads.ts). */
  threads: { main: number; others: number; roles: Record<ThreadRole, number> };
  /** Store counters over the drain (first request to last run drained): commits, event appends, fsync'd group-commit rounds. */
  store: StoreCounters;
}

/**
 * Creates a manual task and drains `runs` runs through it. A run is drained once it is terminal
 * and its workspace files (run.json with the final status, events.jsonl) are on disk under
 * `dataDir`: the mirror is part of a run's work, and it can trail the runs by seconds (6,000 runs
 * once ended with 866 folders written).
 */
export async function agentdDrain(
  child: Child,
  runs: number,
  dataDir: string,
  /** false: the task writes no workspace files (workspace_policy), a diagnostic of what they cost. */
  workspaceFiles = true,
  /** `bulk`: queued with POST /background/tasks/{id}/runs, lists of 1,000 one after the other (as the baselines' addBulk / insert); else one POST .../run per run, 32 in flight. */
  enqueue: 'single' | 'bulk' = 'single',
): Promise<DrainResult> {
  const taskId = `bench-manual-${++drains}`;
  await postJson(`${child.url}/background/tasks`, {
    task_id: taskId,
    query: DRAIN_QUERY,
    schedule: { type: 'manual' },
    overlap_policy: 'allow_parallel',
    session_policy: { mode: 'run' },
    ...(workspaceFiles ? {} : { workspace_policy: { write_run_json: false, write_events_jsonl: false } }),
    // BENCH_BG_TASK: extra task fields (JSON) for an A/B drain, e.g. a workspace_policy.
    ...(process.env.BENCH_BG_TASK ? (JSON.parse(process.env.BENCH_BG_TASK) as Json) : {}),
  });
  const s0 = await storeCounters(child);
  const cpu0 = await child.call<{ user: number; system: number }>({ cmd: 'cpu' });
  const th0 = threadSnapshot(child.pid);
  const t0 = nowMs();
  let requested = 0;
  if (enqueue === 'bulk') {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      for (let i = 0; i < runs && nowMs() - t0 <= POST_BUDGET_MS; i += BULK_LIST) {
        const n = Math.min(BULK_LIST, runs - i);
        await postJson(`${child.url}/background/tasks/${taskId}/runs`, { runs: Array.from({ length: n }, () => ({})) }, agent);
        requested += n;
      }
    } finally {
      agent.destroy();
    }
  } else {
    await fanOut(runs, 32, async (i, agent) => {
      if (nowMs() - t0 > POST_BUDGET_MS) return;
      await postJson(`${child.url}/background/tasks/${taskId}/run`, {}, agent);
      requested++;
    });
  }
  const postS = (nowMs() - t0) / 1000;
  log(`${requested} runs requested in ${postS.toFixed(1)} s`);
  for (;;) {
    const counts = await statusCounts(child.url, taskId);
    const terminal = ['completed', 'failed', 'timeout', 'cancelled', 'skipped'].reduce((s, k) => s + (counts[k] ?? 0), 0);
    if (terminal >= requested) {
      if (workspaceFiles) await workspacesWritten(join(dataDir, 'workspaces', 'background', 'default', taskId), terminal - (counts.skipped ?? 0));
      const seconds = (nowMs() - t0) / 1000;
      const cpu1 = await child.call<{ user: number; system: number }>({ cmd: 'cpu' });
      const th1 = threadSnapshot(child.pid);
      const s1 = await storeCounters(child);
      const { completed = 0, ...other } = counts;
      const roles = cpuByRole(th0, th1);
      const all = Object.values(roles).reduce((a, b) => a + b, 0);
      const threads = { main: roles.main, others: all - roles.main, roles };
      const store = { commits: s1.commits - s0.commits, appends: s1.appends - s0.appends, rounds: s1.rounds - s0.rounds };
      return { seconds, postS, requested, completed, other, cpuMs: (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / 1000, threads, store };
    }
    if (nowMs() - t0 > DRAIN_TIMEOUT_MS) throw new Error(`background runs not drained in ${DRAIN_TIMEOUT_MS / 1000} s: ${JSON.stringify(counts)}`);
    await sleep(100);
  }
}

/** Waits until `expected` run folders under `taskDir` hold events.jsonl and a run.json with a terminal status. */
async function workspacesWritten(taskDir: string, expected: number): Promise<void> {
  const t0 = nowMs();
  const unsure = new Set<string>();
  let listed = 0;
  for (;;) {
    if (listed < expected) {
      const names = existsSync(taskDir) ? readdirSync(taskDir) : [];
      if (names.length > listed) for (const n of names) unsure.add(n);
      listed = names.length;
    }
    // Files are read once every folder is there (a listing is cheap; reading thousands of files
    // each poll would take CPU from the server being measured).
    if (listed >= expected)
      for (const runId of unsure) {
        try {
          const run = JSON.parse(readFileSync(join(taskDir, runId, 'run.json'), 'utf8')) as { status?: string };
          if (['completed', 'failed', 'timeout', 'cancelled'].includes(run.status ?? '') && existsSync(join(taskDir, runId, 'events.jsonl')))
            unsure.delete(runId);
        } catch {
          // not written yet (or being renamed into place)
        }
      }
    if (listed >= expected && unsure.size === 0) return;
    if (nowMs() - t0 > DRAIN_TIMEOUT_MS)
      throw new Error(`workspace files of ${expected} runs not written in ${DRAIN_TIMEOUT_MS / 1000} s: ${listed} folders, ${unsure.size} not final`);
    await sleep(100);
  }
}
