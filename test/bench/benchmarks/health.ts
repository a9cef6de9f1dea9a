// GET /health throughput: agentd against a bare Fastify route answering the same JSON.
import autocannon from 'autocannon';
import { benchConfig, ratio, removeDir, round, scaled, startChild, tempDir, type BenchOutput } from '../lib.js';

const CONNECTIONS = 50;
const ROUND_S = scaled(20) / 10;
const ROUNDS = 3; // per side, alternating, so background load hits both sides alike

async function cannon(url: string, duration: number) {
  return autocannon({ url: `${url}/health`, connections: CONNECTIONS, duration });
}

export async function healthBench(): Promise<BenchOutput> {
  const dataDir = tempDir('health');
  const agentd = await startChild({ mode: 'agentd', dataDir, config: benchConfig(), model: { kind: 'instant', chunks: ['ok'] } });
  const bare = await startChild({ mode: 'bare-health' });
  try {
    await cannon(agentd.url, 1); // warm-up (JIT, connection setup)
    await cannon(bare.url, 1);
    const a: autocannon.Result[] = [];
    const b: autocannon.Result[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      a.push(await cannon(agentd.url, ROUND_S));
      b.push(await cannon(bare.url, ROUND_S));
    }
    const rps = (rs: autocannon.Result[]) => rs.reduce((s, r) => s + r['2xx'], 0) / rs.reduce((s, r) => s + r.duration, 0);
    const lat = (rs: autocannon.Result[], k: 'p50' | 'p99') => rs.reduce((s, r) => s + r.latency[k], 0) / rs.length;
    const errs = (rs: autocannon.Result[]) => rs.reduce((s, r) => s + r.errors + r.non2xx, 0);
    const agentdRps = rps(a);
    const bareRps = rps(b);
    const r = ratio(agentdRps, bareRps);
    return {
      title: `GET /health throughput, autocannon ${CONNECTIONS} connections, ${ROUNDS} x ${ROUND_S} s per side`,
      method: [
        'Baseline: a bare Fastify 5 app (no plugins, no schema) whose GET /health returns the same JSON object, in its own process.',
        `Both measured in alternating rounds (agentd, bare, agentd, bare) after a 1 s warm-up each; autocannon runs in the parent process.`,
      ],
      rows: [
        {
          metric: 'Requests/s',
          value: round(agentdRps, 0),
          unit: 'req/s',
          baseline: round(bareRps, 0),
          ratio: r,
          target: '>= 80 % of bare',
          pass: r !== null && r >= 0.8,
        },
        { metric: 'Latency p50', value: round(lat(a, 'p50'), 2), unit: 'ms', baseline: round(lat(b, 'p50'), 2), ratio: ratio(lat(a, 'p50'), lat(b, 'p50')) },
        { metric: 'Latency p99', value: round(lat(a, 'p99'), 2), unit: 'ms', baseline: round(lat(b, 'p99'), 2), ratio: ratio(lat(a, 'p99'), lat(b, 'p99')) },
        { metric: 'Errors + non-2xx', value: errs(a), unit: '', baseline: errs(b), target: '0', pass: errs(a) === 0 },
      ],
      notes: [],
    };
  } finally {
    await agentd.stop();
    await bare.stop();
    removeDir(dataDir);
  }
}
