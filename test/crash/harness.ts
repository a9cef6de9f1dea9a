// Crash-test harness: runs agentd as a CHILD process (so it can be SIGKILLed for real while the
// test process, its scripted model server and its ledger file live on), and a seeded workload
// that keeps driving runs across kills and restarts. Used by test/http/recovery.test.ts,
// test/http/crash-short.test.ts (short form, every `npm test`) and test/crash/crash.test.ts
// (`npm run test:crash`).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { ChatCompletionRequestBody, ScriptedOpenAI, ScriptedReply } from '../fixtures/scripted-openai.js';
import { waitFor } from '../helpers/wait.js';

export const ROOT = resolve(import.meta.dirname, '../..');
export const CRASH_TOOLS = join(import.meta.dirname, 'fixtures/crash-tools.mjs');

// ------------------------------------------------------------------ the agentd child process

export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface AgentdChild {
  url: string;
  pid: number;
  /** Everything the child wrote to stderr so far (its JSON log lines and the listening line). */
  stderr(): string;
  /** Resolves when the process has exited (its LevelDB lock is free again). */
  exited: Promise<ChildExit>;
  kill(signal: NodeJS.Signals): Promise<ChildExit>;
}

const children = new Set<ChildProcess>();
// A failed test must not leave agentd processes behind holding a data dir.
process.once('exit', () => {
  for (const c of children) c.kill('SIGKILL');
});

/** Kills every child this process started that is still alive (afterAll safety net). */
export async function killAllChildren(): Promise<void> {
  await Promise.all(
    [...children].map(
      (c) =>
        new Promise<void>((res) => {
          if (c.exitCode !== null || c.signalCode !== null) return res();
          c.once('exit', () => res());
          c.kill('SIGKILL');
        }),
    ),
  );
}

export function tempDir(prefix = 'agentd-crash-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export function writeConfig(dir: string, config: Record<string, unknown>): string {
  const file = join(dir, 'agentd.json');
  writeFileSync(file, JSON.stringify(config, null, 2));
  return file;
}

/** A config whose model is the scripted server and whose local tools are the crash fixtures. */
export function crashConfig(modelUrl: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const { agent, ...rest } = extra as { agent?: Record<string, unknown> };
  return {
    agent: {
      model: { provider: 'openai-compatible', base_url: modelUrl, model: 'scripted', max_output_tokens: 64 },
      tools: { local: CRASH_TOOLS, builtin: [] },
      ...(agent ?? {}),
    },
    ...rest,
  };
}

/**
 * `agentd serve` in a child process on a free port; resolves once it listens (start-up recovery
 * has run by then: cli.ts prints the line after `startServer`, which awaits the start-up sweep).
 */
export async function startAgentd(opts: { configFile: string; dataDir: string; env?: Record<string, string>; timeoutMs?: number }): Promise<AgentdChild> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'serve', '--config', opts.configFile, '--data-dir', opts.dataDir, '--port', '0'], {
    cwd: ROOT,
    env: { ...process.env, ...(opts.env ?? {}) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  children.add(child);
  let err = '';
  const exited = new Promise<ChildExit>((res) =>
    child.once('exit', (code, signal) => {
      children.delete(child);
      res({ code, signal });
    }),
  );
  const url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`agentd did not start in ${opts.timeoutMs ?? 30_000} ms:\n${err}`)), opts.timeoutMs ?? 30_000);
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => {
      err += chunk;
      if (err.length > 200_000) err = err.slice(-100_000);
      const m = /listening on (http:\/\/\S+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        res(m[1]);
      }
    });
    void exited.then((e) => {
      clearTimeout(timer);
      rej(new Error(`agentd exited during start-up (${e.code ?? e.signal}):\n${err}`));
    });
  });
  return {
    url,
    pid: child.pid!,
    stderr: () => err,
    exited,
    kill: (signal) => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

// ------------------------------------------------------------------ HTTP helpers (no app code in the test process)

// Response bodies are checked field by field against the documented shapes, so a loose type here
// keeps the assertions readable.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Json = any;

export interface JsonReply {
  status: number;
  body: Json;
}

async function asJson(res: Response): Promise<JsonReply> {
  const text = await res.text();
  let body: unknown = text;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    // keep the text
  }
  return { status: res.status, body };
}

export async function getJson(url: string): Promise<JsonReply> {
  return asJson(await fetch(url, { signal: AbortSignal.timeout(15_000) }));
}

export async function postJson(url: string, body: unknown, timeoutMs = 15_000): Promise<JsonReply> {
  return asJson(
    await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(timeoutMs) }),
  );
}

// Polls until a condition holds: the same helper the HTTP tests use.
export { eventually } from '../helpers/server.js';
import { eventually } from '../helpers/server.js';

/**
 * Starts a run with POST /run/sync without waiting for its answer (the child may die first) and
 * learns its id from GET /runs?session_id=..., so every run gets its own session.
 */
export async function launchRun(url: string, query: string, sessionId: string): Promise<string> {
  void postJson(`${url}/run/sync`, { query, session_id: sessionId }, 600_000).catch(() => undefined);
  return eventually(
    async () => {
      const list = await getJson(`${url}/runs?session_id=${encodeURIComponent(sessionId)}`);
      return (list.body?.runs?.[0]?.run_id as string | undefined) ?? null;
    },
    10_000,
    `run of session ${sessionId}`,
  );
}

export async function getRun(url: string, runId: string): Promise<Json> {
  const r = await getJson(`${url}/runs/${runId}`);
  if (r.status !== 200) throw new Error(`GET /runs/${runId}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

export function waitForRunStatus(url: string, runId: string, statuses: string[], timeoutMs = 15_000): Promise<Json> {
  return eventually(
    async () => {
      const v = await getRun(url, runId);
      return statuses.includes(v.status) ? v : null;
    },
    timeoutMs,
    `run ${runId} in ${statuses.join('|')}`,
  );
}

// ------------------------------------------------------------------ the tool ledger

export interface LedgerLine {
  tool: string;
  phase: 'started' | 'done';
  entry: string | null;
  run_id: string;
  idempotency_key: string;
  attempt: number;
  lease_token: string;
  pid: number;
}

export function readLedger(file: string): LedgerLine[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as LedgerLine);
}

// ------------------------------------------------------------------ model scripting by query tag

/**
 * Routes each chat request to a per-run script. A query starts with `[tag]`; the script gets the
 * number of model turns this run already made (assistant messages after the run's user message),
 * so a replayed request (the reply was never saved) gets the same turn number again.
 */
export type TurnScript = (turn: number, request: ChatCompletionRequestBody) => ScriptedReply;

export interface ParsedRequest {
  tag: string | null;
  turn: number;
  /** Tool messages sent in this request after the run's user message. */
  toolMessages: Array<{ tool_call_id: string; content: string }>;
}

export function parseRequest(req: ChatCompletionRequestBody): ParsedRequest {
  const msgs = req.messages;
  let u = -1;
  for (let i = msgs.length - 1; i >= 0; i--) {
    if (msgs[i].role === 'user') {
      u = i;
      break;
    }
  }
  const text = u >= 0 ? contentText(msgs[u].content) : '';
  const tag = /^\[([^\]]+)\]/.exec(text)?.[1] ?? null;
  const after = msgs.slice(u + 1);
  return {
    tag,
    turn: after.filter((m) => m.role === 'assistant').length,
    toolMessages: after.filter((m) => m.role === 'tool').map((m) => ({ tool_call_id: String(m.tool_call_id ?? ''), content: contentText(m.content) })),
  };
}

function contentText(c: unknown): string {
  if (typeof c === 'string') return c;
  if (Array.isArray(c)) return c.map((p) => (typeof (p as { text?: unknown }).text === 'string' ? (p as { text: string }).text : '')).join('');
  return '';
}

export function routeByTag(model: ScriptedOpenAI, scripts: Map<string, TurnScript> | ((tag: string) => TurnScript | undefined)): void {
  const find = typeof scripts === 'function' ? scripts : (tag: string) => scripts.get(tag);
  model.setDefault((req) => {
    const p = parseRequest(req);
    const script = p.tag ? find(p.tag) : undefined;
    return script ? script(p.turn, req) : { text: 'no script for this query' };
  });
}

/** Requests the model received for one tag, in arrival order. */
export function requestsOf(model: ScriptedOpenAI, tag: string): ParsedRequest[] {
  return model.requests.map(parseRequest).filter((p) => p.tag === tag);
}

// ------------------------------------------------------------------ seeded randomness

/** A stable number in [0, 1) for a string (FNV-1a). */
export function unit(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return (h >>> 0) / 4294967296;
}

/** mulberry32: small, fast, and the same sequence for the same seed on every machine. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// ------------------------------------------------------------------ the crash workload

export interface CrashOptions {
  /** Kill/restart cycles (each ends in a SIGKILL at a random moment). */
  cycles: number;
  /** Runs in the workload, submitted across the cycles. */
  runs: number;
  seed: number;
  /** How long each child lives before its SIGKILL, ms (uniform). */
  lifeMs?: [number, number];
  /** Every n-th cycle ends in a SIGTERM (graceful stop, must exit 0) instead of a SIGKILL; 0 = never. */
  sigtermEvery?: number;
  /** After the last kill: how long one clean process may take to bring every run to rest. */
  settleTimeoutMs?: number;
  /**
   * PostgreSQL instead of one LevelDB data dir: `instances` agentd processes share the database
   * (given by url; the caller creates and drops it), one of them is killed (and restarted) per
   * cycle while the others serve on. Default: the embedded store, one process.
   */
  postgres?: { url: string; instances: number };
  /** Interval background tasks (every 2 s) served by every instance; each occurrence must be dispatched once. */
  tasks?: number;
  log?: (msg: string) => void;
}

export interface CrashReport {
  seed: number;
  cycles: number;
  runs: number;
  kills: number;
  /** Graceful stops (SIGTERM) among the cycles. */
  stops: number;
  starts: number;
  duration_ms: number;
  /** Final record status -> runs. */
  outcomes: Record<string, number>;
  /** error.type of failed runs -> runs. */
  failures: Record<string, number>;
  /** run_resumed events by cause. */
  resumed: Record<string, number>;
  /** Background tasks (opts.tasks): their runs, and occurrences dispatched more than once (must be 0). */
  background?: { tasks: number; runs: number; not_at_rest: number; double_dispatches: number };
  tool_calls: { non_idempotent_executed: number; non_idempotent_unknown: number; idempotent_executions: number };
  approvals: { approved: number; denied: number; approved_executed_once: number; approved_unknown: number; approved_abandoned_by_failed_run: number };
  budgets: { requests: number; granted: number; denied: number };
  model_requests: number;
  /** `"level":"error"` lines the agentd processes wrote to stderr. */
  errors_logged: number;
  violations: string[];
}

type Step = Array<{ name: 'ledger_write' | 'ask_write' | 'counted_echo'; arguments: Record<string, unknown> }>;

/** A job's plan: one tool batch per model turn, then a final answer. Deterministic per seed. */
function planJobs(n: number, rand: () => number): Step[][] {
  const plans: Step[][] = [];
  for (let j = 0; j < n; j++) {
    const steps: Step[] = [];
    const len = 1 + Math.floor(rand() * 4);
    for (let k = 0; k < len; k++) {
      const batch: Step = [];
      const calls = rand() < 0.2 ? 2 : 1;
      for (let c = 0; c < calls; c++) {
        const x = rand();
        const entry = `job${j}-s${k}-c${c}`;
        if (x < 0.4) batch.push({ name: 'ledger_write', arguments: { entry, ms: Math.floor(rand() * 400) } });
        else if (x < 0.6) batch.push({ name: 'ask_write', arguments: { entry, ms: Math.floor(rand() * 200) } });
        else batch.push({ name: 'counted_echo', arguments: { text: entry, ms: Math.floor(rand() * 300) } });
      }
      steps.push(batch);
    }
    plans.push(steps);
  }
  return plans;
}

const NON_IDEMPOTENT = new Set(['ledger_write', 'ask_write']);

/**
 * Runs the workload against a child agentd that is SIGKILLed at a random moment of each cycle and
 * restarted on the same data dir, deciding every approval and budget request it finds waiting
 * (mostly yes), then lets one last process bring everything to rest and checks the invariants.
 * Returns the figures and every invariant violation found (empty when all hold).
 */
export async function runCrashHarness(model: ScriptedOpenAI, opts: CrashOptions): Promise<CrashReport> {
  const t0 = Date.now();
  const log = opts.log ?? (() => {});
  const rand = prng(opts.seed);
  const plans = planJobs(opts.runs, rand);
  const dir = tempDir();
  const ledger = join(dir, 'ledger.jsonl');
  writeFileSync(ledger, '');
  const dataDir = join(dir, 'data');
  // Tool calls: about 3 per run; the agent budget covers ~40 % of them, so many runs pause
  // on it and need a grant, with several runs contending for one ledger key.
  const agentToolLimit = Math.max(2, Math.ceil(opts.runs * 1.2));
  const pgOpts = opts.postgres ?? null;
  const slots = pgOpts ? Math.max(1, pgOpts.instances) : 1;
  const configFile = writeConfig(
    dir,
    crashConfig(model.url, {
      ...(pgOpts
        ? {
            store: { kind: 'postgres', url: pgOpts.url },
            // Nobody takes a running run for dead at start-up on a shared store: leases must lapse.
            background: { lease_seconds: 2, poll_interval_ms: 200, workspace_root: join(dir, 'workspaces') },
          }
        : {}),
      agent: { max_steps: 12 },
      governance: { rules: [{ tools: ['ask_*'], effect: 'ask', reason: 'a person approves writes' }] },
      budgets: {
        session: [{ meter: 'model_calls', limit: 3 }],
        agent: [{ meter: 'tool_calls', limit: agentToolLimit }],
      },
      runs: { ...(pgOpts ? { lease_seconds: 2 } : {}), orphan_sweep: { interval_seconds: 1, decided_grace_seconds: 1 } },
    }),
  );
  const byTag = new Map<string, number>(plans.map((_, j) => [`job${j}`, j]));
  routeByTag(model, (tag) => {
    if (tag === 'tick') return () => ({ text: 'tock' });
    const j = byTag.get(tag);
    if (j === undefined) return undefined;
    return (turn) =>
      turn < plans[j].length ? { tool_calls: plans[j][turn].map((c) => ({ name: c.name, arguments: c.arguments })) } : { text: `job${j} done` };
  });

  const runOf = new Map<number, string>(); // job -> run id, once seen in the store
  const sentTo = new Map<number, [number, number]>(); // job -> [slot, generation] of the child its POST went to, until seen
  const submitted = (j: number) => runOf.has(j) || sentTo.has(j);
  const decided = new Set<string>(); // approval ids / budget request ids this harness decided
  let kills = 0;
  let stops = 0;
  let starts = 0;
  const gens = new Array<number>(slots).fill(0);
  const children = new Array<AgentdChild | null>(slots).fill(null);
  const errorsLogged: string[] = [];
  const violations: string[] = [];
  const start = async (slot = 0) => {
    starts++;
    gens[slot]++;
    const child = await startAgentd({ configFile, dataDir: slots > 1 ? join(dir, `data-${slot}`) : dataDir, env: { AGENTD_TEST_LEDGER: ledger } });
    children[slot] = child;
    return child;
  };
  const collectErrors = (child: AgentdChild) => {
    for (const line of child.stderr().split('\n')) if (line.includes('"level":"error"')) errorsLogged.push(line);
  };

  /** Learns the run ids of submitted jobs; a job sent to a dead child that never reached the store is sent again. */
  const confirm = async (url: string) => {
    for (const [j, [slot, gen]] of [...sentTo]) {
      const list = await getJson(`${url}/runs?session_id=job${j}`);
      const runs = list.body?.runs ?? [];
      if (runs.length > 1) violations.push(`job${j}: ${runs.length} runs for one submission`);
      if (runs.length > 0) {
        runOf.set(j, runs[0].run_id);
        sentTo.delete(j);
      } else if (gen !== gens[slot]) {
        sentTo.delete(j); // its process died before storing it
      }
    }
  };
  /** Sends each job to a live child, round-robin over the slots. */
  const submit = (jobs: number[]) => {
    let k = 0;
    for (const j of jobs) {
      const slot = k++ % slots;
      const child = children[slot];
      if (!child) continue;
      sentTo.set(j, [slot, gens[slot]]);
      void postJson(`${child.url}/run/sync`, { query: `[job${j}] do the plan`, session_id: `job${j}` }, 600_000).catch(() => undefined);
    }
  };
  /**
   * One pass over everything waiting for a person. Decisions depend on the plan, not on timing
   * (most are yes), so a seed always asks the same questions the same way.
   */
  const decide = async (url: string) => {
    const approvals = await getJson(`${url}/runs?status=awaiting_approval&limit=500`);
    for (const run of approvals.body?.runs ?? []) {
      for (const a of run.approvals as Array<{ approval_id: string; status: string; arguments: { entry?: string } }>) {
        if (a.status !== 'pending' || decided.has(a.approval_id)) continue;
        const decision = unit(`${opts.seed}:${a.arguments.entry}`) < 0.85 ? 'approve' : 'deny';
        const r = await postJson(`${url}/runs/${run.run_id}/approvals/${a.approval_id}`, {
          decision,
          approver: 'harness',
          note: decision === 'deny' ? 'not today' : null,
        });
        if (r.status === 200 || r.status === 409) decided.add(a.approval_id);
      }
    }
    const budgets = await getJson(`${url}/runs?status=awaiting_budget&limit=500`);
    for (const run of budgets.body?.runs ?? []) {
      const reqs = run.budget_requests as Array<{ request_id: string; status: string }>;
      const pending = reqs.find((b) => b.status === 'pending');
      if (!pending || decided.has(pending.request_id)) continue;
      const decision = unit(`${opts.seed}:${run.session_id}:${reqs.length}`) < 0.9 ? 'grant' : 'deny';
      const r = await postJson(`${url}/runs/${run.run_id}/budget`, { decision, approver: 'harness', request_id: pending.request_id });
      if (r.status === 200 || r.status === 409) decided.add(pending.request_id);
    }
  };

  const perCycle = Math.ceil(opts.runs / Math.max(1, opts.cycles));
  let next = 0;
  const [lifeMin, lifeMax] = opts.lifeMs ?? [300, 2500];
  // With several instances all of them serve throughout; one (in turn) is killed per cycle and restarted.
  if (slots > 1) for (let i = 0; i < slots; i++) await start(i);
  const taskIds: string[] = [];
  if (opts.tasks) {
    for (let t = 0; t < opts.tasks; t++) {
      const id = `crash-task-${t}`;
      const r = await postJson(`${children[0]!.url}/background/tasks`, {
        task_id: id,
        query: `[tick] task ${t}`,
        schedule: { type: 'interval', seconds: 2 },
        overlap_policy: 'allow_parallel',
        session_policy: { mode: 'run' },
      });
      if (r.status !== 200) violations.push(`task ${id}: create answered ${r.status} ${JSON.stringify(r.body)}`);
      taskIds.push(id);
    }
  }
  for (let cycle = 0; cycle < opts.cycles; cycle++) {
    const victim = cycle % slots;
    const child = slots > 1 ? children[victim]! : await start();
    const life = lifeMin + rand() * (lifeMax - lifeMin);
    const deadline = Date.now() + life;
    try {
      await confirm(child.url);
      const fresh: number[] = [];
      for (const j of plans.keys()) if (!submitted(j) && (j < next || fresh.length < perCycle)) fresh.push(j);
      next = Math.max(next, ...fresh.map((j) => j + 1));
      submit(fresh);
      // The child lives until `deadline`, a random instant to kill it at: this pause is the
      // scenario (not a wait for something to happen); meanwhile a person's decisions keep coming.
      while (Date.now() < deadline) {
        await decide(child.url);
        await new Promise((r) => setTimeout(r, Math.min(100, Math.max(0, deadline - Date.now()))));
      }
    } catch (err) {
      log(`cycle ${cycle}: ${String(err)}`); // the child's death interrupts whatever we were doing
    }
    const graceful = !!opts.sigtermEvery && (cycle + 1) % opts.sigtermEvery === 0;
    const exit = await child.kill(graceful ? 'SIGTERM' : 'SIGKILL');
    children[victim] = null;
    collectErrors(child);
    if (graceful) {
      stops++;
      if (exit.code !== 0) violations.push(`cycle ${cycle}: SIGTERM exit ${exit.code ?? exit.signal}:\n${child.stderr().slice(-2000)}`);
    } else {
      kills++;
      if (exit.signal !== 'SIGKILL')
        violations.push(`cycle ${cycle}: child exited by itself (${exit.code ?? exit.signal}) before its kill:\n${child.stderr().slice(-2000)}`);
    }
    log(
      `cycle ${cycle + 1}/${opts.cycles}: ${graceful ? 'SIGTERM' : 'SIGKILL'}${slots > 1 ? ` of instance ${victim}` : ''} after ${Math.round(life)} ms; ${runOf.size}/${opts.runs} runs known`,
    );
    if (slots > 1 && cycle + 1 < opts.cycles) await start(victim);
  }

  // The tasks stop dispatching with the last kill (a long settle would otherwise keep queueing
  // runs faster than a CPU-starved machine can drain them); what they dispatched must come to rest.
  if (taskIds.length > 0) {
    const live = children.find((c) => c) ?? (await start(0));
    for (const id of taskIds) await postJson(`${live.url}/background/tasks/${id}/pause`, {}).catch(() => undefined);
  }
  // The last process (with several instances: all of them) is left alone: it must bring every run to rest.
  for (let i = 0; i < slots; i++) if (!children[i]) await start(i);
  const child = children[0]!;
  const url = child.url;
  const isRest = (r: { status: string }) => ['completed', 'failed', 'blocked', 'cancelled', 'timeout'].includes(r.status);
  try {
    const settleMs = opts.settleTimeoutMs ?? 60_000;
    let views: Json[] = [];
    const atRest = await waitFor(
      async () => {
        await confirm(url);
        const missing = [...plans.keys()].filter((j) => !submitted(j));
        submit(missing);
        await decide(url);
        views = await Promise.all([...runOf.values()].map((id) => getRun(url, id)));
        return runOf.size === opts.runs && views.every(isRest);
      },
      { timeoutMs: settleMs, intervalMs: 100, what: 'every run at rest' },
    ).catch((err: unknown) => String(err));
    if (atRest !== true) {
      const stuck = views
        .filter((v) => !isRest(v))
        .map((v) => ({
          run_id: v.run_id,
          status: v.status,
          step: v.step,
          attempt: v.attempt,
          error: v.error,
          approvals: v.approvals.map(
            (a: { approval_id: string; status: string }) => `${a.approval_id}:${a.status}${decided.has(a.approval_id) ? ' (decided here)' : ''}`,
          ),
          budget_requests: v.budget_requests.map(
            (b: { request_id: string; status: string; key: string; meter: string; shortfall: number }) =>
              `${b.request_id}:${b.status} ${b.key}/${b.meter} -${b.shortfall}${decided.has(b.request_id) ? ' (decided here)' : ''}`,
          ),
        }));
      violations.push(`${atRest} (${opts.runs - runOf.size} jobs without a run): ${JSON.stringify(stuck, null, 1)}`);
    }
    const report = await check();
    if (opts.tasks) report.background = await checkTasks(url);
    report.duration_ms = Date.now() - t0;
    return report;
  } finally {
    for (const c of children) {
      if (!c) continue;
      const exit = await c.kill('SIGTERM');
      collectErrors(c);
      if (exit.code !== 0) violations.push(`final SIGTERM: exit ${exit.code ?? exit.signal}`);
    }
    for (const line of errorsLogged.slice(0, 10)) log(`agentd logged: ${line}`);
    // Kept for a post-mortem when something is wrong.
    if (violations.length === 0) rmSync(dir, { recursive: true, force: true });
    else log(`data dir and ledger kept in ${dir}`);
  }

  /** Pauses every task, lets their runs come to rest, and checks that no occurrence ran twice. */
  async function checkTasks(url: string): Promise<NonNullable<CrashReport['background']>> {
    for (const id of taskIds) await postJson(`${url}/background/tasks/${id}/pause`, {});
    const TERMINAL_BG = new Set(['completed', 'failed', 'cancelled', 'timeout', 'skipped']);
    const all: Array<{ task_id: string; occurrence_id: string | null; status: string }> = [];
    // Until every run is at rest; after settleTimeoutMs, the runs still moving are reported below.
    await waitFor(
      async () => {
        all.length = 0;
        let cursor: string | null = null;
        do {
          const page: JsonReply = await getJson(`${url}/background/runs?limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
          all.push(...(page.body?.runs ?? []));
          cursor = page.body?.next_cursor ?? null;
        } while (cursor);
        return all.every((r) => TERMINAL_BG.has(r.status));
      },
      { timeoutMs: opts.settleTimeoutMs ?? 60_000, intervalMs: 250, what: 'every background run at rest' },
    ).catch(() => undefined);
    const seen = new Map<string, number>();
    for (const r of all) if (r.occurrence_id) seen.set(`${r.task_id}|${r.occurrence_id}`, (seen.get(`${r.task_id}|${r.occurrence_id}`) ?? 0) + 1);
    const doubles = [...seen].filter(([, n]) => n > 1);
    for (const [occ, n] of doubles.slice(0, 20)) violations.push(`occurrence ${occ} dispatched ${n} times`);
    const notAtRest = all.filter((r) => !TERMINAL_BG.has(r.status));
    if (notAtRest.length > 0) violations.push(`${notAtRest.length} background runs not at rest: ${JSON.stringify(notAtRest.slice(0, 5))}`);
    return { tasks: taskIds.length, runs: all.length, not_at_rest: notAtRest.length, double_dispatches: doubles.length };
  }

  async function check(): Promise<CrashReport> {
    const report: CrashReport = {
      seed: opts.seed,
      cycles: opts.cycles,
      runs: opts.runs,
      kills,
      stops,
      starts,
      duration_ms: 0,
      outcomes: {},
      failures: {},
      resumed: {},
      tool_calls: { non_idempotent_executed: 0, non_idempotent_unknown: 0, idempotent_executions: 0 },
      approvals: { approved: 0, denied: 0, approved_executed_once: 0, approved_unknown: 0, approved_abandoned_by_failed_run: 0 },
      budgets: { requests: 0, granted: 0, denied: 0 },
      model_requests: model.requests.length,
      errors_logged: errorsLogged.length,
      violations,
    };
    const lines = readLedger(ledger);
    const started = new Map<string, LedgerLine[]>();
    for (const l of lines) {
      if (l.phase !== 'started') continue;
      started.set(l.idempotency_key, [...(started.get(l.idempotency_key) ?? []), l]);
      if (NON_IDEMPOTENT.has(l.tool)) report.tool_calls.non_idempotent_executed++;
      else report.tool_calls.idempotent_executions++;
    }
    // 1. No non-idempotent call ran twice.
    for (const [key, ls] of started) {
      if (NON_IDEMPOTENT.has(ls[0].tool) && ls.length > 1)
        violations.push(`${ls[0].tool} ${key} ran ${ls.length} times (pids ${ls.map((l) => l.pid).join(', ')})`);
    }
    const toldUnknown = new Set<string>();
    for (const req of model.requests) {
      for (const m of parseRequest(req).toolMessages) if (/unknown/i.test(m.content)) toldUnknown.add(m.tool_call_id);
    }
    const ledgerKeys = new Map<string, { limit: number; granted: number; spent: number; reserved: number }>();
    const grantedByKey = new Map<string, number>();
    const recordedCalls = new Set<string>();
    for (const [j, runId] of runOf) {
      const v = await getRun(url, runId);
      report.outcomes[v.status] = (report.outcomes[v.status] ?? 0) + 1;
      // 2. Every run is at rest: completed, failed with a reason, or waiting for a person.
      if (v.status === 'failed') {
        if (!v.error?.type || !v.termination_reason) violations.push(`${runId} (job${j}) failed without a reason`);
        report.failures[v.error?.type ?? 'none'] = (report.failures[v.error?.type ?? 'none'] ?? 0) + 1;
      } else if (v.status === 'awaiting_approval') {
        if (!v.approvals.some((a: { status: string }) => a.status === 'pending')) violations.push(`${runId} awaits approval with nothing pending`);
      } else if (v.status === 'awaiting_budget') {
        if (!v.budget_requests.some((b: { status: string }) => b.status === 'pending')) violations.push(`${runId} awaits budget with nothing pending`);
      } else if (v.status !== 'completed') {
        violations.push(`${runId} (job${j}) ended ${v.status}`);
      }
      const calls = new Map<string, { tool_name: string; outcome: string | null; state: string }>();
      for (const c of v.tool_calls) {
        calls.set(c.tool_call_id, c);
        recordedCalls.add(`${runId}:${c.tool_call_id}`);
        if (c.outcome === 'unknown') {
          report.tool_calls.non_idempotent_unknown++;
          // The model is told, unless the run died before its next model call.
          if (v.status === 'completed' && !toldUnknown.has(c.tool_call_id))
            violations.push(`${runId}: the model was never told that ${c.tool_call_id} is unknown`);
          if (c.idempotent) violations.push(`${runId}: idempotent call ${c.tool_call_id} recorded unknown (it should have run again)`);
        }
      }
      // 3. No approved call lost; no denied call run.
      for (const a of v.approvals as Array<{ status: string; tool_call_id: string }>) {
        const n = started.get(`${runId}:${a.tool_call_id}`)?.length ?? 0;
        if (a.status === 'denied' || a.status === 'expired') {
          report.approvals.denied++;
          if (n > 0) violations.push(`${runId}: ${a.status} call ${a.tool_call_id} ran ${n} times`);
          continue;
        }
        if (a.status !== 'approved' && a.status !== 'used') continue;
        report.approvals.approved++;
        const outcome = calls.get(a.tool_call_id)?.outcome;
        if (n === 1 && outcome != null && outcome !== 'unknown') report.approvals.approved_executed_once++;
        // Died while running it: recorded unknown, or still `started` in a run that was given up.
        else if (n <= 1 && (outcome === 'unknown' || (n === 1 && outcome == null && v.status === 'failed'))) report.approvals.approved_unknown++;
        // The run ended before it could run the call (budget denied, too many recoveries).
        else if (n === 0 && v.status === 'failed') report.approvals.approved_abandoned_by_failed_run++;
        else violations.push(`${runId}: approved call ${a.tool_call_id} ran ${n} times (outcome ${outcome ?? 'none'}, run ${v.status})`);
      }
      for (const b of v.budget_requests as Array<{ status: string; key: string; meter: string; amount?: number | null }>) {
        report.budgets.requests++;
        if (b.status === 'granted') {
          report.budgets.granted++;
          grantedByKey.set(`${b.key}|${b.meter}`, (grantedByKey.get(`${b.key}|${b.meter}`) ?? 0) + (b.amount ?? 0));
        }
        if (b.status === 'denied') report.budgets.denied++;
      }
      // 4. No budget overspent (and, at rest, no hold left behind).
      const budget = await getJson(`${url}/runs/${runId}/budget`);
      for (const e of budget.body.budgets as Array<{ key: string; meter: string; limit: number; granted: number; spent: number; reserved: number }>) {
        ledgerKeys.set(`${e.key}|${e.meter}`, e);
      }
    }
    for (const [key, e] of ledgerKeys) {
      if (e.spent + e.reserved > e.limit + e.granted)
        violations.push(`budget ${key} overspent: spent ${e.spent} + reserved ${e.reserved} > limit ${e.limit} + granted ${e.granted}`);
      if (e.reserved !== 0) violations.push(`budget ${key}: ${e.reserved} still reserved with every run at rest`);
      // 6. Every grant a person made reached the ledger, once.
      if ((grantedByKey.get(key) ?? 0) !== e.granted)
        violations.push(`budget ${key}: requests granted ${grantedByKey.get(key) ?? 0} but the ledger holds ${e.granted}`);
    }
    // 5. Every real execution of a non-idempotent tool is in its run's record.
    for (const [key, ls] of started) {
      if (NON_IDEMPOTENT.has(ls[0].tool) && !recordedCalls.has(key)) violations.push(`${ls[0].tool} ${key} ran but its run does not record the call`);
    }
    let cursor: string | null = null;
    do {
      const page = await getJson(`${url}/telemetry/events?event_type=run_resumed&limit=1000${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      for (const e of page.body.events as Array<{ metadata: { cause: string } }>)
        report.resumed[e.metadata.cause] = (report.resumed[e.metadata.cause] ?? 0) + 1;
      cursor = page.body.next_cursor;
    } while (cursor);
    report.duration_ms = Date.now() - t0;
    return report;
  }
}
