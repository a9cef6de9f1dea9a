// A live run logs through its host's child logger: every line it writes carries its id
// as a pino binding, not as a field each call site adds. Checked on the real logger's output of a
// real server: a run whose record another owner took over while its model call was in flight logs
// the lease loss with its run_id; a background run the same with its bg_run_id and task_id; a
// webhook delivery that fails for good with its delivery_id.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { configFromObject } from '../../src/config.js';
import { startServer, type Server } from '../../src/main.js';
import { repos } from '../../src/store/repos/index.js';
import { runIndexes, type RunRecord } from '../../src/runtime/run-record.js';
import { runRowIndexes, type BgRunRow } from '../../src/background/types.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { captureLog, type LogCapture } from '../helpers/log-capture.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';
import { eventually, getJson, postJson, tempDir } from '../helpers/server.js';
import { rmSync } from 'node:fs';

let model: ScriptedOpenAI;
let server: Server;
let log: LogCapture;
let receiver: WebhookReceiver;
const dataDir = tempDir('agentd-run-logging-');

beforeAll(async () => {
  model = await startScriptedOpenAI();
  receiver = await startWebhookReceiver();
  receiver.script(...Array.from({ length: 100 }, () => 500));
  log = captureLog({ level: 'info' });
  const config = configFromObject(
    {
      server: { port: 0, host: '127.0.0.1' },
      agent: { model: { provider: 'openai-compatible', base_url: model.url, model: 'scripted' } },
      runs: { orphan_sweep: { interval_seconds: 3600 } },
      // A receiver that fails every attempt, retried for 0.18 s only: the second attempt gives up.
      webhooks: { endpoints: [{ url: `${receiver.url}/hook`, secret: 'whsec_dGVzdC1zZWNyZXQ=' }], retry_hours: 0.00005, initial_backoff_seconds: 0.2 },
    },
    { dataDir, env: {} },
  );
  server = await startServer(config, { logger: log.logger });
});

afterAll(async () => {
  await server?.close(0).catch(() => undefined);
  await model?.close();
  await receiver?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe("a live run's log lines", () => {
  it('carry the run_id bound by its host (a lease lost to another owner)', async () => {
    // A slow answer: the run is live, waiting on its model call, while another owner takes it.
    model.enqueue({ text: 'one two three four five six', chunkDelayMs: 100 });
    const answer = postJson(`${server.url}/run`, { query: 'hello', session_id: 'log-bind' }, { accept: 'application/json' });
    await model.waitForRequests(1);
    const runId = await eventually(async () => (await getJson(`${server.url}/runs?session_id=log-bind`)).body?.runs?.[0]?.run_id as string | undefined);
    const r = repos(server.store).runs;
    const rec = await eventually(() => r.get<RunRecord>(runId));
    const taken = { ...rec.value, owner: 'worker_elsewhere' };
    await r.update(runId, taken, rec.version, runIndexes(taken));
    await answer;

    const lost = await eventually(() => log.entries().find((e) => e.msg === 'run lease lost to another owner; stopping this copy'));
    expect(lost).toMatchObject({ level: 'warn', run_id: runId });
    // The id comes from the host's child logger (the call site passes no run_id field).
    expect(log.children).toContainEqual({ run_id: runId });
    const line = log.lines.find((l) => l.includes('run lease lost'))!;
    expect(line.split('"run_id"').length - 1).toBe(1);
  });

  it('of a background run carry its bg_run_id and task_id (a row write refused)', async () => {
    model.enqueue({ text: 'background work done slowly', chunkDelayMs: 100 });
    expect((await postJson(`${server.url}/background/tasks`, { task_id: 'log-task', query: 'work', schedule: { type: 'manual' } })).status).toBe(200);
    const started = await postJson(`${server.url}/background/tasks/log-task/run`, {});
    expect(started.status).toBeLessThan(300);
    const bgRunId = started.body.run_id as string;
    await model.waitForRequests(2);
    const r = repos(server.store).bgRuns;
    const row = await eventually(async () => {
      const got = await r.get<BgRunRow>(bgRunId);
      return got?.value.run.status === 'running' ? got : null;
    });
    // Another instance's write: this process's next write of the row is refused (stale version).
    await r.update(bgRunId, row.value, row.version, runRowIndexes(row.value));

    const refused = await eventually(() => log.entries().find((e) => e.msg === 'background run write refused; dropping this copy'));
    expect(refused).toMatchObject({ level: 'warn', bg_run_id: bgRunId, task_id: 'log-task' });
    // Refused as its own write, or (the completion folded into the agent run's final commit, on
    // the embedded stores) as that commit, which then fences the agent run too: the run's new
    // owner continues it (RunHosts.foldInto).
    expect(refused.err).toMatch(/is at version \d+, expected \d+|runs\/\S+ was written by another owner/);
    expect(log.children).toContainEqual({ bg_run_id: bgRunId, task_id: 'log-task' });
  });

  it('of a webhook delivery carry its delivery_id and run_id (a delivery failed for good)', async () => {
    model.enqueue({ text: 'done' });
    const run = await postJson(`${server.url}/run/sync`, { query: 'hook me', session_id: 'log-hook' });
    expect(run.status).toBe(200);
    const runId = run.body.run_id as string;
    const failed = await eventually(() => log.entries().find((e) => e.msg === 'webhook delivery failed for good' && e.run_id === runId), 10_000);
    expect(failed.delivery_id).toMatch(/^msg_/);
    expect(failed).toMatchObject({ level: 'warn', last_error: 'HTTP 500' });
    expect(log.children).toContainEqual({ delivery_id: failed.delivery_id, run_id: runId });
  });
});
