// How soon a saturated concurrency key admits its next run (docs/flow-control.md): the gaps
// between a run's end and the next run's admission and start, from the server's own stored
// timestamps; on one LevelDB instance (the flow benchmark's target row) and, as a diagnostic, on
// two instances on one PostgreSQL database, where the commit that frees a slot hands it on.
import { randomBytes } from 'node:crypto';
import { QUICK, log, percentile, realPathConfig, removeDir, request, round, startChild, tempDir, type Child, type Row } from '../lib.js';
import { WORKLOADS } from './run-real.js';
import { ADMIN_URL, admin } from './flow-bucket.js';

export const SHARED_QUEUED_RUNS = QUICK ? 40 : 200;

/**
 * On a key of limit 1, per run after the first: from the previous run's end (the later of its last
 * event and its record's updated_at) to when the key admitted this one (`admitted`: its
 * user_message's `metadata.queue.admitted_at`, the moment the freed slot became its own) and to
 * its user_message (`started`: its run record exists and its actor is on its way to the model).
 * All from the server's own stored timestamps (ms resolution), none from client timing.
 */
export async function admissionGaps(children: Child[], runs: number): Promise<{ admitted: number[]; started: number[] }> {
  const key = { key: 'bench:saturated', limit: 1 };
  const sessions: string[] = [];
  const all = [];
  // Several instances (one store): the runs go to them in turn; any of them reads every run.
  const child = children[0]!;
  for (let i = 0; i < runs; i++) {
    const session_id = `flow-bench-${process.pid}-${i}`;
    sessions.push(session_id);
    const to = children[i % children.length]!;
    all.push(request(`${to.url}/run/sync`, { method: 'POST', body: JSON.stringify({ query: WORKLOADS.trivial.query, session_id, concurrency: key }) }));
  }
  await Promise.all(all);
  const spans: Array<{ admitted: number | null; start: number; end: number }> = [];
  for (const s of sessions) {
    const runs = JSON.parse((await request(`${child.url}/runs?session_id=${s}`)).body).runs as Array<{ run_id: string; updated_at: string }>;
    const ev = JSON.parse((await request(`${child.url}/telemetry/events?session_id=${s}&limit=100`)).body).events as Array<{
      event_type: string;
      timestamp: string;
      metadata?: { queue?: { admitted_at?: string } } | null;
    }>;
    const first = ev.find((e) => e.event_type === 'user_message')!;
    const admittedAt = first.metadata?.queue?.admitted_at;
    const start = Date.parse(first.timestamp);
    const end = Math.max(...ev.map((e) => Date.parse(e.timestamp)), Date.parse(runs[0]!.updated_at));
    spans.push({ admitted: admittedAt ? Date.parse(admittedAt) : null, start, end });
  }
  spans.sort((a, b) => a.start - b.start);
  const admitted: number[] = [];
  const started: number[] = [];
  for (let i = 1; i < spans.length; i++) {
    const prev = spans[i - 1]!;
    const cur = spans[i]!;
    started.push(Math.max(0, cur.start - prev.end));
    // A run that found the key free (the first, or one arriving after a gap) was never queued.
    if (cur.admitted !== null) admitted.push(Math.max(0, cur.admitted - prev.end));
  }
  return { admitted, started };
}

/**
 * Diagnostic rows: a saturated key (limit 1) on two instances on one PostgreSQL database, the runs
 * posted to both in turn; from a run's end to the next run's admission and start, as the LevelDB
 * rows measure them (stored timestamps, ms resolution).
 */
export async function sharedKeyAdmission(fakeUrl: string): Promise<Row[]> {
  const db = `agentd_bench_${randomBytes(5).toString('hex')}`;
  await admin(`CREATE DATABASE ${db}`);
  const u = new URL(ADMIN_URL);
  u.pathname = `/${db}`;
  const config = realPathConfig(fakeUrl, 'bench', { store: { kind: 'postgres', url: u.toString() }, server: { request_timeout_seconds: 600 } });
  const dirs = [tempDir('flow-order-a'), tempDir('flow-order-b')];
  const children: Child[] = [];
  try {
    for (const d of dirs) children.push(await startChild({ mode: 'agentd', dataDir: d, config, model: { kind: 'config' } }));
    log(`admission across instances: ${SHARED_QUEUED_RUNS} runs on a key of limit 1, two instances on PostgreSQL`);
    const gaps = await admissionGaps(children, SHARED_QUEUED_RUNS);
    const row = (what: string, values: number[]): Row => ({
      metric: `Saturated key (limit 1) on 2 instances on PostgreSQL: from a run's end to ${what}, p99 (p50 in the baseline column)`,
      value: round(percentile(values, 99), 1),
      unit: 'ms',
      baseline: round(percentile(values, 50), 1),
      baseline_label: 'p50',
      target: null,
      pass: null,
    });
    return [row('the key admitting the next queued run (on either instance)', gaps.admitted), row("the next queued run's start", gaps.started)];
  } finally {
    await Promise.all(children.map((c) => c.stop()));
    for (const d of dirs) removeDir(d);
    await admin(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
  }
}
