// Runs: the live list (polled) with filters, and starting a run (POST /run, streamed).
import { useState } from 'preact/hooks';
import { api, stream, type Access } from './api.js';
import { link, navigate, usePoll } from './router.js';

export const STATUSES = ['running', 'awaiting_approval', 'awaiting_budget', 'interrupted', 'completed', 'blocked', 'failed', 'cancelled', 'timeout'];
export const TERMINAL = new Set(['completed', 'blocked', 'failed', 'cancelled', 'timeout']);

/** Live answers of runs started from this tab: run id -> text so far (deltas are never stored). */
export const liveAnswers = new Map<string, string>();

export function Status({ s }: { s: string }) {
  return <span class={`status s-${s}`}>{s}</span>;
}

export function fmtTime(iso: string | null | undefined): string {
  return iso ? new Date(iso).toLocaleString() : '–';
}

function StartRun({ onChange }: { onChange: () => void }) {
  const [query, setQuery] = useState('');
  const [sessionId, setSessionId] = useState('');
  const [answer, setAnswer] = useState('');
  const [runId, setRunId] = useState<string | null>(null);
  const [state, setState] = useState<string>('');
  const [busy, setBusy] = useState(false);
  const start = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setAnswer('');
    setRunId(null);
    setState('starting');
    let id: string | null = null;
    try {
      await stream('/run', { method: 'POST', body: { query, ...(sessionId.trim() ? { session_id: sessionId.trim() } : {}) } }, (f) => {
        if (f.event === 'session') {
          id = f.data.run_id;
          setRunId(id);
          setState('running');
          onChange();
        } else if (f.event === 'delta' && id) {
          const text = (liveAnswers.get(id) ?? '') + f.data.text;
          liveAnswers.set(id, text);
          setAnswer(text);
        } else if (f.event === 'complete') {
          if (typeof f.data.response === 'string') setAnswer(f.data.response);
          setState(f.data.status);
          onChange();
        } else if (f.event === 'error') {
          setState(`error: ${f.data.message ?? f.data.error}`);
        }
      });
    } catch (err) {
      setState(String(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="card" onSubmit={start} id="start-run">
      <h3>Start a run</h3>
      <div class="row">
        <input name="query" placeholder="Ask the agent…" value={query} onInput={(e) => setQuery((e.target as HTMLInputElement).value)} required />
        <input name="session" placeholder="session id (optional)" value={sessionId} onInput={(e) => setSessionId((e.target as HTMLInputElement).value)} />
        <button type="submit" disabled={busy || !query.trim()}>Run</button>
      </div>
      {state && (
        <div class="live">
          <span class="muted">{state}</span>{' '}
          {runId && <a href={`/ui/runs/${runId}`} onClick={link} class="run-link">{runId}</a>}
          {answer && <pre class="answer">{answer}</pre>}
        </div>
      )}
    </form>
  );
}

export function RunsPage({ access }: { access: Access }) {
  const [status, setStatus] = useState('');
  const [sessionId, setSessionId] = useState('');
  const [runs, setRuns] = useState<any[]>([]);
  const [error, setError] = useState<string | null>(null);
  // A run started here refreshes the list at once instead of at the next poll.
  const [tick, setTick] = useState(0);
  usePoll(async () => {
    const q = new URLSearchParams({ limit: '500' });
    if (status) q.set('status', status);
    if (sessionId.trim()) q.set('session_id', sessionId.trim());
    try {
      const page = await api(`/runs?${q}`);
      setRuns([...page.runs].reverse());
      setError(null);
    } catch (e) {
      setError(String(e));
    }
  }, 2000, [status, sessionId, tick]);
  return (
    <>
      {access.canOperate && <StartRun onChange={() => setTick((n) => n + 1)} />}
      <div class="card">
        <h3>Runs</h3>
        <div class="row">
          <select name="status" value={status} onChange={(e) => setStatus((e.target as HTMLSelectElement).value)}>
            <option value="">any status</option>
            {STATUSES.map((s) => <option value={s}>{s}</option>)}
          </select>
          <input name="session-filter" placeholder="session id" value={sessionId} onInput={(e) => setSessionId((e.target as HTMLInputElement).value)} />
        </div>
        {error && <p class="error">{error}</p>}
        <table class="runs">
          <thead><tr><th>run</th><th>status</th><th>session</th><th>started</th><th>tokens</th><th>answer</th></tr></thead>
          <tbody>
            {runs.slice(0, 200).map((r) => (
              <tr key={r.run_id} onClick={() => navigate(`/ui/runs/${r.run_id}`)}>
                <td><a href={`/ui/runs/${r.run_id}`} onClick={link}>{r.run_id}</a></td>
                <td><Status s={r.status} /></td>
                <td class="mono">{r.session_id}</td>
                <td>{fmtTime(r.created_at)}</td>
                <td>{r.usage?.total_tokens ?? 0}</td>
                <td class="snippet">{(r.response ?? '').slice(0, 80)}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {runs.length === 0 && <p class="muted">No runs.</p>}
      </div>
    </>
  );
}
