// Idempotency-Key over real HTTP: a retried request never does the work twice,
// also after a restart and after a crash between storing the key and starting the run.
import { createHash } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, tempDir, type TestServer } from '../helpers/server.js';
import { readSse, streamRun, type Frame } from '../helpers/sse.js';
import { openStore } from '../../src/store/open.js';
import { recordIdOf, requestHashOf, type IdempotencyValue } from '../../src/integrations/idempotency.js';
import { crashConfig, killAllChildren, readLedger, requestsOf, routeByTag, startAgentd, tempDir as crashTempDir, writeConfig } from '../crash/harness.js';

let model: ScriptedOpenAI;
let s: TestServer;
const dataDir = tempDir();

const start = () => startTestServer({}, { dataDir, modelUrl: model.url });
const clockThenAnswer = (answer = 'it is late') => model.enqueue({ tool_calls: [{ name: 'clock', arguments: {} }] }, { text: answer });
const toolCallsOf = (frames: Frame[]) => frames.filter((f) => f.event === 'tool_call');

beforeAll(async () => {
  model = await startScriptedOpenAI();
  s = await start();
});
afterAll(async () => {
  await s?.stop();
  await model.close();
  s?.cleanup();
});
beforeEach(() => model.reset());

describe('POST /run with an Idempotency-Key', () => {
  it('a retry answers with the same run, replayed from its first event; the model is asked once', async () => {
    clockThenAnswer();
    const key = { 'idempotency-key': 'run-key-1' };
    const body = { query: 'what time is it?', session_id: 'idem-a' };
    const first = await streamRun(s.url, body, key);
    expect(first.status).toBe(200);
    const runId = first.frames[0].data.run_id as string;
    expect(first.frames.at(-1)).toMatchObject({ event: 'complete', data: { status: 'success', response: 'it is late', run_id: runId } });
    expect(model.requests).toHaveLength(2);

    const again = await streamRun(s.url, body, key);
    expect(again.status).toBe(200);
    expect(again.frames[0]).toMatchObject({ event: 'session', data: { run_id: runId, session_id: 'idem-a' } });
    // The same stored events (same cursors), one set of tool calls, the same result.
    const ids = (fs: Frame[]) => fs.filter((f) => f.id).map((f) => f.id);
    expect(ids(again.frames)).toEqual(ids(first.frames));
    expect(toolCallsOf(again.frames)).toHaveLength(1);
    expect(again.frames.at(-1)).toMatchObject({ event: 'complete', data: { status: 'success', response: 'it is late', run_id: runId } });
    expect(model.requests).toHaveLength(2);
    const runs = await getJson(`${s.url}/runs?session_id=idem-a`);
    expect(runs.body.total).toBe(1);
  });

  it('a client that drops the stream and retries gets the same run, live; the run was not cancelled', async () => {
    // The answer streams slowly (4 chunks, 400 ms apart): the retry arrives while it runs.
    model.enqueue({ tool_calls: [{ name: 'clock', arguments: {} }] }, { text: 'one two three four', chunkDelayMs: 400 });
    const key = { 'idempotency-key': 'run-key-dropped' };
    const body = { query: 'slow one', session_id: 'idem-b' };
    const ac = new AbortController();
    const res = await fetch(`${s.url}/run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...key },
      body: JSON.stringify(body),
      signal: ac.signal,
    });
    let runId = '';
    for await (const f of readSse(res)) {
      if (f.event === 'session') runId = f.data.run_id;
      if (f.event === 'tool_result') break;
    }
    ac.abort();
    await model.waitForRequests(2);
    expect((await getJson(`${s.url}/runs/${runId}`)).body.status).toBe('running');
    const frames: Frame[] = [];
    const r = await fetch(`${s.url}/run`, { method: 'POST', headers: { 'content-type': 'application/json', ...key }, body: JSON.stringify(body) });
    for await (const f of readSse(r)) frames.push(f);
    expect(frames[0].data.run_id).toBe(runId);
    expect(toolCallsOf(frames)).toHaveLength(1);
    expect(frames.at(-1)).toMatchObject({ event: 'complete', data: { run_id: runId, status: 'success', response: 'one two three four' } });
    expect(model.requests).toHaveLength(2);
    expect((await getJson(`${s.url}/runs?session_id=idem-b`)).body.total).toBe(1);
  });

  it('the same key with another body is 422; a bad key is 422', async () => {
    clockThenAnswer();
    const key = { 'idempotency-key': 'run-key-2' };
    const ok = await postJson(`${s.url}/run/sync`, { query: 'first', session_id: 'idem-c' }, key);
    expect(ok.status).toBe(200);
    const other = await postJson(`${s.url}/run/sync`, { query: 'second', session_id: 'idem-c' }, key);
    expect(other.status).toBe(422);
    expect(other.body.detail[0]).toMatchObject({ loc: ['header', 'idempotency-key'], type: 'idempotency_key_reused' });
    // Another route with the same key is another request too.
    const stream = await postJson(`${s.url}/run`, { query: 'first', session_id: 'idem-c' }, key);
    expect(stream.status).toBe(422);
    const long = await postJson(`${s.url}/run/sync`, { query: 'x' }, { 'idempotency-key': 'k'.repeat(256) });
    expect(long.status).toBe(422);
    expect(long.body.detail[0].loc).toEqual(['header', 'idempotency-key']);
    expect(model.requests).toHaveLength(2);
  });

  it('POST /run/sync: a retry after a restart answers with the original run and runs nothing', async () => {
    clockThenAnswer('before the restart');
    const key = { 'idempotency-key': 'sync-restart' };
    const body = { query: 'remember me', session_id: 'idem-d' };
    const first = await postJson(`${s.url}/run/sync`, body, key);
    expect(first.status).toBe(200);
    await s.stop();
    s = await start();
    const again = await postJson(`${s.url}/run/sync`, body, key);
    expect(again.status).toBe(200);
    expect(again.body.run_id).toBe(first.body.run_id);
    expect(again.body.response).toBe('before the restart');
    // POST /run with a key used by /run/sync is a different request.
    expect(model.requests).toHaveLength(2);
  });

  it('a crash between storing the key and starting the run: the retry starts the run once, with the reserved id', async () => {
    await s.stop();
    // What a process killed right after writing the key leaves: a pending record, claimed by a
    // worker that no longer exists, whose run was never created.
    const body = { query: 'after the crash', session_id: 'idem-e' };
    const reserved = 'run_reservedByDeadProcess';
    const store = await openStore({ kind: 'level', path: dataDir });
    const now = Date.now();
    await store.createRecord<IdempotencyValue>('idempotency', recordIdOf('anonymous', 'crash-key'), {
      principal: 'anonymous',
      key_sha256: createHash('sha256').update('crash-key').digest('hex'),
      operation: 'runSync',
      request_sha256: requestHashOf({ method: 'POST', path: '/run/sync', body }),
      target_id: reserved,
      state: 'pending',
      claim: { worker: 'worker_dead', at: new Date(now).toISOString() },
      response: null,
      created_at: new Date(now).toISOString(),
      expires_at: new Date(now + 86_400_000).toISOString(),
    });
    await store.close();
    s = await start();
    model.enqueue({ text: 'recovered' });
    const [a, b] = await Promise.all([
      postJson(`${s.url}/run/sync`, body, { 'idempotency-key': 'crash-key' }),
      postJson(`${s.url}/run/sync`, body, { 'idempotency-key': 'crash-key' }),
    ]);
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    expect(a.body.run_id).toBe(reserved);
    expect(b.body.run_id).toBe(reserved);
    expect(model.requests).toHaveLength(1);
    expect((await getJson(`${s.url}/runs?session_id=idem-e`)).body.total).toBe(1);
  });
});

describe('decision routes and background runs', () => {
  it('a retried cancel answers as the first one did instead of 409', async () => {
    model.setDefault({ hang: true });
    const key = { 'idempotency-key': 'cancel-1' };
    const res = await fetch(`${s.url}/run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': 'cancel-run' },
      body: JSON.stringify({ query: 'hang', session_id: 'idem-f' }),
    });
    const reader = readSse(res);
    const session = (await reader.next()).value as Frame;
    const runId = session.data.run_id as string;
    await model.waitForRequests(1);
    const first = await postJson(`${s.url}/runs/${runId}/cancel`, null, key);
    expect(first.status).toBe(200);
    await eventually(async () => (await getJson(`${s.url}/runs/${runId}`)).body.status === 'cancelled');
    const again = await postJson(`${s.url}/runs/${runId}/cancel`, null, key);
    expect(again).toMatchObject({ status: 200, body: first.body });
    const plain = await postJson(`${s.url}/runs/${runId}/cancel`, null);
    expect(plain.status).toBe(409);
    await reader.return(undefined);
    model.setDefault({ text: 'Hello from the scripted model.' });
  });

  it('POST /background/tasks/{id}/run: a retry gives the same background run', async () => {
    model.setDefault({ text: 'bg done' });
    const task = await postJson(`${s.url}/background/tasks`, {
      task_id: 'idem-task',
      query: 'hello',
      schedule: { type: 'manual' },
      overlap_policy: 'allow_parallel',
    });
    expect(task.status, JSON.stringify(task.body)).toBe(200);
    const key = { 'idempotency-key': 'bg-run-1' };
    const a = await postJson(`${s.url}/background/tasks/idem-task/run`, { wait: true }, key);
    expect(a.status).toBe(200);
    const b = await postJson(`${s.url}/background/tasks/idem-task/run`, { wait: true }, key);
    expect(b.status).toBe(200);
    expect(b.body.run_id).toBe(a.body.run_id);
    const runs = await getJson(`${s.url}/background/runs?task_id=idem-task`);
    expect(runs.body.total).toBe(1);
    expect(model.requests).toHaveLength(1);
  });
});

describe('keys are scoped per caller', () => {
  let authed: TestServer;
  const key = (k: string) => ({ name: k, role: 'operator', key_sha256: createHash('sha256').update(k).digest('hex') });
  beforeAll(async () => {
    authed = await startTestServer({ auth: { api_keys: [key('alice-key-0123456789'), key('bob-key-0123456789')] } }, { modelUrl: model.url });
  });
  afterAll(async () => {
    await authed.stop();
    authed.cleanup();
  });

  it("the same key from two API keys is two requests; neither sees the other's run", async () => {
    model.setDefault({ text: 'hi' });
    const body = { query: 'same words' };
    const a = await postJson(`${authed.url}/run/sync`, body, { authorization: 'Bearer alice-key-0123456789', 'idempotency-key': 'shared' });
    const b = await postJson(`${authed.url}/run/sync`, body, { authorization: 'Bearer bob-key-0123456789', 'idempotency-key': 'shared' });
    const a2 = await postJson(`${authed.url}/run/sync`, body, { authorization: 'Bearer alice-key-0123456789', 'idempotency-key': 'shared' });
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    expect(b.body.run_id).not.toBe(a.body.run_id);
    expect(a2.body.run_id).toBe(a.body.run_id);
    expect(model.requests).toHaveLength(2);
  });
});

describe('POST /run with a key through a SIGKILL (child process)', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    await killAllChildren();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('the retry after the restart gets the same run, recovered and finished, with its tool call run once', async () => {
    const dir = crashTempDir();
    dirs.push(dir);
    const ledger = join(dir, 'ledger.jsonl');
    writeFileSync(ledger, '');
    let release = false;
    routeByTag(model, (tag) =>
      tag === 'k'
        ? (turn) =>
            turn === 0 ? { tool_calls: [{ name: 'counted_echo', arguments: { text: 'once' } }] } : release ? { text: 'done after the crash' } : { hang: true }
        : undefined,
    );
    const cfg = writeConfig(dir, crashConfig(model.url));
    const env = { AGENTD_TEST_LEDGER: ledger };
    let child = await startAgentd({ configFile: cfg, dataDir: dir, env });
    const key = { 'idempotency-key': 'kill-key' };
    const body = { query: '[k] echo, then think', session_id: 'idem-kill' };
    const res = await fetch(`${child.url}/run`, { method: 'POST', headers: { 'content-type': 'application/json', ...key }, body: JSON.stringify(body) });
    let runId = '';
    const firstIds: string[] = [];
    const reader = readSse(res);
    for await (const f of reader) {
      if (f.event === 'session') runId = f.data.run_id;
      if (f.id) firstIds.push(f.id);
      if (f.event === 'tool_result') break;
    }
    await eventually(() => requestsOf(model, 'k').some((r) => r.turn === 1), 10_000, 'second model call sent');
    expect((await child.kill('SIGKILL')).signal).toBe('SIGKILL');
    await reader.return(undefined).catch(() => undefined);
    release = true;
    child = await startAgentd({ configFile: cfg, dataDir: dir, env });
    const frames: Frame[] = [];
    const again = await fetch(`${child.url}/run`, { method: 'POST', headers: { 'content-type': 'application/json', ...key }, body: JSON.stringify(body) });
    for await (const f of readSse(again)) frames.push(f);
    expect(frames[0].data.run_id).toBe(runId);
    // The replay starts with the events the first stream had, in the same order, with the same ids.
    expect(
      frames
        .filter((f) => f.id)
        .slice(0, firstIds.length)
        .map((f) => f.id),
    ).toEqual(firstIds);
    expect(frames.at(-1)).toMatchObject({ event: 'complete', data: { run_id: runId, status: 'success', response: 'done after the crash' } });
    expect(toolCallsOf(frames)).toHaveLength(1);
    const echoes = readLedger(ledger).filter((l) => l.tool === 'counted_echo' && l.phase === 'done');
    expect(echoes).toHaveLength(1);
    expect(requestsOf(model, 'k').filter((r) => r.turn === 0)).toHaveLength(1);
    const runs = await getJson(`${child.url}/runs?session_id=idem-kill`);
    expect(runs.body.total).toBe(1);
    await child.kill('SIGKILL');
  }, 60_000);
});
