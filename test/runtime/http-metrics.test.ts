// HttpRequestMetrics writes the two per-request HTTP families itself (plain numbers on the request
// path); what a scrape reads must stay exactly what prom-client's own Counter and Histogram gave.
import { Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { HttpRequestMetrics } from '../../src/telemetry/http-metrics.js';

const BOUNDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const NAMES = { requests: 'x_http_requests_total', requestsHelp: 'requests', seconds: 'x_http_seconds', secondsHelp: 'seconds' };
const OBSERVATIONS: Array<[string, string, number, number]> = [
  ['GET', '/health', 200, 0.0004],
  ['GET', '/health', 200, 0.005], // exactly on a bound: counted in that bucket
  ['GET', '/health', 200, 0.7],
  ['POST', '/run', 200, 12.5],
  ['POST', '/run', 422, 0.02],
  ['GET', 'unmatched', 404, 75], // above the last bound: only in +Inf
  ['GET', '/health', 503, 0],
];

describe('HttpRequestMetrics', () => {
  it("scrapes to the same Prometheus text and JSON as prom-client's Counter and Histogram", async () => {
    const reference = new Registry();
    const counter = new Counter({ name: NAMES.requests, help: NAMES.requestsHelp, labelNames: ['method', 'route', 'status'], registers: [reference] });
    const histogram = new Histogram({
      name: NAMES.seconds,
      help: NAMES.secondsHelp,
      labelNames: ['method', 'route', 'status'],
      buckets: BOUNDS,
      registers: [reference],
    });
    const ours = new Registry();
    const http = new HttpRequestMetrics(ours, NAMES, BOUNDS);
    for (const [method, route, status, seconds] of OBSERVATIONS) {
      const labels = { method, route, status: String(status) };
      counter.inc(labels);
      histogram.observe(labels, seconds);
      http.observe(method, route, status, seconds);
    }
    expect(await ours.metrics()).toBe(await reference.metrics());
    // prom-client's JSON carries `exemplar: null` on histogram buckets (exemplars are off); the rest must match.
    const withoutExemplars = (json: unknown): unknown => JSON.parse(JSON.stringify(json, (k, v: unknown) => (k === 'exemplar' ? undefined : v)));
    expect(withoutExemplars(await ours.getMetricsAsJSON())).toEqual(withoutExemplars(await reference.getMetricsAsJSON()));
    // A second scrape reads the same (nothing is reset by reading).
    expect(await ours.metrics()).toBe(await reference.metrics());
  });

  it('writes no series before the first request, like prom-client', async () => {
    const reference = new Registry();
    new Counter({ name: NAMES.requests, help: NAMES.requestsHelp, labelNames: ['method', 'route', 'status'], registers: [reference] });
    new Histogram({ name: NAMES.seconds, help: NAMES.secondsHelp, labelNames: ['method', 'route', 'status'], buckets: BOUNDS, registers: [reference] });
    const ours = new Registry();
    new HttpRequestMetrics(ours, NAMES, BOUNDS);
    expect(await ours.metrics()).toBe(await reference.metrics());
  });
});
