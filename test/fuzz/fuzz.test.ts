// The fixed-seed sample of the OpenAPI fuzzer: 2,000 generated requests
// over every route of the document, against a server without and one with API keys. Zero 5xx,
// zero hangs, zero error bodies outside the documented JSON shapes, the servers alive after, no
// 5xx in the servers' logs, no stream left behind. `npm run fuzz` is the long form.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Deep,
  Huge,
  PoolRef,
  Pools,
  RawToken,
  checkAnswer,
  materialize,
  operationsOf,
  percentEncode,
  planRequests,
  runFuzz,
  serialize,
  type Answer,
  type FuzzReport,
  type OpenApiDoc,
  type Operation,
  type WireRequest,
} from './openapi-fuzz.js';
import { fetchDoc, startTarget, type RunningTarget } from './target.js';
import { eventually, startTestServer, type TestServer } from '../helpers/server.js';
import { rawRequest, requestText } from '../helpers/raw-http.js';

const SEED = 20_260_110;
const REQUESTS = 2_000;

describe('the generator and the checker (pure)', () => {
  it('writes what JSON.stringify cannot: huge and deep values, raw number tokens, pool ids', () => {
    const pools = new Pools();
    pools.add('run_id', 'run_abc');
    const text = serialize(
      { a: new Huge(5, '\u{1F600}'), b: new Deep(3, 'array'), c: new RawToken('1e400'), d: new PoolRef('run_id', 7), e: new PoolRef('task_id', 0) },
      pools,
    );
    expect(text).toBe('{"a":"\u{1F600}\u{1F600}\\ud83d","b":[[[0]]],"c":1e400,"d":"run_abc","e":"missing-task_id"}');
    expect(serialize(new Deep(2, 'object'), pools)).toBe('{"a":{"a":0}}');
    // A lone surrogate leaves as a JSON escape, never as invalid UTF-8.
    expect(serialize('a\ud800', pools)).toBe('"a\\ud800"');
  });

  it('percent-encodes lone surrogates as their 3-byte form (encodeURIComponent throws)', () => {
    expect(percentEncode('a\ud800')).toBe('a%ED%A0%80');
    expect(percentEncode('\u{1F600}/x y')).toBe('%F0%9F%98%80%2Fx%20y');
    expect(() => encodeURIComponent('\ud800')).toThrow();
  });

  it('the same seed plans the same requests', () => {
    const doc: OpenApiDoc = {
      paths: {
        '/runs/{run_id}': {
          get: {
            parameters: [{ in: 'path', name: 'run_id', required: true, schema: { type: 'string', pattern: 'x' } }],
            responses: { 200: { content: { 'application/json': {} } } },
          },
        },
      },
    };
    const ops = operationsOf(doc);
    const a = planRequests(ops, doc, 5, 50);
    const b = planRequests(ops, doc, 5, 50);
    const pools = new Pools();
    const wire = (x: typeof a) => x.map((s) => materialize(s, ops[0], pools, null).target);
    expect(wire(a)).toEqual(wire(b));
    expect(new Set(wire(a)).size).toBeGreaterThan(10);
  });

  it('fails 5xx, hangs, non-JSON and shapeless error bodies, stack traces; passes the documented shapes', () => {
    const op: Operation = { key: 'GET /x', method: 'GET', path: '/x', params: [], body: null, sse: false };
    const req: WireRequest = { method: 'GET', target: '/x', headers: {}, body: null, chunked: false };
    const answer = (status: number, body: string, contentType = 'application/json; charset=utf-8'): Answer => ({
      status,
      contentType,
      body,
      hung: false,
      stream: false,
      ms: 1,
    });
    expect(checkAnswer(op, req, answer(500, '{"error":"InternalServerError","message":"m","detail":null}'))).toMatch(/status 500/);
    expect(checkAnswer(op, req, answer(503, '{"error":"ServerBusy","message":"m","detail":null}'))).toMatch(/status 503/);
    expect(checkAnswer(op, req, { ...answer(0, ''), hung: true })).toMatch(/hang/);
    expect(checkAnswer(op, req, { ...answer(0, ''), error: 'ECONNRESET' })).toMatch(/no answer/);
    expect(checkAnswer(op, req, answer(400, '<html>Bad Request</html>', 'text/html'))).toMatch(/not JSON/);
    expect(checkAnswer(op, req, answer(400, '{"statusCode":400,"error":"Bad Request"}'))).toMatch(/no documented shape/);
    expect(checkAnswer(op, req, answer(422, '{"error":"X","message":"m","detail":null}'))).toMatch(/422/);
    expect(checkAnswer(op, req, answer(404, '{"error":"NotFound","message":"Error: x\\n    at f (/a/b.ts:1:2)","detail":null}'.replace('\\n', '\n')))).toMatch(
      /stack/,
    );
    expect(checkAnswer(op, req, { ...answer(200, ''), stream: true, contentType: 'text/event-stream' })).toMatch(/SSE/);
    expect(checkAnswer(op, req, answer(404, '{"error":"NotFound","message":"m","detail":null}'))).toBeNull();
    expect(checkAnswer(op, req, answer(422, '{"detail":[{"loc":["body"],"msg":"m","type":"json_invalid"}]}'))).toBeNull();
    expect(checkAnswer(op, req, answer(400, '{"detail":"outside the workspace"}'))).toBeNull();
    expect(checkAnswer(op, req, answer(200, '# HELP x', 'text/plain'))).toBeNull();
    expect(checkAnswer({ ...op, sse: true }, req, { ...answer(200, ''), stream: true, contentType: 'text/event-stream' })).toBeNull();
  });
});

describe(`fuzzing every route of the OpenAPI document (seed ${SEED}, ${REQUESTS} requests)`, () => {
  let targets: RunningTarget[] = [];
  let doc: OpenApiDoc;
  let report: FuzzReport;

  beforeAll(async () => {
    targets = [await startTarget('open'), await startTarget('auth')];
    doc = await fetchDoc(targets[0]);
    report = await runFuzz(doc, targets, { seed: SEED, requests: REQUESTS, concurrency: 4, timeoutMs: 10_000 });
  }, 120_000);

  afterAll(async () => {
    for (const t of targets) await t.stop();
  });

  it('sends its share to every route, in every category of bad input', () => {
    expect(report.requests).toBe(REQUESTS);
    const ops = operationsOf(doc);
    expect(ops.length).toBeGreaterThan(40);
    for (const op of ops) expect(report.perRoute[op.key].requests, op.key).toBeGreaterThanOrEqual(Math.floor(REQUESTS / ops.length));
    for (const c of [
      'valid',
      'body:wrong-type',
      'body:missing-field',
      'body:extra-field',
      'body:unicode',
      'body:edge-number',
      'body:huge-string',
      'body:deep',
      'body:garbled',
      'path:weird-id',
      'path:long-id',
      'path:spelling',
      'query',
      'headers:auth',
      'method',
    ]) {
      expect(report.categories[c] ?? 0, c).toBeGreaterThan(0);
    }
    // Not only refusals: valid requests reach the handlers, and streams are opened.
    expect(report.statuses['200'] ?? 0).toBeGreaterThan(REQUESTS / 10);
    expect(report.streamsOpened).toBeGreaterThan(0);
  });

  it('answers every request, never with a 5xx or an error body outside the documented JSON shapes', () => {
    const lines = report.failures.map(
      (f) => `[${f.server}] ${f.reason}: ${f.method} ${f.target} (${f.category}) -> ${f.status} ${f.answer}${f.requestBody ? ` | body ${f.requestBody}` : ''}`,
    );
    expect(lines).toEqual([]);
    expect(report.healthChecks).toBeGreaterThan(0);
  });

  it('logs no server error, and leaves no stream subscribed once its client is gone', async () => {
    const logged = targets.flatMap((t) => t.serverErrors.map((e) => `[${t.name}] ${e.method} ${e.route}: ${e.error.name}: ${e.error.message}`));
    expect(logged).toEqual([]);
    // Nothing stays on the bus once every client is gone (a parked background run no longer
    // watches its agent run there: a decision moves it on in its own commit).
    for (const t of targets) {
      await eventually(() => t.server.runtime.bus.size === 0, 10_000, `${t.name}: stream subscriptions released (${t.server.runtime.bus.size} left)`);
    }
  });
});

// What the fuzzer found, each kept as a focused test.
describe('HEAD on an SSE route (found by npm run fuzz, seed 1)', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer();
  });
  afterAll(async () => {
    await s.stop();
    s.cleanup();
  });

  // Fastify adds a HEAD route to every GET; on a stream route it opened the stream, whose headers
  // never left (a HEAD answer has no body, so the writes that flush them were dropped): the
  // client waited for ever and the stream stayed subscribed until it gave up.
  it('answers at once, in the error shape, and opens no stream', async () => {
    const port = Number(new URL(s.url).port);
    for (const target of ['/events/fz', '/events/fz?cursor=0000000000000001', '/telemetry/events/stream?session_id=fz']) {
      const a = await rawRequest(port, requestText('HEAD', target), { timeoutMs: 3000 });
      expect(a.status, target).toBe(404);
      expect(a.headers['content-type'], target).toContain('application/json');
    }
    expect(s.runtime.bus.size).toBe(0);
    // GET still streams.
    const get = await rawRequest(port, requestText('GET', '/events/fz'), { headersOnly: true, timeoutMs: 3000 });
    expect(get.status).toBe(200);
    expect(get.headers['content-type']).toContain('text/event-stream');
  });
});
