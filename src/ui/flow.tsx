// Flow page (docs/flow-control.md): the runs waiting for a concurrency key with their place, the
// runs whose model call waits for a provider's rate limit (throttled), and each rate-limited
// provider key's budget in use. Read from the public API: GET /runs (status queued, and running
// runs with throttled_until), GET /runs/{id} for each queued run's place, GET /metrics/prometheus
// for the bucket levels. Polled every 2 s.
import { useState } from 'preact/hooks';
import { api } from './api.js';
import { link, usePoll } from './router.js';

/** Queued runs whose place is read one by one (the rest are counted). */
const PLACES_SHOWN = 50;

interface Bucket {
  key: string;
  requests: number | null;
  tokens: number | null;
  paused: boolean;
}

/** The rate limiter's gauges in the Prometheus text: one row per provider key. */
function bucketsOf(text: string): Bucket[] {
  const byKey = new Map<string, Bucket>();
  const row = (key: string) => byKey.get(key) ?? byKey.set(key, { key, requests: null, tokens: null, paused: false }).get(key)!;
  for (const line of text.split('\n')) {
    const m = /^(agentd_model_rate_bucket_level|agentd_model_rate_paused)\{([^}]*)\}\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries([...m[2]!.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]!.replace(/\\(.)/g, '$1')]));
    const value = Number(m[3]);
    if (!labels.key) continue;
    const b = row(labels.key);
    if (m[1] === 'agentd_model_rate_paused') b.paused = value === 1;
    else if (labels.unit === 'requests') b.requests = value;
    else if (labels.unit === 'tokens') b.tokens = value;
  }
  return [...byKey.values()].sort((a, b) => a.key.localeCompare(b.key));
}

const runLink = (id: string) => (
  <a href={`/ui/runs/${id}`} onClick={link} class="mono">
    {id}
  </a>
);

export function FlowPage() {
  const [queued, setQueued] = useState<{ total: number; runs: any[] } | null>(null);
  const [throttled, setThrottled] = useState<any[]>([]);
  const [buckets, setBuckets] = useState<Bucket[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  usePoll(async () => {
    try {
      const list = await api('/runs?status=queued&order=asc&limit=200');
      const views = await Promise.all((list.runs as any[]).slice(0, PLACES_SHOWN).map((r) => api(`/runs/${r.run_id}`).catch(() => r)));
      setQueued({ total: list.total ?? list.runs.length, runs: views });
      const running = await api('/runs?status=running&limit=200');
      setThrottled((running.runs as any[]).filter((r) => r.throttled_until && Date.parse(r.throttled_until) > Date.now()));
      setError(null);
    } catch (e) {
      setError(String(e));
    }
    // The gauges need the metrics route (a key without it sees the runs only).
    api<string>('/metrics/prometheus').then(
      (text) => setBuckets(bucketsOf(String(text))),
      () => setBuckets(null),
    );
  }, 2000);
  return (
    <>
      <h2>Flow control</h2>
      {error && <p class="error">{error}</p>}
      <div class="card" id="flow-queued">
        <h3>
          Queued for a concurrency key <span class="muted count">{queued ? queued.total : '…'}</span>
        </h3>
        {queued && queued.runs.length === 0 ? (
          <p class="muted empty">No run waits for a concurrency key.</p>
        ) : (
          <table class="flow-queue">
            <thead>
              <tr>
                <th>KEY</th>
                <th>POSITION</th>
                <th>PRIORITY</th>
                <th>RUN</th>
                <th>QUEUED SINCE</th>
              </tr>
            </thead>
            <tbody>
              {(queued?.runs ?? []).map((r) => (
                <tr data-run={r.run_id}>
                  <td class="mono key">{r.queue?.key ?? '–'}</td>
                  <td class="position">{r.queue?.position ?? '–'}</td>
                  <td class="priority">{r.priority ?? 0}</td>
                  <td>{runLink(r.run_id)}</td>
                  <td>{new Date(r.created_at).toLocaleString()}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </div>
      <div class="card" id="flow-throttled">
        <h3>Throttled (waiting for a provider's rate limit)</h3>
        {throttled.length === 0 ? (
          <p class="muted empty">No model call waits for a rate limit.</p>
        ) : (
          <table class="flow-throttled">
            <tbody>
              {throttled.map((r) => (
                <tr data-run={r.run_id}>
                  <td>{runLink(r.run_id)}</td>
                  <td class="until">until {new Date(r.throttled_until).toLocaleTimeString()}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </div>
      <div class="card" id="flow-buckets">
        <h3>Model rate limits: budget in use</h3>
        {buckets === null ? (
          <p class="muted">The bucket levels need access to GET /metrics/prometheus.</p>
        ) : buckets.length === 0 ? (
          <p class="muted empty">No provider key has a rate limit in use.</p>
        ) : (
          <table class="flow-buckets">
            <thead>
              <tr>
                <th>PROVIDER KEY</th>
                <th>REQUESTS</th>
                <th>TOKENS</th>
                <th>STATE</th>
              </tr>
            </thead>
            <tbody>
              {buckets.map((b) => (
                <tr data-key={b.key}>
                  <td class="mono">{b.key}</td>
                  <td class="requests">{b.requests === null ? '–' : b.requests.toFixed(1)}</td>
                  <td class="tokens">{b.tokens === null ? '–' : Math.round(b.tokens)}</td>
                  <td class="state">{b.paused ? 'paused (429 Retry-After)' : 'open'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </div>
    </>
  );
}
