// Debugging one run on its page (docs/debugging.md): its checkpoint timeline across every segment
// (a wait for a person shows as a gap), "fork from here" with an edit box, "replay with…", and
// the compare view of two runs (/ui/compare/{a}/{b}).
import { useEffect, useState } from 'preact/hooks';
import { api, type Access } from './api.js';
import { link, navigate } from './router.js';
import { Status, fmtTime } from './runs.js';

/** Machine states a run waits for a person in: the time until the next checkpoint is a gap. */
const PAUSES = new Set(['awaitingApproval', 'awaitingBudget', 'interrupted']);

function seconds(ms: number): string {
  return ms < 1000 ? `${ms} ms` : ms < 120_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 60_000)} min`;
}

/** The optional JSON object of a text box: undefined when empty, an error message when not an object. */
function jsonObject(text: string, what: string): Record<string, unknown> | undefined | string {
  if (!text.trim()) return undefined;
  try {
    const v = JSON.parse(text);
    if (v && typeof v === 'object' && !Array.isArray(v)) return v;
  } catch {
    /* below */
  }
  return `${what} must be a JSON object`;
}

/** A fork's or replay's result: its status and answer, its run page and the comparison with the original. */
function Started({ original, result }: { original: string; result: any }) {
  return (
    <p class="debug-result" id="debug-result">
      <a class="mono" href={`/ui/runs/${encodeURIComponent(result.run_id)}`} onClick={link}>
        {result.run_id}
      </a>{' '}
      <Status s={result.status} /> <span class="answer-text">{result.response ?? ''}</span>{' '}
      <a class="compare-link" href={`/ui/compare/${encodeURIComponent(original)}/${encodeURIComponent(result.run_id)}`} onClick={link}>
        compare with the original
      </a>
    </p>
  );
}

/** The edit box of "fork from here": tool results to replace (JSON), a user message to add. */
function ForkForm({ runId, checkpoint, onDone }: { runId: string; checkpoint: any; onDone: (r: any) => void }) {
  const [toolResults, setToolResults] = useState('');
  const [userMessage, setUserMessage] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = (e: Event) => {
    e.preventDefault();
    const tool_results = jsonObject(toolResults, 'tool results');
    if (typeof tool_results === 'string') return setError(tool_results);
    const edits = { ...(tool_results ? { tool_results } : {}), ...(userMessage.trim() ? { user_message: userMessage } : {}) };
    setBusy(true);
    api(`/runs/${encodeURIComponent(runId)}/fork`, { method: 'POST', body: { checkpoint_id: checkpoint.checkpoint_id, edits } }).then(
      (r) => {
        setBusy(false);
        setError(null);
        onDone(r);
      },
      (err) => {
        setBusy(false);
        setError(String(err));
      },
    );
  };
  return (
    <form class="fork-form" id="fork-form" onSubmit={submit}>
      <p class="muted">
        Fork from <span class="mono">{checkpoint.checkpoint_id}</span> (step {checkpoint.step}): a new run in a new session, the original untouched.
      </p>
      <label>
        Tool results to replace, by tool call id (JSON)
        <textarea
          id="fork-tool-results"
          rows={3}
          placeholder='{"call_1": "a different result"}'
          value={toolResults}
          onInput={(e) => setToolResults((e.target as HTMLTextAreaElement).value)}
        />
      </label>
      <label>
        Add a user message
        <textarea id="fork-user-message" rows={2} value={userMessage} onInput={(e) => setUserMessage((e.target as HTMLTextAreaElement).value)} />
      </label>
      <button id="fork-submit" type="submit" disabled={busy}>
        {busy ? 'Forking…' : 'Fork'}
      </button>
      {error && <p class="error">{error}</p>}
    </form>
  );
}

/**
 * Every checkpoint of the run in order, across its segments; the time a run waited for a person
 * (a pause checkpoint to the next) is a gap row.
 */
export function CheckpointTimeline({ runId, access, version }: { runId: string; access: Access; version: string }) {
  const [cps, setCps] = useState<any[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [forking, setForking] = useState<string | null>(null);
  const [result, setResult] = useState<any>(null);
  const [shown, setShown] = useState<{ id: string; messages: any[] } | null>(null);
  useEffect(() => {
    api(`/runs/${encodeURIComponent(runId)}/checkpoints`).then(
      (r) => setCps(r.checkpoints),
      (e) => setError(String(e)),
    );
  }, [runId, version]);
  const show = (id: string) =>
    api(`/runs/${encodeURIComponent(runId)}/checkpoints/${encodeURIComponent(id)}`).then(
      (r) => setShown({ id, messages: r.messages }),
      (e) => setError(String(e)),
    );
  if (!cps) return <p class={error ? 'error' : 'muted'}>{error ?? 'Loading checkpoints…'}</p>;
  const rows = [];
  for (let i = 0; i < cps.length; i++) {
    const c = cps[i];
    rows.push(
      <tr class="checkpoint" key={c.checkpoint_id} data-checkpoint={c.checkpoint_id}>
        <td class="mono">{c.checkpoint_id}</td>
        <td>{c.step}</td>
        <td class="mono state">{c.state}</td>
        <td>{c.message_count}</td>
        <td>{c.usage?.total_tokens ?? 0}</td>
        <td>{fmtTime(c.created_at)}</td>
        <td>
          <button class="link-button show-messages" type="button" onClick={() => void show(c.checkpoint_id)}>
            messages
          </button>{' '}
          {access.canOperate && (
            <button class="fork-here" type="button" onClick={() => setForking(forking === c.checkpoint_id ? null : c.checkpoint_id)}>
              fork from here
            </button>
          )}
        </td>
      </tr>,
    );
    const next = cps[i + 1];
    if (PAUSES.has(c.state) && next) {
      const ms = Date.parse(next.created_at) - Date.parse(c.created_at);
      rows.push(
        <tr class="cp-wait" key={`${c.checkpoint_id}-wait`}>
          <td colSpan={7}>
            <div class="gap" /> <strong>waited {seconds(Math.max(0, ms))} for a person</strong>{' '}
            <span class="muted">({c.state === 'awaitingBudget' ? 'a budget decision' : c.state === 'interrupted' ? 'a resume' : 'an approval'})</span>
          </td>
        </tr>,
      );
    }
    if (forking === c.checkpoint_id)
      rows.push(
        <tr key={`${c.checkpoint_id}-fork`}>
          <td colSpan={7}>
            <ForkForm
              runId={runId}
              checkpoint={c}
              onDone={(r) => {
                setForking(null);
                setResult(r);
              }}
            />
          </td>
        </tr>,
      );
  }
  return (
    <>
      <table class="checkpoints" id="checkpoints">
        <thead>
          <tr>
            <th>checkpoint</th>
            <th>step</th>
            <th>state</th>
            <th>messages</th>
            <th>tokens</th>
            <th>at</th>
            <th />
          </tr>
        </thead>
        <tbody>{rows}</tbody>
      </table>
      {result && <Started original={runId} result={result} />}
      {shown && (
        <div class="checkpoint-messages" id="checkpoint-messages">
          <h4>
            Conversation at <span class="mono">{shown.id}</span>
          </h4>
          <pre>{JSON.stringify(shown.messages, null, 2)}</pre>
        </div>
      )}
      {error && <p class="error">{error}</p>}
    </>
  );
}

/** "Replay with…": another agent, model config or system instruction; tools recorded or live. */
export function ReplayForm({ runId }: { runId: string }) {
  const [open, setOpen] = useState(false);
  const [system, setSystem] = useState('');
  const [agentId, setAgentId] = useState('');
  const [model, setModel] = useState('');
  const [tools, setTools] = useState('recorded');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [result, setResult] = useState<any>(null);
  if (!open)
    return (
      <button id="replay-open" type="button" onClick={() => setOpen(true)}>
        Replay with…
      </button>
    );
  const submit = (e: Event) => {
    e.preventDefault();
    const modelConfig = jsonObject(model, 'the model config');
    if (typeof modelConfig === 'string') return setError(modelConfig);
    const variant = {
      ...(system.trim() ? { system_instruction: system } : {}),
      ...(agentId.trim() ? { agent_id: agentId.trim() } : {}),
      ...(modelConfig ? { model: modelConfig } : {}),
    };
    setBusy(true);
    setResult(null);
    api(`/runs/${encodeURIComponent(runId)}/replay`, { method: 'POST', body: { variant, tools } }).then(
      (r) => {
        setBusy(false);
        setError(null);
        setResult(r);
      },
      (err) => {
        setBusy(false);
        setError(String(err));
      },
    );
  };
  return (
    <form class="replay-form" id="replay-form" onSubmit={submit}>
      <p class="muted">Re-ask a variant with the same inputs; tool results come from this run's recording (a non-idempotent tool never runs).</p>
      <label>
        System instruction
        <textarea id="replay-system" rows={2} value={system} onInput={(e) => setSystem((e.target as HTMLTextAreaElement).value)} />
      </label>
      <div class="row">
        <input id="replay-agent" placeholder="agent id (optional)" value={agentId} onInput={(e) => setAgentId((e.target as HTMLInputElement).value)} />
        <select id="replay-tools" value={tools} onChange={(e) => setTools((e.target as HTMLSelectElement).value)}>
          <option value="recorded">tools: recorded</option>
          <option value="live">tools: live</option>
        </select>
      </div>
      <label>
        Model config (JSON, optional)
        <textarea
          id="replay-model"
          rows={2}
          placeholder='{"provider": "openai-compatible", "base_url": "…", "model": "…"}'
          value={model}
          onInput={(e) => setModel((e.target as HTMLTextAreaElement).value)}
        />
      </label>
      <button id="replay-submit" type="submit" disabled={busy}>
        {busy ? 'Replaying…' : 'Replay'}
      </button>
      {error && <p class="error">{error}</p>}
      {result && <Started original={runId} result={result} />}
    </form>
  );
}

function Summary({ s, side }: { s: any; side: 'a' | 'b' }) {
  return (
    <div class={`card compare-side compare-${side}`} id={`compare-${side}`}>
      <h3>
        <a class="mono" href={`/ui/runs/${encodeURIComponent(s.run_id)}`} onClick={link}>
          {s.run_id}
        </a>{' '}
        <Status s={s.status} />
      </h3>
      <p>
        steps {s.steps} · tokens {s.tokens} · ${s.cost_usd.toFixed(6)} · {s.duration_ms} ms
      </p>
      <pre class="compare-response">{s.response ?? ''}</pre>
      <ul class="compare-tools">
        {s.tool_calls.map((c: any, i: number) => (
          <li key={i} class="mono">
            {c.name}({JSON.stringify(c.arguments)}) → {c.outcome}
          </li>
        ))}
      </ul>
    </div>
  );
}

const signed = (n: number, digits = 0) => `${n > 0 ? '+' : ''}${digits ? n.toFixed(digits) : n}`;

/** Two runs side by side and what changed (GET /runs/{a}/compare/{b}). */
export function ComparePage({ a, b }: { a: string; b: string }) {
  const [cmp, setCmp] = useState<any>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    api(`/runs/${encodeURIComponent(a)}/compare/${encodeURIComponent(b)}`).then(setCmp, (e) => setError(String(e)));
  }, [a, b]);
  if (!cmp) return <p class={error ? 'error' : 'muted'}>{error ?? 'Loading…'}</p>;
  const d = cmp.diff;
  const calls = (label: string, cls: string, list: any[]) =>
    list.length > 0 && (
      <li class={cls}>
        {label}:{' '}
        {list.map((c: any, i: number) => (
          <span key={i} class="mono">
            {c.name ?? c.a?.name}({JSON.stringify(c.arguments ?? c.a?.arguments)}){' '}
          </span>
        ))}
      </li>
    );
  return (
    <>
      <div class="card" id="compare-diff">
        <h2>Compare</h2>
        <p class="deltas">
          answer {d.response_changed ? <strong class="changed">changed</strong> : <span class="same">unchanged</span>} · steps{' '}
          <span class="steps-delta">{signed(d.steps_delta)}</span> · tokens <span class="tokens-delta">{signed(d.tokens_delta)}</span> · cost{' '}
          {signed(d.cost_delta_usd, 6)} · duration {signed(d.duration_delta_ms)} ms
        </p>
        {d.response_changed && <pre class="response-diff">{d.response_diff}</pre>}
        <ul class="tool-diff">
          {calls('added', 'tools-added', d.tool_calls.added)}
          {calls('removed', 'tools-removed', d.tool_calls.removed)}
          {calls('changed', 'tools-changed', d.tool_calls.changed)}
        </ul>
        <button type="button" onClick={() => navigate(`/ui/compare/${encodeURIComponent(b)}/${encodeURIComponent(a)}`)}>
          swap
        </button>
      </div>
      <div class="compare">
        <Summary s={cmp.a} side="a" />
        <Summary s={cmp.b} side="b" />
      </div>
    </>
  );
}
