// Bucket accuracy of the model-provider rate limit across instances (docs/flow-control.md): two
// agentd instances on one PostgreSQL database, the served model limited to RATE requests per
// minute, both driven past it by closed loops of trivial runs (one model call each); the rate of
// runs completed over the window, both instances together, against the configured rate.
// BENCH_FLOW_BUCKET_SECONDS sets the window (default 60 s; 10 s with --quick, a sanity check).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { QUICK, closedLoop, log, realPathConfig, removeDir, request, round, startChild, tempDir, type Child, type Row } from '../lib.js';
import { WORKLOADS } from './run-real.js';

export const ADMIN_URL = process.env.AGENTD_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const RATE_PER_MINUTE = 600;
const PER_INSTANCE = 8;
const WINDOW_S = Number(process.env.BENCH_FLOW_BUCKET_SECONDS ?? (QUICK ? 10 : 60));

export async function admin(sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: ADMIN_URL });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

const okRun = (r: { status: number; body: string }) => r.status === 200 && r.body.includes('"status":"success"');

function drive(children: Child[], durationMs: number) {
  const body = JSON.stringify({ query: WORKLOADS.trivial.query });
  return Promise.all(
    children.map((c) =>
      closedLoop({ concurrency: PER_INSTANCE, durationMs, send: (agent) => request(`${c.url}/run/sync`, { method: 'POST', body, agent }), ok: okRun }),
    ),
  );
}

/** The bench row: admitted calls per minute over the window, against RATE_PER_MINUTE (target within 2 %). */
export async function bucketAccuracy(fakeUrl: string): Promise<Row[]> {
  const db = `agentd_bench_${randomBytes(5).toString('hex')}`;
  await admin(`CREATE DATABASE ${db}`);
  const u = new URL(ADMIN_URL);
  u.pathname = `/${db}`;
  const config = realPathConfig(fakeUrl, 'bench', {
    store: { kind: 'postgres', url: u.toString() },
    agent: { model: { provider: 'openai-compatible', base_url: fakeUrl, model: 'bench', rate_limit: { requests_per_minute: RATE_PER_MINUTE } } },
    server: { request_timeout_seconds: 600 },
  });
  const dirs = [tempDir('flow-bucket-a'), tempDir('flow-bucket-b')];
  const children: Child[] = [];
  try {
    for (const d of dirs) children.push(await startChild({ mode: 'agentd', dataDir: d, config, model: { kind: 'config' } }));
    log(`bucket accuracy: 2 instances on PostgreSQL at ${RATE_PER_MINUTE}/min, warm-up 3 s, window ${WINDOW_S} s`);
    await drive(children, 3000);
    const loops = await drive(children, WINDOW_S * 1000);
    const count = loops.reduce((n, l) => n + l.count, 0);
    const seconds = Math.max(...loops.map((l) => l.seconds));
    const perMinute = (count / seconds) * 60;
    const error = Math.abs(perMinute - RATE_PER_MINUTE) / RATE_PER_MINUTE;
    return [
      {
        metric: `Model rate limit ${RATE_PER_MINUTE}/min shared by 2 instances on PostgreSQL: calls admitted per minute over ${WINDOW_S} s (both saturated, c=${PER_INSTANCE} each)`,
        value: round(perMinute, 1),
        unit: 'calls/min',
        baseline: RATE_PER_MINUTE,
        baseline_label: 'configured',
        ratio: perMinute / RATE_PER_MINUTE,
        target: 'within 2 %',
        pass: error <= 0.02,
      },
    ];
  } finally {
    await Promise.all(children.map((c) => c.stop()));
    for (const d of dirs) removeDir(d);
    await admin(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
  }
}
