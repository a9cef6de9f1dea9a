// One run: its record (polled while live), trace waterfall, live events, answer, cancel, decisions.
import { useEffect, useState } from 'preact/hooks';
import { api, stream, type Access } from './api.js';
import { ApprovalCard, BudgetCard } from './approvals.js';
import { link, usePoll } from './router.js';
import { Status, TERMINAL, fmtTime, liveAnswers } from './runs.js';

const MAX_EVENTS = 500;

function Waterfall({ trace }: { trace: any }) {
  const spans: any[] = trace.spans ?? [];
  if (spans.length === 0) return <p class="muted">No spans.</p>;
  const t0 = Math.min(...spans.map((s) => Date.parse(s.started_at)));
  const end = (s: any) => (s.ended_at ? Date.parse(s.ended_at) : Date.now());
  const t1 = Math.max(...spans.map(end), t0 + 1);
  const depth = new Map<string, number>();
  const byId = new Map(spans.map((s) => [s.span_id, s]));
  const depthOf = (s: any): number => {
    if (depth.has(s.span_id)) return depth.get(s.span_id)!;
    const p = s.parent_span_id ? byId.get(s.parent_span_id) : undefined;
    const d = p && p !== s ? Math.min(depthOf(p) + 1, 10) : 0;
    depth.set(s.span_id, d);
    return d;
  };
  const sorted = [...spans].sort((a, b) => Date.parse(a.started_at) - Date.parse(b.started_at));
  return (
    <table class="waterfall">
      <thead>
        <tr>
          <th>span</th>
          <th>ms</th>
          <th>tokens</th>
          <th>cost</th>
          <th class="bar-col">timeline ({t1 - t0} ms)</th>
        </tr>
      </thead>
      <tbody>
        {sorted.map((s) => {
          const a = s.attributes ?? {};
          const tokens =
            a['gen_ai.usage.input_tokens'] !== undefined
              ? `${a['gen_ai.usage.input_tokens']}/${a['gen_ai.usage.output_tokens'] ?? 0}`
              : (a.total_tokens ?? a.tokens ?? '');
          const cost = a['agentd.estimated_cost_usd'] ?? a.estimated_cost_usd;
          const left = ((Date.parse(s.started_at) - t0) / (t1 - t0)) * 100;
          const width = Math.max(((end(s) - Date.parse(s.started_at)) / (t1 - t0)) * 100, 0.5);
          const label = a['gen_ai.tool.name'] ?? a['gen_ai.request.model'] ?? '';
          return (
            <tr class="span" key={s.span_id}>
              <td style={{ paddingLeft: `${depthOf(s) * 14 + 4}px` }}>
                {s.name} <span class="muted">{String(label)}</span>
              </td>
              <td>{s.duration_ms ?? '…'}</td>
              <td>{String(tokens)}</td>
              <td>{typeof cost === 'number' ? `$${cost.toFixed(6)}` : ''}</td>
              <td class="bar-col">
                <div class={`bar b-${s.status}`} style={{ marginLeft: `${left}%`, width: `${width}%` }} title={`${s.status} ${s.duration_ms ?? ''} ms`} />
              </td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}

/** One line for a stored event: its error, else its output, else its input. */
function summary(e: any): string {
  const v = e.error ?? e.output ?? e.input;
  if (v === null || v === undefined) return '';
  return (typeof v === 'string' ? v : JSON.stringify(v)).slice(0, 160);
}

/** Statuses a run accepts a steer message in (docs/runs.md). */
const STEERABLE = new Set(['running', 'awaiting_approval', 'interrupted']);

/** A message the run reads once, as a user message, before its next model call. */
function SteerForm({ runId, onError }: { runId: string; onError: (e: string | null) => void }) {
  const [text, setText] = useState('');
  const [sent, setSent] = useState<string | null>(null);
  const send = () => {
    if (!text.trim()) return;
    api(`/runs/${encodeURIComponent(runId)}/steer`, { method: 'POST', body: { message: text } }).then(
      (r) => {
        setSent(r.message_id);
        setText('');
        onError(null);
      },
      (e) => onError(String(e)),
    );
  };
  return (
    <p class="steer">
      <input
        id="steer-message"
        value={text}
        placeholder="Tell the run something (read before its next model call)"
        maxLength={32768}
        onInput={(e) => setText((e.target as HTMLInputElement).value)}
      />
      <button id="steer-send" onClick={send}>
        Steer
      </button>
      {sent && <span class="muted"> queued {sent}</span>}
    </p>
  );
}

export function RunPage({ runId, access }: { runId: string; access: Access }) {
  const [run, setRun] = useState<any>(null);
  const [trace, setTrace] = useState<any>(null);
  const [events, setEvents] = useState<any[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [tools, setTools] = useState<any[]>([]);
  const live = run && !TERMINAL.has(run.status);
  usePoll(
    async () => {
      try {
        const r = await api(`/runs/${encodeURIComponent(runId)}`);
        setRun(r);
        setError(null);
        api(`/telemetry/runs/${encodeURIComponent(runId)}/trace`).then(
          (t) => setTrace(t.trace ?? t),
          () => undefined,
        );
      } catch (e) {
        setError(String(e));
      }
    },
    live === false ? 10_000 : 1500,
    [runId, live],
  );
  useEffect(() => {
    api('/tools').then(
      (t) => setTools(t.tools),
      () => undefined,
    );
  }, []);
  // Live events of this run; reconnects with Last-Event-ID so nothing is missed.
  const sessionId = run?.session_id as string | undefined;
  useEffect(() => {
    if (!sessionId) return;
    const ctl = new AbortController();
    let last: string | null = null;
    setEvents([]);
    (async () => {
      for (let attempt = 0; attempt < 20 && !ctl.signal.aborted; attempt++) {
        try {
          await stream(`/events/${encodeURIComponent(sessionId)}?run_id=${encodeURIComponent(runId)}`, { signal: ctl.signal, lastEventId: last }, (f) => {
            if (f.event === 'session' || f.event === 'error') return;
            if (f.id) last = f.id;
            setEvents((es) => [...es, { type: f.event, ...f.data }].slice(-MAX_EVENTS));
          });
        } catch {
          /* retried below */
        }
        await new Promise((r) => setTimeout(r, 1000));
      }
    })();
    return () => ctl.abort();
  }, [sessionId, runId]);
  if (!run) return <p class={error ? 'error' : 'muted'}>{error ?? 'Loading…'}</p>;
  const answer = run.response ?? liveAnswers.get(runId) ?? '';
  const pending = (run.approvals ?? []).filter((a: any) => a.status === 'pending');
  const budget = (run.budget_requests ?? []).filter((b: any) => b.status === 'pending');
  return (
    <>
      <div class="card">
        <h2 class="mono">
          {run.run_id} <Status s={run.status} />
        </h2>
        <p>
          session <span class="mono">{run.session_id}</span> · started {fmtTime(run.created_at)} · step {run.step} · tokens {run.usage?.total_tokens ?? 0}
          {' · '}
          <a href={`/ui/machines?run=${run.run_id}`} onClick={link}>
            machine
          </a>
        </p>
        {access.canOperate && live && (
          <button
            class="danger"
            id="cancel-run"
            onClick={() =>
              api(`/runs/${runId}/cancel`, { method: 'POST', body: {} }).then(
                () => undefined,
                (e) => setError(String(e)),
              )
            }
          >
            Cancel run
          </button>
        )}
        {access.canOperate && run.status === 'running' && (
          <button
            id="interrupt-run"
            onClick={() =>
              api(`/runs/${runId}/interrupt`, { method: 'POST', body: {} }).then(
                () => undefined,
                (e) => setError(String(e)),
              )
            }
          >
            Interrupt at next step
          </button>
        )}
        {access.canOperate && run.status === 'interrupted' && (
          <button
            id="resume-run"
            onClick={() =>
              void api(`/runs/${runId}/resume`, { method: 'POST', body: {} }).then(
                () => undefined,
                (e) => setError(String(e)),
              )
            }
          >
            Resume
          </button>
        )}
        {access.canOperate && STEERABLE.has(run.status) && <SteerForm runId={runId} onError={setError} />}
        {error && <p class="error">{error}</p>}
        <h3>Answer</h3>
        <pre class="answer" id="run-answer">
          {answer || (run.error ? JSON.stringify(run.error) : '…')}
        </pre>
      </div>
      {pending.map((a: any) => (
        <ApprovalCard run={run} approval={a} tools={tools} access={access} key={a.approval_id} />
      ))}
      {budget.map((b: any) => (
        <BudgetCard run={run} request={b} access={access} key={b.request_id ?? 'budget'} />
      ))}
      <div class="card">
        <h3>Trace</h3>
        {trace ? <Waterfall trace={trace} /> : <p class="muted">No trace yet.</p>}
      </div>
      <div class="card">
        <h3>
          Events <span class="muted">(live)</span>
        </h3>
        <table class="events">
          <tbody>
            {events.map((e, i) => (
              <tr key={i}>
                <td class="mono">{e.type}</td>
                <td>{fmtTime(e.timestamp ?? e.created_at)}</td>
                <td>{summary(e)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}
