// The flow benchmark's interleaved key-overhead measurement (test/bench/benchmarks/flow-overhead.ts):
// its ABBA schedule, its guard (a phase counts only its own route's runs) and its statistics.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { interleaved, median, medianInterval } from './benchmarks/flow-overhead.js';

describe('median and its bootstrap interval', () => {
  it('is the middle value, and the interval holds it and is the same on every call', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 2, 3])).toBe(2.5);
    const values = Array.from({ length: 41 }, (_, i) => 0.9 + (i % 7) * 0.03);
    const [lo, hi] = medianInterval(values);
    expect(lo).toBeLessThanOrEqual(median(values));
    expect(hi).toBeGreaterThanOrEqual(median(values));
    expect(medianInterval(values)).toEqual([lo, hi]);
    expect(medianInterval(Array(20).fill(1))).toEqual([1, 1]);
  });
});

describe.runIf(process.platform === 'linux')('interleaved phases', () => {
  // Requests by route (the header the child's BENCH_FLOW_BURN_US reads).
  const seen: string[] = [];
  const body = { plain: '{"r":"plain"}', keyed: '{"r":"keyed"}' };
  let server: http.Server;
  let url = '';
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      const route = String(req.headers['x-bench-route']);
      seen.push(route);
      req.resume();
      req.on('end', () => setTimeout(() => res.end(JSON.parse(body[route as 'plain' | 'keyed']).r), 2));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('runs ABBA blocks of phases, each sending one route (body and header)', async () => {
    const m = await interleaved({
      url,
      pid: process.pid,
      concurrency: 4,
      blocks: 2,
      guardMs: 5,
      measureMs: 60,
      body,
      ok: (status, body) => status === 200 && (body === 'plain' || body === 'keyed'),
    });
    expect(m.errors).toBe(0);
    expect(m.phases.map((p) => p.route)).toEqual(['plain', 'keyed', 'keyed', 'plain', 'keyed', 'plain', 'plain', 'keyed']);
    expect(m.blocks).toHaveLength(2);
    expect(m.phases.every((p) => p.seconds > 0 && p.cpuMs >= 0)).toBe(true);
    expect(seen.filter((r) => r === 'plain').length).toBeGreaterThan(0);
    expect(seen.filter((r) => r === 'keyed').length).toBeGreaterThan(0);
  });
});
