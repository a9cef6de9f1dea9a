// Completion webhooks over real HTTP: a local receiver checks the Standard
// Webhooks signature with its own HMAC code; failures are retried with the same webhook-id; a
// SIGKILL between the run's end and the delivery loses nothing.
import { createHmac, randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { startWebhookReceiver, type Received, type WebhookReceiver } from '../helpers/webhook-receiver.js';
import { crashConfig, killAllChildren, startAgentd, tempDir, writeConfig } from '../crash/harness.js';

const SECRET = `whsec_${randomBytes(24).toString('base64')}`;
const REQUEST_SECRET = 'request-secret-value-0123456789';

/** The receiver's own check (Standard Webhooks): HMAC-SHA256 over `${id}.${timestamp}.${body}`. */
function validSignature(r: Received, secret: string): boolean {
  const key = secret.startsWith('whsec_') ? Buffer.from(secret.slice(6), 'base64') : Buffer.from(secret, 'utf8');
  const expected = createHmac('sha256', key).update(`${r.id}.${r.timestamp}.${r.body}`).digest('base64');
  return r.signature.split(' ').some((s) => s === `v1,${expected}`);
}

let model: ScriptedOpenAI;
let hooks: WebhookReceiver;
let own: WebhookReceiver;
let s: TestServer;
const PATH_TOKEN = 'T0001-path-token-b1e9';
const QUERY_TOKEN = 'query-token-7c2d';

beforeAll(async () => {
  model = await startScriptedOpenAI();
  hooks = await startWebhookReceiver();
  own = await startWebhookReceiver();
  s = await startTestServer(
    {
      governance: { rules: [{ tools: ['workspace_write'], effect: 'ask' }] },
      webhooks: {
        // A Slack-style receiver: its URL carries a token in the path and in the query.
        endpoints: [{ url: `${hooks.url}/${PATH_TOKEN}?token=${QUERY_TOKEN}`, secret_env: 'HOOK_SECRET' }],
        allow_request_hosts: [`127.0.0.1:${own.port}`],
        request_secret_env: 'REQUEST_SECRET',
        initial_backoff_seconds: 0.2,
      },
    },
    { modelUrl: model.url, env: { HOOK_SECRET: SECRET, REQUEST_SECRET } },
  );
});
afterAll(async () => {
  await s?.stop();
  s?.cleanup();
  await hooks.close();
  await own.close();
  await model.close();
  await killAllChildren();
});

const forRun = (r: WebhookReceiver, runId: string) => r.received.filter((x) => x.json?.data?.run_id === runId);

describe('completion webhooks', () => {
  it('a completed run is delivered to the receiver, signed; the delivery is listed', async () => {
    model.enqueue({ text: 'all done' });
    const run = await postJson(`${s.url}/run/sync`, { query: 'hello' });
    expect(run.status).toBe(200);
    const got = await eventually(() => forRun(hooks, run.body.run_id).length > 0 && forRun(hooks, run.body.run_id), 10_000, 'webhook received');
    expect(got).toHaveLength(1);
    const hook = got[0];
    expect(hook.json).toMatchObject({
      type: 'run.completed',
      data: { run_id: run.body.run_id, session_id: run.body.session_id, status: 'completed', response: 'all done' },
    });
    expect(hook.id).toMatch(/^msg_/);
    expect(Math.abs(Number(hook.timestamp) - Date.now() / 1000)).toBeLessThan(60);
    expect(validSignature(hook, SECRET)).toBe(true);
    expect(validSignature({ ...hook, body: hook.body.replace('all done', 'all gone') }, SECRET)).toBe(false);
    const list = await eventually(
      async () => {
        const l = await getJson(`${s.url}/webhooks/deliveries?run_id=${run.body.run_id}`);
        return l.body.deliveries?.[0]?.status === 'delivered' && l;
      },
      5000,
      'delivery marked delivered',
    );
    expect(list.body.deliveries[0]).toMatchObject({
      delivery_id: hook.id,
      event_type: 'run.completed',
      status: 'delivered',
      attempts: 1,
      last_status_code: 200,
    });
    // The receiver was called at its full URL, token and all...
    expect(hook.path).toBe(`/hooks/${PATH_TOKEN}?token=${QUERY_TOKEN}`);
    // ...but the listing shows only its origin: a read-role caller learns no receiver token.
    expect(list.body.deliveries[0].url).toBe(`http://127.0.0.1:${hooks.port}/…`);
    // The signing key is in no answer and no stored event.
    const events = await getJson(`${s.url}/telemetry/events?run_id=${run.body.run_id}`);
    for (const text of [JSON.stringify(list.body), JSON.stringify(events.body)]) {
      expect(text).not.toContain(SECRET.slice(6));
      expect(text).not.toContain(REQUEST_SECRET);
      expect(text).not.toContain(PATH_TOKEN);
      expect(text).not.toContain(QUERY_TOKEN);
    }
  });

  it('a receiver that fails twice gets the same delivery a third time, with the same webhook-id', async () => {
    hooks.script(500, 503);
    model.enqueue({ text: 'third time lucky' });
    const run = await postJson(`${s.url}/run/sync`, { query: 'retry me' });
    const got = await eventually(() => forRun(hooks, run.body.run_id).length >= 3 && forRun(hooks, run.body.run_id), 15_000, 'three attempts');
    expect(got.map((g) => g.answered)).toEqual([500, 503, 200]);
    expect(new Set(got.map((g) => g.id)).size).toBe(1);
    expect(new Set(got.map((g) => g.body)).size).toBe(1);
    for (const g of got) expect(validSignature(g, SECRET)).toBe(true);
    const list = await eventually(
      async () => {
        const l = await getJson(`${s.url}/webhooks/deliveries?run_id=${run.body.run_id}`);
        return l.body.deliveries?.[0]?.status === 'delivered' && l;
      },
      5000,
      'delivered after retries',
    );
    expect(list.body.deliveries[0]).toMatchObject({ attempts: 3, status: 'delivered' });
    expect(list.body.deliveries[0].history.map((h: { status_code: number }) => h.status_code)).toEqual([500, 503, 200]);
    const failed = await getJson(`${s.url}/webhooks/deliveries?status=failed`);
    expect(failed.body.deliveries).toEqual([]);
    const metrics = await (await fetch(`${s.url}/metrics/prometheus`)).text();
    const value = (line: string) => Number(new RegExp(`^${line.replace(/[{}]/g, '\\$&')} (\\S+)$`, 'm').exec(metrics)?.[1] ?? NaN);
    expect(value('agentd_webhook_attempts_total{result="http_error"}')).toBeGreaterThanOrEqual(2);
    expect(value('agentd_webhook_deliveries_total{outcome="delivered"}')).toBeGreaterThanOrEqual(1);
    expect(metrics).toMatch(/^agentd_webhook_deliveries_pending \d+$/m);
  });

  it('a run that waits for approval is announced once; the per-request URL gets it too, signed with its own secret', async () => {
    model.enqueue({ tool_calls: [{ name: 'workspace_write', arguments: { path: 'a.txt', content: 'x' } }] });
    const refused = await postJson(`${s.url}/run/sync`, { query: 'write it', webhook: 'http://example.com/hook' });
    expect(refused.status).toBe(422);
    expect(refused.body.detail[0]).toMatchObject({ loc: ['body', 'webhook'], type: 'webhook_url_not_allowed' });
    const run = await postJson(`${s.url}/run/sync`, { query: 'write it', webhook: `http://127.0.0.1:${own.port}/mine` });
    expect(run.body.status).toBe('awaiting_approval');
    const mine = await eventually(() => forRun(own, run.body.run_id).length > 0 && forRun(own, run.body.run_id), 10_000, 'per-request webhook');
    expect(mine[0].json).toMatchObject({ type: 'run.awaiting_approval', data: { run_id: run.body.run_id, status: 'awaiting_approval' } });
    expect(mine[0].path).toBe('/mine');
    expect(validSignature(mine[0], REQUEST_SECRET)).toBe(true);
    const cfg = await eventually(() => forRun(hooks, run.body.run_id).length > 0 && forRun(hooks, run.body.run_id), 10_000, 'configured webhook');
    expect(cfg.map((c) => c.json.type)).toEqual(['run.awaiting_approval']);
    // Cancelled: run.cancelled follows.
    await postJson(`${s.url}/runs/${run.body.run_id}/cancel`, null);
    const cancelled = await eventually(() => forRun(own, run.body.run_id).find((x) => x.json.type === 'run.cancelled'), 10_000, 'run.cancelled');
    expect(cancelled.json.data.status).toBe('cancelled');
  });

  it('a manual background run announces background_run.completed, to its own URL too', async () => {
    model.setDefault({ text: 'background done' });
    const task = await postJson(`${s.url}/background/tasks`, { task_id: 'hook-task', query: 'work', schedule: { type: 'manual' } });
    expect(task.status, JSON.stringify(task.body)).toBe(200);
    const run = await postJson(`${s.url}/background/tasks/hook-task/run`, { wait: true, webhook: `http://127.0.0.1:${own.port}/bg` });
    expect(run.body.status).toBe('completed');
    const mine = await eventually(
      () => forRun(own, run.body.run_id).find((x) => x.json.type === 'background_run.completed'),
      10_000,
      'background_run.completed (request URL)',
    );
    expect(mine.json.data).toMatchObject({ run_id: run.body.run_id, task_id: 'hook-task', status: 'completed' });
    expect(validSignature(mine, REQUEST_SECRET)).toBe(true);
    const cfg = await eventually(
      () => forRun(hooks, run.body.run_id).find((x) => x.json.type === 'background_run.completed'),
      10_000,
      'background_run.completed (configured)',
    );
    expect(validSignature(cfg, SECRET)).toBe(true);
    const refused = await postJson(`${s.url}/background/tasks/hook-task/run`, { webhook: 'http://169.254.169.254/latest' });
    expect(refused.status).toBe(422);
    model.setDefault({ text: 'Hello from the scripted model.' });
  });

  it('GET /webhooks/deliveries pages like the other lists', async () => {
    const first = await getJson(`${s.url}/webhooks/deliveries?limit=1`);
    expect(first.status).toBe(200);
    expect(first.body.deliveries).toHaveLength(1);
    expect(first.body.total).toBeGreaterThan(1);
    const next = await getJson(`${s.url}/webhooks/deliveries?limit=1&cursor=${encodeURIComponent(first.body.next_cursor)}`);
    expect(next.body.deliveries[0].delivery_id).not.toBe(first.body.deliveries[0].delivery_id);
    expect((await getJson(`${s.url}/webhooks/deliveries?limit=0`)).status).toBe(422);
  });
});

describe("a SIGKILL between the run's end and the delivery", () => {
  const dataDir = tempDir();
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it('the delivery is made after the restart, with the same webhook-id', async () => {
    const receiver = await startWebhookReceiver();
    try {
      receiver.fallback = 'hang'; // the first attempt is in flight when agentd dies
      const cfg = writeConfig(
        dataDir,
        crashConfig(model.url, { webhooks: { endpoints: [{ url: receiver.url, secret_env: 'HOOK_SECRET', events: ['run.completed'] }], timeout_seconds: 60 } }),
      );
      const env = { HOOK_SECRET: SECRET };
      let child = await startAgentd({ configFile: cfg, dataDir, env });
      model.setDefault({ text: 'finished before the crash' });
      const run = await postJson(`${child.url}/run/sync`, { query: 'end, then die' });
      expect(run.body.status).toBe('success');
      await eventually(() => receiver.received.length > 0, 10_000, 'first attempt');
      expect((await child.kill('SIGKILL')).signal).toBe('SIGKILL');
      receiver.fallback = 200;
      child = await startAgentd({ configFile: cfg, dataDir, env });
      const got = await eventually(() => receiver.received.some((r) => r.answered === 200) && receiver.received, 15_000, 'delivered after restart');
      expect(got.every((r) => r.id === got[0].id && validSignature(r, SECRET))).toBe(true);
      expect(got[0].json).toMatchObject({ type: 'run.completed', data: { run_id: run.body.run_id } });
      const list = await eventually(
        async () => {
          const l = await getJson(`${child.url}/webhooks/deliveries`);
          return l.body.deliveries?.[0]?.status === 'delivered' && l;
        },
        5000,
        'listed as delivered',
      );
      expect(list.body.deliveries).toHaveLength(1);
      await child.kill('SIGKILL');
    } finally {
      await receiver.close();
    }
  }, 60_000);

  it('a run that ended while the dispatcher had not yet written its delivery: delivered after the restart', async () => {
    const dir2 = tempDir();
    const receiver = await startWebhookReceiver();
    try {
      const cfg = writeConfig(dir2, crashConfig(model.url, { webhooks: { endpoints: [{ url: receiver.url, secret_env: 'HOOK_SECRET' }] } }));
      const env = { HOOK_SECRET: SECRET };
      let child = await startAgentd({ configFile: cfg, dataDir: dir2, env });
      model.setDefault({ text: 'gone at once' });
      const run = await postJson(`${child.url}/run/sync`, { query: 'end, then die at once' });
      expect(run.body.status).toBe('success');
      await child.kill('SIGKILL'); // at once: the delivery may not even be in the outbox yet
      child = await startAgentd({ configFile: cfg, dataDir: dir2, env });
      const got = await eventually(() => receiver.received.find((r) => r.json?.data?.run_id === run.body.run_id), 15_000, 'delivered after restart');
      expect(validSignature(got, SECRET)).toBe(true);
      await child.kill('SIGKILL');
    } finally {
      await receiver.close();
      rmSync(dir2, { recursive: true, force: true });
    }
  }, 60_000);
});
