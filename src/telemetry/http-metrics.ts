// The per-request HTTP metrics (agentd_http_requests_total and agentd_http_request_duration_seconds).
// They are updated on every request's path, where prom-client's labelled children cost ~0.7 µs a
// request (each observe/inc re-validates and re-hashes its labels object): a measurable share of
// a cheap route such as GET /health. Here a request adds to plain numbers of its label
// set's record, and the two families are written out in prom-client's own format only when the
// registry is scraped, through its documented custom-metric interface (an object with name, help,
// type and get(), passed to Registry.registerMetric).
import type { Registry } from 'prom-client';

interface Series {
  labels: { method: string; route: string; status: string };
  count: number;
  sum: number;
  /** Observations per bucket (not cumulative), in the order of the upper bounds. */
  buckets: Float64Array;
}

interface MetricValue {
  labels: Record<string, string | number>;
  /** A histogram's series labels, which the text format writes after `le` (as prom-client does). */
  sharedLabels?: Record<string, string>;
  value: number;
  metricName?: string;
}

type Collected = { name: string; help: string; type: string; values: MetricValue[]; aggregator: 'sum' };

/** The shape prom-client's Registry reads from every registered metric. */
interface CollectedMetric {
  name: string;
  help: string;
  type: 'counter' | 'histogram';
  aggregator: 'sum';
  /** For the text format (Registry.metrics). */
  getForPromString(): Promise<Collected>;
  /** For JSON (Registry.getMetricsAsJSON): shared labels merged into labels. */
  get(): Promise<Collected>;
}

export class HttpRequestMetrics {
  /** By `method route status`: route patterns, not URLs, so the set stays bounded. */
  private readonly series = new Map<string, Series>();

  constructor(
    registry: Registry,
    private readonly names: { requests: string; seconds: string; requestsHelp: string; secondsHelp: string },
    private readonly upperBounds: readonly number[],
  ) {
    registry.registerMetric(this.metric(names.requests, names.requestsHelp, 'counter', () => this.counterValues()) as never);
    registry.registerMetric(this.metric(names.seconds, names.secondsHelp, 'histogram', () => this.histogramValues()) as never);
  }

  observe(method: string, route: string, status: number, seconds: number): void {
    const key = `${method} ${route} ${status}`;
    let s = this.series.get(key);
    if (!s) {
      s = { labels: { method, route, status: String(status) }, count: 0, sum: 0, buckets: new Float64Array(this.upperBounds.length) };
      this.series.set(key, s);
    }
    s.count += 1;
    s.sum += seconds;
    // Above the last bound: counted in +Inf (count) only, as prom-client does.
    for (let i = 0; i < this.upperBounds.length; i++) {
      if (seconds <= this.upperBounds[i]) {
        s.buckets[i] += 1;
        break;
      }
    }
  }

  private metric(name: string, help: string, type: 'counter' | 'histogram', values: () => MetricValue[]): CollectedMetric {
    const collect = (): Collected => ({ name, help, type, values: values(), aggregator: 'sum' });
    return {
      name,
      help,
      type,
      aggregator: 'sum',
      getForPromString: async () => collect(),
      get: async () => {
        const c = collect();
        c.values = c.values.map(({ sharedLabels, ...v }) => (sharedLabels ? { ...v, labels: { ...v.labels, ...sharedLabels } } : v));
        return c;
      },
    };
  }

  private counterValues(): MetricValue[] {
    return [...this.series.values()].map((s) => ({ labels: { ...s.labels }, value: s.count }));
  }

  private histogramValues(): MetricValue[] {
    const out: MetricValue[] = [];
    const bucket = `${this.names.seconds}_bucket`;
    for (const s of this.series.values()) {
      let acc = 0;
      for (let i = 0; i < this.upperBounds.length; i++) {
        acc += s.buckets[i];
        out.push({ labels: { le: this.upperBounds[i] }, sharedLabels: s.labels, value: acc, metricName: bucket });
      }
      out.push({ labels: { le: '+Inf' }, sharedLabels: s.labels, value: s.count, metricName: bucket });
      out.push({ labels: {}, sharedLabels: s.labels, value: s.sum, metricName: `${this.names.seconds}_sum` });
      out.push({ labels: {}, sharedLabels: s.labels, value: s.count, metricName: `${this.names.seconds}_count` });
    }
    return out;
  }
}
