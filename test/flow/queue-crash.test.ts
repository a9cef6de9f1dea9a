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
