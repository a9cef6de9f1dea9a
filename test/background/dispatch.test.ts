// The cheap dispatch path (docs/background.md "Dispatch cost"): pure machine steps, the workspace
// mirror lane, claim + start as one write, and the in-memory in-flight view seeded from the store
// after a restart.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { createActor, fromCallback, transition } from 'xstate';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backgroundRunMachine, persistedSnapshotOf } from '../../machines/background-run.machine.js';
import type { Worker } from 'node:worker_threads';
import { FOLDER_WRITER_THREAD, FolderWriter } from '../../src/background/folder-writer.js';
import { MirrorQueue } from '../../src/background/workspace-mirror.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, tempDir, type TestServer } from '../helpers/server.js';
import { api, directModel, eventNames, TOOLS, waitRun } from './helpers.js';

describe('background-run steps on public xstate APIs', () => {
  const ctx = {
    run: { run_id: 'r', status: 'queued', attempt: 0, max_attempts: 1, lease_generation: 0, metadata: {}, cancel_requested_at: null },
    internal: { agent_run_id: null, continue_agent: false, next_reason: null, current_attempt: null, retry_policy: { max_retries: 0 } },
  } as never;

  it('steps with transition(), each effect seeing the context after its assign', () => {
    const s0 = backgroundRunMachine.resolveState({ value: 'queued', context: ctx });
    const [s1, a1] = transition(backgroundRunMachine, s0, { type: 'CLAIM', at: 't1', worker_id: 'w', lease_token: 'l', lease_expires_at: 't9' });
    const [s2, a2] = transition(backgroundRunMachine, s1, { type: 'START', at: 't2', attempt_id: 'a1' });
    expect(s2.value).toBe('running');
    expect(a1.map((x) => x.type)).toEqual(['record']);
    // The agent run is the run's child, invoked on entering `running`.
    expect(a2.map((x) => x.type)).toEqual(['record', 'xstate.spawnChild']);
    const record = a2.find((x) => x.type === 'record') as unknown as { info: { context: { run: { status: string } } } };
    expect(record.info.context.run.status).toBe('running');
  });

  it('restores a row into an actor from the persisted snapshot xstate builds, with no effect run', () => {
    const effects: string[] = [];
    const logic = backgroundRunMachine.provide({
      actions: { record: () => void effects.push('record') },
      actors: { agentRun: fromCallback(() => void effects.push('agentRun')) },
    });
    const row = { ...(ctx as object), run: { ...(ctx as { run: object }).run, status: 'awaiting_budget' } } as never;
    const actor = createActor(logic, { snapshot: persistedSnapshotOf(row) } as never).start();
    expect(actor.getSnapshot().value).toBe('awaiting');
    expect(actor.getSnapshot().context.run.status).toBe('awaiting_budget');
    expect(effects).toEqual([]);
    actor.send({ type: 'RESUME', at: 't3' });
    expect(actor.getSnapshot().value).toBe('queued');
    expect(effects).toEqual(['record']);
    const done = createActor(logic, {
      snapshot: persistedSnapshotOf({ ...(ctx as object), run: { ...(ctx as { run: object }).run, status: 'skipped' } } as never),
    } as never);
    expect(done.getSnapshot().status).toBe('done');
  });
});

/** Holds every folder write of `q` until the returned function is called. */
function holdWrites(q: MirrorQueue): () => void {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  const write = q.writeFolder;
  q.writeFolder = async (...args) => {
    await held;
    return write(...args);
  };
  return release;
}

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
    // One folder write, one promise: the steps merged into it share its answer.
    expect(second).toBe(first);
    expect(third).toBe(first);
    expect(await Promise.all([first, second, third])).toEqual([true, true, true]);
    expect(lines('a')).toEqual([1, 2, 3, 4]);
    expect(JSON.parse(readFileSync(join(d, 'run.json'), 'utf8'))).toEqual({ status: 'completed' });
    expect(existsSync(join(d, 'run.json.tmp'))).toBe(false);
  });

  it("shows run.json's run when the folder is written: once per write, the newest of the merged steps", async () => {
    const shown: object[] = [];
    const q = new MirrorQueue(
      1,
      60_000,
      () => undefined,
      undefined,
      60_000,
      (run) => (shown.push(run), { ...run, shown: true }),
    );
    const d = join(dir, 'shown');
    const runs = [{ status: 'queued' }, { status: 'running' }, { status: 'completed' }];
    const steps = runs.map((run, i) => q.write(d, [{ n: i + 1 }], run, i === 0, i === 2));
    expect(await Promise.all(steps)).toEqual([true, true, true]);
    expect(shown).toEqual([{ status: 'completed' }]);
    expect(shown[0]).toBe(runs[2]);
    expect(JSON.parse(readFileSync(join(d, 'run.json'), 'utf8'))).toEqual({ status: 'completed', shown: true });
    expect(lines('shown')).toEqual([1, 2, 3]);
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

  it("counts in its backlog the folders being written and those with a counted step; a queued run's folder counts once a counted step joins it", async () => {
    const q = new MirrorQueue(1, 10_000, () => undefined);
    const release = holdWrites(q);
    const w1 = q.write(join(dir, 'q1'), [{ n: 1 }], null, true, false, false); // queued: waits, not counted
    expect(q.backlog).toBe(0);
    const w2 = q.write(join(dir, 'q1'), [{ n: 2 }], null, false, false); // its claim: counted
    expect(q.backlog).toBe(1);
    const w3 = q.write(join(dir, 'q2'), [{ n: 1 }], null, true, true); // urgent: taken at once, being written
    expect(q.backlog).toBe(2);
    void q.drop(join(dir, 'q1'));
    expect(q.backlog).toBe(1);
    release();
    expect(await Promise.all([w1, w2, w3])).toEqual([false, false, true]);
    expect(q.backlog).toBe(0);
  });

  it("a queued run's folder waits the long delay, and goes after the short one once its claim joins it, written once", async () => {
    const q = new MirrorQueue(2, 30, () => undefined, undefined, 60_000);
    const writes: string[] = [];
    const write = q.writeFolder;
    q.writeFolder = (d, ...rest) => {
      writes.push(d);
      return write(d, ...rest);
    };
    const d = join(dir, 'slow');
    const queued = q.write(d, [{ n: 1 }], { status: 'queued' }, true, false, false);
    // Part of the scenario: past the short delay (30 ms), nothing is written.
    await new Promise((r) => setTimeout(r, 100));
    expect(existsSync(d)).toBe(false); // the long delay (60 s here), not the short one
    const claimed = q.write(d, [{ n: 2 }], { status: 'running' }, false, false);
    expect(await Promise.all([queued, claimed])).toEqual([true, true]);
    expect(writes).toEqual([d]);
    expect(lines('slow')).toEqual([1, 2]);
    expect(JSON.parse(readFileSync(join(d, 'run.json'), 'utf8'))).toEqual({ status: 'running' });
  });

  it('hurry() writes every waiting step now, and every later one at once', async () => {
    const q = new MirrorQueue(2, 60_000, () => undefined, undefined, 60_000);
    const a1 = q.write(join(dir, 'h1'), [{ n: 1 }], null, true, false, false);
    const a2 = q.write(join(dir, 'h2'), [{ n: 1 }], null, true, false);
    q.hurry();
    const a3 = q.write(join(dir, 'h3'), [{ n: 1 }], null, true, false, false);
    expect(await Promise.all([a1, a2, a3])).toEqual([true, true, true]);
  });

  it('reports a failed write and resolves false', async () => {
    const errors: string[] = [];
    const q = new MirrorQueue(1, 0, (d) => errors.push(d));
    const bad = join(dir, 'c', 'x');
    // makeDir false and no folder: the append fails.
    expect(await q.write(bad, [{ n: 1 }], null, false, true)).toBe(false);
    expect(errors).toEqual([bad]);
  });

  it('drop() forgets the waiting steps under a folder and resolves once the writes under way there are through', async () => {
    const q = new MirrorQueue(2, 60_000, () => undefined);
    const release = holdWrites(q);
    const root = join(dir, 'dropped');
    const busy = q.write(join(root, 'r1'), [{ n: 1 }], null, true, true); // urgent: being written
    const waiting = q.write(join(root, 'r2'), [{ n: 1 }], null, true, false); // waits its delay
    let dropped = false;
    const drop = q.drop(root).then(() => (dropped = true));
    expect(await waiting).toBe(false);
    // Part of the scenario: a while in which drop() must not resolve.
    await new Promise((r) => setTimeout(r, 50));
    expect(dropped).toBe(false); // r1's write is still under way: removing the folder now would let it make it again
    release();
    await drop;
    expect(await busy).toBe(true);
    expect(existsSync(join(root, 'r2'))).toBe(false);
  });

  it('close() writes every waiting step first, then refuses new ones', async () => {
    const errors: string[] = [];
    const q = new MirrorQueue(1, 60_000, (d) => errors.push(d), undefined, 60_000);
    const waiting = [1, 2, 3].map((i) => q.write(join(dir, `z${i}`), [{ n: i }], { n: i }, true, false, i !== 2));
    await q.close();
    for (const i of [1, 2, 3]) expect(lines(`z${i}`)).toEqual([i]);
    expect(await Promise.all(waiting)).toEqual([true, true, true]);
    expect(await q.write(join(dir, 'z4'), [{ n: 4 }], null, true, true)).toBe(false);
    expect(errors).toEqual([join(dir, 'z4')]);
  });
});

describe("FolderWriter (the mirror's worker thread)", () => {
  const dir = tempDir('agentd-writer-');

  it('appends the lines, replaces run.json atomically, and fails a write with the file error', async () => {
    const w = new FolderWriter();
    const d = join(dir, 'a', 'b');
    await w.write(d, '{"n":1}\n', '{"status":"queued"}', true);
    await w.write(d, '{"n":2}\n', null, false);
    await w.write(d, '', '{"status":"completed"}', false);
    expect(readFileSync(join(d, 'events.jsonl'), 'utf8')).toBe('{"n":1}\n{"n":2}\n');
    expect(readFileSync(join(d, 'run.json'), 'utf8')).toBe('{"status":"completed"}');
    expect(existsSync(join(d, 'run.json.tmp'))).toBe(false);
    // No folder and makeDir false: the append fails with the file system's code.
    await expect(w.write(join(dir, 'missing', 'x'), 'x\n', null, false)).rejects.toMatchObject({ code: 'ENOENT' });
    await w.close();
    await expect(w.write(d, 'x\n', null, false)).rejects.toThrow(/closed/);
  });

  it('writes asked for in one turn of the event loop go to the worker in one message, each settled on its own', async () => {
    const w = new FolderWriter();
    await w.write(join(dir, 'm0'), '{"n":0}\n', null, true); // starts the worker
    const worker = (w as unknown as { worker: Worker }).worker;
    let posts = 0;
    const post = worker.postMessage.bind(worker);
    worker.postMessage = (value: unknown) => {
      posts++;
      post(value);
    };
    const writes = [1, 2, 3, 4, 5].map((i) => w.write(join(dir, `m${i}`), `{"n":${i}}\n`, `{"n":${i}}`, true));
    const failing = w.write(join(dir, 'absent', 'x'), 'x\n', null, false);
    await Promise.all(writes);
    await expect(failing).rejects.toMatchObject({ code: 'ENOENT' });
    expect(posts).toBe(1);
    for (const i of [1, 2, 3, 4, 5]) expect(readFileSync(join(dir, `m${i}`, 'run.json'), 'utf8')).toBe(`{"n":${i}}`);
    await w.close();
  });

  it('a worker that died fails the writes it held, and the next write starts another', async () => {
    const w = new FolderWriter();
    const d = join(dir, 'c');
    await w.write(d, '{"n":1}\n', null, true);
    const worker = (w as unknown as { worker: Worker }).worker;
    const held = w.write(d, '{"n":2}\n', null, false);
    await worker.terminate();
    await held.catch(() => undefined); // written or failed, depending on who was first
    await w.write(d, '{"n":3}\n', null, false);
    expect((w as unknown as { worker: Worker }).worker).not.toBe(worker);
    expect(readFileSync(join(d, 'events.jsonl'), 'utf8')).toMatch(/^\{"n":1\}\n(\{"n":2\}\n)?\{"n":3\}\n$/);
    await w.close();
  });

  // Its CPU is told apart from the other threads' (Node names them all `node`): ps -L, top -H and
  // the drain benchmark's CPU by thread (test/bench/threads.ts).
  it.runIf(process.platform === 'linux')('names its thread in /proc', async () => {
    // Writers of other tests in this process (MirrorQueues never closed) may be alive: the new thread is the one to check.
    const named = () =>
      new Set(readdirSync('/proc/self/task').filter((t) => readFileSync(`/proc/self/task/${t}/comm`, 'utf8').trim() === FOLDER_WRITER_THREAD));
    const before = named();
    const w = new FolderWriter();
    await w.write(join(dir, 'named'), '{"n":1}\n', null, true);
    const mine = [...named()].filter((t) => !before.has(t));
    expect(mine).toHaveLength(1);
    await w.close();
    expect(named().has(mine[0])).toBe(false);
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
