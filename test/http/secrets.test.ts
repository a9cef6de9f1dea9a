// Secrets never leave a run through telemetry, checked through HTTP
// against a real server, the model behind the scripted OpenAI-compatible server:
//  - a tool's output with `password` fields and tokens inside strings is redacted in the stored
//    events (tool_result AND the next model_call's recorded input), the SSE frames of POST /run,
//    the run as served by GET /runs*, and the session history, while the model itself still gets
//    the tool output intact (it needs it to work);
//  - a provider 401 that echoes the configured API key (and a configured OTLP header value) leaves
//    the key nowhere: GET /runs, GET /runs/:id, events, the POST /run frames, the OTLP export,
//    and the bytes of the LevelDB data dir after close.
import { createServer, type IncomingMessage, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDACTED } from '../../src/telemetry/redact.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { TOOL_SECRETS } from '../fixtures/secret-tools.mjs';
import { eventually, getJson, startTestServer, type TestServer } from '../helpers/server.js';
import { streamRun } from '../helpers/sse.js';

const TOOLS = join(import.meta.dirname, '../fixtures/secret-tools.mjs');
const ALL_TOOL_SECRETS = Object.values(TOOL_SECRETS);

function leaks(value: unknown, secrets: string[]): string[] {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return secrets.filter((s) => text.includes(s));
}

let model: ScriptedOpenAI;
beforeAll(async () => {
  model = await startScriptedOpenAI();
});
afterAll(async () => {
  await model.close();
});

describe('finding 8: secrets in tool output and answers are redacted wherever telemetry leaves the run', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ agent: { tools: { local: TOOLS, builtin: [] } } }, { modelUrl: model.url });
  });
  afterAll(async () => {
    await server.stop();
    server.cleanup();
  });

  it('events, POST /run frames, GET /runs*, history and the next model_call input carry no secret; the model still sees the real output', async () => {
    model.reset();
    model.enqueue(
      { tool_calls: [{ name: 'fetch_credentials', arguments: {} }] },
      { tool_calls: [{ name: 'read_config', arguments: {} }] },
      { text: `Done: the config uses password=${TOOL_SECRETS.password} and ${TOOL_SECRETS.github}.` },
    );
    const { status, frames } = await streamRun(server.url, { query: 'get the credentials', session_id: 'secrets-1' });
    expect(status).toBe(200);
    const complete = frames.find((f) => f.event === 'complete')!;
    expect(complete.data.status).toBe('success');
    const runId: string = complete.data.run_id;

    // The model's own conversation is intact: it got the tool output as the tool returned it.
    expect(model.requests).toHaveLength(3);
    expect(JSON.stringify(model.requests[1].messages)).toContain(TOOL_SECRETS.password);
    expect(JSON.stringify(model.requests[2].messages)).toContain(TOOL_SECRETS.apiKey);

    // Every frame that is a stored event, and the complete frame, is redacted. (`delta` frames are
    // the model's live text to the caller who asked, never stored: see docs/telemetry.md.)
    const stored = frames.filter((f) => f.event !== 'delta');
    expect(stored.length).toBeGreaterThan(5);
    expect(leaks(stored, ALL_TOOL_SECRETS)).toEqual([]);
    expect(complete.data.response).toContain(`password=${REDACTED}`);

    const events = (await getJson(`${server.url}/telemetry/events?run_id=${runId}&limit=1000`)).body.events as any[];
    expect(leaks(events, ALL_TOOL_SECRETS)).toEqual([]);
    const results = events.filter((e) => e.event_type === 'tool_result');
    expect(results[0].output).toEqual({ user: 'svc', password: REDACTED, note: `call it with Authorization: ${REDACTED}` });
    expect(results[1].output).toBe(`db = postgres://svc:${REDACTED}@db/app\napi_key=${REDACTED}\n`);
    // The model_call after each tool step records the tool message it sent: redacted too.
    const calls = events.filter((e) => e.event_type === 'model_call');
    expect(calls).toHaveLength(3);
    expect(calls[1].input.last.role).toBe('tool');
    expect(JSON.parse(calls[1].input.last.content)).toEqual({ user: 'svc', password: REDACTED, note: `call it with Authorization: ${REDACTED}` });
    expect(calls[2].input.last.content).toContain(`api_key=${REDACTED}`);
    const final = events.find((e) => e.event_type === 'final_answer');
    expect(final.output.response).toBe(`Done: the config uses password=${REDACTED} and ${REDACTED}.`);

    const one = await getJson(`${server.url}/runs/${runId}`);
    expect(one.status).toBe(200);
    expect(leaks(one.body, ALL_TOOL_SECRETS)).toEqual([]);
    expect(one.body.response).toBe(`Done: the config uses password=${REDACTED} and ${REDACTED}.`);
    const list = await getJson(`${server.url}/runs?session_id=secrets-1`);
    expect(list.body.runs.map((r: any) => r.run_id)).toContain(runId);
    expect(leaks(list.body, ALL_TOOL_SECRETS)).toEqual([]);

    // The session history is served to readers too: its turns are stored redacted.
    const history = await getJson(`${server.url}/sessions/secrets-1/history`);
    expect(history.status).toBe(200);
    expect(leaks(history.body, ALL_TOOL_SECRETS)).toEqual([]);
  });
});

describe('finding 9: a provider echoing the configured API key', () => {
  // Shaped like no known credential, so only the registry of configured values can find it.
  const MODEL_KEY = 'cfgkey-' + 'Q7x2vK9pLm4Rt8Zw3NhD';
  const OTLP_TOKEN = 'collector-' + 'Vd8Kp2Qz6Wm4';
  const needles = [MODEL_KEY, OTLP_TOKEN, MODEL_KEY.slice(6, 20)];
  const received: Array<{ headers: IncomingMessage['headers']; body: string }> = [];
  let collector: HttpServer;
  let server: TestServer;

  beforeAll(async () => {
    collector = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{}');
      });
    });
    await new Promise<void>((r) => collector.listen(0, '127.0.0.1', () => r()));
    const port = (collector.address() as AddressInfo).port;
    server = await startTestServer(
      { telemetry: { otlp: { endpoint: `http://127.0.0.1:${port}`, protocol: 'http/json', headers: { 'x-collector-token': OTLP_TOKEN } } } },
      { modelUrl: model.url, env: { AGENTD_MODEL_API_KEY: MODEL_KEY } },
    );
  });
  afterAll(async () => {
    if (server) server.cleanup();
    await new Promise<void>((r) => collector.close(() => r()));
  });

  it('leaves the key nowhere: GET /runs, GET /runs/:id, events, frames, OTLP, and the data dir bytes', async () => {
    model.reset();
    model.enqueue((_body, headers) => ({
      status: 401,
      message:
        `Incorrect API key provided: ${String(headers.authorization).replace(/^Bearer /, '')}. ` +
        `You sent Authorization: ${String(headers.authorization)} (collector ${OTLP_TOKEN})`,
    }));
    const { frames } = await streamRun(server.url, { query: 'hello', session_id: 'secrets-2' });
    // The scripted server really got the key and echoed it.
    expect(model.headers[0].authorization).toBe(`Bearer ${MODEL_KEY}`);
    const complete = frames.find((f) => f.event === 'complete')!;
    expect(complete.data.status).toBe('error');
    expect(complete.data.error.message).toContain('401');
    expect(complete.data.error.message).toContain(REDACTED);
    const runId: string = complete.data.run_id;
    expect(leaks(frames, needles)).toEqual([]);

    const one = await getJson(`${server.url}/runs/${runId}`);
    expect(one.body.status).toBe('failed');
    expect(leaks(one.body, needles)).toEqual([]);
    expect(leaks((await getJson(`${server.url}/runs`)).body, needles)).toEqual([]);
    const events = (await getJson(`${server.url}/telemetry/events?run_id=${runId}&limit=1000`)).body.events as any[];
    const errors = events.filter((e) => e.event_type === 'model_error');
    expect(errors.length).toBeGreaterThan(0);
    expect(errors[0].error.message).toContain(REDACTED);
    expect(leaks(events, needles)).toEqual([]);

    // OTLP: the collector gets its own auth header (that is what it is for), never in the body.
    const exported = await eventually(() => received.find((r) => r.body.includes(runId)), 10_000, 'the run exported over OTLP');
    expect(exported.headers['x-collector-token']).toBe(OTLP_TOKEN);
    expect(exported.body).toContain('agentd.error.message');
    expect(
      leaks(
        received.map((r) => r.body),
        needles,
      ),
    ).toEqual([]);

    // The bytes on disk: every file of the data dir (LevelDB log and tables, workspaces).
    await server.stop();
    const files: string[] = [];
    const walk = (dir: string): void => {
      for (const name of readdirSync(dir)) {
        const p = join(dir, name);
        if (statSync(p).isDirectory()) walk(p);
        else files.push(p);
      }
    };
    walk(server.dataDir);
    expect(files.some((f) => /\.(log|ldb)$/.test(f))).toBe(true);
    const onDisk = files.filter((f) => needles.some((n) => readFileSync(f).includes(Buffer.from(n))));
    expect(onDisk).toEqual([]);
  });
});
