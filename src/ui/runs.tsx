// Runs: the live list (polled) with filters, and starting a run (POST /run, streamed).
import { useRef, useState } from 'preact/hooks';
import { api, stream, type Access } from './api.js';
import { link, navigate, usePoll } from './router.js';

export const STATUSES = ['running', 'awaiting_approval', 'awaiting_budget', 'interrupted', 'completed', 'blocked', 'failed', 'cancelled', 'timeout'];
const MAX_PAGES = 20;
const KEEP_RUNS = 1000;

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
        <button type="submit" disabled={busy || !query.trim()}>
          Run
        </button>
      </div>
      {state && (
        <div class="live">
          <span class="muted">{state}</span>{' '}
          {runId && (
            <a href={`/ui/runs/${runId}`} onClick={link} class="run-link">
              {runId}
            </a>
          )}
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
  // GET /runs is oldest first with a cursor. The first poll walks to the end (at most MAX_PAGES
  // pages of 500 per poll) and remembers where the last page starts; later polls read from there,
  // so a poll is one or two requests however many runs the store holds, and the newest runs stay
  // fresh. (A run older than that last page keeps the status it had when it was last seen.)
  const tail = useRef<{ key: string; cursor: string | null; runs: Map<string, any> }>({ key: '', cursor: null, runs: new Map() });
  usePoll(
    async () => {
      const q = new URLSearchParams({ limit: '500' });
      if (status) q.set('status', status);
      if (sessionId.trim()) q.set('session_id', sessionId.trim());
      const key = q.toString();
      // With a status filter a run leaves the set when its status changes, so the set (usually
      // small: what is running or waiting) is read from the start every time.
      if (tail.current.key !== key || status) tail.current = { key, cursor: null, runs: new Map() };
      const t = tail.current;
      try {
        let cursor = t.cursor;
        for (let i = 0; i < MAX_PAGES; i++) {
          const page = await api(`/runs?${q}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
          for (const r of page.runs) t.runs.set(r.run_id, r);
          // This page's start: the next poll reads it again (fresh statuses) and what follows it.
          t.cursor = cursor;
          if (!page.next_cursor || page.runs.length === 0) break;
          cursor = page.next_cursor;
        }
        // Keep the newest KEEP_RUNS (a Map keeps insertion order: oldest first).
        while (t.runs.size > KEEP_RUNS) t.runs.delete(t.runs.keys().next().value as string);
        if (tail.current === t) setRuns([...t.runs.values()].reverse());
        setError(null);
      } catch (e) {
        setError(String(e));
      }
    },
    2000,
    [status, sessionId, tick],
  );
  return (
    <>
      {access.canOperate && <StartRun onChange={() => setTick((n) => n + 1)} />}
      <div class="card">
        <h3>Runs</h3>
        <div class="row">
          <select name="status" value={status} onChange={(e) => setStatus((e.target as HTMLSelectElement).value)}>
            <option value="">any status</option>
            {STATUSES.map((s) => (
              <option value={s}>{s}</option>
            ))}
          </select>
          <input name="session-filter" placeholder="session id" value={sessionId} onInput={(e) => setSessionId((e.target as HTMLInputElement).value)} />
        </div>
        {error && <p class="error">{error}</p>}
        <table class="runs">
          <thead>
            <tr>
              <th>run</th>
              <th>status</th>
              <th>session</th>
              <th>started</th>
              <th>tokens</th>
              <th>answer</th>
            </tr>
          </thead>
          <tbody>
            {runs.slice(0, 200).map((r) => (
              <tr key={r.run_id} onClick={() => navigate(`/ui/runs/${r.run_id}`)}>
                <td>
                  <a href={`/ui/runs/${r.run_id}`} onClick={link}>
                    {r.run_id}
                  </a>
                </td>
                <td>
                  <Status s={r.status} />
                </td>
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
