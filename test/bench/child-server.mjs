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
// Counts for `npm run bench -- profile-key` (test/bench/profile-key.ts): async resources made
// (promises, ticks, timers) by type while counting is on, and the bytes JavaScript allocated by
// function (V8's sampling heap profiler, the objects GC collected since included).
const asyncMade = {};
let asyncHook = null;
commands.set('asyncCount', async ({ on }) => {
  if (!asyncHook) {
    const { createHook } = await import('node:async_hooks');
    asyncHook = createHook({ init: (_id, type) => void (asyncMade[type] = (asyncMade[type] ?? 0) + 1) });
  }
  if (on) asyncHook.enable();
  else asyncHook.disable();
  return { ...asyncMade };
});
// PostgreSQL statements sent while counting is on, by their text's start (every query of every
// pooled client and of the change feed's connection: pg.Client's query, the one way to send one).
const pgMade = {};
let pgCounting = false;
let pgPatched = false;
commands.set('pgCount', async ({ on }) => {
  if (!pgPatched) {
    const pg = (await import('pg')).default;
    const query = pg.Client.prototype.query;
    pg.Client.prototype.query = function (config, ...rest) {
      if (pgCounting) {
        const text = typeof config === 'string' ? config : (config?.text ?? '');
        const k = text.replace(/\s+/g, ' ').trim().slice(0, 60);
        pgMade[k] = (pgMade[k] ?? 0) + 1;
      }
      return query.call(this, config, ...rest);
    };
    pgPatched = true;
  }
  pgCounting = !!on;
  return { ...pgMade };
});
// Counts for `npm run bench -- profile-run` (test/bench/profile-run.ts): JSON.stringify and
// JSON.parse calls made while counting is on (the wrappers are installed only then).
const jsonCalls = { stringify: 0, parse: 0 };
const jsonOrig = { stringify: JSON.stringify, parse: JSON.parse };
commands.set('jsonCount', ({ on }) => {
  if (on) {
    JSON.stringify = function (...a) {
      jsonCalls.stringify++;
      return jsonOrig.stringify.apply(JSON, a);
    };
    JSON.parse = function (...a) {
      jsonCalls.parse++;
      return jsonOrig.parse.apply(JSON, a);
    };
  } else Object.assign(JSON, jsonOrig);
  return { ...jsonCalls };
});
let heapSession = null;
commands.set('heapSampleStart', async ({ interval }) => {
  const { Session } = await import('node:inspector/promises');
  heapSession = new Session();
  heapSession.connect();
  await heapSession.post('HeapProfiler.enable');
  await heapSession.post('HeapProfiler.startSampling', {
    samplingInterval: interval ?? 512,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  return true;
});
commands.set('heapSampleStop', async () => {
  const { profile } = await heapSession.post('HeapProfiler.stopSampling');
  heapSession.disconnect();
  const bytes = {};
  const walk = (n) => {
    const f = n.callFrame;
    const key = `${f.functionName || '(anonymous)'} ${f.url.replace(/^.*\/(node_modules\/|test\/bench\/dist\/)/, '')}:${f.lineNumber + 1}`;
    bytes[key] = (bytes[key] ?? 0) + n.selfSize;
    for (const c of n.children) walk(c);
  };
  walk(profile.head);
  return bytes;
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
    const { DemoModel } = await import('./dist/src/agent/model/demo.js');
    return new DemoModel({ chunkDelayMs: m.chunkDelayMs });
  }
  return undefined; // the configured provider
}

// ---------------------------------------------------------------- agentd

async function startAgentd() {
  const { configFromObject } = await import('./dist/src/config.js');
  // syncWrites false: the diagnostic variant without an fsync per write batch (config store.sync).
  const storeConfig = spec.syncWrites === false ? { ...(spec.config.store ?? {}), sync: false } : spec.config.store;
  const config = configFromObject(
    { ...spec.config, ...(storeConfig ? { store: storeConfig } : {}), server: { port: 0, ...(spec.config.server ?? {}) } },
    { dataDir: spec.dataDir, env: {} },
  );
  const model = await buildModel(spec.model);
  const { startServer } = await import('./dist/src/main.js');
  const server = await startServer(config, { model });

  // BENCH_FLOW_BURN_US: the flow benchmark's check of its own method (test/bench/burn-keyed.mjs).
  (await import('./burn-keyed.mjs')).burnOnKeyed(server.app.server, Number(process.env.BENCH_FLOW_BURN_US ?? 0));

  // Diagnostics: store calls and group-commit rounds (one LevelDB batch, one fsync each).
  const stats = { commits: 0, appends: 0, rounds: 0, reads: 0, ops: 0, opBytes: 0, events: 0, eventBytes: 0, shapes: {}, byKind: {}, readsBy: {} };
  const store = server.store;
  // countBytes: also count the ops of each commit and the JSON bytes of their values and of the
  // appended events (costs a JSON.stringify each, so only while a profile's counting pass asks for it).
  let countBytes = false;
  commands.set('countBytes', ({ on }) => (countBytes = !!on));
  const size = (v) => (v === undefined ? 0 : Buffer.byteLength(JSON.stringify(v)));
  // Ops and value bytes by `op:kind` (which records a run writes, and how big they are).
  const countOp = (op) => {
    const bytes = size(op.value);
    stats.opBytes += bytes;
    const k = (stats.byKind[`${op.op}:${op.kind}`] ??= { ops: 0, bytes: 0 });
    k.ops++;
    k.bytes += bytes;
  };
  const countCommit = store.commit?.bind(store);
  if (countCommit) {
    const tally = (list) => {
      const shape = [...new Set(list.map((op) => `${op.op}:${op.kind}`))].sort().join('+');
      stats.shapes[shape] = (stats.shapes[shape] ?? 0) + 1;
      stats.ops += list.length;
      for (const op of list) countOp(op);
      return list;
    };
    // commit takes the ops or a function giving them when the store takes the write.
    store.commit = (ops, ...rest) => {
      if (!countBytes) return countCommit(ops, ...rest);
      return countCommit(typeof ops === 'function' ? () => tally(ops()) : tally(ops), ...rest);
    };
  }
  // commitWithEvents: a commit carrying events (counted as a commit; its shape names both).
  const countCommitEvents = store.commitWithEvents?.bind(store);
  if (countCommitEvents) {
    store.commitWithEvents = (ops, events) => {
      stats.commits++;
      if (!countBytes) return countCommitEvents(ops, events);
      // events may be a function (called right after the ops, when the store takes the write):
      // counted then, with the ops, under one shape.
      let listed = Array.isArray(events) ? events : null;
      const countEvents = (list) => {
        stats.events += list.length;
        for (const e of list) stats.eventBytes += size(e);
        return list;
      };
      if (listed) countEvents(listed);
      const tally = (list) => {
        if (!listed) listed = countEvents(events());
        const shape = [...new Set(list.map((op) => `${op.op}:${op.kind}`))].sort().join('+') + ` with:${listed.map((e) => e.event_type).join(',')}`;
        stats.shapes[shape] = (stats.shapes[shape] ?? 0) + 1;
        stats.ops += list.length;
        for (const op of list) countOp(op);
        return list;
      };
      return countCommitEvents(
        typeof ops === 'function' ? () => tally(ops()) : tally(ops),
        Array.isArray(events) ? events : () => listed ?? countEvents(events()),
      );
    };
  }
  const countAppend = store.appendEvents?.bind(store);
  if (countAppend) {
    store.appendEvents = (...args) => {
      if (countBytes) {
        const events = args.find((a) => Array.isArray(a)) ?? [];
        stats.events += events.length;
        const shape = `append:${events.map((e) => e.event_type).join(',')}`;
        stats.shapes[shape] = (stats.shapes[shape] ?? 0) + 1;
        for (const e of events) stats.eventBytes += size(e);
      }
      return countAppend(...args);
    };
  }
  for (const [name, key] of [
    ['commit', 'commits'],
    ['appendEvents', 'appends'],
    ['getRecord', 'reads'],
    ['listRecords', 'reads'],
    ['readEvents', 'reads'],
    ['getRecords', 'reads'],
  ]) {
    const orig = store[name]?.bind(store);
    if (!orig) continue;
    store[name] = (...args) => {
      stats[key]++;
      if (countBytes && key === 'reads') {
        const what = `${name}:${typeof args[0] === 'string' ? args[0] : JSON.stringify(args[0]).slice(0, 60)}`;
        stats.readsBy[what] = (stats.readsBy[what] ?? 0) + 1;
      }
      return orig(...args);
    };
  }
  // diskReads: LevelDB's asynchronous read calls (each one a trip through libuv's thread pool), by
  // binding function and, for point reads, the key's kind (`get:r:bg_runs`; `nextv` is an iterator
  // page). Counted on classic-level's native binding, so every read path of the store is seen.
  stats.diskReads = {};
  if (store.adapter === 'level') {
    const { createRequire } = await import('node:module');
    const { dirname, join } = await import('node:path');
    const req = createRequire(import.meta.url);
    const binding = req(join(dirname(req.resolve('classic-level')), 'binding.js'));
    const keyKind = (k) => {
      const parts = String(k).split('\u0000');
      return parts[0] === 'r' || parts[0] === 'n' ? `${parts[0]}:${parts[1]}` : parts[0];
    };
    const tally = (k) => (stats.diskReads[k] = (stats.diskReads[k] ?? 0) + 1);
    // Installed only while a counting pass asks for it (countBytes): the wrapper's frame would
    // otherwise take the native calls' self time in a CPU profile.
    const originals = [];
    const wrapped = [];
    for (const [fn, label, keysAt] of [
      ['db_get', 'get', 2],
      ['db_get_many', 'getMany', 1],
      ['iterator_nextv', 'nextv', -1],
      ['db_has', 'has', -1],
      ['db_has_many', 'hasMany', -1],
    ]) {
      const orig = binding[fn];
      if (typeof orig !== 'function') continue;
      originals.push([fn, orig]);
      wrapped.push([
        fn,
        function (...args) {
          if (keysAt < 0) tally(label);
          else {
            const keys = Array.isArray(args[keysAt]) ? args[keysAt] : [args[keysAt]];
            tally(`${label}:${[...new Set(keys.map(keyKind))].sort().join('+')}`);
          }
          return orig.apply(this, args);
        },
      ]);
    }
    const setCountBytes = commands.get('countBytes');
    commands.set('countBytes', (msg) => {
      for (const [fn, f] of msg.on ? wrapped : originals) binding[fn] = f;
      return setCountBytes(msg);
    });
  }
  // Worker messages (the workspace mirror's hand-offs to its writer thread, src/background/folder-writer.ts):
  // posts and the bytes of the strings they carry, counted while a counting pass asks for it.
  stats.workerPosts = 0;
  stats.workerPostBytes = 0;
  {
    const { Worker } = await import('node:worker_threads');
    const post = Worker.prototype.postMessage;
    const strBytes = (v) =>
      typeof v === 'string'
        ? v.length
        : Array.isArray(v)
          ? v.reduce((n, x) => n + strBytes(x), 0)
          : v && typeof v === 'object'
            ? Object.values(v).reduce((n, x) => n + strBytes(x), 0)
            : 0;
    const setCount = commands.get('countBytes');
    commands.set('countBytes', (msg) => {
      Worker.prototype.postMessage = msg.on
        ? function (value, ...rest) {
            stats.workerPosts++;
            stats.workerPostBytes += strBytes(value);
            return post.call(this, value, ...rest);
          }
        : post;
      return setCount(msg);
    });
  }
  // Group-commit rounds (one fsync each) are counted by the LevelDB store itself (LevelStore.stats).
  // LevelDB's own compaction statistics (per level: tables, size, time, MB read and written), LevelStore only.
  commands.set('levelStats', () => store.db?.getProperty?.('leveldb.stats') ?? null);
  // The live data of the store: the bytes of every key and value it holds now (one full scan), whatever
  // LevelDB's log, memtable and levels hold besides (overwritten rows before their compaction).
  commands.set('liveStoreBytes', async () => {
    let bytes = 0;
    for await (const [k, v] of store.db.iterator()) bytes += Buffer.byteLength(k) + Buffer.byteLength(v);
    return bytes;
  });
  // pgTrace: every PostgreSQL statement (PgQueries.query: write rounds, reads, claims) and every
  // outgoing HTTP request (the model calls) as [start ms, end ms, label] while on, so a profile can
  // count the serial round trips on a run's path (test/bench/profile.ts, BENCH_PG_TRACE).
  const trace = { on: false, spans: [] };
  const queries = store.queries;
  if (queries?.query) {
    const orig = queries.query.bind(queries);
    queries.query = async (cfg, idempotent) => {
      if (!trace.on) return orig(cfg, idempotent);
      const t0 = nowMs();
      try {
        return await orig(cfg, idempotent);
      } finally {
        trace.spans.push([t0, nowMs(), spanLabel(cfg)]);
      }
    };
    const http = (await import('node:http')).default;
    const request = http.request.bind(http);
    http.request = (...args) => {
      const req = request(...args);
      if (trace.on) {
        const t0 = nowMs();
        req.once('response', (res) => res.once('end', () => trace.spans.push([t0, nowMs(), 'http'])));
      }
      return req;
    };
  }
  // A read names its kind; a write round (after a tab) its commits, each by the kinds of its ops.
  function spanLabel(cfg) {
    const name = cfg.name ?? String(cfg.text).slice(0, 40);
    const v = cfg.values ?? [];
    if (name.startsWith('agentd_get') || name.startsWith('agentd_list') || name.startsWith('agentd_count')) return `${name}:${v[0]}`;
    if (!name.startsWith('agentd_write_round')) return name;
    const commits = new Map();
    (v[0] ?? []).forEach((c, i) => (commits.get(c) ?? commits.set(c, new Set()).get(c)).add(`${v[1][i]}:${v[2][i]}`));
    const evs = (v[7] ?? []).length;
    const shapes = new Map();
    for (const k of commits.values()) {
      const shape = [...k].sort().join('+');
      shapes.set(shape, (shapes.get(shape) ?? 0) + 1);
    }
    return `${name}\t[${[...shapes].map(([shape, n]) => (n > 1 ? `${n}x ${shape}` : shape)).join(' | ')}]${evs ? ` +${evs} events` : ''}`;
  }
  commands.set('pgTrace', ({ on }) => {
    trace.on = !!on;
    if (on) trace.spans = [];
    return on ? null : trace.spans;
  });
  commands.set('storeStats', () => ({
    ...stats,
    rounds: store.stats?.groupCommitRounds ?? 0,
    shapes: { ...stats.shapes },
    byKind: structuredClone(stats.byKind),
    readsBy: { ...stats.readsBy },
    diskReads: { ...stats.diskReads },
  }));

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
            event_type: 'bench_event',
            trace_id: 'trace_bench',
            span_id: `span_${i}`,
            actor: { type: 'system', id: 'bench' },
            output: { i, pad },
            metadata: { session_id, run_id: null },
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

// ---------------------------------------------------------------- fake OpenAI-compatible server

// A fast OpenAI-compatible Chat Completions server (the real-path model of the run benchmarks), in
// its own process so its CPU is not counted as the measured server's. Replies, by request:
// - a conversation with a tool result in it: the final answer after the tool;
// - the last user message mentions "add tool": one `add` tool call {a: 2, b: 3};
// - otherwise a short text answer.
// - a last user message saying "in <n> words": a text answer of n one-word chunks (n <= 10000),
//   otherwise as the short answer (the protocols benchmark's per-frame rows: two workloads that
//   differ only in how many text deltas the run streams);
// Model name `slow-<chunks>-<ms>`: that many text chunks, <ms> apart (the streams benchmark).
// Streams like the scripted test server (role chunk, one chunk per word, tool call split in two,
// finish chunk, usage chunk when asked, [DONE]); everything but slow replies in one write.
async function startFakeOpenAI() {
  const http = await import('node:http');
  const CREATED = 1767225600;
  const ANSWER = 'Hello from the benchmark model.';
  const AFTER_TOOL = 'The sum is 5.';
  const words = (t) => t.match(/\s*\S+\s*/g) ?? [];
  // n words of the same size ("w0001 w0002 ..."), so each is one chunk of the stream.
  const manyWords = (n) => Array.from({ length: n }, (_, i) => `w${String(i + 1).padStart(4, '0')} `).join('');
  const usage = { prompt_tokens: 20, completion_tokens: 8, total_tokens: 28 };
  let stats = { requests: 0 };
  function streamBody(model, text, call, withUsage) {
    const base = { id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: CREATED, model };
    const out = [];
    out.push({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] });
    for (const w of words(text)) out.push({ ...base, choices: [{ index: 0, delta: { content: w }, finish_reason: null }] });
    if (call) {
      const args = JSON.stringify(call.arguments);
      const half = Math.floor(args.length / 2);
      out.push({
        ...base,
        choices: [
          {
            index: 0,
            delta: { tool_calls: [{ index: 0, id: 'call_bench_1', type: 'function', function: { name: call.name, arguments: args.slice(0, half) } }] },
            finish_reason: null,
          },
        ],
      });
      out.push({ ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: args.slice(half) } }] }, finish_reason: null }] });
    }
    out.push({ ...base, choices: [{ index: 0, delta: {}, finish_reason: call ? 'tool_calls' : 'stop' }] });
    if (withUsage) out.push({ ...base, choices: [], usage });
    return out.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + 'data: [DONE]\n\n';
  }
  function jsonBody(model, text, call) {
    return JSON.stringify({
      id: 'chatcmpl-bench',
      object: 'chat.completion',
      created: CREATED,
      model,
      choices: [
        {
          index: 0,
          message: {
            role: 'assistant',
            content: text || null,
            ...(call
              ? { tool_calls: [{ id: 'call_bench_1', type: 'function', function: { name: call.name, arguments: JSON.stringify(call.arguments) } }] }
              : {}),
          },
          finish_reason: call ? 'tool_calls' : 'stop',
        },
      ],
      usage,
    });
  }
  const cache = new Map();
  const sseHeadFake = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' };
  const server = http.createServer((req, res) => {
    const parts = [];
    req.on('data', (c) => parts.push(c));
    req.on('end', async () => {
      stats.requests++;
      let body;
      try {
        body = JSON.parse(Buffer.concat(parts).toString('utf8'));
      } catch {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"invalid JSON"}}');
        return;
      }
      const model = String(body.model ?? 'bench');
      const msgs = Array.isArray(body.messages) ? body.messages : [];
      const afterTool = msgs.some((m) => m.role === 'tool');
      let lastUser = '';
      for (const m of msgs) if (m.role === 'user') lastUser = typeof m.content === 'string' ? m.content : JSON.stringify(m.content);
      const asked = /\bin (\d{1,5}) words\b/.exec(lastUser);
      const n = asked ? Math.min(10_000, Number(asked[1])) : 0;
      const kind = afterTool ? 'after' : lastUser.includes('add tool') ? 'call' : n > 0 ? `words-${n}` : 'answer';
      const text = kind === 'after' ? AFTER_TOOL : kind === 'answer' ? ANSWER : kind === 'call' ? '' : manyWords(n);
      const call = kind === 'call' ? { name: 'add', arguments: { a: 2, b: 3 } } : null;
      const slow = /^slow-(\d+)-(\d+)$/.exec(model);
      if (body.stream && slow && kind !== 'call') {
        res.writeHead(200, sseHeadFake);
        let closed = false;
        res.on('close', () => {
          closed = true;
        });
        const base = { id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: CREATED, model };
        res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] })}\n\n`);
        for (let i = 0; i < Number(slow[1]); i++) {
          await sleep(Number(slow[2]));
          if (closed) return;
          res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: `chunk ${i} ` }, finish_reason: null }] })}\n\n`);
        }
        res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`);
        if (body.stream_options?.include_usage) res.write(`data: ${JSON.stringify({ ...base, choices: [], usage })}\n\n`);
        res.end('data: [DONE]\n\n');
        return;
      }
      const key = `${kind}|${model}|${body.stream ? 1 : 0}|${body.stream_options?.include_usage ? 1 : 0}`;
      let payload = cache.get(key);
      if (!payload) {
        payload = Buffer.from(body.stream ? streamBody(model, text, call, !!body.stream_options?.include_usage) : jsonBody(model, text, call));
        cache.set(key, payload);
      }
      res.writeHead(200, { ...(body.stream ? sseHeadFake : { 'content-type': 'application/json' }), 'content-length': payload.length });
      res.end(payload);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  commands.set('fakeStats', () => ({ ...stats }));
  process.on('SIGTERM', () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  });
  return `http://127.0.0.1:${server.address().port}/v1`;
}

// ---------------------------------------------------------------- hand-rolled AI SDK route

// What a user writes instead of adopting agentd: a Fastify route calling the AI SDK's streamText
// against the same server with the same tool (executed by the SDK), up to 5 steps, each stream
// part sent as one SSE frame, nothing stored.
async function startHandRolled() {
  const { streamText, tool, jsonSchema, stepCountIs } = await import('ai');
  const { createOpenAICompatible } = await import('@ai-sdk/openai-compatible');
  const { ADD } = await import('./bench-tools.mjs');
  const provider = createOpenAICompatible({ name: 'openai-compatible', baseURL: spec.baseUrl, includeUsage: true });
  const model = provider.chatModel(spec.model);
  const tools = {
    add: tool({ description: ADD.description, inputSchema: jsonSchema(ADD.input_schema), execute: async ({ a, b }) => ({ sum: Number(a) + Number(b) }) }),
  };
  const app = Fastify({ logger: false, forceCloseConnections: true });
  app.post('/run', async (req, reply) => {
    const query = req.body?.query;
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, sseHead);
    const ac = new AbortController();
    res.on('close', () => ac.abort());
    try {
      const result = streamText({
        model,
        system: 'You are a helpful assistant.',
        prompt: query,
        tools,
        stopWhen: stepCountIs(5),
        abortSignal: ac.signal,
        onError: () => {},
      });
      for await (const part of result.fullStream) res.write(`event: ${part.type}\ndata: ${JSON.stringify(part)}\n\n`);
      res.write('event: complete\ndata: {"status":"success"}\n\n');
    } catch (err) {
      res.write(`event: error\ndata: ${JSON.stringify({ message: String(err) })}\n\n`);
    }
    res.end();
  });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  process.on('SIGTERM', async () => {
    await app.close();
    process.exit(0);
  });
  return url;
}

const url =
  spec.mode === 'agentd'
    ? await startAgentd()
    : spec.mode === 'fake-openai'
      ? await startFakeOpenAI()
      : spec.mode === 'hand-rolled'
        ? await startHandRolled()
        : await startBare();
process.send({ type: 'ready', url });
