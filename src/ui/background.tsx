// Background: tasks (schedule preview with DST notes, create, edit, pause/resume, run now) and
// their runs (attempts, workspace files with download).
import { useEffect, useState } from 'preact/hooks';
import { api, download, type Access } from './api.js';
import { link, usePoll } from './router.js';
import { useNewestRuns, type NewestRuns } from './newest-runs.js';
import { Status, fmtTime } from './runs.js';

const enc = encodeURIComponent;
/** Background runs a page (GET /background/runs?order=desc); older pages on demand, at most KEEP_BG_RUNS kept. */
const BG_PAGE = 100;
const KEEP_BG_RUNS = 1000;

/** How long a task's "queued a run" / "paused" / "resumed" notice stays. */
const NOTICE_MS = 4000;

/** The agent run of a background run's attempt n (machines/background-run-model.ts, agentRunIdFor). */
const agentRunId = (runId: string, attempt: number): string => (attempt <= 1 ? runId : `${runId}.a${attempt}`);

/** Links to the run page (trace included) of the agent run of one attempt. */
function AttemptLinks({ runId, attempt }: { runId: string; attempt: number }) {
  if (attempt < 1) return null;
  const id = agentRunId(runId, attempt);
  return (
    <span class="attempt-links">
      <a class="run-page" href={`/ui/runs/${enc(id)}`} onClick={link}>
        run
      </a>{' '}
      <a class="run-trace" href={`/ui/runs/${enc(id)}#trace`} onClick={link}>
        trace
      </a>
    </span>
  );
}

function scheduleText(s: any): string {
  if (!s) return '';
  if (s.type === 'cron') return `cron "${s.expression}" (${s.timezone})`;
  if (s.type === 'interval') return `every ${s.seconds} s`;
  if (s.type === 'once') return `once at ${fmtTime(s.run_at)}`;
  return 'manual';
}

/** The schedule fields of the form as a ScheduleSpec. */
function scheduleOf(type: string, value: string, timezone: string): Record<string, unknown> {
  if (type === 'cron') return { type, expression: value, timezone: timezone || 'UTC' };
  if (type === 'interval') return { type, seconds: Number(value) };
  if (type === 'once') return { type, run_at: new Date(value).toISOString() };
  return { type: 'manual' };
}

function TaskForm({ task, onSaved }: { task?: any; onSaved: () => void }) {
  const s = task?.schedule ?? { type: 'manual' };
  const [taskId, setTaskId] = useState(task?.task_id ?? '');
  const [query, setQuery] = useState(task?.query ?? '');
  const [type, setType] = useState<string>(s.type);
  const [value, setValue] = useState<string>(s.expression ?? (s.seconds != null ? String(s.seconds) : (s.run_at ?? '')));
  const [tz, setTz] = useState<string>(s.timezone ?? 'UTC');
  const [error, setError] = useState<string | null>(null);
  const save = async (e: Event) => {
    e.preventDefault();
    setError(null);
    try {
      const schedule = scheduleOf(type, value, tz);
      if (task) await api(`/background/tasks/${enc(task.task_id)}`, { method: 'PATCH', body: { query, schedule } });
      else {
        await api('/background/tasks', { method: 'POST', body: { task_id: taskId, query, schedule } });
        setTaskId('');
        setQuery('');
        setValue('');
      }
      onSaved();
    } catch (err) {
      setError(String(err));
    }
  };
  return (
    <form class="task-form" onSubmit={save}>
      <div class="row">
        {!task && <input name="task_id" placeholder="task id" value={taskId} onInput={(e) => setTaskId((e.target as HTMLInputElement).value)} required />}
        <input name="task_query" class="grow" placeholder="query" value={query} onInput={(e) => setQuery((e.target as HTMLInputElement).value)} required />
      </div>
      <div class="row">
        <select name="schedule_type" value={type} onChange={(e) => setType((e.target as HTMLSelectElement).value)}>
          {['manual', 'cron', 'interval', 'once'].map((t) => (
            <option value={t}>{t}</option>
          ))}
        </select>
        {type !== 'manual' && (
          <input
            name="schedule_value"
            placeholder={type === 'cron' ? '0 9 * * *' : type === 'interval' ? 'seconds' : '2026-12-01T09:00:00Z'}
            value={value}
            onInput={(e) => setValue((e.target as HTMLInputElement).value)}
          />
        )}
        {type === 'cron' && <input name="timezone" placeholder="time zone" value={tz} onInput={(e) => setTz((e.target as HTMLInputElement).value)} />}
        <button type="submit">{task ? 'Save' : 'Create task'}</button>
      </div>
      {error && <p class="error">{error}</p>}
    </form>
  );
}

function Task({ task, access, refresh, tick }: { task: any; access: Access; refresh: () => void; tick: number }) {
  const [preview, setPreview] = useState<any[] | null>(null);
  const [state, setState] = useState<any>(null);
  const [editing, setEditing] = useState(false);
  const [msg, setMsg] = useState<{ text: string; ok: boolean } | null>(null);
  // "queued a run", "paused": a passing notice, gone after a few seconds (an error stays).
  useEffect(() => {
    if (!msg?.ok) return;
    const timer = setTimeout(() => setMsg(null), NOTICE_MS);
    return () => clearTimeout(timer);
  }, [msg]);
  usePoll(
    async () => {
      const st = await api(`/background/tasks/${enc(task.task_id)}/status`).catch(() => null);
      setState(st);
      if (task.schedule?.type !== 'manual') {
        const p = await api(`/background/tasks/${enc(task.task_id)}/schedule?count=3`).catch(() => null);
        setPreview(p?.upcoming ?? null);
      }
    },
    5000,
    [task.task_id, task.updated_at, tick],
  );
  const act = (path: string, label: string) => async () => {
    try {
      await api(`/background/tasks/${enc(task.task_id)}/${path}`, { method: 'POST', body: {} });
      setMsg({ text: label, ok: true });
      refresh();
    } catch (e) {
      setMsg({ text: String(e), ok: false });
    }
  };
  const paused = state?.schedule_state?.paused;
  return (
    <div class="card task" data-task={task.task_id}>
      <h3 class="mono">
        {task.task_id} {paused && <span class="status s-paused">paused</span>} {!task.enabled && <span class="status s-disabled">disabled</span>}
      </h3>
      <p>{task.query}</p>
      <p class="muted">
        {scheduleText(task.schedule)} · runs {state?.runs ?? '…'} · active {state?.active_runs ?? '…'}
      </p>
      {(paused || !task.enabled) && task.schedule?.type !== 'manual' && (
        <p class="muted no-due">{paused ? 'Paused: nothing is due until it is resumed.' : 'Disabled: nothing is due.'}</p>
      )}
      {preview && !paused && task.enabled && (
        <ul class="preview">
          {preview.map((o) => (
            <li>
              {o.local_time} <span class="muted">({o.due_at})</span>
              {o.note && <span class="note"> ⚠ {o.note}</span>}
            </li>
          ))}
        </ul>
      )}
      {access.canOperate && (
        <div class="row">
          <button class="run-now" onClick={act('run', 'queued a run')}>
            Run now
          </button>
          {paused ? (
            <button class="resume" onClick={act('resume', 'resumed')}>
              Resume
            </button>
          ) : (
            <button class="pause" onClick={act('pause', 'paused')}>
              Pause
            </button>
          )}
          <button class="edit" onClick={() => setEditing(!editing)}>
            {editing ? 'Close' : 'Edit'}
          </button>
        </div>
      )}
      <a href={`/ui/machines?task=${enc(task.task_id)}`} onClick={link}>
        machine
      </a>
      {' · '}
      <a class="task-runs" href={`/ui/background/tasks/${enc(task.task_id)}`} onClick={link}>
        runs
      </a>
      {editing && (
        <TaskForm
          task={task}
          onSaved={() => {
            setEditing(false);
            refresh();
          }}
        />
      )}
      {msg && <p class={msg.ok ? 'muted notice' : 'error notice'}>{msg.text}</p>}
    </div>
  );
}

function BgRun({ run }: { run: any }) {
  const [open, setOpen] = useState(false);
  const [attempts, setAttempts] = useState<any[]>([]);
  const [files, setFiles] = useState<any[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const toggle = async () => {
    setOpen(!open);
    if (open) return;
    try {
      const [a, w] = await Promise.all([api(`/background/runs/${enc(run.run_id)}/attempts`), api(`/background/runs/${enc(run.run_id)}/workspace`)]);
      setAttempts(a.attempts);
      setFiles(w.files);
    } catch (e) {
      setError(String(e));
    }
  };
  return (
    <>
      <tr class="bg-run" data-run={run.run_id} onClick={toggle}>
        <td class="mono">
          {run.run_id} <AttemptLinks runId={run.run_id} attempt={run.attempt} />
        </td>
        <td>{run.task_id}</td>
        <td>
          <Status s={run.status} />
        </td>
        <td>
          {run.attempt}/{run.max_attempts}
        </td>
        <td>{run.trigger_type}</td>
        <td>{fmtTime(run.queued_at)}</td>
        <td class="snippet">{(run.result_preview ?? '').slice(0, 60)}</td>
      </tr>
      {open && (
        <tr>
          <td colSpan={7}>
            {error && <p class="error">{error}</p>}
            <b>Attempts</b>
            <ul>
              {attempts.map((a) => (
                <li>
                  #{a.attempt_number} <Status s={a.status} /> {fmtTime(a.started_at)} → {fmtTime(a.finished_at)} {a.reason ? ` · ${a.reason}` : ''}{' '}
                  {a.error ? <span class="error">{String(a.error).slice(0, 160)}</span> : ''} <AttemptLinks runId={run.run_id} attempt={a.attempt_number} />
                </li>
              ))}
            </ul>
            <b>Workspace</b>
            {files && files.length === 0 && <p class="muted">empty</p>}
            <ul class="files">
              {(files ?? []).map((f) => (
                <li>
                  {f.is_dir ? (
                    `${f.path}/`
                  ) : (
                    <a
                      href="#"
                      class="file"
                      onClick={(e) => {
                        e.preventDefault();
                        download(`/background/runs/${enc(run.run_id)}/workspace/files/${f.path.split('/').map(enc).join('/')}`, f.name).catch((err) =>
                          setError(String(err)),
                        );
                      }}
                    >
                      {f.path}
                    </a>
                  )}{' '}
                  <span class="muted">{f.is_dir ? '' : `${f.size} B`}</span>
                </li>
              ))}
            </ul>
            <a href={`/ui/machines?bgrun=${run.run_id}`} onClick={link}>
              machine
            </a>
          </td>
        </tr>
      )}
    </>
  );
}

export function BackgroundPage({ access }: { access: Access }) {
  const [tasks, setTasks] = useState<any[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  const runs = useNewestBgRuns('', tick);
  usePoll(
    async () => {
      try {
        setTasks((await api('/background/tasks?limit=500')).tasks);
        setError(null);
      } catch (e) {
        setError(String(e));
      }
    },
    2000,
    [tick],
  );
  const refresh = () => setTick((n) => n + 1);
  return (
    <>
      {access.canOperate && (
        <div class="card">
          <h3>New task</h3>
          <TaskForm onSaved={refresh} />
        </div>
      )}
      {(error ?? runs.error) && <p class="error">{error ?? runs.error}</p>}
      {tasks.map((t) => (
        <Task key={t.task_id} task={t} access={access} refresh={refresh} tick={tick} />
      ))}
      {tasks.length === 0 && <p class="muted">No tasks.</p>}
      <BgRunsTable title="Background runs" list={runs} />
    </>
  );
}

/** The newest BG_PAGE background runs (`filter`: extra query, e.g. `task_id=x`); older pages on demand. */
function useNewestBgRuns(filter: string, tick: number): NewestRuns {
  return useNewestRuns(`/background/runs?order=desc&limit=${BG_PAGE}${filter ? `&${filter}` : ''}`, KEEP_BG_RUNS, tick);
}

function BgRunsTable({ title, list }: { title: string; list: NewestRuns }) {
  const { runs, loadOlder } = list;
  return (
    <div class="card">
      <h3>{title}</h3>
      <table class="runs bg-runs">
        <thead>
          <tr>
            <th>run</th>
            <th>task</th>
            <th>status</th>
            <th>attempt</th>
            <th>trigger</th>
            <th>queued</th>
            <th>result</th>
          </tr>
        </thead>
        <tbody>
          {runs.map((r) => (
            <BgRun key={r.run_id} run={r} />
          ))}
        </tbody>
      </table>
      {runs.length === 0 && <p class="muted">No runs yet.</p>}
      {loadOlder && (
        <button class="older" onClick={() => void loadOlder()}>
          Older runs
        </button>
      )}
    </div>
  );
}

/** One task and its own runs (newest first): /ui/background/tasks/<task_id>. */
export function TaskRunsPage({ taskId, access }: { taskId: string; access: Access }) {
  const [task, setTask] = useState<any>(null);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  const runs = useNewestBgRuns(`task_id=${enc(taskId)}`, tick);
  usePoll(
    async () => {
      try {
        setTask(await api(`/background/tasks/${enc(taskId)}`));
        setError(null);
      } catch (e) {
        setError(String(e));
      }
    },
    2000,
    [taskId, tick],
  );
  return (
    <>
      <p>
        <a href="/ui/background" onClick={link}>
          ← all tasks
        </a>
      </p>
      {(error ?? runs.error) && <p class="error">{error ?? runs.error}</p>}
      {task && <Task task={task} access={access} refresh={() => setTick((n) => n + 1)} tick={tick} />}
      <BgRunsTable title={`Runs of ${taskId}`} list={runs} />
    </>
  );
}
