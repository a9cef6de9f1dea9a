// Runs: the live list (polled) with filters, and starting a run (POST /run, streamed).
import { useState } from 'preact/hooks';
import { stream, type Access } from './api.js';
import { link, navigate } from './router.js';
import { useNewestRuns } from './newest-runs.js';

export const STATUSES = ['running', 'awaiting_approval', 'awaiting_budget', 'interrupted', 'completed', 'blocked', 'failed', 'cancelled', 'timeout'];
/** Runs per page of the list (newest first). */
const PAGE = 100;
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

/** A run's wall time, created to ended ("–" while it runs or waits). */
function fmtDuration(from: string | null | undefined, to: string | null | undefined): string {
  if (!from || !to) return '–';
  const ms = Math.max(0, Date.parse(to) - Date.parse(from));
  if (Number.isNaN(ms)) return '–';
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const sec = Math.round(ms / 1000);
  return sec < 3600 ? `${Math.floor(sec / 60)} m ${sec % 60} s` : `${Math.floor(sec / 3600)} h ${Math.floor((sec % 3600) / 60)} m`;
}

/** Dollars to a few significant digits ($0.00056, $1.23). */
function fmtUsd(v: number | null | undefined): string {
  if (!v) return '$0';
  return v >= 0.01 ? `$${v.toFixed(2)}` : `$${Number(v.toPrecision(2))}`;
}

/** A datetime-local input's value (the browser's local time) as ISO 8601 with a timezone, or null. */
function isoOfLocal(v: string): string | null {
  if (!v) return null;
  const t = new Date(v);
  return Number.isNaN(t.getTime()) ? null : t.toISOString();
}

export function RunsPage({ access }: { access: Access }) {
  const [status, setStatus] = useState('');
  const [sessionId, setSessionId] = useState('');
  const [agentId, setAgentId] = useState('');
  const [taskId, setTaskId] = useState('');
  const [since, setSince] = useState('');
  const [until, setUntil] = useState('');
  // A run started here refreshes the list at once instead of at the next poll.
  const [tick, setTick] = useState(0);
  const query = () => {
    const q = new URLSearchParams({ order: 'desc', limit: String(PAGE) });
    if (status) q.set('status', status);
    if (sessionId.trim()) q.set('session_id', sessionId.trim());
    if (agentId.trim()) q.set('agent_id', agentId.trim());
    if (taskId.trim()) q.set('task_id', taskId.trim());
    const from = isoOfLocal(since);
    const to = isoOfLocal(until);
    if (from) q.set('since', from);
    if (to) q.set('until', to);
    return q;
  };
  // Newest first (order=desc), older pages on demand (newest-runs.ts). The filters are the API's
  // own (agent, task, time); a changed filter starts the older pages over.
  const { runs: shown, error, loadOlder } = useNewestRuns(`/runs?${query()}`, KEEP_RUNS, tick);
  const text = (set: (v: string) => void) => (e: Event) => set((e.target as HTMLInputElement).value);
  return (
    <>
      {access.canOperate && <StartRun onChange={() => setTick((n) => n + 1)} />}
      <div class="card">
        <h3>Runs</h3>
        <div class="row filters">
          <select name="status" value={status} onChange={(e) => setStatus((e.target as HTMLSelectElement).value)}>
            <option value="">any status</option>
            {STATUSES.map((s) => (
              <option value={s}>{s}</option>
            ))}
          </select>
          <input name="session-filter" placeholder="session id" value={sessionId} onInput={text(setSessionId)} />
          <input name="agent-filter" placeholder="agent id" value={agentId} onInput={text(setAgentId)} />
          <input name="task-filter" placeholder="task id" value={taskId} onInput={text(setTaskId)} />
          <label>
            from <input name="since" type="datetime-local" value={since} onInput={text(setSince)} />
          </label>
          <label>
            to <input name="until" type="datetime-local" value={until} onInput={text(setUntil)} />
          </label>
        </div>
        {error && <p class="error">{error}</p>}
        <table class="runs">
          <thead>
            <tr>
              <th>run</th>
              <th>status</th>
              <th>agent</th>
              <th>task</th>
              <th>session</th>
              <th>started</th>
              <th>duration</th>
              <th>tokens</th>
              <th>cost</th>
              <th>answer</th>
            </tr>
          </thead>
          <tbody>
            {shown.map((r) => (
              <tr key={r.run_id} data-run={r.run_id} onClick={() => navigate(`/ui/runs/${r.run_id}`)}>
                <td>
                  <a href={`/ui/runs/${r.run_id}`} onClick={link}>
                    {r.run_id}
                  </a>
                </td>
                <td>
                  <Status s={r.status} />
                </td>
                <td class="mono agent">{r.agent_id ?? r.agent_name}</td>
                <td class="mono task">
                  {r.task_id ? (
                    <a href={`/ui/background/tasks/${encodeURIComponent(r.task_id)}`} onClick={link}>
                      {r.task_id}
                    </a>
                  ) : (
                    '–'
                  )}
                </td>
                <td class="mono">{r.session_id}</td>
                <td>{fmtTime(r.created_at)}</td>
                <td class="duration">{fmtDuration(r.created_at, r.ended_at)}</td>
                <td>{r.usage?.total_tokens ?? 0}</td>
                <td class="cost">{fmtUsd(r.usage?.estimated_cost_usd)}</td>
                <td class="snippet">{(r.response ?? '').slice(0, 80)}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {shown.length === 0 && <p class="muted">No runs.</p>}
        {loadOlder && (
          <button class="older" onClick={() => void loadOlder()}>
            Older runs
          </button>
        )}
      </div>
    </>
  );
}
