// One structured logger: every line JSON with a level, request lines and 5xx lines with the
// request's id, secrets redacted, the `serve` command's own lines included.
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { configFromObject } from '../../src/config.js';
import { startServer } from '../../src/main.js';
import { logServerErrorToRequestLog } from '../../src/http/error-handler.js';
import { createLogger, loggerSettings, prettyLine } from '../../src/telemetry/logger.js';
import { Redactor } from '../../src/telemetry/redact.js';
import { redactorForConfig } from '../../src/telemetry/secrets.js';
import { getJson, startTestServer, tempDir } from '../helpers/server.js';
import { waitFor } from '../helpers/wait.js';

const ROOT = join(import.meta.dirname, '../..');
const SECRET = 'sk-proj-abcdefghijklmnop1234567890';

function capture() {
  const lines: string[] = [];
  return { lines, destination: { write: (s: string) => void lines.push(...s.split('\n').filter(Boolean)) } };
}
const parsed = (lines: string[]) => lines.map((l) => JSON.parse(l) as Record<string, any>);

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('the logger of a server', () => {
  it('writes JSON lines with a level, the request id inside a request, and a redacted 5xx line', async () => {
    const dataDir = tempDir();
    dirs.push(dataDir);
    const config = configFromObject(
      { server: { port: 0 }, runs: { orphan_sweep: { interval_seconds: 3600 } } },
      { dataDir, env: { AGENTD_MODEL_API_KEY: SECRET } },
    );
    const { lines, destination } = capture();
    const logger = createLogger({ destination, format: 'json', redactor: redactorForConfig(config) });
    const server = await startServer(config, { logger, logRequests: true });
    try {
      const ok = await fetch(`${server.url}/health?api_key=${SECRET}`, { headers: { 'x-request-id': 'req-logging-1' } });
      expect(ok.status).toBe(200);
      // A real internal failure: the store closed under the server.
      await server.store.close();
      const failed = await getJson(`${server.url}/runs`);
      expect(failed.status).toBe(500);
      const failedId = failed.headers.get('x-request-id');
      // The completed-request line follows the response.
      await waitFor(() => parsed(lines).some((e) => e.reqId === failedId && e.msg === 'request completed'), { what: "the failed request's completed line" });

      const entries = parsed(lines);
      for (const e of entries) {
        expect(['trace', 'debug', 'info', 'warn', 'error']).toContain(e.level);
        expect(typeof e.time).toBe('string');
        expect(typeof e.msg).toBe('string');
      }
      const ofFirst = entries.filter((e) => e.reqId === 'req-logging-1');
      expect(ofFirst.map((e) => e.msg)).toEqual(expect.arrayContaining(['incoming request', 'request completed']));
      const serverError = entries.find((e) => e.level === 'error' && e.status === 500);
      expect(serverError).toMatchObject({ reqId: failedId, method: 'GET', route: '/runs', msg: 'unhandled error' });
      expect(serverError!.error.message.length).toBeGreaterThan(0);
      // Each request line has its id; nothing anywhere holds the configured key.
      for (const e of entries) if (e.req || e.res) expect(e.reqId).toBeTruthy();
      expect(lines.join('\n')).not.toContain(SECRET);
    } finally {
      await server.close(0).catch(() => undefined);
    }
  });

  it('redacts a 5xx line: configured secrets and credential patterns in the message and stack', () => {
    const { lines, destination } = capture();
    const logger = createLogger({ destination, format: 'json', redactor: new Redactor([SECRET]) });
    logServerErrorToRequestLog(
      {
        level: 'error',
        msg: 'unhandled error',
        request_id: 'r1',
        method: 'POST',
        route: '/run',
        status: 500,
        error: {
          name: 'Error',
          message: `provider said: invalid key ${SECRET}`,
          stack: `Error: Authorization: Bearer ghp_abcdefghijklmnopqrstuvwxyz0123456789\n    at x (y.js:1:1)`,
        },
      },
      { id: 'r1', server: { log: logger } } as never,
    );
    expect(lines).toHaveLength(1);
    const e = JSON.parse(lines[0]);
    expect(e).toMatchObject({ level: 'error', reqId: 'r1', route: '/run', status: 500, msg: 'unhandled error' });
    expect(lines[0]).not.toContain(SECRET);
    expect(lines[0]).not.toContain('ghp_abcdefghijklmnopqrstuvwxyz0123456789');
    expect(e.error.message).toContain('[REDACTED]');
  });

  it('redacts secrets passed in the message text and in error fields', () => {
    const { lines, destination } = capture();
    const logger = createLogger({ destination, format: 'json', redactor: new Redactor([SECRET]) });
    logger.warn({ err: new Error(`boom ${SECRET}`), password: 'hunter2-hunter2' }, `otlp export failed: ${SECRET}`);
    const e = JSON.parse(lines[0]);
    expect(lines[0]).not.toContain(SECRET);
    expect(lines[0]).not.toContain('hunter2-hunter2');
    expect(e.err.type).toBe('Error');
    expect(typeof e.err.stack).toBe('string');
  });

  it("redacts a child logger's lines: its bindings, its fields and its message (a run's host logs through one)", () => {
    const { lines, destination } = capture();
    const logger = createLogger({ destination, format: 'json', redactor: new Redactor([SECRET]) });
    // pino writes a child's bindings as they were given, past formatters.log: they are redacted when bound.
    const run = logger.child({ run_id: 'run_1', api_key: 'plain-value-1234', note: `key ${SECRET}` });
    const tool = run.child({ tool: 'fetch', authorization: 'Bearer abc.def.ghi' });
    tool.warn({ token: 'tok-12345678', detail: `echo ${SECRET}` }, `tool said ${SECRET}`);
    run.info('plain line');
    const [e, plain] = parsed(lines);
    expect(lines.join('\n')).not.toContain(SECRET);
    for (const v of ['plain-value-1234', 'abc.def.ghi', 'tok-12345678']) expect(lines[0]).not.toContain(v);
    expect(e).toMatchObject({ run_id: 'run_1', tool: 'fetch', api_key: '[REDACTED]', authorization: '[REDACTED]', token: '[REDACTED]' });
    expect(e.msg).toContain('[REDACTED]');
    expect(plain).toMatchObject({ run_id: 'run_1', msg: 'plain line', api_key: '[REDACTED]' });
  });
});

describe('formats and settings', () => {
  it('formats a line for people in pretty mode', () => {
    const line = prettyLine(
      JSON.stringify({ level: 'warn', time: '2026-11-24T10:11:12.345Z', pid: 1, hostname: 'h', reqId: 'req_1', msg: 'slow reader', run_id: 'run_1', n: 3 }),
    );
    expect(line).toBe('10:11:12.345 WARN  [req_1] slow reader  run_id=run_1 n=3\n');
    const { lines, destination } = capture();
    createLogger({ destination, format: 'pretty' }).info({ a: 'b c' }, 'hello');
    expect(lines[0]).toMatch(/^\d\d:\d\d:\d\d\.\d{3} INFO  hello {2}a="b c"$/);
  });

  it('takes the log settings from the config (AGENTD_LOG_LEVEL, AGENTD_LOG_FORMAT, AGENTD_LOG_REQUESTS) and refuses unknown values', () => {
    const logOf = (env: Record<string, string>, file: Record<string, unknown> = {}) => configFromObject(file, { env }).log;
    expect(logOf({})).toEqual({ level: 'info', requests: false });
    expect(logOf({ AGENTD_LOG_LEVEL: 'DEBUG', AGENTD_LOG_FORMAT: 'pretty', AGENTD_LOG_REQUESTS: '1' })).toEqual({
      level: 'debug',
      format: 'pretty',
      requests: true,
    });
    // The environment wins over the file; an empty value means the default.
    expect(logOf({ AGENTD_LOG_LEVEL: 'warn', AGENTD_LOG_FORMAT: '' }, { log: { level: 'error', format: 'json' } })).toEqual({
      level: 'warn',
      format: 'json',
      requests: false,
    });
    expect(loggerSettings(logOf({ AGENTD_LOG_LEVEL: 'trace' }))).toEqual({ level: 'trace' });
    expect(() => logOf({ AGENTD_LOG_LEVEL: 'loud' })).toThrow(/AGENTD_LOG_LEVEL/);
    // `silent` would hide the line every 5xx writes.
    expect(() => logOf({ AGENTD_LOG_LEVEL: 'silent' })).toThrow(/AGENTD_LOG_LEVEL/);
    expect(() => logOf({ AGENTD_LOG_FORMAT: 'xml' })).toThrow(/AGENTD_LOG_FORMAT/);
    const { lines, destination } = capture();
    const quiet = createLogger({ destination, level: 'warn' });
    quiet.info('not written');
    quiet.error('written');
    expect(parsed(lines).map((e) => e.msg)).toEqual(['written']);
  });
});

describe('agentd serve', () => {
  it('writes only JSON lines on stderr (not a terminal): its own lines, request lines, the shutdown line', async () => {
    const dataDir = tempDir();
    dirs.push(dataDir);
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'serve', '--data-dir', dataDir, '--port', '0', '--host', '127.0.0.1'], {
      cwd: ROOT,
      env: { ...process.env, AGENTD_LOG_REQUESTS: '1', AGENTD_LOG_LEVEL: 'info', AGENTD_LOG_FORMAT: '' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    child.stderr!.setEncoding('utf8');
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const url = await new Promise<string>((res, rej) => {
      const timer = setTimeout(() => rej(new Error(`no listening line in 30 s:\n${err}`)), 30_000);
      child.stderr!.on('data', (c: string) => {
        err += c;
        const m = /listening on (http:\/\/\S+)/.exec(err);
        if (m) {
          clearTimeout(timer);
          res(m[1]);
        }
      });
    });
    const r = await fetch(`${url}/no/such/route`, { headers: { 'x-request-id': 'req-serve-1' } });
    expect(r.status).toBe(404);
    // Served, the demo model streams word by word with a pause (--demo-delay-ms, default 15):
    // the last word leaves at least (words - 1) pauses after the first (a lower bound only).
    const streamed = await fetch(`${url}/run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ query: 'hello there my good old friend' }),
    });
    const arrivals: number[] = [];
    const decoder = new TextDecoder();
    for await (const chunk of streamed.body as unknown as AsyncIterable<Uint8Array>) {
      const n = (decoder.decode(chunk).match(/^event: delta$/gm) ?? []).length;
      for (let i = 0; i < n; i++) arrivals.push(performance.now());
    }
    expect(arrivals.length).toBeGreaterThan(4);
    // Two adjacent words may reach us in one read: allow one pause less.
    expect(arrivals.at(-1)! - arrivals[0]).toBeGreaterThanOrEqual((arrivals.length - 2) * 14);
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    const entries = err
      .split('\n')
      .filter(Boolean)
      .map((l) => {
        try {
          return JSON.parse(l) as Record<string, any>;
        } catch {
          throw new Error(`not a JSON line: ${l}`);
        }
      });
    for (const e of entries) expect(typeof e.level).toBe('string');
    const listening = entries.find((e) => e.level === 'info' && /listening on http/.test(e.msg));
    // The start-up line names the dashboard, where a first-time user goes next.
    expect(listening?.msg).toContain(`dashboard ${url}/ui`);
    expect(entries.filter((e) => e.reqId === 'req-serve-1').map((e) => e.msg)).toEqual(expect.arrayContaining(['incoming request', 'request completed']));
    expect(entries.some((e) => /SIGTERM received/.test(e.msg))).toBe(true);
  }, 60_000);
});

describe('SSE answers', () => {
  it('carry x-request-id and start with a retry hint, on POST /run and on a replay stream', async () => {
    const server = await startTestServer();
    try {
      const run = await fetch(`${server.url}/run`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-id': 'req-sse-1' },
        body: JSON.stringify({ query: 'hello', session_id: 'sse-hdr' }),
      });
      expect(run.status).toBe(200);
      expect(run.headers.get('content-type')).toContain('text/event-stream');
      expect(run.headers.get('x-request-id')).toBe('req-sse-1');
      const text = await run.text();
      expect(text.startsWith('retry: 2000\n\n')).toBe(true);
      expect(text).toContain('event: complete');

      const ac = new AbortController();
      const replay = await fetch(`${server.url}/events/sse-hdr`, { signal: ac.signal, headers: { 'x-request-id': 'req-sse-2' } });
      expect(replay.headers.get('x-request-id')).toBe('req-sse-2');
      const reader = replay.body!.getReader();
      let first = '';
      while (!first.includes('\n\n')) first += new TextDecoder().decode((await reader.read()).value);
      ac.abort();
      expect(first.startsWith('retry: 2000\n\n')).toBe(true);
      // Without a header of its own, the stream gets the id agentd made.
      const made = await fetch(`${server.url}/events/sse-hdr`, { signal: AbortSignal.timeout(5000) }).catch(() => null);
      expect(made?.headers.get('x-request-id')).toMatch(/^req_/);
      await made?.body?.cancel().catch(() => undefined);
    } finally {
      await server.stop();
      server.cleanup();
    }
  });
});
