// A run queued for its concurrency key survives a SIGKILL of the agentd process and runs once
// after the restart (docs/flow-control.md, docs/contract.md §3.4). agentd runs as a child process
// (test/crash/harness.ts); the scripted model lives in this one.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { crashConfig, eventually, getJson, killAllChildren, postJson, startAgentd, tempDir, waitForRunStatus, writeConfig } from '../crash/harness.js';

let model: ScriptedOpenAI;
beforeAll(async () => {
  model = await startScriptedOpenAI();
});
afterAll(async () => {
  await killAllChildren();
  await model.close();
});

const queryOf = (body: { messages: Array<{ role: string; content?: unknown }> }): string =>
  String(body.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '');

it('a queued run survives SIGKILL, keeps its place and runs once', async () => {
  const dir = tempDir();
  const configFile = writeConfig(dir, crashConfig(model.url));
  // Before the kill every call hangs (the head holds the key's only slot); after it, all answer.
  let killed = false;
  model.setDefault(() => (killed ? { text: 'answered' } : { hang: true }));
  const first = await startAgentd({ configFile, dataDir: dir });
  const key = { key: 'tenant:crash', limit: 1 };
  void postJson(`${first.url}/run/sync`, { query: 'head', session_id: 's-head', concurrency: key }, 60_000).catch(() => undefined);
  await model.waitForRequests(1);
  const queued: string[] = [];
  for (const name of ['second', 'third']) {
    void postJson(`${first.url}/run/sync`, { query: name, session_id: `s-${name}`, concurrency: key }, 60_000).catch(() => undefined);
    queued.push(
      await eventually(async () => {
        const list = await getJson(`${first.url}/runs?session_id=s-${name}`);
        return (list.body?.runs?.[0]?.run_id as string | undefined) ?? null;
      }),
    );
  }
  for (const id of queued) expect((await getJson(`${first.url}/runs/${id}`)).body.status).toBe('queued');
  expect((await getJson(`${first.url}/runs/${queued[1]}`)).body.queue).toEqual({ key: 'tenant:crash', position: 2 });
  await first.kill('SIGKILL');
  killed = true;

  const second = await startAgentd({ configFile, dataDir: dir });
  for (const id of queued) await waitForRunStatus(second.url, id, ['completed'], 30_000);
  const asked = model.requests.map(queryOf);
  expect(asked.filter((q) => q === 'second')).toHaveLength(1);
  expect(asked.filter((q) => q === 'third')).toHaveLength(1);
  // In their order: the second before the third.
  expect(asked.indexOf('second')).toBeLessThan(asked.indexOf('third'));
  await second.kill('SIGTERM');
}, 90_000);

it('on PostgreSQL, the runs queued on an instance killed with SIGKILL are taken over by another and run once', async () => {
  const { startCluster } = await import('../cluster/helpers.js');
  model.reset();
  let killed = false;
  model.setDefault(() => (killed ? { text: 'answered' } : { hang: true }));
  const cluster = await startCluster(2, model.url);
  try {
    const a = cluster.instances[0]!;
    const b = cluster.instances[1]!;
    const key = { key: 'tenant:pg-crash', limit: 1 };
    void postJson(`${a.url}/run/sync`, { query: 'head', session_id: 'pg-head', concurrency: key }, 60_000).catch(() => undefined);
    await model.waitForRequests(1);
    void postJson(`${a.url}/run/sync`, { query: 'orphan', session_id: 'pg-orphan', concurrency: key }, 60_000).catch(() => undefined);
    const orphan = await eventually(async () => {
      const list = await getJson(`${b.url}/runs?session_id=pg-orphan`);
      return list.body?.runs?.[0]?.status === 'queued' ? (list.body.runs[0].run_id as string) : null;
    });
    await a.kill('SIGKILL');
    killed = true;
    // B recovers the head (its lease lapses) and takes the orphan over (its owner stopped beating).
    await waitForRunStatus(b.url, orphan, ['completed'], 40_000);
    expect(model.requests.map(queryOf).filter((q) => q === 'orphan')).toHaveLength(1);
  } finally {
    await cluster.destroy();
  }
}, 90_000);

it('on LevelDB, a keyed background run recovered after SIGKILL retakes its slot: a queued run of its key waits for it', async () => {
  model.reset();
  const dir = tempDir();
  const configFile = writeConfig(dir, crashConfig(model.url, { background: { poll_interval_ms: 50, lease_seconds: 2 } }));
  // Before the kill every call hangs; after it, the recovered run's call hangs until the test lets
  // it go, and so would a second run's (were it admitted, two calls would be in flight).
  let killed = false;
  let letGo: () => void = () => {};
  const held = new Promise<void>((r) => (letGo = r));
  model.setDefault(() => (killed ? { text: 'answered', holdUntil: held } : { hang: true }));
  const first = await startAgentd({ configFile, dataDir: dir });
  const task = {
    schedule: { type: 'manual' },
    overlap_policy: 'allow_parallel',
    session_policy: { mode: 'run' },
    retry_policy: { max_retries: 1, initial_delay_seconds: 0 },
  };
  const created = await postJson(`${first.url}/background/tasks`, { task_id: 'keyed', query: 'bg', concurrency: { key: 'bg:crash', limit: 1 }, ...task });
  expect(created.status, JSON.stringify(created.body)).toBe(200);
  const runA = (await postJson(`${first.url}/background/tasks/keyed/run`, { query: 'bg-first' })).body.run_id as string;
  await model.waitForRequests(1);
  // On LevelDB the model request may go out a moment before the claim is stored (docs/background.md
  // "Starting before the claim lands"): the kill comes once the run reads running, its slot held.
  await eventually(async () => (await getJson(`${first.url}/background/runs/${runA}`)).body.status === 'running', 10_000, `${runA} running`);
  await first.kill('SIGKILL');
  killed = true;
  model.reset();
  model.setDefault(() => ({ text: 'answered', holdUntil: held }));

  const second = await startAgentd({ configFile, dataDir: dir });
  try {
    // The recovered run reaches the model again, holding the key's only slot.
    await model.waitForRequests(1);
    const runB = (await postJson(`${second.url}/background/tasks/keyed/run`, { query: 'bg-second' })).body.run_id as string;
    // A probe task's run, triggered later, reaching the model proves claim passes ran meanwhile.
    await postJson(`${second.url}/background/tasks`, { task_id: 'probe', query: 'probe', ...task });
    await postJson(`${second.url}/background/tasks/probe/run`, {});
    await model.waitForRequests(2);
    expect((await getJson(`${second.url}/background/runs/${runB}`)).body.status).toBe('queued');
    expect(model.requests.map(queryOf).filter((q) => q.startsWith('bg-'))).toEqual(['bg-first']);
    letGo();
    for (const id of [runA, runB]) {
      await eventually(async () => (await getJson(`${second.url}/background/runs/${id}`)).body.status === 'completed', 30_000, `${id} completed`);
    }
  } finally {
    letGo();
    await second.kill('SIGTERM');
  }
}, 90_000);
