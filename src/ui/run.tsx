// One run: its record (polled while live), trace waterfall, live events, answer, cancel, decisions.
import { useEffect, useState } from 'preact/hooks';
import { api, stream, type Access } from './api.js';
import { ApprovalCard, BudgetCard } from './approvals.js';
import { link, usePoll } from './router.js';
import { Status, TERMINAL, fmtTime, liveAnswers } from './runs.js';
import { RunTimeline } from './trace-view.js';
import { CheckpointTimeline, ReplayForm } from './debug.js';

const MAX_EVENTS = 500;

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

/** How a run ended badly: its error type and message (or why it stopped), not raw JSON. */
function EndBanner({ run }: { run: any }) {
  const bad = run.status === 'failed' || run.status === 'cancelled' || run.status === 'timeout' || run.status === 'blocked';
  if (!bad && !run.error) return null;
  const code = run.error?.type ?? run.stop_reason ?? run.status;
  const message = run.error?.message ?? (run.status === 'cancelled' ? 'the run was cancelled' : `the run ended: ${run.status}`);
  return (
    <div class={`banner ${run.status === 'cancelled' ? 'b-cancelled' : 'b-failed'}`} id="run-banner" role="alert">
      <strong class="code">{code}</strong> <span class="message">{message}</span>
      {run.stop_reason && run.stop_reason !== code && <span class="muted"> · stop reason {run.stop_reason}</span>}
    </div>
  );
}

/** Cancel asks first: a cancelled run cannot be resumed. */
function CancelButton({ runId, onError }: { runId: string; onError: (e: string | null) => void }) {
  const [asking, setAsking] = useState(false);
  if (!asking) {
    return (
      <button class="danger" id="cancel-run" onClick={() => setAsking(true)}>
        Cancel run
      </button>
    );
  }
  return (
    <span class="confirm" id="cancel-confirm">
      Cancel this run? It cannot be resumed.{' '}
      <button
        class="danger"
        id="cancel-run-confirm"
        onClick={() =>
          api(`/runs/${encodeURIComponent(runId)}/cancel`, { method: 'POST', body: {} }).then(
            () => setAsking(false),
            (e) => onError(String(e)),
          )
        }
      >
        Yes, cancel it
      </button>{' '}
      <button id="cancel-run-keep" onClick={() => setAsking(false)}>
        Keep it running
      </button>
    </span>
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
          (t) => setTrace(t),
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
  // A link to `…#trace` (the background pages' "trace") scrolls to the trace once it is drawn.
  const hasTrace = trace !== null;
  useEffect(() => {
    if (hasTrace && location.hash === '#trace') document.getElementById('trace')?.scrollIntoView();
  }, [hasTrace, runId]);
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
          {run.task_id && (
            <>
              {' · '}
              <a class="task-link" href={`/ui/background/tasks/${encodeURIComponent(run.task_id)}`} onClick={link}>
                task {run.task_id}
              </a>
            </>
          )}
        </p>
        {access.canOperate && live && <CancelButton runId={runId} onError={setError} />}
        {/* A background run's agent run is interrupted and resumed through its background run (POST /runs/{id}/interrupt and /resume answer 409 AGT_ERR_RUN_IS_BACKGROUND). */}
        {access.canOperate && run.status === 'running' && !run.task_id && (
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
        {access.canOperate && run.status === 'interrupted' && !run.task_id && (
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
        <EndBanner run={run} />
        {(answer || !run.error) && (
          <>
            <h3>Answer</h3>
            <pre class="answer" id="run-answer">
              {answer || '…'}
            </pre>
          </>
        )}
      </div>
      {pending.map((a: any) => (
        <ApprovalCard run={run} approval={a} tools={tools} access={access} key={a.approval_id} />
      ))}
      {budget.map((b: any) => (
        <BudgetCard run={run} request={b} access={access} key={b.request_id ?? 'budget'} />
      ))}
      <div class="card" id="debug">
        <h3>Checkpoints</h3>
        {/* Read again as the run moves: a new segment adds checkpoints. */}
        <CheckpointTimeline runId={runId} access={access} version={`${run.status}:${run.step}`} />
        {access.canOperate && TERMINAL.has(run.status) && <ReplayForm runId={runId} />}
      </div>
      <div class="card" id="trace">
        <h3>Trace</h3>
        {trace ? <RunTimeline view={trace} /> : <p class="muted">No trace yet.</p>}
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
