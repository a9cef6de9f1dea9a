// Two agentd HTTP servers in this process over ONE in-memory store joined by the in-process change
// feed (LocalChanges): the multi-instance logic of src/runtime/cluster.ts without PostgreSQL or
// child processes (test/cluster/*.test.ts runs the same guarantees on real PostgreSQL).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { configFromObject } from '../../src/config.js';
import { Runtime } from '../../src/composition-root.js';
import { MemoryStore } from '../../src/store/memory.js';
import { LocalChanges } from '../../src/store/changes.js';
import { readVersion } from '../../src/version.js';
import { createLogger, silentLogger } from '../../src/telemetry/logger.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { routeByTag, CRASH_TOOLS } from '../crash/harness.js';
import { eventually, getJson, postJson, tempDir } from '../helpers/server.js';
import { rmSync } from 'node:fs';

interface Peer {
  url: string;
  runtime: Runtime;
  close(): Promise<void>;
}

let model: ScriptedOpenAI;
let store: MemoryStore;
let a: Peer;
let b: Peer;
const dir = tempDir('agentd-cluster-link-');

async function startPeer(config: Record<string, unknown>): Promise<Peer> {
  const cfg = configFromObject(config, { dataDir: dir, env: {} });
  const logger = createLogger({ level: 'warn' });
  const runtime = await Runtime.create(cfg, store, { logger: silentLogger });
  const app = await buildApp({ config: cfg, store, runtime, version: readVersion(), logger, logRequests: false, authEnabled: false });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  await runtime.start();
  return {
    url,
    runtime,
    async close() {
      runtime.runs.lifecycle.beginShutdown();
      await runtime.close(0);
      await app.close();
    },
  };
}

beforeAll(async () => {
  model = await startScriptedOpenAI();
  store = new MemoryStore();
  await store.open();
  store.changes = new LocalChanges();
  const config = {
    server: { port: 0 },
    agent: {
      model: { provider: 'openai-compatible', base_url: model.url, model: 'scripted', max_output_tokens: 64 },
      tools: { local: CRASH_TOOLS, builtin: [] },
    },
    governance: { rules: [{ tools: ['ask_*'], effect: 'ask', reason: 'a person approves writes' }] },
    runs: { orphan_sweep: { interval_seconds: 3600 } },
  };
  a = await startPeer(config);
  b = await startPeer(config);
  routeByTag(model, (tag) => {
    if (tag === 'slow')
      return (turn) => (turn === 0 ? { tool_calls: [{ name: 'counted_echo', arguments: { text: 'slow', ms: 30_000 } }] } : { text: 'slow done' });
    if (tag === 'stream')
      return (turn) => (turn < 3 ? { tool_calls: [{ name: 'counted_echo', arguments: { text: `s${turn}`, ms: 150 } }] } : { text: 'stream done' });
    return undefined;
  });
});

afterAll(async () => {
  await a?.close();
  await b?.close();
  await model?.close();
  await store?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('two instances on one shared store', () => {
  it('a run started on A is read on B, and a stream on B follows it live', async () => {
    // Follow the session on B before the run exists on A.
    const controller = new AbortController();
    const res = await fetch(`${b.url}/events/sess-stream`, { signal: controller.signal, headers: { accept: 'text/event-stream' } });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const seen: string[] = [];
    const ids: string[] = [];
    let buf = '';
    const reading = (async () => {
      const dec = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buf += dec.decode(value, { stream: true });
        for (const m of buf.matchAll(/^event: (\S+)$/gm)) seen.push(m[1]);
        for (const m of buf.matchAll(/^id: (\S+)$/gm)) ids.push(m[1]);
        buf = buf.slice(buf.lastIndexOf('\n') + 1);
      }
    })().catch(() => undefined);
    const started = postJson(`${a.url}/run/sync`, { query: '[stream] go', session_id: 'sess-stream' });
    // Live: tool results arrive on B while the run is still going on A.
    await eventually(() => seen.filter((e) => e === 'tool_result').length >= 1, 10_000, 'a tool_result on B while the run goes on');
    const mid = await getJson(`${b.url}/runs?session_id=sess-stream`);
    expect(mid.body.runs[0].status).toBe('running');
    const done = await started;
    expect(done.status).toBe(200);
    expect(done.body.status).toBe('success');
    await eventually(() => seen.includes('final_answer'), 10_000, 'the end on B');
    expect(seen.filter((e) => e === 'tool_result')).toHaveLength(3);
    // Each event once: a stored event is published on B by the link, never twice.
    expect(new Set(ids).size).toBe(ids.length);
    const onB = await getJson(`${b.url}/runs/${done.body.run_id}`);
    expect(onB.body.status).toBe('completed');
    controller.abort();
    await reading;
  });

  it('a cancel posted to B stops a run live on A within a second', async () => {
    void postJson(`${a.url}/run/sync`, { query: '[slow] wait', session_id: 'sess-cancel' }).catch(() => undefined);
    const runId = await eventually(
      async () => (await getJson(`${b.url}/runs?session_id=sess-cancel`)).body.runs?.[0]?.run_id as string | undefined,
      10_000,
      'run id',
    );
    await eventually(async () => a.runtime.runs.isLive(runId), 10_000, 'run live on A');
    const t0 = Date.now();
    const c = await postJson(`${b.url}/runs/${runId}/cancel`, {});
    expect(c.status).toBe(200);
    expect(c.body.status).toBe('cancel_requested');
    const ended = await eventually(
      async () => {
        const r = await getJson(`${b.url}/runs/${runId}`);
        return r.body.status === 'cancelled' ? r.body : null;
      },
      5_000,
      'cancelled',
    );
    expect(ended.status).toBe('cancelled');
    expect(Date.now() - t0).toBeLessThan(1_000);
  });

  it('a task created on A is known to B, and disabling it on B stops A dispatching it', async () => {
    const created = await postJson(`${a.url}/background/tasks`, {
      task_id: 'shared-task',
      query: 'hello',
      schedule: { type: 'manual' },
    });
    expect(created.status).toBe(200);
    await eventually(() => b.runtime.background.scheduler.tasks.has('shared-task'), 5_000, 'task known on B');
    const patched = await fetch(`${b.url}/background/tasks/shared-task`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ enabled: false }),
    });
    expect(patched.status).toBe(200);
    await eventually(() => a.runtime.background.scheduler.tasks.get('shared-task')?.enabled === false, 5_000, 'disabled on A');
    const run = await postJson(`${a.url}/background/tasks/shared-task/run`, {});
    expect(run.status).toBe(404);
  });
});
