// Machines: each state machine of GET /machines drawn as an SVG graph; a followed run, background
// run or task has its current state highlighted. While its actor is live in the server, every
// state comes from GET /machines/live (the actor system's inspection events); between actors (a run
// paused for a person, an ended one) the record's status, polled every second, stands in for it
// (docs/dashboard.md).
import { useEffect, useState } from 'preact/hooks';
import { api, stream } from './api.js';
import { navigate, usePoll } from './router.js';
import { H, W, eventLabel, layout } from './machine-graph.js';

/** The machine state a record's status stands for, or null when the status spans several states. */
export function stateOf(machine: string, status: string | undefined, extra: { paused?: boolean; enabled?: boolean } = {}): string | null {
  if (!status) return null;
  if (machine === 'run') {
    const m: Record<string, string> = {
      awaiting_approval: 'awaitingApproval',
      awaiting_budget: 'awaitingBudget',
      timeout: 'timedOut',
      completed: 'completed',
      failed: 'failed',
      blocked: 'blocked',
      cancelled: 'cancelled',
    };
    return m[status] ?? null;
  }
  if (machine === 'backgroundRun') return status.startsWith('awaiting_') ? 'awaiting' : status;
  if (machine === 'task') return extra.enabled === false ? 'disabled' : extra.paused ? 'paused' : 'scheduling';
  return null;
}

/** The top-level state of an XState state value (`'calling'`, or `{running: 'x'}` → `'running'`). */
export function topState(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object') return Object.keys(value)[0] ?? null;
  return null;
}

/**
 * Follows `actor` on GET /machines/live while the page shows it; `onState` gets each state of a
 * live actor (null when it stops). Reconnects after a pause, since a resumed run is a new actor
 * under the same id.
 */
function useLiveState(actor: string | null, onState: (state: { value: string | null; status: string; event: string | null } | null) => void): void {
  useEffect(() => {
    if (!actor) return;
    const ac = new AbortController();
    void (async () => {
      while (!ac.signal.aborted) {
        try {
          await stream(`/machines/live?actor=${encodeURIComponent(actor)}`, { signal: ac.signal }, (f) => {
            if (f.event === 'state') onState({ value: topState(f.data.value), status: f.data.status, event: f.data.event });
          });
        } catch {
          /* the record poll still shows where it stands */
        }
        onState(null);
        await new Promise((r) => setTimeout(r, 1000));
      }
    })();
    return () => ac.abort();
  }, [actor]);
}

function Graph({ m, current }: { m: any; current: string | null }) {
  const states: string[] = m.states ?? [];
  if (states.length === 0) return <p class="muted">No states (an actor without a state graph).</p>;
  const initial = typeof m.definition?.initial === 'string' ? m.definition.initial : states[0];
  const edges = (m.transitions ?? []).filter((t: any) => t.source !== 'any' && t.source !== t.target);
  const anyEdges = (m.transitions ?? []).filter((t: any) => t.source === 'any');
  const pos = layout(states, edges, initial);
  const width = Math.max(...[...pos.values()].map((p) => p.x)) + W + 20;
  const height = Math.max(...[...pos.values()].map((p) => p.y)) + H + 20;
  return (
    <>
      <svg class="machine" width={width} height={height} viewBox={`0 0 ${width} ${height}`} data-machine={m.id}>
        <defs>
          <marker id={`arrow-${m.id}`} viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
            <path d="M 0 0 L 10 5 L 0 10 z" fill="#889" />
          </marker>
        </defs>
        {edges.map((t: any) => {
          const a = pos.get(t.source);
          const b = pos.get(t.target);
          if (!a || !b) return null;
          const x1 = a.x + W;
          const y1 = a.y + H / 2;
          const back = b.x <= a.x;
          const x2 = back ? b.x + W / 2 : b.x;
          const y2 = back ? b.y + (b.y > a.y ? 0 : H) : b.y + H / 2;
          const mx = (x1 + x2) / 2;
          const d = back
            ? `M ${a.x + W / 2} ${a.y + (b.y > a.y ? H : 0)} C ${a.x + W / 2 - 40} ${(a.y + b.y) / 2}, ${x2 - 40} ${(a.y + b.y) / 2}, ${x2} ${y2}`
            : `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`;
          return (
            <path class="edge" d={d} marker-end={`url(#arrow-${m.id})`}>
              <title>{`${t.source} → ${t.target}: ${eventLabel(t.event)}`}</title>
            </path>
          );
        })}
        {states.map((s) => {
          const p = pos.get(s)!;
          return (
            <g class={`state${s === current ? ' current' : ''}${s === initial ? ' initial' : ''}`} data-state={s}>
              <rect x={p.x} y={p.y} width={W} height={H} rx="6" />
              <text x={p.x + W / 2} y={p.y + H / 2 + 4} text-anchor="middle">
                {s}
              </text>
            </g>
          );
        })}
      </svg>
      {anyEdges.length > 0 && <p class="muted">From any state: {anyEdges.map((t: any) => `${eventLabel(t.event)} → ${t.target}`).join(', ')}</p>}
    </>
  );
}

export function MachinesPage({ query }: { query: URLSearchParams }) {
  const [machines, setMachines] = useState<any[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [follow, setFollow] = useState<{ machine: string; state: string | null; label: string } | null>(null);
  const runId = query.get('run');
  const bgRunId = query.get('bgrun');
  const taskId = query.get('task');
  const [input, setInput] = useState(runId ?? bgRunId ?? taskId ?? '');
  const [live, setLive] = useState<{ value: string | null; status: string; event: string | null } | null>(null);
  const actor = runId ? `run:${runId}` : bgRunId ? `bgrun:${bgRunId}` : taskId ? `task:${taskId}` : null;
  useLiveState(actor, setLive);
  useEffect(() => {
    api('/machines').then(
      (m) => setMachines(m.machines),
      (e) => setError(String(e)),
    );
  }, []);
  usePoll(
    async () => {
      if (runId) {
        const r = await api(`/runs/${encodeURIComponent(runId)}`);
        setFollow({ machine: 'run', state: stateOf('run', r.status), label: `run ${runId}: ${r.status}` });
      } else if (bgRunId) {
        const r = await api(`/background/runs/${encodeURIComponent(bgRunId)}`);
        setFollow({ machine: 'backgroundRun', state: stateOf('backgroundRun', r.status), label: `background run ${bgRunId}: ${r.status}` });
      } else if (taskId) {
        const [t, st] = await Promise.all([
          api(`/background/tasks/${encodeURIComponent(taskId)}`),
          api(`/background/tasks/${encodeURIComponent(taskId)}/status`),
        ]);
        const state = stateOf('task', 'x', { enabled: t.enabled, paused: st.schedule_state?.paused });
        setFollow({ machine: 'task', state, label: `task ${taskId}: ${state}` });
      } else setFollow(null);
    },
    1000,
    [runId, bgRunId, taskId],
  );
  // The followed machine is the one to look at: bring it into view once it is known.
  const followed = follow?.machine ?? null;
  useEffect(() => {
    if (followed && machines.length) document.getElementById(`machine-${followed}`)?.scrollIntoView({ block: 'start' });
  }, [followed, machines.length]);
  const go = (e: Event) => {
    e.preventDefault();
    const v = input.trim();
    const kind = v.startsWith('run_') ? 'run' : v.startsWith('bgrun_') || v.startsWith('brun_') ? 'bgrun' : 'task';
    navigate(v ? `/ui/machines?${kind}=${encodeURIComponent(v)}` : '/ui/machines');
  };
  return (
    <>
      <form class="card row" onSubmit={go}>
        <h3>State machines</h3>
        <input
          name="follow"
          placeholder="follow a run id, background run id or task id"
          value={input}
          onInput={(e) => setInput((e.target as HTMLInputElement).value)}
        />
        <button type="submit">Follow</button>
        {follow && (
          <span class="following">
            {follow.label}
            {live?.value
              ? ` · live: ${live.value}${live.event ? ` (after ${eventLabel(live.event)})` : ''}`
              : follow.state === null
                ? ' (between steps: several states)'
                : ''}
          </span>
        )}
      </form>
      {error && <p class="error">{error}</p>}
      {machines.map((m) => (
        <div class={`card${follow?.machine === m.id ? ' followed' : ''}`} key={m.id} id={`machine-${m.id}`}>
          <h3>
            {m.id} <span class="muted">v{m.version}</span>
          </h3>
          <div class="scroll">
            <Graph m={m} current={follow && follow.machine === m.id ? (live?.value ?? follow.state) : null} />
          </div>
        </div>
      ))}
    </>
  );
}
