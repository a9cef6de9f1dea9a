// The cost of tenant filtering (docs/multi-tenant.md) on the real model path: one agentd child with
// two API keys of the same role, a global one and one of tenant `acme`, measured in alternating
// rounds against the same server. POST /run by the tenant key stamps the run, keys its session in
// the tenant's namespace and checks the tenant on every read it makes; GET /runs by the tenant key
// reads the tenant's index instead of every run. Both sides pay for auth alike, so the ratio is
// what tenants add.
import { createHash } from 'node:crypto';
import {
  QUICK,
  closedLoop,
  log,
  mergeLoops,
  ratio,
  realPathConfig,
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
import { WORKLOADS } from './run-real.js';

const ROUND_MS = QUICK ? 1000 : 3000;
const ROUNDS = QUICK ? 2 : 6;
/** Runs each key makes before the GET /runs rounds, so both lists have pages to read. */
const SEEDED = QUICK ? 100 : 500;

const KEYS = { global: 'bench-global-key', tenant: 'bench-acme-key' } as const;
type Side = keyof typeof KEYS;
const sha = (s: string) => createHash('sha256').update(s).digest('hex');
const auth = (side: Side) => ({ authorization: `Bearer ${KEYS[side]}` });

function postRun(child: Child, side: Side, concurrency: number, durationMs: number): Promise<LoopResult> {
  const body = JSON.stringify({ query: WORKLOADS.trivial.query });
  return closedLoop({
    concurrency,
    durationMs,
    send: (agent) => request(`${child.url}/run`, { method: 'POST', body, agent, headers: auth(side) }),
    ok: (r) => r.status === 200 && r.body.includes('event: complete') && r.body.includes('"status":"success"'),
  });
}

function listRuns(child: Child, side: Side, concurrency: number, durationMs: number): Promise<LoopResult> {
  return closedLoop({
    concurrency,
    durationMs,
    send: (agent) => request(`${child.url}/runs?limit=50&order=desc`, { agent, headers: auth(side) }),
    ok: (r) => r.status === 200 && r.body.startsWith('{"runs":[{'),
  });
}

/** Alternating rounds (A B, B A, ...) of `measure` for both sides, merged per side. */
async function alternate(measure: (side: Side) => Promise<LoopResult>): Promise<Record<Side, LoopResult>> {
  const loops: Record<Side, LoopResult[]> = { global: [], tenant: [] };
  for (let i = 0; i < ROUNDS; i++) {
    const order: Side[] = i % 2 === 0 ? ['global', 'tenant'] : ['tenant', 'global'];
    for (const side of order) loops[side].push(await measure(side));
  }
  return { global: mergeLoops(loops.global), tenant: mergeLoops(loops.tenant) };
}

export async function tenantsBench(): Promise<BenchOutput> {
  const dir = tempDir('tenants');
  const fake = await startChild({ mode: 'fake-openai' });
  let agentd: Child | null = null;
  try {
    const config = realPathConfig(fake.url, 'bench', {
      auth: {
        api_keys: [
          { name: 'global-operator', key_sha256: sha(KEYS.global), role: 'operator' },
          { name: 'acme-operator', key_sha256: sha(KEYS.tenant), role: 'operator', tenant: 'acme' },
        ],
      },
    });
    agentd = await startChild({ mode: 'agentd', dataDir: dir, config, model: { kind: 'config' } });
    const child = agentd;
    log('warm-up');
    for (const side of ['global', 'tenant'] as const) await postRun(child, side, 32, QUICK ? 1000 : 5000);
    const rows: Row[] = [];
    let errors = 0;
    for (const c of [1, 32]) {
      log(`POST /run c=${c}: ${ROUNDS} rounds of ${ROUND_MS} ms per key, alternating`);
      const r = await alternate((side) => postRun(child, side, c, ROUND_MS));
      errors += r.global.errors + r.tenant.errors;
      const x = ratio(r.tenant.perSecond, r.global.perSecond);
      rows.push({
        metric: `Runs/s, POST /run by a tenant's key, trivial workload, concurrency ${c}`,
        value: round(r.tenant.perSecond, 1),
        unit: 'runs/s',
        baseline: round(r.global.perSecond, 1),
        baseline_label: 'POST /run by a global key',
        ratio: x,
        target: '>= 0.95x (within 5 %)',
        pass: x !== null && x >= 0.95,
      });
    }
    log(`seeding: ${SEEDED} more runs per key`);
    for (const side of ['global', 'tenant'] as const) {
      const body = JSON.stringify({ query: WORKLOADS.trivial.query });
      await closedLoop({
        concurrency: 16,
        durationMs: 120_000,
        maxCount: SEEDED,
        send: (agent) => request(`${child.url}/run/sync`, { method: 'POST', body, agent, headers: auth(side) }),
        ok: (res) => res.status === 200,
      });
    }
    log(`GET /runs c=8: ${ROUNDS} rounds of ${ROUND_MS} ms per key, alternating`);
    const l = await alternate((side) => listRuns(child, side, 8, ROUND_MS));
    errors += l.global.errors + l.tenant.errors;
    const lx = ratio(l.tenant.perSecond, l.global.perSecond);
    rows.push({
      metric: "Requests/s, GET /runs?limit=50&order=desc by a tenant's key (its own runs), concurrency 8",
      value: round(l.tenant.perSecond, 1),
      unit: 'req/s',
      baseline: round(l.global.perSecond, 1),
      baseline_label: "GET /runs by a global key (every tenant's runs)",
      ratio: lx,
      target: '>= 0.95x (within 5 %)',
      pass: lx !== null && lx >= 0.95,
    });
    rows.push({ metric: 'Failed requests', value: errors, unit: '', target: '0', pass: errors === 0 });
    return {
      title: 'Tenants: the cost of acting in a tenant on POST /run and GET /runs',
      method: [
        'One agentd child as in the run benchmark (`openai-compatible` against the fake OpenAI server over HTTP, LevelDB with fsync), the trivial workload, auth on with two operator keys: a global one and one of tenant `acme`.',
        `POST /run by each key, ${ROUNDS} alternating rounds of ${ROUND_MS / 1000} s at concurrency 1 and 32 (new sessions: the tenant's runs keep their sessions in its namespace).`,
        `GET /runs?limit=50&order=desc by each key after ${SEEDED} more runs per key, ${ROUNDS} alternating rounds at concurrency 8: the tenant key reads its tenant's index, the global key every run.`,
      ],
      rows,
      notes: [],
    };
  } finally {
    await agentd?.stop();
    await fake.stop();
    removeDir(dir);
  }
}
