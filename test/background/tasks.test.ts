// Background agents and tasks through HTTP against a real server (demo model): CRUD, validation,
// schedule preview, pause/resume, status answers.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BackgroundAgentsResponse,
  BackgroundManagerStatusResponse,
  BackgroundTaskSpec,
  BackgroundTaskStatusResponse,
  BackgroundTasksResponse,
  HTTPValidationError,
  SchedulePreviewResponse,
} from '../../src/schemas/index.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { api, type Api } from './helpers.js';

let server: TestServer;
let a: Api;

beforeAll(async () => {
  server = await startTestServer({ background: { poll_interval_ms: 50 } });
  a = api(server.url);
});

afterAll(async () => {
  await server.stop();
  server.cleanup();
});

const locs = (body: any): string[] => HTTPValidationError.parse(body).detail.map((d) => d.loc.join('.'));

describe('background agents', () => {
  it('registers the default agent at start-up and lists it', async () => {
    const r = await a.get('/background/agents');
    expect(r.status).toBe(200);
    const list = BackgroundAgentsResponse.parse(r.body);
    expect(list.agents.map((x) => x.agent_id)).toContain('default');
    expect(list.agents.find((x) => x.agent_id === 'default')?.metadata).toMatchObject({ served_agent: true });
  });

  it('registers a spec of its own, refuses a duplicate without replace, replaces with it, deletes', async () => {
    const spec = { agent_id: 'writer', name: 'Writer', system_instruction: 'Write short notes.', model_config: { model: 'x' } };
    const created = await a.post('/background/agents', { spec });
    expect(created.status).toBe(200);
    expect(created.body).toMatchObject({ agent_id: 'writer', system_instruction: 'Write short notes.', created_at: expect.any(String) });
    expect((await a.post('/background/agents', { spec })).status).toBe(409);
    const replaced = await a.post('/background/agents', { spec: { ...spec, name: 'Writer 2' }, replace: true });
    expect(replaced.status).toBe(200);
    expect(replaced.body.name).toBe('Writer 2');
    expect((await a.get('/background/agents/writer')).body.name).toBe('Writer 2');
    // The served agent under a new id.
    const served = await a.post('/background/agents', { agent_id: 'served2' });
    expect(served.body).toMatchObject({ agent_id: 'served2', metadata: { served_agent: true } });
    expect((await a.del('/background/agents/served2')).body).toEqual({ status: 'deleted' });
    expect((await a.get('/background/agents/served2')).status).toBe(404);
  });

  it('answers 422 when agent_id and spec.agent_id differ', async () => {
    const r = await a.post('/background/agents', { agent_id: 'a1', spec: { agent_id: 'a2' } });
    expect(r.status).toBe(422);
    expect(locs(r.body)).toContain('body.spec.agent_id');
  });
});

describe('background tasks: CRUD', () => {
  it('creates with defaults, gets, lists, patches and deletes a task', async () => {
    const created = await a.post('/background/tasks', { task_id: 'crud-1', query: 'hello', schedule: { type: 'manual' }, metadata: { team: 'x' } });
    expect(created.status).toBe(200);
    const spec = BackgroundTaskSpec.parse(created.body);
    expect(spec).toMatchObject({
      task_id: 'crud-1',
      agent_id: 'default',
      enabled: true,
      overlap_policy: 'skip_if_running',
      retry_policy: { backoff: 'fixed', initial_delay_seconds: 30, max_delay_seconds: 300, max_retries: 0 },
      session_policy: { mode: 'task' },
      workspace_policy: { namespace_template: 'background/{agent_id}/{task_id}/{run_id}', write_events_jsonl: true, write_run_json: true },
    });
    expect((await a.get('/background/tasks/crud-1')).body).toEqual(created.body);
    const list = BackgroundTasksResponse.parse((await a.get('/background/tasks')).body);
    expect(list.tasks.map((t) => t.task_id)).toContain('crud-1');
    expect((await a.get('/background/tasks?agent_id=nobody')).body).toEqual({ tasks: [], total: 0, next_cursor: null });

    const patched = await a.patch('/background/tasks/crud-1', { query: 'changed', overlap_policy: 'queue_next', metadata: null });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ query: 'changed', overlap_policy: 'queue_next', metadata: { team: 'x' } });
    // An enabled task is an actor of the task machine (in the `group:tasks` supervisor), and sees the patch.
    const actor = server.runtime.system.get('task:crud-1');
    expect((actor?.getSnapshot() as { context: { overlap_policy: string } } | undefined)?.context.overlap_policy).toBe('queue_next');

    expect((await a.del('/background/tasks/crud-1')).body).toEqual({ status: 'deleted' });
    expect(server.runtime.system.get('task:crud-1')).toBeUndefined();
    expect((await a.get('/background/tasks/crud-1')).status).toBe(404);
    expect((await a.del('/background/tasks/crud-1')).status).toBe(404);
    expect((await a.patch('/background/tasks/crud-1', { query: 'x' })).status).toBe(404);
  });

  it('refuses a duplicate without replace and starts a new schedule revision with it', async () => {
    const body = { task_id: 'dup-1', query: 'q', schedule: { type: 'interval', seconds: 3600 } };
    expect((await a.post('/background/tasks', body)).status).toBe(200);
    const again = await a.post('/background/tasks', body);
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ error: 'Conflict' });
    const replaced = await a.post('/background/tasks', { ...body, query: 'q2', replace: true });
    expect(replaced.status).toBe(200);
    expect(replaced.body.query).toBe('q2');
    const st = BackgroundTaskStatusResponse.parse((await a.get('/background/tasks/dup-1/status')).body);
    expect(st.schedule_state?.schedule_revision).toBe(2);
    // A re-created task keeps counting revisions, so old occurrence ids are never reused.
    await a.del('/background/tasks/dup-1');
    await a.post('/background/tasks', body);
    expect((await a.get('/background/tasks/dup-1/status')).body.schedule_state.schedule_revision).toBe(3);
    await a.del('/background/tasks/dup-1');
  });

  it('answers 404 for a task of an unregistered agent', async () => {
    const r = await a.post('/background/tasks', { task_id: 'orphan', agent_id: 'ghost', query: 'q', schedule: { type: 'manual' } });
    expect(r.status).toBe(404);
    expect(r.body).toMatchObject({ error: 'NotFound' });
  });
});

describe('background tasks: validation (422)', () => {
  const base = { task_id: 'v-1', query: 'q' };
  const cases: Array<[string, unknown, string]> = [
    ['interval without seconds', { ...base, schedule: { type: 'interval' } }, 'body.schedule.seconds'],
    ['interval with seconds 0', { ...base, schedule: { type: 'interval', seconds: 0 } }, 'body.schedule.seconds'],
    ['once without run_at', { ...base, schedule: { type: 'once' } }, 'body.schedule.run_at'],
    ['cron without expression', { ...base, schedule: { type: 'cron' } }, 'body.schedule.expression'],
    ['cron with 6 fields', { ...base, schedule: { type: 'cron', expression: '0 0 * * * *' } }, 'body.schedule.expression'],
    ['cron with a bad field', { ...base, schedule: { type: 'cron', expression: '99 * * * *' } }, 'body.schedule.expression'],
    ['manual with seconds', { ...base, schedule: { type: 'manual', seconds: 5 } }, 'body.schedule.seconds'],
    ['unknown time zone', { ...base, schedule: { type: 'cron', expression: '0 9 * * *', timezone: 'Mars/Olympus' } }, 'body.schedule.timezone'],
    [
      'end_at before start_at',
      { ...base, schedule: { type: 'interval', seconds: 5, start_at: '2030-01-02T00:00:00Z', end_at: '2030-01-01T00:00:00Z' } },
      'body.schedule.end_at',
    ],
    ['negative jitter', { ...base, schedule: { type: 'interval', seconds: 5, jitter_seconds: -1 } }, 'body.schedule.jitter_seconds'],
    ['unknown field', { ...base, schedule: { type: 'manual' }, colour: 'red' }, 'body'],
    ['unknown schedule field', { ...base, schedule: { type: 'manual', every: 3 } }, 'body.schedule'],
    ['task id ..', { ...base, task_id: '..', schedule: { type: 'manual' } }, 'body.task_id'],
    ['task id with a slash', { ...base, task_id: 'a/../b', schedule: { type: 'manual' } }, 'body.task_id'],
    ['agent id ..', { ...base, agent_id: '..', schedule: { type: 'manual' } }, 'body.agent_id'],
    [
      'template escaping the root',
      { ...base, schedule: { type: 'manual' }, workspace_policy: { namespace_template: '../{run_id}' } },
      'body.workspace_policy.namespace_template',
    ],
    ['fixed session without id', { ...base, schedule: { type: 'manual' }, session_policy: { mode: 'fixed' } }, 'body.session_policy.session_id'],
    ['unknown retry field', { ...base, schedule: { type: 'manual' }, retry_policy: { tries: 3 } }, 'body.retry_policy'],
  ];
  for (const [name, body, loc] of cases) {
    it(name, async () => {
      const r = await a.post('/background/tasks', body);
      expect(r.status).toBe(422);
      expect(locs(r.body).some((l) => l === loc || l.startsWith(`${loc}.`))).toBe(true);
    });
  }

  it('refuses ids with .. in paths', async () => {
    expect((await a.get('/background/tasks/..%2F..%2Fetc')).status).toBe(422);
    expect((await a.get('/background/runs/a..b')).status).toBe(422);
    expect((await a.get('/background/runs/a..b/events')).status).toBe(422);
  });

  it('refuses a bad patch and a bad run request', async () => {
    await a.post('/background/tasks', { task_id: 'v-2', query: 'q', schedule: { type: 'manual' } });
    expect((await a.patch('/background/tasks/v-2', { schedule: { type: 'interval' } })).status).toBe(422);
    expect((await a.patch('/background/tasks/v-2', { bogus: 1 })).status).toBe(422);
    expect((await a.post('/background/tasks/v-2/run', { wait: 'soon' })).status).toBe(422);
    await a.del('/background/tasks/v-2');
  });
});

describe('background tasks: schedules', () => {
  it('previews the next due times in the task time zone, with a note where DST moved one', async () => {
    await a.post('/background/tasks', {
      task_id: 'dst-1',
      query: 'q',
      enabled: false,
      schedule: { type: 'cron', expression: '30 2 * * *', timezone: 'America/New_York', start_at: '2099-03-06T12:00:00Z' },
    });
    const r = await a.get('/background/tasks/dst-1/schedule?count=4');
    expect(r.status).toBe(200);
    const p = SchedulePreviewResponse.parse(r.body);
    expect(p.timezone).toBe('America/New_York');
    expect(p.upcoming).toHaveLength(4);
    // 2099-03-08 is the spring-forward day: 02:30 does not exist and runs at 03:00 EDT instead.
    expect(p.upcoming[0]).toMatchObject({ due_at: '2099-03-07T07:30:00.000Z', local_time: '2099-03-07T02:30:00-05:00', note: null });
    expect(p.upcoming[1]).toMatchObject({ due_at: '2099-03-08T07:00:00.000Z', local_time: '2099-03-08T03:00:00-04:00' });
    expect(p.upcoming[1].note).toEqual(expect.any(String));
    expect(p.upcoming[2]).toMatchObject({ due_at: '2099-03-09T06:30:00.000Z', note: null });
    expect((await a.get('/background/tasks/dst-1/schedule?count=0')).status).toBe(422);
    expect((await a.get('/background/tasks/nope/schedule')).status).toBe(404);
    await a.del('/background/tasks/dst-1');
  });

  it('pauses and resumes the schedule; the state shows it', async () => {
    await a.post('/background/tasks', { task_id: 'pause-1', query: 'q', schedule: { type: 'interval', seconds: 3600 } });
    expect((await a.post('/background/tasks/pause-1/pause')).body).toEqual({ status: 'paused' });
    let st = BackgroundTaskStatusResponse.parse((await a.get('/background/tasks/pause-1/status')).body);
    // Paused, it is due at no time (the stored next due time would fall into the past).
    expect(st.schedule_state).toMatchObject({ paused: true, paused_reason: expect.any(String), next_due_at: null });
    expect((await a.post('/background/tasks/pause-1/resume')).body).toEqual({ status: 'resumed' });
    st = BackgroundTaskStatusResponse.parse((await a.get('/background/tasks/pause-1/status')).body);
    expect(st.schedule_state).toMatchObject({ paused: false, paused_reason: null, next_due_at: expect.any(String) });
    expect((await a.post('/background/tasks/nope/pause')).status).toBe(404);
    await a.del('/background/tasks/pause-1');
  });

  it('does not run a disabled task by hand (404) and counts nothing for it', async () => {
    await a.post('/background/tasks', { task_id: 'off-1', query: 'q', schedule: { type: 'manual' }, enabled: false });
    expect((await a.post('/background/tasks/off-1/run', {})).status).toBe(404);
    expect((await a.post('/background/tasks/nope/run', {})).status).toBe(404);
    const st = BackgroundTaskStatusResponse.parse((await a.get('/background/tasks/off-1/status')).body);
    expect(st).toMatchObject({ enabled: false, runs: 0, active_runs: 0, latest_run: null });
    await a.del('/background/tasks/off-1');
  });

  it('runs in the session its policy names', async () => {
    await a.post('/background/tasks', {
      task_id: 'sess-1',
      query: 'hello',
      schedule: { type: 'manual' },
      session_policy: { mode: 'fixed', session_id: 'my-session' },
    });
    const r = await a.post('/background/tasks/sess-1/run', { wait: true });
    expect(r.body).toMatchObject({ status: 'completed', session_id: 'my-session' });
    const history = await a.get('/sessions/my-session/history');
    expect(history.status).toBe(200);
    expect(history.body.messages.map((m: any) => m.content)).toContain('hello');
    await a.del('/background/tasks/sess-1?delete_runs=true');
  });

  it('queues a manual run for a request without a body', async () => {
    await a.post('/background/tasks', { task_id: 'nobody-1', query: 'hello', schedule: { type: 'manual' } });
    const res = await fetch(`${server.url}/background/tasks/nobody-1/run`, { method: 'POST' });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ task_id: 'nobody-1', trigger_type: 'manual', status: expect.stringMatching(/queued|claimed|running|completed/) });
    await a.del('/background/tasks/nobody-1?delete_runs=true');
  });

  it('reports the manager status', async () => {
    const r = await a.get('/background/status');
    const s = BackgroundManagerStatusResponse.parse(r.body);
    expect(s).toMatchObject({ running: true, initialized: true, lease_seconds: 30, worker_id: expect.stringMatching(/^worker_/) });
    expect(s.agents).toBeGreaterThanOrEqual(1);
    expect(Object.keys(s.status_counts)).toEqual(expect.arrayContaining(['queued', 'running', 'completed', 'skipped']));
  });
});
