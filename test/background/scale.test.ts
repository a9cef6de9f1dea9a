// Background at scale and workspace confinement, through HTTP against real servers:
// - a namespace template that names another session's folder, or tries to leave the task's own
//   namespace (.., absolute, encoded, backslash, an id of ".."), is refused with 422 at the field;
// - no answer shows a server path (the data dir never appears in any background answer);
// - a scheduled occurrence skipped by the overlap policy costs a counter, not a run row or folder;
// - background.run_retention deletes ended runs (by count per task and by age) and their folders;
// - DELETE /background/tasks/{id}?delete_runs=true removes the runs and the task's workspace tree.
import { existsSync, mkdirSync, readdirSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MIRROR_BACKLOG_MAX } from '../../src/background/run-workspace.js';
import { QUEUED_COUNT_MAX_AGE_MS } from '../../src/background/queue-bound.js';
import type { MirrorQueue } from '../../src/background/workspace-mirror.js';
import { HTTPValidationError } from '../../src/schemas/index.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, startTestServer, type TestServer } from '../helpers/server.js';
import { waitFor } from '../helpers/wait.js';
import { api, directModel, TOOLS, waitRun, type Api } from './helpers.js';

const base = {
  agent: { tools: { local: TOOLS, builtin: ['workspace'] } },
  governance: { rules: [{ tools: ['bg_ask'], effect: 'ask' }] },
  background: { poll_interval_ms: 50, lease_seconds: 2, concurrency: 4 },
};

let model: ScriptedOpenAI;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  directModel(model);
});

afterAll(async () => {
  await model.close();
});

const locs = (body: unknown): string[] => HTTPValidationError.parse(body).detail.map((d) => d.loc.join('.'));
const wsRoot = (s: TestServer) => join(s.dataDir, 'workspaces');

async function withServer(config: Record<string, any>, fn: (s: TestServer, a: Api) => Promise<void>): Promise<void> {
  const s = await startTestServer(config, { modelUrl: model.url });
  try {
    await fn(s, api(s.url));
  } finally {
    await s.stop();
    s.cleanup();
  }
}

describe('workspace confinement', () => {
  let server: TestServer;
  let a: Api;

  beforeAll(async () => {
    server = await startTestServer(base, { modelUrl: model.url });
    a = api(server.url);
    // Another session's folder, with a file a task must not reach.
    mkdirSync(join(wsRoot(server), 'sessions', 'victim'), { recursive: true });
    writeFileSync(join(wsRoot(server), 'sessions', 'victim', 'secret.txt'), 'session data');
  });

  afterAll(async () => {
    await server.stop();
    server.cleanup();
  });

  const create = (task_id: string, namespace_template: string) =>
    a.post('/background/tasks', { task_id, query: 'hello', schedule: { type: 'manual' }, workspace_policy: { namespace_template } });

  it("refuses a template that names another session's folder or another task's namespace", async () => {
    for (const t of ['sessions/victim', 'sessions/{run_id}', 'background/{agent_id}/other-task/{run_id}', 'background/{agent_id}', '{run_id}', 'shared']) {
      const r = await create('thief', t);
      expect(r.status, t).toBe(422);
      expect(locs(r.body), t).toEqual(['body.workspace_policy.namespace_template']);
    }
    expect((await a.get('/background/tasks/thief')).status).toBe(404);
  });

  it('refuses traversal: .., absolute, encoded, backslash, and an id that renders to ..', async () => {
    for (const t of [
      'background/{agent_id}/{task_id}/../../../sessions/victim',
      'background/{agent_id}/{task_id}/..',
      '/etc/agentd',
      '~/x',
      'C:/x',
      'background/{agent_id}/{task_id}/%2e%2e/%2E%2E/sessions/victim',
      'background/{agent_id}/{task_id}/%2fetc',
      'background\\{agent_id}\\{task_id}\\..\\..\\sessions\\victim',
      'background/{agent_id}/{task_id}/./x',
      'background/{agent_id}/{task_id}/\u0000',
    ]) {
      const r = await create('trav', t);
      expect(r.status, t).toBe(422);
      expect(locs(r.body), t).toEqual(['body.workspace_policy.namespace_template']);
    }
    // The default template with a task id of "..": the rendered path would leave the namespace.
    const dots = await a.post('/background/tasks', { task_id: '..', query: 'hello', schedule: { type: 'manual' } });
    expect(dots.status).toBe(422); // refused by the id rule or, failing that, by the rendered path
  });

  it('PATCH is checked the same way', async () => {
    expect((await create('patched', 'background/{agent_id}/{task_id}/{run_id}')).status).toBe(200);
    const r = await a.patch('/background/tasks/patched', { workspace_policy: { namespace_template: 'sessions/victim' } });
    expect(r.status).toBe(422);
    expect(locs(r.body)).toEqual(['body.workspace_policy.namespace_template']);
    expect((await a.get('/background/tasks/patched')).body.workspace_policy.namespace_template).toBe('background/{agent_id}/{task_id}/{run_id}');
  });

  it('accepts templates inside the task namespace, a shared per-task folder included', async () => {
    expect((await create('inside', 'background/{agent_id}/{task_id}/runs/{run_id}')).status).toBe(200);
    expect((await create('onefolder', 'background/{agent_id}/{task_id}')).status).toBe(200);
    expect((await create('literal', 'background/default/literal/x/{run_id}')).status).toBe(200);
  });

  it('no background answer shows a server path: the data dir never appears', async () => {
    const t = 'paths';
    const answers: string[] = [];
    const keep = (r: { status: number; text: string }) => {
      expect(r.status, r.text).toBe(200);
      answers.push(r.text);
      return r;
    };
    keep(await a.post('/background/tasks', { task_id: t, query: 'CALL workspace_write {"path": "out.txt", "content": "x"}', schedule: { type: 'manual' } }));
    const run = JSON.parse(keep(await a.post(`/background/tasks/${t}/run`, { wait: true })).text);
    expect(run.status).toBe('completed');
    expect(run.workspace_path).toBe(`background/default/${t}/${run.run_id}`);
    const ws = keep(await a.get(`/background/runs/${run.run_id}/workspace`));
    expect(JSON.parse(ws.text).workspace_path).toBe(run.workspace_path);
    expect(JSON.parse(ws.text).files.map((f: { path: string }) => f.path)).toEqual(expect.arrayContaining(['out.txt', 'run.json', 'events.jsonl']));
    for (const p of [
      `/background/tasks/${t}`,
      '/background/tasks',
      `/background/tasks/${t}/status`,
      `/background/runs/${run.run_id}`,
      `/background/runs?task_id=${t}`,
      '/background/runs',
      `/background/runs/${run.run_id}/events`,
      `/background/runs/${run.run_id}/attempts`,
      '/background/status',
      '/background/agents',
      '/background/agents/default',
      `/background/runs/${run.run_id}/workspace/files/run.json`,
    ])
      keep(await a.get(p));
    // A refused template's message names the rendered template, not the server path.
    answers.push((await create('thief2', 'sessions/victim')).text);
    const dirs = [server.dataDir, realpathSync(server.dataDir)];
    for (const text of answers) for (const d of dirs) expect(text).not.toContain(d);
  });
});

describe('shared namespaces, when the config allows them', () => {
  it('background.workspace.allow_shared_namespaces lets a template leave the task namespace (still not the root)', async () => {
    await withServer({ ...base, background: { ...base.background, workspace: { allow_shared_namespaces: true } } }, async (_s, a) => {
      const ok = await a.post('/background/tasks', {
        task_id: 'sh',
        query: 'hello',
        schedule: { type: 'manual' },
        workspace_policy: { namespace_template: 'shared/{run_id}' },
      });
      expect(ok.status).toBe(200);
      const run = (await a.post('/background/tasks/sh/run', { wait: true })).body;
      expect(run.workspace_path).toBe(`shared/${run.run_id}`);
      const up = await a.post('/background/tasks', {
        task_id: 'up',
        query: 'hello',
        schedule: { type: 'manual' },
        workspace_policy: { namespace_template: 'shared/../..' },
      });
      expect(up.status).toBe(422);
    });
  });
});

describe('skipped occurrences, retention and deletion', () => {
  it('a scheduled occurrence skipped by the overlap policy leaves no run row and no folder, only a counter', async () => {
    await withServer(base, async (s, a) => {
      // The first run parks for an approval, so every later occurrence finds it in flight.
      expect((await a.post('/background/tasks', { task_id: 'tick', query: 'CALL bg_ask {}', schedule: { type: 'interval', seconds: 1 } })).status).toBe(200);
      const st = await eventually(
        async () => {
          const r = (await a.get('/background/tasks/tick/status')).body;
          return r.schedule_state?.skipped_occurrences >= 2 ? r : null;
        },
        8_000,
        'two skipped occurrences',
      );
      expect(st.schedule_state.last_skipped).toMatchObject({
        occurrence_id: expect.stringMatching(/^interval:/),
        reason: expect.stringContaining('skip_if_running'),
      });
      const runs = (await a.get('/background/runs?task_id=tick')).body;
      expect(runs.total).toBe(1);
      expect(runs.runs[0].status).toBe('awaiting_approval');
      expect(st.status_counts.skipped).toBe(0);
      expect((await a.get('/background/status')).body.skipped_occurrences).toBeGreaterThanOrEqual(2);
      // One folder: the parked run's. None for the skipped occurrences.
      expect(readdirSync(join(wsRoot(s), 'background', 'default', 'tick'))).toEqual([runs.runs[0].run_id]);
      expect((await a.del('/background/tasks/tick?delete_runs=true')).status).toBe(200);
    });
  });

  it('DELETE with delete_runs removes the runs and the task workspace tree', async () => {
    await withServer(base, async (s, a) => {
      expect(
        (
          await a.post('/background/tasks', {
            task_id: 'gone',
            query: 'CALL workspace_write {"path": "a/b.txt", "content": "x"}',
            schedule: { type: 'manual' },
            overlap_policy: 'allow_parallel',
          })
        ).status,
      ).toBe(200);
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push((await a.post('/background/tasks/gone/run', { wait: true })).body.run_id);
      const tree = join(wsRoot(s), 'background', 'default', 'gone');
      expect(readdirSync(tree).sort()).toEqual([...ids].sort());
      expect((await a.del('/background/tasks/gone?delete_runs=true')).status).toBe(200);
      expect(existsSync(tree)).toBe(false);
      for (const id of ids) expect((await a.get(`/background/runs/${id}`)).status).toBe(404);
      expect((await a.get('/background/runs?task_id=gone')).body.total).toBe(0);
      for (const id of ids) expect((await a.get(`/background/runs/${id}/attempts`)).status).toBe(404);
    });
  });

  it('retention keeps only the newest max_runs_per_task ended runs of a task, folders included', async () => {
    const config = { ...base, background: { ...base.background, run_retention: { max_runs_per_task: 2, sweep_interval_seconds: 0.2 } } };
    await withServer(config, async (s, a) => {
      expect((await a.post('/background/tasks', { task_id: 'keep2', query: 'hello', schedule: { type: 'manual' } })).status).toBe(200);
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) ids.push((await a.post('/background/tasks/keep2/run', { wait: true })).body.run_id);
      await eventually(async () => (await a.get('/background/runs?task_id=keep2')).body.total === 2, 5_000, 'retention by count');
      const left = (await a.get('/background/runs?task_id=keep2')).body.runs.map((r: { run_id: string }) => r.run_id);
      expect(left).toEqual(ids.slice(2));
      for (const id of ids.slice(0, 2)) expect((await a.get(`/background/runs/${id}`)).status).toBe(404);
      // The folders go right after the rows' commit.
      const want = JSON.stringify(ids.slice(2).sort());
      await eventually(
        () => JSON.stringify(readdirSync(join(wsRoot(s), 'background', 'default', 'keep2')).sort()) === want,
        2_000,
        "only the kept runs' folders",
      );
    });
  });

  it('retention deletes ended runs older than max_age_days, and leaves runs in flight', async () => {
    const config = { ...base, background: { ...base.background, run_retention: { max_age_days: 1 / 86_400, sweep_interval_seconds: 0.2 } } };
    await withServer(config, async (s, a) => {
      expect((await a.post('/background/tasks', { task_id: 'old', query: 'hello', schedule: { type: 'manual' } })).status).toBe(200);
      expect((await a.post('/background/tasks', { task_id: 'parked', query: 'CALL bg_ask {}', schedule: { type: 'manual' } })).status).toBe(200);
      const done = (await a.post('/background/tasks/old/run', { wait: true })).body;
      expect(done.status).toBe('completed');
      const parked = (await a.post('/background/tasks/parked/run', { wait: true })).body;
      expect(parked.status).toBe('awaiting_approval');
      await eventually(async () => (await a.get(`/background/runs/${done.run_id}`)).status === 404, 6_000, 'retention by age');
      // The folder goes right after the row's commit.
      await eventually(() => !existsSync(join(wsRoot(s), done.workspace_path)), 2_000, 'its folder removed');
      // Part of the scenario: several more sweeps (every 0.2 s) pass, and the parked run stays.
      await new Promise((r) => setTimeout(r, 1500));
      expect((await waitRun(a, parked.run_id, (r) => r.status === 'awaiting_approval')).run_id).toBe(parked.run_id);
    });
  });

  // Idle tasks cost nothing to sweep: with 10,000 cron tasks, counting every task's ended runs each
  // minute was 50,000 counter reads (~1.4 s of CPU) a sweep.
  it('a retention sweep counts the runs of only those tasks with a run ended since the last sweep', async () => {
    const config = { ...base, background: { ...base.background, run_retention: { max_runs_per_task: 2, sweep_interval_seconds: 3600 } } };
    await withServer(config, async (s, a) => {
      for (let i = 0; i < 20; i++) {
        expect((await a.post('/background/tasks', { task_id: `idle-${i}`, query: 'hello', schedule: { type: 'manual' } })).status).toBe(200);
      }
      expect((await a.post('/background/tasks', { task_id: 'busy', query: 'hello', schedule: { type: 'manual' } })).status).toBe(200);
      const counted: string[] = [];
      let failOnce = false;
      const count = s.store.countRecords.bind(s.store);
      s.store.countRecords = (kind, index) => {
        if (index?.name === 'task_status') counted.push(index.value.split('|')[0]);
        if (failOnce && index?.name === 'task_status') {
          failOnce = false;
          return Promise.reject(new Error('disk read failed'));
        }
        return count(kind, index);
      };
      const bg = s.runtime.background;
      await bg.sweepRetention();
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push((await a.post('/background/tasks/busy/run', { wait: true })).body.run_id);
      // A sweep that fails while counting leaves the task for the next one.
      failOnce = true;
      expect(await bg.sweepRetention()).toBe(0);
      counted.length = 0;
      expect(await bg.sweepRetention()).toBe(1);
      expect(new Set(counted)).toEqual(new Set(['busy']));
      expect((await a.get(`/background/runs/${ids[0]}`)).status).toBe(404);
      // Nothing ended since: nothing is counted.
      counted.length = 0;
      expect(await bg.sweepRetention()).toBe(0);
      expect(counted).toEqual([]);
    });
  });

  it('the first retention sweep after a restart counts every task (runs that ended before it)', async () => {
    const keepAll = { ...base, background: { ...base.background, run_retention: { max_runs_per_task: 1000, sweep_interval_seconds: 3600 } } };
    const s = await startTestServer(keepAll, { modelUrl: model.url });
    let stopped = false;
    try {
      const a = api(s.url);
      expect((await a.post('/background/tasks', { task_id: 'many', query: 'hello', schedule: { type: 'manual' } })).status).toBe(200);
      for (let i = 0; i < 3; i++) expect((await a.post('/background/tasks/many/run', { wait: true })).body.status).toBe('completed');
      for (let i = 0; i < 5; i++)
        expect((await a.post('/background/tasks', { task_id: `idle-${i}`, query: 'hello', schedule: { type: 'manual' } })).status).toBe(200);
      stopped = true;
      await s.stop();
      const keep2 = { ...base, background: { ...base.background, run_retention: { max_runs_per_task: 2, sweep_interval_seconds: 3600 } } };
      const s2 = await startTestServer(keep2, { modelUrl: model.url, dataDir: s.dataDir });
      try {
        const counted: string[] = [];
        const count = s2.store.countRecords.bind(s2.store);
        s2.store.countRecords = (kind, index) => {
          if (index) counted.push(`${index.name}:${index.value.split('|')[0]}`);
          return count(kind, index);
        };
        expect(await s2.runtime.background.sweepRetention()).toBe(1);
        // One read of each task's run count; the counts by ended status only for the task over its
        // limit (10,000 tasks made that first sweep 40,000 reads).
        const byTask = (name: string) => new Set(counted.filter((c) => c.startsWith(`${name}:`)).map((c) => c.slice(name.length + 1)));
        expect(byTask('task_id')).toEqual(new Set(['many', 'idle-0', 'idle-1', 'idle-2', 'idle-3', 'idle-4']));
        expect(byTask('task_status')).toEqual(new Set(['many']));
        expect((await api(s2.url).get('/background/runs?task_id=many')).body.total).toBe(2);
      } finally {
        await s2.stop();
      }
    } finally {
      if (!stopped) await s.stop();
      s.cleanup();
    }
  });
});

/** agentd_background_workspace_backlog from GET /metrics/prometheus. */
async function backlogGauge(s: TestServer): Promise<number> {
  const text = await (await fetch(`${s.url}/metrics/prometheus`)).text();
  const line = text.split('\n').find((l) => l.startsWith('agentd_background_workspace_backlog '));
  return Number(line?.split(' ')[1]);
}

describe('the workspace mirror under a sustained drain', () => {
  it('claims no more runs while MIRROR_BACKLOG_MAX run folders wait to be written, and every folder is written in the end', async () => {
    // Creating a run's folder and files can cost more than the run itself (slow filesystems): the
    // mirror fell behind the runs without bound, holding the rest in memory. Here its writes are
    // held, so the backlog builds up at once (queued runs' folders count too); the claimer must
    // stop at the bound. The old code ran all of them.
    const concurrency = 64;
    const runs = MIRROR_BACKLOG_MAX + concurrency + 80;
    await withServer({ ...base, background: { ...base.background, concurrency } }, async (s, a) => {
      const mirror = (s.runtime.background.engine as unknown as { workspaces: { mirrors: MirrorQueue } }).workspaces.mirrors;
      const write = mirror.writeFolder;
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      mirror.writeFolder = async (...args) => {
        await held;
        return write(...args);
      };
      const ended = async () => (await a.get('/background/tasks/burst/status')).body.status_counts.completed ?? 0;
      try {
        expect(
          (await a.post('/background/tasks', { task_id: 'burst', query: 'hello', schedule: { type: 'manual' }, overlap_policy: 'allow_parallel' })).status,
        ).toBe(200);
        for (let i = 0; i < runs; i += 32) {
          const batch = await Promise.all(Array.from({ length: Math.min(32, runs - i) }, () => a.post('/background/tasks/burst/run', {})));
          expect(batch.every((r) => r.status === 200)).toBe(true);
        }
        // The runs claimed before the bound end; then nothing more is claimed while writes are held:
        // a moment comes when no run is held and some are still queued (a claimer that ignored the
        // bound would hold runs until none is left queued).
        const counts = await waitFor(
          async () => {
            const c = (await a.get('/background/tasks/burst/status')).body.status_counts as Record<string, number>;
            return (c.claimed ?? 0) + (c.running ?? 0) === 0 && (c.completed ?? 0) > 0 ? c : null;
          },
          { timeoutMs: 30_000, what: 'the claimed runs ended and no more claimed' },
        );
        expect(counts.queued).toBeGreaterThan(0);
        expect(counts.completed).toBeLessThanOrEqual(MIRROR_BACKLOG_MAX + concurrency);
        // Operators see why: the backlog gauge stands at the bound.
        expect(await backlogGauge(s)).toBeGreaterThanOrEqual(MIRROR_BACKLOG_MAX);
      } finally {
        release(); // a failed expectation must not leave the server's close waiting on held writes
      }
      await eventually(async () => (await ended()) === runs, 20_000, 'every run ended');
      const taskDir = join(wsRoot(s), 'background', 'default', 'burst');
      await eventually(() => readdirSync(taskDir).filter((d) => existsSync(join(taskDir, d, 'run.json'))).length === runs, 20_000, 'every run folder written');
      await eventually(async () => (await backlogGauge(s)) === 0, 10_000, 'the backlog gauge back at 0');
    });
  }, 60_000);
});

describe('the bound on queued runs', () => {
  it('POST /background/tasks/{id}/run answers 503 ServerBusy with Retry-After once background.max_queued_runs runs are queued, and queues again once they drain', async () => {
    // Before: nothing refused a manual run, so a caller could queue them faster than the workers
    // drained them, without bound.
    const max = 5;
    await withServer({ ...base, background: { ...base.background, concurrency: 1, max_queued_runs: max } }, async (s, a) => {
      let hold = true;
      model.setDefault(() => (hold ? { hang: true } : { text: 'ok' }));
      try {
        expect(
          (await a.post('/background/tasks', { task_id: 'flood', query: 'hello', schedule: { type: 'manual' }, overlap_policy: 'allow_parallel' })).status,
        ).toBe(200);
        // The first run is claimed and hangs in its model call: every later one waits in the queue.
        const first = (await a.post('/background/tasks/flood/run', {})).body.run_id as string;
        await waitRun(a, first, (r) => r.status === 'running');
        // Part of the scenario: the bound's queued count is at most QUEUED_COUNT_MAX_AGE_MS old (by
        // design, nothing to await); once it is that old, the next request counts afresh.
        await new Promise((r) => setTimeout(r, QUEUED_COUNT_MAX_AGE_MS + 100));
        const answers = await Promise.all(Array.from({ length: max + 3 }, () => a.post('/background/tasks/flood/run', {})));
        expect(answers.filter((r) => r.status === 200)).toHaveLength(max);
        const refused = answers.filter((r) => r.status !== 200);
        expect(refused).toHaveLength(3);
        for (const r of refused) {
          expect(r.status).toBe(503);
          expect(r.body).toMatchObject({ error: 'ServerBusy', code: 'AGT_ERR_SERVER_BUSY' });
          expect(r.headers.get('retry-after')).toBe('5');
        }
        expect((await a.get('/background/tasks/flood/status')).body.status_counts.queued).toBe(max);
        // Drained, the queue takes runs again.
        hold = false;
        await a.post(`/background/runs/${first}/cancel`, {});
        await eventually(async () => ((await a.get('/background/tasks/flood/status')).body.status_counts.queued ?? 0) === 0, 15_000, 'the queue drained');
        // Accepted once the bound's count is read again (503 until then, nothing queued).
        await waitFor(async () => (await a.post('/background/tasks/flood/run', {})).status === 200, { timeoutMs: 15_000, what: 'a run queued again' });
      } finally {
        directModel(model);
      }
    });
  }, 30_000);
});
