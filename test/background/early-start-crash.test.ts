// Starting a run's agent run before its claim is stored (docs/background.md "Starting before the
// claim lands"), killed at that point: the server runs in a child process whose store stops
// landing writes from the second run's claim on (a stalled disk), so that claim, the first run's
// end and everything after are never stored; the second run's agent run has started anyway and
// reached a non-idempotent tool call, whose `started` save waits behind the claim. SIGKILL there,
// then a new server on the same data dir: every run completes once, no tool call ran twice, and
// the second run, whose claim was never stored, starts from its queue (attempt 1, reason initial).
import type { ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, tempDir, type TestServer } from '../helpers/server.js';
import { waitFor } from '../helpers/wait.js';
import { api, directModel, eventNames, startChildServer, TOOLS, waitRun } from './helpers.js';

let model: ScriptedOpenAI;
let child: ChildProcess | null = null;
let second: TestServer | null = null;
const dataDir = tempDir('agentd-bg-early-');
const ledger = join(tempDir('agentd-bg-early-ledger-'), 'ledger.txt');

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
});

const config = () => ({
  server: { port: 0 },
  agent: { model: { provider: 'openai-compatible', base_url: model.url, model: 'scripted' }, tools: { local: TOOLS, builtin: [] } },
  background: { poll_interval_ms: 50, concurrency: 1 },
  runs: { orphan_sweep: { interval_seconds: 3600 } },
});

const marks = () =>
  readFileSync(ledger, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('mark:'));

// Only a store this process alone writes starts a run before its claim is stored (on PostgreSQL the
// claim lands first): the child's held writes are LevelDB's.
it.skipIf(process.env.AGENTD_TEST_STORE === 'postgres')(
  'a crash while the next run started before its claim was stored repeats no tool call and loses no run',
  async () => {
    const started = await startChildServer(dataDir, config(), { BG_LEDGER: ledger, BG_HOLD_FROM_CLAIM: '2' });
    child = started.child;
    const out = started.output;
    const a = api(started.url);
    const t = await a.post('/background/tasks', {
      task_id: 'marks',
      schedule: { type: 'manual' },
      query: 'CALL bg_mark {"tag": "k"}',
      overlap_policy: 'allow_parallel',
      session_policy: { mode: 'run' },
      // The first run's end may ride in the same store round as the second run's claim (the round
      // the stalled disk holds): its row is then still `running` at the kill, and the new server
      // recovers it with a second attempt that continues its agent run. With no retry left it would
      // fail instead, depending on how the host scheduled that round (seen under load).
      retry_policy: { max_retries: 1, initial_delay_seconds: 0 },
    });
    expect(t.status).toBe(200);
    const r = await a.post('/background/tasks/marks/runs', { runs: [{}, {}, {}] });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const ids: string[] = r.body.runs.map((x: { run: { run_id: string } }) => x.run.run_id);
    // The second run's agent run asked the model, which called bg_mark: its `started` save is held
    // behind the unstored claim, so the tool has not run.
    await waitFor(() => out().includes('mark-started'), { what: "the second run's tool call saved started (held)", timeoutMs: 30_000 });
    expect(marks()).toEqual([`mark:k:${ids[0]}`]);
    const exited = new Promise((res) => child!.once('exit', res));
    child.kill('SIGKILL');
    await exited;
    child = null;

    process.env.BG_LEDGER = ledger;
    second = await startTestServer(config(), { dataDir });
    const b = api(second.url);
    for (const id of ids) {
      const run = await waitRun(b, id, undefined, 30_000);
      const attempts = (await b.get(`/background/runs/${id}/attempts`)).body;
      expect(run.status, JSON.stringify({ run, attempts })).toBe('completed');
    }
    // Each run's non-idempotent call ran once, ever.
    expect(marks().sort()).toEqual(ids.map((id) => `mark:k:${id}`).sort());
    for (const id of ids) {
      const names = eventNames((await b.get(`/background/runs/${id}/events`)).body.events).filter((n) => n !== 'background_run_heartbeat');
      expect(names.filter((n) => n === 'background_run_completed')).toHaveLength(1);
    }
    // The second run's claim never reached the store: it was still queued, and ran as a first attempt.
    const attempts = (await b.get(`/background/runs/${ids[1]}/attempts`)).body.attempts;
    expect(attempts).toEqual([expect.objectContaining({ attempt_number: 1, status: 'completed', reason: 'initial' })]);
  },
  90_000,
);
