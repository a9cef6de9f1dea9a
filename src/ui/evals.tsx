// Evaluations (docs/debugging.md): create one from a filter over stored runs, watch its progress,
// read its aggregates and each run's diff (the compare view).
import { useState } from 'preact/hooks';
import { api, type Access } from './api.js';
import { link, navigate, usePoll } from './router.js';
import { fmtTime } from './runs.js';

const ENDED_RUN_STATUSES = ['completed', 'blocked', 'failed', 'cancelled', 'timeout'];
const LIVE = new Set(['queued', 'running']);

function EvalStatus({ s }: { s: string }) {
  return <span class={`status s-${s === 'queued' ? 'queued' : s}`}>{s}</span>;
}

function Progress({ p }: { p: { total: number; done: number; failed: number } }) {
  return (
    <span class="progress">
      <span class="progress-text">
        {p.done + p.failed}/{p.total}
      </span>
      {p.failed > 0 && <span class="error"> ({p.failed} failed)</span>}
    </span>
  );
}

/** The create form: a filter over stored runs, a variant, a scorer. */
function CreateEval({ onCreated }: { onCreated: (id: string) => void }) {
  const [name, setName] = useState('');
  const [agentId, setAgentId] = useState('');
  const [sessionId, setSessionId] = useState('');
  const [status, setStatus] = useState('');
  const [limit, setLimit] = useState('50');
  const [system, setSystem] = useState('');
  const [model, setModel] = useState('');
  const [scorer, setScorer] = useState('exact');
  const [contains, setContains] = useState('');
  const [error, setError] = useState<string | null>(null);
  const submit = (e: Event) => {
    e.preventDefault();
    let modelConfig: unknown;
    if (model.trim()) {
      try {
        modelConfig = JSON.parse(model);
      } catch {
        return setError('the model config must be JSON');
      }
    }
    const filter = {
      ...(agentId.trim() ? { agent_id: agentId.trim() } : {}),
      ...(sessionId.trim() ? { session_id: sessionId.trim() } : {}),
      ...(status ? { status } : {}),
      limit: Number(limit),
    };
    const body = {
      name,
      source: { filter },
      variant: { ...(system.trim() ? { system_instruction: system } : {}), ...(modelConfig ? { model: modelConfig } : {}) },
      scorer: scorer === 'none' ? null : scorer === 'contains' ? { type: 'contains', text: contains } : { type: 'exact' },
    };
    api('/evals', { method: 'POST', body }).then(
      (r) => {
        setError(null);
        onCreated(r.eval_id);
      },
      (err) => setError(String(err)),
    );
  };
  return (
    <form class="card" id="eval-create" onSubmit={submit}>
      <h3>New evaluation</h3>
      <div class="row">
        <input id="eval-name" class="grow" placeholder="name" value={name} required onInput={(e) => setName((e.target as HTMLInputElement).value)} />
      </div>
      <div class="row">
        Runs:
        <input id="eval-agent" placeholder="agent id" value={agentId} onInput={(e) => setAgentId((e.target as HTMLInputElement).value)} />
        <input id="eval-session" placeholder="session id" value={sessionId} onInput={(e) => setSessionId((e.target as HTMLInputElement).value)} />
        <select id="eval-status" value={status} onChange={(e) => setStatus((e.target as HTMLSelectElement).value)}>
          <option value="">every ended run</option>
          {ENDED_RUN_STATUSES.map((s) => (
            <option value={s} key={s}>
              {s}
            </option>
          ))}
        </select>
        newest
        <input id="eval-limit" type="number" min={1} max={1000} value={limit} onInput={(e) => setLimit((e.target as HTMLInputElement).value)} />
      </div>
      <label>
        Variant system instruction
        <textarea id="eval-system" rows={2} value={system} onInput={(e) => setSystem((e.target as HTMLTextAreaElement).value)} />
      </label>
      <label>
        Variant model config (JSON, optional)
        <textarea id="eval-model" rows={2} value={model} onInput={(e) => setModel((e.target as HTMLTextAreaElement).value)} />
      </label>
      <div class="row">
        Scorer
        <select id="eval-scorer" value={scorer} onChange={(e) => setScorer((e.target as HTMLSelectElement).value)}>
          <option value="exact">exact</option>
          <option value="contains">contains</option>
          <option value="none">none</option>
        </select>
        {scorer === 'contains' && (
          <input id="eval-contains" placeholder="text" value={contains} onInput={(e) => setContains((e.target as HTMLInputElement).value)} />
        )}
        <button id="eval-submit" type="submit">
          Create
        </button>
      </div>
      {error && <p class="error">{error}</p>}
    </form>
  );
}

export function EvalsPage({ access }: { access: Access }) {
  const [evals, setEvals] = useState<any[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  usePoll(async () => {
    try {
      setEvals((await api('/evals?limit=100')).evals);
      setError(null);
    } catch (e) {
      setError(String(e));
    }
  }, 3000);
  return (
    <>
      {access.canOperate && <CreateEval onCreated={(id) => navigate(`/ui/evals/${encodeURIComponent(id)}`)} />}
      <div class="card">
        <h3>Evaluations</h3>
        {error && <p class="error">{error}</p>}
        {evals === null ? (
          <p class="muted">Loading…</p>
        ) : evals.length === 0 ? (
          <p class="muted" id="evals-empty">
            No evaluations yet.
          </p>
        ) : (
          <table class="evals" id="evals">
            <thead>
              <tr>
                <th>name</th>
                <th>status</th>
                <th>progress</th>
                <th>created</th>
              </tr>
            </thead>
            <tbody>
              {evals.map((e) => (
                <tr key={e.eval_id} data-eval={e.eval_id}>
                  <td>
                    <a href={`/ui/evals/${encodeURIComponent(e.eval_id)}`} onClick={link}>
                      {e.name}
                    </a>
                  </td>
                  <td>
                    <EvalStatus s={e.status} />
                  </td>
                  <td>
                    <Progress p={e.progress} />
                  </td>
                  <td>{fmtTime(e.created_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </div>
    </>
  );
}

const fmtScore = (n: number | null) => (n === null ? '–' : n.toFixed(2));

/** One evaluation: progress (polled while it runs), aggregates, each item with its diff. */
export function EvalPage({ evalId, access }: { evalId: string; access: Access }) {
  const [ev, setEv] = useState<any>(null);
  const [error, setError] = useState<string | null>(null);
  const live = ev ? LIVE.has(ev.status) : true;
  usePoll(
    async () => {
      try {
        setEv(await api(`/evals/${encodeURIComponent(evalId)}`));
        setError(null);
      } catch (e) {
        setError(String(e));
      }
    },
    live ? 1000 : 10_000,
    [evalId, live],
  );
  if (!ev) return <p class={error ? 'error' : 'muted'}>{error ?? 'Loading…'}</p>;
  const a = ev.aggregates;
  return (
    <>
      <div class="card" id="eval">
        <h2>
          {ev.name} <EvalStatus s={ev.status} />
        </h2>
        <p>
          <span class="mono">{ev.eval_id}</span> · progress <Progress p={ev.progress} /> · tools {ev.tools} · concurrency {ev.concurrency} · created{' '}
          {fmtTime(ev.created_at)}
        </p>
        <p class="mono">variant {JSON.stringify(ev.variant)}</p>
        {access.canOperate && live && (
          <button
            class="danger"
            id="eval-cancel"
            onClick={() => api(`/evals/${encodeURIComponent(evalId)}/cancel`, { method: 'POST', body: {} }).then(setEv, (e) => setError(String(e)))}
          >
            Cancel
          </button>
        )}
        {error && <p class="error">{error}</p>}
      </div>
      <div class="card" id="eval-aggregates">
        <h3>Aggregates</h3>
        <p>
          <span class="agg-items">{a.items}</span> items · <span class="agg-changed">{a.changed_pct.toFixed(0)}%</span> changed · mean score{' '}
          <span class="agg-score">{fmtScore(a.mean_score)}</span> · tokens {a.token_delta > 0 ? '+' : ''}
          {a.token_delta} · cost {a.cost_delta_usd > 0 ? '+' : ''}
          {a.cost_delta_usd.toFixed(6)} USD
        </p>
        {Object.keys(a.outcomes).length > 0 && (
          <table class="eval-outcomes">
            <thead>
              <tr>
                <th>original outcome</th>
                <th>items</th>
                <th>changed</th>
                <th>mean score</th>
              </tr>
            </thead>
            <tbody>
              {Object.entries(a.outcomes).map(([label, o]: [string, any]) => (
                <tr key={label}>
                  <td>{label}</td>
                  <td>{o.items}</td>
                  <td>{o.changed}</td>
                  <td>{fmtScore(o.mean_score)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </div>
      <div class="card">
        <h3>Runs</h3>
        <table class="eval-items" id="eval-items">
          <thead>
            <tr>
              <th>run</th>
              <th>status</th>
              <th>changed</th>
              <th>score</th>
              <th>tokens</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {ev.items.map((it: any) => (
              <tr key={it.run_id} class="eval-item" data-run={it.run_id}>
                <td>
                  <a class="mono" href={`/ui/runs/${encodeURIComponent(it.run_id)}`} onClick={link}>
                    {it.run_id}
                  </a>
                </td>
                <td>
                  <span class={`status s-${it.status}`}>{it.status}</span>
                  {it.error && <span class="error"> {it.error}</span>}
                </td>
                <td class="item-changed">{it.changed === null ? '–' : it.changed ? 'changed' : 'same'}</td>
                <td class="item-score">{fmtScore(it.score)}</td>
                <td>{it.token_delta === null ? '–' : `${it.token_delta > 0 ? '+' : ''}${it.token_delta}`}</td>
                <td>
                  {it.status === 'done' && it.replay_run_id && (
                    <a class="item-diff" href={`/ui/compare/${encodeURIComponent(it.run_id)}/${encodeURIComponent(it.replay_run_id)}`} onClick={link}>
                      diff
                    </a>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}
