// The typed client (agentd/client) against a real server with the scripted model: its generated
// types are those of the live document, runs stream to `complete`, approvals are decided, errors
// are typed, and a follow stream reconnects with Last-Event-ID when its connection is cut.
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { createServer, Socket, type Server } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentdError, createClient, OPERATIONS, type EventFrame, type RunFrame } from '../../src/client/index.js';
import { CLIENT_TYPES_FILE, renderClientTypes } from '../../scripts/gen-client.js';
// @ts-expect-error: a plain .mjs build script, no declarations
import { buildClient } from '../../scripts/build-client.mjs';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, startTestServer, tempDir, type TestServer } from '../helpers/server.js';

const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');
const GOVERNED = {
  agent: { tools: { local: TOOLS, builtin: [] } },
  governance: { rules: [{ tools: ['ledger_*'], effect: 'ask', reason: 'writes to the ledger' }] },
};

let model: ScriptedOpenAI;
let server: TestServer;

beforeAll(async () => {
  process.env.AGENTD_TEST_LEDGER = join(tempDir(), 'ledger.jsonl');
  model = await startScriptedOpenAI();
  model.setDefault((req) => {
    const last = req.messages.at(-1);
    return last?.role === 'tool' ? { text: `saw: ${String(last.content)}` } : { text: 'plain answer' };
  });
  // 127.0.0.1 on any port: one test reaches the server through a TCP proxy on another port, whose
  // Host the default (loopback names on the bound port only) would refuse.
  server = await startTestServer({ ...GOVERNED, server: { allowed_hosts: ['127.0.0.1'] } }, { modelUrl: model.url });
});

afterAll(async () => {
  await server?.stop();
  server?.cleanup();
  await model?.close();
});

describe('generated types', () => {
  it('are those of the live OpenAPI document (run `npm run gen:client` after changing a route or schema)', async () => {
    const doc = (await getJson(`${server.url}/openapi.json`)).body;
    expect(await renderClientTypes(doc), 'src/client/openapi-types.ts is out of date: npm run gen:client').toBe(readFileSync(CLIENT_TYPES_FILE, 'utf8'));
  });

  it('place every operation where the document does', async () => {
    const doc = (await getJson(`${server.url}/openapi.json`)).body as { paths: Record<string, Record<string, { operationId: string }>> };
    const fromDoc: Record<string, [string, string]> = {};
    for (const [path, methods] of Object.entries(doc.paths)) for (const [m, op] of Object.entries(methods)) fromDoc[op.operationId] = [m.toUpperCase(), path];
    expect(OPERATIONS).toEqual(fromDoc);
  });
});

describe('the client', () => {
  const client = () => createClient({ url: server.url });

  it('streams a run to complete as typed frames', async () => {
    model.enqueue({ text: 'Hello from the stream', chunkDelayMs: 1 });
    const frames: RunFrame[] = [];
    for await (const f of client().runs.stream('hi')) frames.push(f);
    expect(frames[0].kind).toBe('session');
    const last = frames.at(-1)!;
    expect(last.kind).toBe('complete');
    if (last.kind !== 'complete') throw new Error('unreachable');
    expect(last.data).toMatchObject({ status: 'success', response: 'Hello from the stream' });
    const deltas = frames.flatMap((f) => (f.kind === 'delta' ? [f.data.text] : []));
    expect(deltas.join('')).toBe('Hello from the stream');
    const events = frames.filter((f) => f.kind === 'event');
    expect(events.length).toBeGreaterThan(0);
    for (const e of events) if (e.kind === 'event') expect(e.event).toBe(e.data.event_type);
    // The run is listed, with its session.
    const session = frames[0].kind === 'session' ? frames[0].data.session_id : '';
    const listed = await client().runs.list({ session_id: session });
    expect(listed.runs.map((r) => r.run_id)).toEqual([last.data.run_id]);
    expect(listed.total).toBe(1);
  });

  it('sends an Idempotency-Key: the same key gives the same run, streamed or synchronous', async () => {
    const a = await client().runs.sync('once only', { session_id: 'client-idem', idempotency_key: 'client-key-1' });
    const b = await client().runs.sync('once only', { session_id: 'client-idem', idempotency_key: 'client-key-1' });
    expect(b.run_id).toBe(a.run_id);
    const frames: RunFrame[] = [];
    for await (const f of client().runs.stream('streamed once', { idempotency_key: 'client-key-2' })) frames.push(f);
    const again: RunFrame[] = [];
    for await (const f of client().runs.stream('streamed once', { idempotency_key: 'client-key-2' })) again.push(f);
    const runOf = (fs: RunFrame[]) => (fs[0].kind === 'session' ? fs[0].data.run_id : null);
    expect(runOf(again)).toBe(runOf(frames));
    expect(again.at(-1)?.kind).toBe('complete');
    expect((await client().webhooks.deliveries()).deliveries).toEqual([]);
  });

  it('decides an approval', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'pay 10' } }] });
    const c = client();
    const paused = await c.runs.sync('pay');
    expect(paused.status).toBe('awaiting_approval');
    const approval = paused.approvals![0];
    const decided = await c.approvals.decide(paused.run_id!, approval.approval_id, { decision: 'approve', approver: 'alice' });
    expect(decided).toMatchObject({ status: 'approved', approver: 'alice' });
    const done = await eventually(async () => {
      const run = await c.runs.get(paused.run_id!);
      return run.status === 'completed' ? run : null;
    });
    expect(done.response).toBe('saw: {"appended":"pay 10"}');
  });

  it('throws a typed AgentdError for a 404', async () => {
    const err = await client()
      .runs.get('run_missing')
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AgentdError);
    expect(err).toMatchObject({ status: 404, code: 'NotFound', validation: null });
    expect((err as AgentdError).message).toMatch(/run_missing/);
    expect((err as AgentdError).requestId).toMatch(/^req_/);
  });

  it('throws a typed AgentdError with the validation detail for a 422', async () => {
    const err = await client()
      .approvals.decide('run_x', 'approval_y', { decision: 'approve', approver: '' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AgentdError);
    const e = err as AgentdError;
    expect(e.status).toBe(422);
    expect(e.code).toBe('ValidationError');
    expect(e.validation?.map((v) => v.loc.join('.'))).toEqual(['body.approver']);
    expect(e.message).toMatch(/^body\.approver: /);
  });

  it('sends the API key, and a missing key is a typed 401', async () => {
    const keyed = await startTestServer({
      auth: {
        api_keys: [{ name: 'ops', role: 'reader', key_sha256: '2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b' /* sha256('secret') */ }],
      },
    });
    try {
      await expect(createClient({ url: keyed.url }).runs.list()).rejects.toMatchObject({ status: 401, code: 'Unauthorized' });
      expect((await createClient({ url: keyed.url, apiKey: 'secret' }).runs.list()).runs).toEqual([]);
    } finally {
      await keyed.stop();
      keyed.cleanup();
    }
  });
});

/** A TCP proxy in front of the server whose connections can be cut; it records each request head. */
async function startProxy(target: number): Promise<{ port: number; heads: string[]; cut(): void; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const heads: string[] = [];
  const proxy: Server = createServer((client) => {
    const upstream = new Socket();
    sockets.add(client).add(upstream);
    let head = '';
    client.pause(); // nothing is read before the upstream connection can take it
    upstream.connect(target, '127.0.0.1', () => {
      client.on('data', (d: Buffer) => {
        if (head.length < 4096) {
          head += d.toString('latin1');
          if (head.includes('\r\n\r\n')) heads.push(head.slice(0, head.indexOf('\r\n\r\n')));
        }
      });
      client.pipe(upstream);
      upstream.pipe(client);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  return {
    port: (proxy.address() as { port: number }).port,
    heads,
    cut: () => {
      for (const s of sockets) s.destroy();
    },
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        proxy.close(() => r());
      }),
  };
}

describe('events.follow', () => {
  it('reconnects with Last-Event-ID after the connection is cut, losing and repeating nothing', async () => {
    const port = Number(new URL(server.url).port);
    const proxy = await startProxy(port);
    const direct = createClient({ url: server.url });
    const viaProxy = createClient({ url: `http://127.0.0.1:${proxy.port}` });
    try {
      const first = await direct.runs.sync('one');
      const session = first.session_id;
      const abort = new AbortController();
      const seen: EventFrame[] = [];
      const reconnects: Array<string | null> = [];
      const reading = (async () => {
        for await (const f of viaProxy.events.follow(session, { signal: abort.signal, retryDelayMs: 50, onReconnect: (_n, last) => reconnects.push(last) }))
          seen.push(f);
      })();
      // The first run's events arrive; then the connection is cut and a second run happens.
      const firstCount = (await direct.events.list({ session_id: session })).count;
      await eventually(() => seen.filter((f) => f.kind === 'event').length === firstCount);
      const cursorBeforeCut = seen.at(-1)!.id!;
      proxy.cut();
      await direct.runs.sync('two', { session_id: session });
      const all = await direct.events.list({ session_id: session });
      await eventually(() => seen.filter((f) => f.kind === 'event').length >= all.count, 10_000, 'every event after the reconnect');
      abort.abort();
      await reading;

      expect(reconnects[0]).toBe(cursorBeforeCut);
      const followHeads = proxy.heads.filter((h) => h.startsWith(`GET /events/${session}`));
      expect(followHeads.length).toBeGreaterThanOrEqual(2);
      expect(followHeads[1].toLowerCase()).toContain(`last-event-id: ${cursorBeforeCut}`);
      expect(seen.filter((f) => f.kind === 'session')).toHaveLength(1);
      const ids = seen.filter((f) => f.kind === 'event').map((f) => f.id);
      expect(ids).toEqual(all.events.map((e) => e.cursor));
    } finally {
      await proxy.close();
    }
  });
});

describe('events.follow across a restart', () => {
  it('resumes after the server ends the stream with ServiceShuttingDown and comes back on the same port', async () => {
    const port = await freePort();
    const dataDir = tempDir();
    let a: TestServer | null = await startTestServer({ ...GOVERNED, server: { port } }, { modelUrl: model.url, dataDir });
    let b: TestServer | null = null;
    try {
      const c = createClient({ url: `http://127.0.0.1:${port}` });
      const first = await c.runs.sync('before');
      const abort = new AbortController();
      const seen: EventFrame[] = [];
      const reconnects: Array<string | null> = [];
      const reading = (async () => {
        for await (const f of c.events.follow(first.session_id, {
          signal: abort.signal,
          retryDelayMs: 100,
          maxReconnects: 100,
          onReconnect: (_n, last) => reconnects.push(last),
        }))
          seen.push(f);
      })();
      const before = (await c.events.list({ session_id: first.session_id })).count;
      await eventually(() => seen.filter((f) => f.kind === 'event').length === before);
      await a.stop(1000);
      a = null;
      b = await startTestServer({ ...GOVERNED, server: { port } }, { modelUrl: model.url, dataDir });
      await c.runs.sync('after', { session_id: first.session_id });
      const all = await c.events.list({ session_id: first.session_id });
      await eventually(() => seen.filter((f) => f.kind === 'event').length >= all.count, 10_000, 'the events after the restart');
      abort.abort();
      await reading;
      expect(reconnects.length).toBeGreaterThanOrEqual(1);
      expect(reconnects[0]).toBe(all.events[before - 1].cursor);
      expect(seen.filter((f) => f.kind === 'event').map((f) => f.id)).toEqual(all.events.map((e) => e.cursor));
      // The shutdown frame is handled, not handed to the caller.
      expect(seen.some((f) => f.kind === 'error')).toBe(false);
    } finally {
      await a?.stop();
      await b?.stop();
      b?.cleanup();
    }
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

describe('the built package entry agentd/client', () => {
  it('is what package.json exports: an ES module and its declarations, working against the server', async () => {
    const pkg = JSON.parse(readFileSync(join(import.meta.dirname, '../../package.json'), 'utf8'));
    const entry = pkg.exports['./client'] as { types: string; import: string };
    const outdir = tempDir('agentd-client-build-');
    try {
      await (buildClient as (o: { outdir: string }) => Promise<void>)({ outdir });
      // The exports name files under ./dist/; the build wrote the same names under outdir.
      const at = (rel: string) => join(outdir, rel.replace(/^\.\/dist\//, ''));
      expect(existsSync(at(entry.types))).toBe(true);
      expect(readFileSync(at(entry.types), 'utf8')).toContain('createClient');
      const mod = (await import(pathToFileURL(at(entry.import)).href)) as typeof import('../../src/client/index.js');
      const health = await mod.createClient({ url: server.url }).health();
      expect(health.status).toBe('healthy');
      await expect(mod.createClient({ url: server.url }).runs.get('run_missing')).rejects.toBeInstanceOf(mod.AgentdError);
    } finally {
      rmSync(outdir, { recursive: true, force: true });
    }
  }, 90_000);
});
