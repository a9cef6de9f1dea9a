// A benchmark server in its own process, so the parent (load generator) can read its RSS/CPU from
// /proc and the two do not share an event loop. Plain JS over the compiled build in test/bench/dist/ (what
// `npm start` runs, built by run.ts), with no TypeScript loader in the measured process. The spec comes in BENCH_CHILD (JSON);
// the child answers over the IPC channel: {type:'ready', url} once listening, then
// {type:'reply', id, value} for each command the parent sends.
import Fastify from 'fastify';

const spec = JSON.parse(process.env.BENCH_CHILD ?? '{}');
const nowMs = () => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

const commands = new Map();
process.on('message', async (msg) => {
  const handler = commands.get(msg.cmd);
  let value;
  try {
    value = handler ? await handler(msg) : { error: `unknown command ${msg.cmd}` };
  } catch (err) {
    value = { error: String(err?.stack ?? err) };
  }
  process.send({ type: 'reply', id: msg.id, value });
});
commands.set('memory', () => process.memoryUsage());
commands.set('cpu', () => process.cpuUsage());
commands.set('heapSnapshot', async ({ file }) => {
  globalThis.gc?.();
  const { writeHeapSnapshot } = await import('node:v8');
  return writeHeapSnapshot(file);
});
// Needs --expose-gc (BENCH_NODE_FLAGS): heap in use after a full collection, to tell a leak from lazy GC.
commands.set('gc', () => {
  globalThis.gc?.();
  return process.memoryUsage();
});

// ---------------------------------------------------------------- models

async function buildModel(m) {
  const { ModelCallError } = await import('./dist/src/agent/model/types.js');
  const usage = { input_tokens: 10, output_tokens: 5, total_tokens: 15 };
  if (m.kind === 'instant') {
    const text = m.chunks.join('');
    return {
      provider: 'bench',
      model: 'instant',
      estimateInputTokens: () => 10,
      async call(req) {
        for (const c of m.chunks) req.onDelta?.(c);
        return { text, tool_calls: [], usage, finish_reason: 'stop', model: 'instant' };
      },
    };
  }
  if (m.kind === 'slow') {
    return {
      provider: 'bench',
      model: 'slow',
      estimateInputTokens: () => 10,
      async call(req) {
        let text = '';
        for (let i = 0; i < m.chunks; i++) {
          await sleep(m.delayMs, req.signal);
          if (req.signal?.aborted) throw new ModelCallError('aborted', 'model call aborted');
          const c = `chunk ${i} `;
          text += c;
          req.onDelta?.(c);
        }
        return { text, tool_calls: [], usage, finish_reason: 'stop', model: 'slow' };
      },
    };
  }
  if (m.kind === 'demo') {
    const { createDemoModel } = await import('./dist/src/agent/model/demo.js');
    return createDemoModel({ chunkDelayMs: m.chunkDelayMs });
  }
  return undefined; // the configured provider
}

// ---------------------------------------------------------------- agentd

async function startAgentd() {
  const { configFromObject } = await import('./dist/src/config.js');
  // syncWrites false: the diagnostic variant without an fsync per write batch (config store.sync).
  const storeConfig = spec.syncWrites === false ? { ...(spec.config.store ?? {}), sync: false } : spec.config.store;
  const config = configFromObject({ ...spec.config, ...(storeConfig ? { store: storeConfig } : {}), server: { port: 0, ...(spec.config.server ?? {}) } }, { dataDir: spec.dataDir, env: {} });
  const model = await buildModel(spec.model);
  const { startServer } = await import('./dist/src/main.js');
  const server = await startServer(config, { model });

  // Diagnostics: store calls and group-commit rounds (one LevelDB batch, one fsync each).
  const stats = { commits: 0, appends: 0, rounds: 0, reads: 0 };
  const store = server.store;
  for (const [name, key] of [['commit', 'commits'], ['appendEvents', 'appends'], ['round', 'rounds'], ['getRecord', 'reads'], ['listRecords', 'reads'], ['readEvents', 'reads'], ['getRecords', 'reads']]) {
    const orig = store[name]?.bind(store);
    if (!orig) continue;
    store[name] = (...args) => {
      stats[key]++;
      return orig(...args);
    };
  }
  commands.set('storeStats', () => ({ ...stats }));

  // Stamp the moment each event is stored: the emitter publishes right after the store resolved.
  const published = new Map();
  const bus = server.runtime.bus;
  const publish = bus.publish.bind(bus);
  bus.publish = (event) => {
    if (published.size < 200_000 && event.event_type === 'bench_event') published.set(event.cursor, nowMs());
    publish(event);
  };
  commands.set('emit', async ({ session_id, count, intervalMs, payloadBytes }) => {
    published.clear();
    const startedAt = new Map();
    const pending = [];
    const pad = 'x'.repeat(payloadBytes);
    for (let i = 0; i < count; i++) {
      const t = nowMs();
      pending.push(
        server.runtime.telemetry
          .emit({
            event_type: 'bench_event', trace_id: 'trace_bench', span_id: `span_${i}`, actor: { type: 'system', id: 'bench' },
            output: { i, pad }, metadata: { session_id, run_id: null },
          })
          .then((e) => startedAt.set(e.cursor, t)),
      );
      await sleep(intervalMs);
    }
    await Promise.all(pending);
    return { published: [...published], started: [...startedAt] };
  });
  commands.set('liveRuns', () => server.runtime.runs.liveCount);
  commands.set('actors', () => server.runtime.system.size());
  commands.set('actorIds', () => Object.keys(server.runtime.system.root.getSnapshot().children).slice(0, 6));
  const stop = async () => {
    await server.close(5_000);
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  return server.url;
}

// ---------------------------------------------------------------- bare baselines

const sseHead = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' };

async function startBare() {
  const app = Fastify({ logger: false, forceCloseConnections: true });
  if (spec.mode === 'bare-health') {
    app.get('/health', async () => ({ status: 'healthy', agent_name: 'assistant', uptime: process.uptime(), version: '0.1.0' }));
  } else if (spec.mode === 'bare-sse') {
    // With `durable`, each request first writes one fsynced LevelDB batch of about the keys and
    // bytes of agentd's one store round per run: the baseline with the same durability.
    let db = null;
    let n = 0;
    if (spec.durable) {
      const { Level } = await import('level');
      db = new Level(spec.durable.dir, { keyEncoding: 'utf8', valueEncoding: 'utf8' });
      await db.open();
    }
    app.post('/run', async (req, reply) => {
      if (db) {
        const id = String(++n).padStart(16, '0');
        const b = db.batch();
        for (const [k, v] of spec.durable.ops) b.put(`${k}${id}`, v);
        await b.write({ sync: true });
      }
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, sseHead);
      for (const f of spec.frames) res.write(f);
      res.end();
    });
  } else if (spec.mode === 'bare-slow-sse') {
    app.post('/run', async (req, reply) => {
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, sseHead);
      for (const f of spec.head) res.write(f);
      for (let i = 0; i < spec.count; i++) {
        await sleep(spec.delayMs);
        res.write(spec.delta);
      }
      for (const f of spec.tail) res.write(f);
      res.end();
    });
  } else if (spec.mode === 'bare-json') {
    app.get('/telemetry/events', async (req, reply) => {
      reply.header('content-type', 'application/json; charset=utf-8');
      return spec.body;
    });
  } else if (spec.mode === 'bare-stream') {
    const clients = new Set();
    app.get('/stream', (req, reply) => {
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, sseHead);
      res.write('event: session\ndata: {"status":"streaming"}\n\n');
      clients.add(res);
      res.on('close', () => clients.delete(res));
    });
    commands.set('emit', async ({ count, intervalMs, payloadBytes }) => {
      const written = [];
      const pad = 'x'.repeat(payloadBytes);
      for (let i = 1; i <= count; i++) {
        const data = JSON.stringify({ event_type: 'bench_event', cursor: String(i).padStart(16, '0'), output: { i, pad } });
        written.push([String(i).padStart(16, '0'), nowMs()]);
        for (const res of clients) res.write(`event: bench_event\nid: ${String(i).padStart(16, '0')}\ndata: ${data}\n\n`);
        await sleep(intervalMs);
      }
      return { published: written, started: written };
    });
  } else {
    throw new Error(`unknown mode ${spec.mode}`);
  }
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  process.on('SIGTERM', async () => {
    await app.close();
    process.exit(0);
  });
  return url;
}

const url = spec.mode === 'agentd' ? await startAgentd() : await startBare();
process.send({ type: 'ready', url });
