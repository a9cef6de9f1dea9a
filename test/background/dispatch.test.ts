// The cheap dispatch path (docs/background.md "Dispatch cost"): pure machine steps, the workspace
// mirror lane, claim + start as one write, and the in-memory in-flight view seeded from the store
// after a restart.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { initialTransition, transition } from 'xstate';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backgroundRunMachine } from '../../machines/background-run.machine.js';
import { taskMachine } from '../../machines/task.machine.js';
import { pureStepper } from '../../src/background/transition.js';
import { MirrorQueue } from '../../src/background/workspace.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, tempDir, type TestServer } from '../helpers/server.js';
import { api, directModel, eventNames, TOOLS, waitRun } from './helpers.js';

describe('pureStepper', () => {
  it('takes the same steps and returns the same effects as xstate transition()', () => {
    const step = pureStepper(taskMachine);
    const [s0] = initialTransition(taskMachine, { task_id: 't', overlap_policy: 'skip_if_running', enabled: true, paused: false });
    const due = {
      type: 'DUE' as const,
      occurrence: { occurrence_id: 'o', trigger_type: 'interval' as const, due_at: 'x', run_at: 'x', missed: false },
      inFlight: { activeRunIds: [], queuedRunIds: ['r1'] },
    };
    const [a, aActs] = step(s0, due);
    const [b, bActs] = transition(taskMachine, s0, due);
    expect(a.value).toEqual(b.value);
    expect(aActs.map((x) => [x.type, x.params])).toEqual(bActs.map((x) => [x.type, x.params]));
    expect(aActs[0].params).toMatchObject({ decision: { action: 'skip' } });
    const [paused] = step(s0, { type: 'PAUSE', reason: 'ops' });
    expect(step(paused, due)[1].map((x) => x.type)).toEqual(['drop']);
    // The initial snapshot takes the eventless transitions, as initialTransition does.
    expect(step.initial({ task_id: 't', overlap_policy: 'skip_if_running', enabled: true, paused: true }).value).toBe('paused');
    expect(step.initial({ task_id: 't', overlap_policy: 'skip_if_running', enabled: true, paused: false }).value).toEqual(s0.value);
    // Steps do not leak effects into each other.
    expect(step(s0, { type: 'UPDATE', overlap_policy: 'allow_parallel' })[1]).toEqual([]);
  });

  it('steps the background-run machine with each effect seeing the context after its assign', () => {
    const step = pureStepper(backgroundRunMachine);
    const ctx = {
      run: { run_id: 'r', status: 'queued', attempt: 0, max_attempts: 1, lease_generation: 0, metadata: {}, cancel_requested_at: null },
      internal: { agent_run_id: null, continue_agent: false, next_reason: null, current_attempt: null, retry_policy: { max_retries: 0 } },
    } as never;
    const s0 = backgroundRunMachine.resolveState({ value: 'queued', context: ctx });
    const [s1, a1] = step(s0, { type: 'CLAIM', at: 't1', worker_id: 'w', lease_token: 'l', lease_expires_at: 't9' });
    const [s2, a2] = step(s1, { type: 'START', at: 't2', attempt_id: 'a1' });
    expect(s2.value).toBe('running');
    expect(a1.map((x) => x.type)).toEqual(['record']);
    expect(a2.map((x) => x.type)).toEqual(['record', 'startAgent']);
    expect((a2[0] as unknown as { info: { context: { run: { status: string } } } }).info.context.run.status).toBe('running');
  });
});

describe('MirrorQueue', () => {
  const dir = tempDir('agentd-mirror-');
  const lines = (dirName: string) =>
    readFileSync(join(dir, dirName, 'events.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).n);

  it('merges the steps of a folder that wait, keeps their order and writes the newest run.json', async () => {
    const q = new MirrorQueue(1, 50, () => undefined);
    const d = join(dir, 'a');
    const first = q.write(d, [{ n: 1 }], { status: 'queued' }, true, false);
    const second = q.write(d, [{ n: 2 }, { n: 3 }], { status: 'running' }, false, false);
    expect(existsSync(d)).toBe(false); // not urgent: it waits for more steps
    const third = q.write(d, [{ n: 4 }], { status: 'completed' }, false, true); // urgent: written now, with the rest
    expect(await Promise.all([first, second, third])).toEqual([true, true, true]);
    expect(lines('a')).toEqual([1, 2, 3, 4]);
    expect(JSON.parse(readFileSync(join(d, 'run.json'), 'utf8'))).toEqual({ status: 'completed' });
    expect(existsSync(join(d, 'run.json.tmp'))).toBe(false);
  });

  it('writes a folder once at a time: steps that arrive during a write follow it, in order', async () => {
    const q = new MirrorQueue(2, 0, () => undefined);
    const d = join(dir, 'b');
    const writes: Array<Promise<boolean>> = [];
    for (let i = 1; i <= 20; i++) writes.push(q.write(d, [{ n: i }], { n: i }, i === 1, i % 3 === 0));
    await Promise.all(writes);
    expect(lines('b')).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(JSON.parse(readFileSync(join(d, 'run.json'), 'utf8'))).toEqual({ n: 20 });
  });

  it('reports a failed write and resolves false', async () => {
    const errors: string[] = [];
    const q = new MirrorQueue(1, 0, (d) => errors.push(d));
    const bad = join(dir, 'c', 'x');
    // makeDir false and no folder: the append fails.
    expect(await q.write(bad, [{ n: 1 }], null, false, true)).toBe(false);
    expect(errors).toEqual([bad]);
  });
});

describe('dispatch through a server', () => {
  let model: ScriptedOpenAI;
  let server: TestServer | null = null;
  const dataDir = tempDir('agentd-bg-dispatch-');
  const config = {
    agent: { tools: { local: TOOLS, builtin: [] } },
    governance: { rules: [{ tools: ['bg_ask'], effect: 'ask' }] },
    background: { poll_interval_ms: 50, lease_seconds: 2, concurrency: 4 },
  };

  beforeAll(async () => {
    model = await startScriptedOpenAI();
    directModel(model);
    server = await startTestServer(config, { modelUrl: model.url, dataDir });
  });

  afterAll(async () => {
    await server?.stop();
    server?.cleanup();
    await model.close();
  });

  it('claims and starts in one write: the replay and the attempts are unchanged', async () => {
    const a = api(server!.url);
    expect((await a.post('/background/tasks', { task_id: 'one', query: 'hello', schedule: { type: 'manual' } })).status).toBe(200);
    const r = (await a.post('/background/tasks/one/run', { wait: true })).body;
    expect(r.status).toBe('completed');
    const ev = (await a.get(`/background/runs/${r.run_id}/events`)).body.events;
    expect(eventNames(ev)).toEqual(['background_run_queued', 'background_run_claimed', 'background_run_started', 'background_run_completed']);
    // The claim and the start were one write; each event still carries the status of its own step.
    expect(ev.map((e: { status: string }) => e.status)).toEqual(['queued', 'claimed', 'running', 'completed']);
    expect(ev[1].lease_generation).toBe(1);
    const at = (await a.get(`/background/runs/${r.run_id}/attempts`)).body.attempts;
    expect(at).toEqual([expect.objectContaining({ attempt_number: 1, status: 'completed', reason: 'initial' })]);
    expect(JSON.parse(readFileSync(join(server!.dataDir, 'workspaces', r.workspace_path, 'run.json'), 'utf8'))).toMatchObject({ status: 'completed' });
  });

  it('many manual runs of one task issued at once: one run each, overlap decided in order', async () => {
    const a = api(server!.url);
    expect((await a.post('/background/tasks', { task_id: 'par', query: 'hello', schedule: { type: 'manual' }, overlap_policy: 'allow_parallel' })).status).toBe(
      200,
    );
    const runs = await Promise.all(Array.from({ length: 20 }, () => a.post('/background/tasks/par/run', {})));
    expect(runs.every((r) => r.status === 200 && r.body.status === 'queued')).toBe(true);
    expect(new Set(runs.map((r) => r.body.run_id)).size).toBe(20);
    for (const r of runs) expect((await waitRun(a, r.body.run_id)).status).toBe('completed');

    expect((await a.post('/background/tasks', { task_id: 'skip', query: 'CALL bg_ask {}', schedule: { type: 'manual' } })).status).toBe(200);
    const burst = await Promise.all(Array.from({ length: 5 }, () => a.post('/background/tasks/skip/run', {})));
    // skip_if_running: the first one is in flight before the second is decided, even though none was written yet.
    expect(burst.map((r) => r.body.status).sort()).toEqual(['queued', 'skipped', 'skipped', 'skipped', 'skipped']);
  });

  it('after a restart, the in-flight view is read back from the store: a parked run still makes the next one skip', async () => {
    const a = api(server!.url);
    expect((await a.post('/background/tasks', { task_id: 'parked', query: 'CALL bg_ask {}', schedule: { type: 'manual' } })).status).toBe(200);
    const first = (await a.post('/background/tasks/parked/run', { wait: true })).body;
    expect(first.status).toBe('awaiting_approval');
    await server!.stop();
    server = await startTestServer(config, { modelUrl: model.url, dataDir });
    const b = api(server.url);
    const second = (await b.post('/background/tasks/parked/run', {})).body;
    expect(second.status).toBe('skipped');
    expect(eventNames((await b.get(`/background/runs/${second.run_id}/events`)).body.events)).toEqual(['background_run_skipped']);
    // A skipped run never ran: it gets no workspace folder.
    expect((await b.get(`/background/runs/${second.run_id}/workspace`)).body.files).toEqual([]);
    // Once the parked run ends, the task takes runs again.
    expect((await b.post(`/background/runs/${first.run_id}/cancel`)).status).toBe(200);
    await waitRun(b, first.run_id);
    const third = (await b.post('/background/tasks/parked/run', {})).body;
    expect(third.status).toBe('queued');
    await b.post(`/background/runs/${third.run_id}/cancel`);
  });
});
