// A restart in the middle of a running background run: the server runs in a child process that
// is killed with SIGKILL while a slow tool runs; a new server on the same data dir recovers the
// run (attempt reason `recovery`) and finishes it without repeating the tool call that completed.
import type { ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, startTestServer, tempDir, testStoreOf, type TestServer } from '../helpers/server.js';
import { api, directModel, eventNames, startChildServer, TOOLS, waitRun } from './helpers.js';

let model: ScriptedOpenAI;
let child: ChildProcess | null = null;
let second: TestServer | null = null;
const dataDir = tempDir('agentd-bg-restart-');
const ledger = join(tempDir('agentd-bg-ledger-'), 'ledger.txt');

beforeAll(async () => {
  model = await startScriptedOpenAI();
  directModel(model);
  writeFileSync(ledger, '');
});

afterAll(async () => {
  child?.kill('SIGKILL');
  await second?.stop();
  second?.cleanup();
  await model.close();
  delete process.env.BG_LEDGER;
  delete process.env.BG_SLOW_MS;
});

function configFor(modelUrl: string) {
  return {
    server: { port: 0 },
    agent: { model: { provider: 'openai-compatible', base_url: modelUrl, model: 'scripted' }, tools: { local: TOOLS, builtin: [] } },
    background: { poll_interval_ms: 50, lease_seconds: 2 },
    runs: { orphan_sweep: { interval_seconds: 3600 } },
  };
}

const ledgerLines = () => readFileSync(ledger, 'utf8').split('\n').filter(Boolean);

describe('restart in the middle of a running background run', () => {
  it('recovers the run in a new process and finishes it without repeating a completed tool call', async () => {
    // The child and the server after it open the same store (under AGENTD_TEST_STORE=postgres, the data dir's database).
    const config = { ...configFor(model.url), store: await testStoreOf(dataDir) };
    let url: string;
    ({ child, url } = await startChildServer(dataDir, config, { BG_LEDGER: ledger, BG_SLOW_MS: '30000' }));
    const a = api(url);
    const created = await a.post('/background/tasks', {
      task_id: 'crashy',
      query: 'CALL bg_mark {"tag": "m"}; CALL bg_slow {"tag": "s"}',
      schedule: { type: 'manual' },
      retry_policy: { max_retries: 1, initial_delay_seconds: 0 },
    });
    expect(created.status).toBe(200);
    const r = await a.post('/background/tasks/crashy/run', {});
    expect(r.status).toBe(200);
    const runId = r.body.run_id as string;
    // The non-idempotent call completed and the slow one is under way: now the process dies.
    await eventually(async () => ledgerLines().some((l) => l.startsWith('slow:start')) && ledgerLines().some((l) => l.startsWith('mark:')), 15_000);
    await eventually(async () => {
      const ag = await a.get(`/runs/${runId}`);
      return ag.body.tool_calls?.some((c: any) => c.tool_name === 'bg_mark' && c.state === 'completed');
    });
    const exited = new Promise((res) => child!.once('exit', res));
    child!.kill('SIGKILL');
    await exited;
    child = null;

    process.env.BG_LEDGER = ledger;
    process.env.BG_SLOW_MS = '10';
    second = await startTestServer(config, { dataDir });
    const b = api(second.url);
    const done = await waitRun(b, runId, undefined, 15_000);
    expect(done).toMatchObject({ status: 'completed', attempt: 2 });
    expect(done.result_preview).toContain('done:');

    const attempts = (await b.get(`/background/runs/${runId}/attempts`)).body.attempts;
    expect(attempts).toEqual([
      expect.objectContaining({ attempt_number: 1, status: 'interrupted', reason: 'initial', agent_run_id: runId }),
      expect.objectContaining({ attempt_number: 2, status: 'completed', reason: 'recovery', agent_run_id: runId }),
    ]);
    // Heartbeats (every lease/4) may come between any two lifecycle events, as many as the
    // machine's load allows: the lifecycle order is what is checked.
    const names = eventNames((await b.get(`/background/runs/${runId}/events`)).body.events).filter((n) => n !== 'background_run_heartbeat');
    expect(names).toEqual([
      'background_run_queued',
      'background_run_claimed',
      'background_run_started',
      'background_run_recovered',
      'background_run_started',
      'background_run_completed',
    ]);
    // The completed non-idempotent call ran once, ever; the idempotent slow one ran again.
    expect(ledgerLines().filter((l) => l.startsWith('mark:'))).toHaveLength(1);
    expect(ledgerLines().filter((l) => l.startsWith('slow:start'))).toHaveLength(2);
    const agentRun = (await b.get(`/runs/${runId}`)).body;
    expect(agentRun.status).toBe('completed');
    expect(agentRun.tool_calls.map((c: any) => [c.tool_name, c.outcome])).toEqual(
      expect.arrayContaining([
        ['bg_mark', 'success'],
        ['bg_slow', 'success'],
      ]),
    );
  });

  it('after a graceful shutdown mid-run, the next start continues the interrupted agent run', async () => {
    const dir = tempDir('agentd-bg-graceful-');
    writeFileSync(ledger, '');
    process.env.BG_LEDGER = ledger;
    process.env.BG_SLOW_MS = '30000';
    const config = configFor(model.url);
    const first = await startTestServer(config, { dataDir: dir });
    const a = api(first.url);
    await a.post('/background/tasks', {
      task_id: 'graceful',
      query: 'CALL bg_mark {"tag": "g"}; CALL bg_slow {"tag": "g"}',
      schedule: { type: 'manual' },
      retry_policy: { max_retries: 1, initial_delay_seconds: 0 },
    });
    const runId = (await a.post('/background/tasks/graceful/run', {})).body.run_id as string;
    await eventually(async () => ledgerLines().some((l) => l.startsWith('slow:start')) && ledgerLines().some((l) => l.startsWith('mark:')), 10_000);
    await first.stop(0); // no grace: the live agent run is saved `interrupted`
    process.env.BG_SLOW_MS = '10';
    const next = await startTestServer(config, { dataDir: dir });
    try {
      const b = api(next.url);
      const done = await waitRun(b, runId, undefined, 15_000);
      expect(done).toMatchObject({ status: 'completed', attempt: 2 });
      const attempts = (await b.get(`/background/runs/${runId}/attempts`)).body.attempts;
      expect(attempts.map((x: any) => [x.status, x.reason])).toEqual([
        ['interrupted', 'initial'],
        ['completed', 'recovery'],
      ]);
      eventNames((await b.get(`/background/runs/${runId}/events`)).body.events);
      expect(ledgerLines().filter((l) => l.startsWith('mark:'))).toHaveLength(1);
      const agentRun = (await b.get(`/runs/${runId}`)).body;
      expect(agentRun.status).toBe('completed');
    } finally {
      await next.stop();
      next.cleanup();
    }
  });
});

describe('workspace mirror after a crash', () => {
  // The start-up check runs on the embedded store only (on PostgreSQL another instance may still be writing those folders).
  const embeddedOnly = it.skipIf(process.env.AGENTD_TEST_STORE === 'postgres');
  const mirrorConfig = () => ({
    ...configFor(model.url),
    agent: { model: { provider: 'openai-compatible', base_url: model.url, model: 'scripted' }, tools: { builtin: [] } },
  });

  /** One completed manual run of a new task on a server that is then stopped, once its folder holds the final run.json and every line. */
  async function completedRun(dir: string, taskId: string): Promise<{ runId: string; folder: string; lines: string[] }> {
    const first = await startTestServer(mirrorConfig(), { dataDir: dir });
    try {
      const a = api(first.url);
      await a.post('/background/tasks', { task_id: taskId, query: 'just answer', schedule: { type: 'manual' } });
      const runId = (await a.post(`/background/tasks/${taskId}/run`, {})).body.run_id as string;
      const done = await waitRun(a, runId, undefined, 15_000);
      expect(done.status).toBe('completed');
      const folder = join(first.dataDir, 'workspaces', done.workspace_path);
      const lines = () => readFileSync(join(folder, 'events.jsonl'), 'utf8').trim().split('\n');
      await eventually(
        () => existsSync(join(folder, 'run.json')) && JSON.parse(readFileSync(join(folder, 'run.json'), 'utf8')).status === 'completed' && lines().length >= 4,
        5_000,
        'the run folder written',
      );
      return { runId, folder, lines: lines() };
    } finally {
      await first.stop();
    }
  }

  embeddedOnly('a run that ended with its folder unwritten (the mirror trails the runs) gets it at the next start-up, unasked', async () => {
    const dir = tempDir('agentd-bg-mirror-');
    const { folder, lines: full } = await completedRun(dir, 'ended');
    // What a SIGKILL leaves when the run's steps were still in the mirror's queue: no folder.
    rmSync(folder, { recursive: true });
    const next = await startTestServer(mirrorConfig(), { dataDir: dir });
    try {
      // Nothing asks for the run: the start-up check writes its folder.
      await eventually(() => existsSync(join(folder, 'run.json')), 10_000, 'run.json written again');
      expect(JSON.parse(readFileSync(join(folder, 'run.json'), 'utf8')).status).toBe('completed');
      expect(readFileSync(join(folder, 'events.jsonl'), 'utf8').trim().split('\n')).toEqual(full);
    } finally {
      await next.stop();
      next.cleanup();
    }
  });

  embeddedOnly(
    'a run.json one step behind its complete events.jsonl (a crash between the append and the rename) is rewritten at the next start-up',
    async () => {
      const dir = tempDir('agentd-bg-mirror-');
      const { folder } = await completedRun(dir, 'behind');
      const lines = readFileSync(join(folder, 'events.jsonl'), 'utf8');
      // What a SIGKILL between the last append and run.json's rename leaves: every line, the older run.json.
      const stale = { ...JSON.parse(readFileSync(join(folder, 'run.json'), 'utf8')), status: 'running', finished_at: null };
      writeFileSync(join(folder, 'run.json'), JSON.stringify(stale));
      const next = await startTestServer(mirrorConfig(), { dataDir: dir });
      try {
        await eventually(() => JSON.parse(readFileSync(join(folder, 'run.json'), 'utf8')).status === 'completed', 10_000, 'run.json rewritten');
        expect(readFileSync(join(folder, 'events.jsonl'), 'utf8')).toBe(lines); // nothing appended twice
      } finally {
        await next.stop();
        next.cleanup();
      }
    },
  );

  it('a run picked up by a new process gets the events.jsonl lines a crash lost, in order', async () => {
    const dir = tempDir('agentd-bg-mirror-');
    const { runId, folder, lines: full } = await completedRun(dir, 'mirror');
    const path = join(folder, 'events.jsonl');
    // What a SIGKILL inside the mirror's delay leaves: the folder's last steps never written.
    writeFileSync(path, `${full.slice(0, 2).join('\n')}\n`);
    const next = await startTestServer(mirrorConfig(), { dataDir: dir });
    try {
      const b = api(next.url);
      expect((await b.get(`/background/runs/${runId}/events`)).status).toBe(200);
      const lines = readFileSync(path, 'utf8').trim().split('\n');
      expect(lines.map((l) => JSON.parse(l).sequence)).toEqual(full.map((_, i) => i + 1));
      expect(lines).toEqual(full);
    } finally {
      await next.stop();
      next.cleanup();
    }
  });
});
