// `npm run bench -- profile-key [--quick]`: what a concurrency key that never queues costs one
// POST /run, by counts rather than time (docs/flow-control.md; the flow benchmark's overhead rows
// time it, which a loaded host blurs). One fresh agentd child per route (plain, then keyed: the
// flow benchmark's bodies), each warmed up, then per run: the store's commits, ops and bytes by
// record kind, the promises and other async resources made (node:async_hooks), and the bytes
// JavaScript allocated by function (V8's sampling heap profiler, collected objects included).
// Prints the keyed-minus-plain differences; writes no results. BENCH_CHILD_SCRIPT measures another
// build (an A/B against a copy of child-server.mjs next to that build's dist/).
// BENCH_PROFILE_STORE=postgres: the same on PostgreSQL (127.0.0.1:5432, AGENTD_TEST_PG_URL; a
// database of its own per route, created and dropped here), with the statements agentd sent per
// run too (`pg …`, by the start of their text; `pg statements`: all of them).
import { randomBytes } from 'node:crypto';
import { QUICK, closedLoop, log, realPathConfig, removeDir, request, startChild, tempDir } from './lib.js';
import { WORKLOADS } from './benchmarks/run-real.js';
import { admin, dbUrl } from './benchmarks/postgres.js';

const POSTGRES = process.env.BENCH_PROFILE_STORE === 'postgres';

type Route = 'plain' | 'keyed';
type Tally = Record<string, number>;

interface StoreStats {
  commits: number;
  rounds: number;
  reads: number;
  ops: number;
  opBytes: number;
  events: number;
  eventBytes: number;
  byKind: Record<string, { ops: number; bytes: number }>;
}

interface RouteCounts {
  perRun: Record<string, Tally>;
  allocBy: Tally;
}

const WARMUP = QUICK ? 500 : 1500;
const COUNTED = QUICK ? 150 : 400;
const ALLOC_RUNS = QUICK ? 300 : 1000;

const minus = (a: Tally, b: Tally, n: number): Tally => Object.fromEntries(Object.keys(a).map((k) => [k, (a[k]! - (b[k] ?? 0)) / n]));

async function countRoute(fakeUrl: string, route: Route): Promise<RouteCounts> {
  const dir = tempDir('profile-key');
  const query = WORKLOADS.trivial.query;
  const body = JSON.stringify(route === 'keyed' ? { query, concurrency: { key: 'bench:unlimited', limit: 10_000 } } : { query });
  const db = POSTGRES ? `agentd_bench_profile_key_${randomBytes(4).toString('hex')}` : null;
  if (db) await admin(`CREATE DATABASE ${db}`);
  const extra = db ? { store: { kind: 'postgres', url: dbUrl(db) } } : {};
  const agentd = await startChild({ mode: 'agentd', dataDir: dir, config: realPathConfig(fakeUrl, 'bench', extra), model: { kind: 'config' } });
  try {
    const loop = (c: number, n: number) =>
      closedLoop({
        concurrency: c,
        durationMs: 600_000,
        maxCount: n,
        send: (agent) => request(`${agentd.url}/run`, { method: 'POST', body, agent }),
        ok: (x) => x.status === 200 && x.body.includes('"status":"success"'),
      });
    log(`${route}: warm-up, ${WARMUP} runs at concurrency 32`);
    await loop(32, WARMUP);
    const perRun: Record<string, Tally> = {};
    for (const c of [1, 32]) {
      await agentd.call({ cmd: 'countBytes', on: true });
      const s0 = await agentd.call<StoreStats>({ cmd: 'storeStats' });
      const q0 = db ? await agentd.call<Tally>({ cmd: 'pgCount', on: true }) : {};
      const a0 = await agentd.call<Tally>({ cmd: 'asyncCount', on: true });
      const r = await loop(c, COUNTED);
      const a1 = await agentd.call<Tally>({ cmd: 'asyncCount', on: false });
      const q1 = db ? await agentd.call<Tally>({ cmd: 'pgCount', on: false }) : {};
      const s1 = await agentd.call<StoreStats>({ cmd: 'storeStats' });
      await agentd.call({ cmd: 'countBytes', on: false });
      const n = r.count + r.errors;
      if (r.errors) log(`  ${r.errors} failed: ${r.firstError}`);
      const pick = (s: StoreStats): Tally => {
        const t: Tally = { commits: s.commits, rounds: s.rounds, reads: s.reads, ops: s.ops, op_bytes: s.opBytes, events: s.events, event_bytes: s.eventBytes };
        for (const [k, v] of Object.entries(s.byKind)) Object.assign(t, { [`${k} ops`]: v.ops, [`${k} bytes`]: v.bytes });
        return t;
      };
      const statements = minus(q1, q0, n);
      perRun[`c=${c}`] = {
        ...minus(pick(s1), pick(s0), n),
        ...Object.fromEntries(Object.entries(minus(a1, a0, n)).map(([k, v]) => [`async ${k}`, v])),
        ...Object.fromEntries(Object.entries(statements).map(([k, v]) => [`pg ${k}`, v])),
        ...(db ? { 'pg statements': Object.values(statements).reduce((a, b) => a + b, 0) } : {}),
      };
    }
    log(`${route}: allocations over ${ALLOC_RUNS} runs at concurrency 32`);
    await agentd.call({ cmd: 'heapSampleStart', interval: 512 });
    const r = await loop(32, ALLOC_RUNS);
    const bytes = await agentd.call<Tally>({ cmd: 'heapSampleStop' });
    const n = r.count + r.errors;
    return { perRun, allocBy: Object.fromEntries(Object.entries(bytes).map(([k, v]) => [k, v / n])) };
  } finally {
    await agentd.stop();
    removeDir(dir);
    if (db) await admin(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
  }
}

const GROUPS: Array<[string, (where: string) => boolean]> = [
  ['agentd (src/, machines/)', (w) => / (src|machines)\//.test(w)],
  ['zod', (w) => w.includes('zod/')],
  ['XState', (w) => w.includes('xstate/')],
  ['Fastify', (w) => w.includes('fastify') || w.includes('find-my-way')],
];
const groupOf = (where: string) => GROUPS.find(([, f]) => f(where))?.[0] ?? 'other (Node, V8 builtins, other dependencies)';

export async function profileKeyCost(): Promise<void> {
  const fake = await startChild({ mode: 'fake-openai' });
  try {
    const plain = await countRoute(fake.url, 'plain');
    const keyed = await countRoute(fake.url, 'keyed');
    const out = (line: string) => process.stdout.write(`${line}\n`);
    for (const c of Object.keys(plain.perRun)) {
      out(`per run at ${c}: plain, keyed, keyed - plain`);
      const keys = [...new Set([...Object.keys(plain.perRun[c]!), ...Object.keys(keyed.perRun[c]!)])].sort();
      for (const k of keys) {
        const p = plain.perRun[c]![k] ?? 0;
        const q = keyed.perRun[c]![k] ?? 0;
        if (p !== 0 || q !== 0) out(`  ${k}: ${p.toFixed(2)}  ${q.toFixed(2)}  ${(q - p >= 0 ? '+' : '') + (q - p).toFixed(2)}`);
      }
    }
    const total = (t: Tally) => Object.values(t).reduce((s, v) => s + v, 0);
    out(`JavaScript allocated per run (bytes; sampled every 512 B): plain ${total(plain.allocBy).toFixed(0)}, keyed ${total(keyed.allocBy).toFixed(0)}`);
    const byGroup = (t: Tally) => Object.entries(t).reduce<Tally>((g, [k, v]) => ({ ...g, [groupOf(k)]: (g[groupOf(k)] ?? 0) + v }), {});
    const gp = byGroup(plain.allocBy);
    const gk = byGroup(keyed.allocBy);
    for (const g of new Set([...Object.keys(gp), ...Object.keys(gk)])) out(`  ${g}: keyed - plain ${((gk[g] ?? 0) - (gp[g] ?? 0)).toFixed(0)} B`);
    out('  largest differences by function (inlining moves bytes between callers and callees: read the groups first)');
    const fns = [...new Set([...Object.keys(plain.allocBy), ...Object.keys(keyed.allocBy)])]
      .map((k) => [k, (keyed.allocBy[k] ?? 0) - (plain.allocBy[k] ?? 0)] as const)
      .sort((a, b) => Math.abs(b[1]) - Math.abs(a[1]))
      .slice(0, 15);
    for (const [k, d] of fns) out(`    ${d >= 0 ? '+' : ''}${d.toFixed(0)} B  ${k}`);
  } finally {
    await fake.stop();
  }
}
