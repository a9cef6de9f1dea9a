// `agentd tasks ls|create|run|pause|resume|preview` and `agentd events tail`.
import type { Schemas } from '../client/index.js';
import { EXIT, intFlag, UsageError, type CommandSpec, type Parsed } from './args.js';
import { brief, out, printJson, remoteOf, status, table } from './remote.js';

const helpOf = (spec: CommandSpec) => `agentd ${spec.path.join(' ')}`;
const str = (v: string | boolean | undefined): string | undefined => (typeof v === 'string' ? v : undefined);

/** Tasks whose schedule state `tasks ls` looks up (one request each). */
const STATUS_LOOKUPS = 100;

function scheduleText(s: Schemas['ScheduleSpec']): string {
  switch (s.type) {
    case 'cron':
      return `cron ${s.expression ?? '?'} ${s.timezone}`;
    case 'interval':
      return `every ${s.seconds ?? '?'} s`;
    case 'once':
      return `at ${s.run_at ?? '?'}`;
    default:
      return s.type;
  }
}

export async function tasksLs(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const r = await remote.client.background.tasks.list();
  if (remote.json) {
    printJson(r);
    return EXIT.ok;
  }
  if (r.tasks.length === 0) {
    status('no tasks');
    return EXIT.ok;
  }
  // Paused and the next due time live in each task's schedule state: one status request per task,
  // a few at a time, for the first STATUS_LOOKUPS tasks (the rest show '-').
  const states = new Map<string, Schemas['BackgroundScheduleState'] | null>();
  const ids = r.tasks.slice(0, STATUS_LOOKUPS).map((t) => t.task_id);
  for (let i = 0; i < ids.length; i += 8) {
    await Promise.all(ids.slice(i, i + 8).map(async (id) => states.set(id, (await remote.client.background.tasks.status(id)).schedule_state)));
  }
  const stateOf = (t: Schemas['BackgroundTaskSpec']) => {
    if (!t.enabled) return 'disabled';
    const st = states.get(t.task_id);
    return st === undefined ? '-' : st?.paused ? 'paused' : 'active';
  };
  out(
    table(
      ['TASK', 'SCHEDULE', 'STATE', 'NEXT DUE', 'QUERY'],
      r.tasks.map((t) => [t.task_id, scheduleText(t.schedule), stateOf(t), states.get(t.task_id)?.next_due_at, brief(t.query, 50)]),
    ),
  );
  return EXIT.ok;
}

/** The schedule of `tasks create` from exactly one of --cron, --every, --at, --manual. */
export function scheduleOf(values: Parsed['values'], helpOf: string): Schemas['ScheduleSpecInput'] {
  const given = (['cron', 'every', 'at', 'manual'] as const).filter((k) => values[k] !== undefined);
  if (given.length !== 1)
    throw new UsageError(
      given.length === 0 ? 'a schedule is required: one of --cron, --every, --at, --manual' : `one schedule only (got --${given.join(', --')})`,
      helpOf,
    );
  if (values.tz !== undefined && given[0] !== 'cron') throw new UsageError('--tz goes with --cron', helpOf);
  switch (given[0]) {
    case 'cron':
      return {
        type: 'cron',
        expression: String(values.cron),
        ...(typeof values.tz === 'string' ? { timezone: values.tz } : {}),
      } as Schemas['ScheduleSpecInput'];
    case 'every': {
      const seconds = Number(values.every);
      if (!(typeof values.every === 'string' && /^\d+(\.\d+)?$/.test(values.every) && seconds > 0))
        throw new UsageError(`--every: expected a number of seconds > 0, got '${String(values.every)}'`, helpOf);
      return { type: 'interval', seconds } as Schemas['ScheduleSpecInput'];
    }
    case 'at':
      return { type: 'once', run_at: String(values.at) } as Schemas['ScheduleSpecInput'];
    default:
      return { type: 'manual' } as Schemas['ScheduleSpecInput'];
  }
}

export async function tasksCreate(p: Parsed, spec: CommandSpec): Promise<number> {
  const h = helpOf(spec);
  const id = str(p.values.id);
  const query = str(p.values.query);
  if (!id) throw new UsageError('--id is required', h);
  if (!query) throw new UsageError('--query is required', h);
  const schedule = scheduleOf(p.values, h);
  const remote = remoteOf(p);
  const t = await remote.client.background.tasks.create({
    body: { task_id: id, query, schedule, ...(p.values.replace ? { replace: true } : {}) } as Schemas['BackgroundTaskCreateRequest'],
  });
  if (remote.json) printJson(t);
  else out(`task ${t.task_id} created: ${scheduleText(t.schedule)} (next due times: agentd tasks preview ${t.task_id})`);
  return EXIT.ok;
}

/** Exit code of a background run: as `agentd run` (0 completed, 3 waiting for a person, 1 failed). */
function backgroundExit(status: Schemas['BackgroundRun']['status']): number {
  if (status === 'awaiting_approval' || status === 'awaiting_budget') return EXIT.waiting;
  if (status === 'failed' || status === 'timeout' || status === 'cancelled' || status === 'skipped') return EXIT.error;
  return EXIT.ok;
}

export async function tasksRun(p: Parsed): Promise<number> {
  const remote = remoteOf(p);
  const wait = p.values.wait === true;
  const r = await remote.client.background.tasks.run(p.positionals[0], { wait });
  if (remote.json) printJson(r);
  else {
    out(`background run ${r.run_id} of task ${p.positionals[0]}: ${r.status}${r.error ? `: ${r.error}` : ''}`);
    if (wait && r.result_preview) out(r.result_preview);
    if (r.status === 'awaiting_approval') status(`pending approvals: agentd approvals ls`);
    if (r.status === 'awaiting_budget')
      status(`decide: agentd budget grant|deny RUN (the agent run of session ${r.session_id}: agentd runs ls --session ${r.session_id})`);
  }
  return wait ? backgroundExit(r.status) : EXIT.ok;
}

async function taskAction(p: Parsed, action: 'pause' | 'resume'): Promise<number> {
  const remote = remoteOf(p);
  const id = p.positionals[0];
  const r = await remote.client.background.tasks[action](id);
  if (remote.json) printJson(r);
  else out(`task ${id}: ${r.status}`);
  return EXIT.ok;
}

export const tasksPause = (p: Parsed) => taskAction(p, 'pause');
export const tasksResume = (p: Parsed) => taskAction(p, 'resume');

export async function tasksPreview(p: Parsed, spec: CommandSpec): Promise<number> {
  const remote = remoteOf(p);
  const count = intFlag(p.values.count, 'count', helpOf(spec));
  const r = await remote.client.background.tasks.preview(p.positionals[0], count !== undefined ? { count } : {});
  if (remote.json) printJson(r);
  else {
    out(`task ${r.task_id} (${r.timezone}):`);
    out(
      table(
        ['DUE (UTC)', 'LOCAL', 'NOTE'],
        r.upcoming.map((o) => [o.due_at, o.local_time, o.note ?? '']),
      ),
    );
  }
  return EXIT.ok;
}

export async function eventsTail(p: Parsed, spec: CommandSpec): Promise<number> {
  const h = helpOf(spec);
  const limit = intFlag(p.values.limit, 'limit', h);
  const runId = str(p.values.run);
  let session = str(p.values.session);
  if (!session && !runId) throw new UsageError('--session or --run is required (events are followed per session)', h);
  const remote = remoteOf(p);
  if (!session) session = (await remote.client.runs.get(runId!)).session_id;
  // Ctrl-C ends the follow cleanly (exit 0): the stream is closed, nothing is left half-printed.
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let seen = 0;
  try {
    for await (const f of remote.client.events.follow(session, {
      run_id: runId,
      after: str(p.values.from),
      signal: stop.signal,
      onReconnect: (attempt, last) => status(`· reconnecting (attempt ${attempt}) after ${last ?? 'the start'}`),
    })) {
      if (f.kind === 'session') {
        if (!remote.json) status(`following session ${f.data.session_id}${runId ? `, run ${runId}` : ''} (Ctrl-C to stop)`);
        continue;
      }
      if (f.kind === 'error') {
        status(`error: ${f.data.message}`);
        return EXIT.error;
      }
      if (remote.json) printJson({ event: f.event, id: f.id, data: f.data });
      else out(eventLine(f.data));
      if (limit !== undefined && ++seen >= limit) break;
    }
  } catch (err) {
    if (!stop.signal.aborted) throw err;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  return EXIT.ok;
}

/** One event as a line: cursor, time, type, run, actor, and the gist of its payload. */
export function eventLine(e: Schemas['TelemetryEvent']): string {
  const actor = e.actor ? `${e.actor.type}${e.actor.id ? `:${e.actor.id}` : ''}` : '';
  const extra = e.error
    ? `error: ${e.error.message}`
    : e.output !== undefined && e.output !== null
      ? brief(e.output, 60)
      : e.input !== undefined && e.input !== null
        ? brief(e.input, 60)
        : '';
  return [e.cursor ?? '-', e.timestamp, e.event_type, e.metadata?.run_id ?? '-', actor, extra].filter((x) => x !== '').join('  ');
}
