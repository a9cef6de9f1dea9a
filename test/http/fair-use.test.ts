// Fair use (src/http/fair-use.ts): one client holding every connection or stream it can open
// must not take the service down for the others. Over real sockets; the flooding client and the
// others connect from different loopback addresses (127.0.0.1, 127.0.0.2, ...), as different
// hosts would.
import { createHash } from 'node:crypto';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { configFromObject, ConfigError } from '../../src/config.js';
import { connectionsPerAddress } from '../../src/http/fair-use.js';
import { eventually, startTestServer, type TestServer } from '../helpers/server.js';

const sha = (k: string) => createHash('sha256').update(k).digest('hex');
const KEYS = { reader: 'key-reader-fair', operator: 'key-operator-fair' };
const AUTH = {
  api_keys: [
    { name: 'flooder', role: 'reader', key_sha256: sha(KEYS.reader) },
    { name: 'other', role: 'operator', key_sha256: sha(KEYS.operator) },
  ],
};
const portOf = (s: TestServer) => Number(new URL(s.url).port);

interface Held {
  status: number;
  headers: Record<string, string>;
  body: string;
  socket: net.Socket;
  /** Everything read so far (an accepted stream keeps reading). */
  text: () => string;
  closed: () => boolean;
}

/**
 * Opens a socket from `localAddress`, sends `request` (none: an idle socket), and resolves once
 * the answer's headers (and its body, when it has a Content-Length) arrived, or the server closed.
 * The socket stays open: the caller destroys it.
 */
function open(port: number, localAddress: string, request: string | null, timeoutMs = 30_000): Promise<Held> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1', localAddress }, () => {
      if (request !== null) socket.write(request);
    });
    let text = '';
    let closed = false;
    let settled = false;
    const timer = setTimeout(() => {
      settled = true;
      socket.destroy();
      reject(new Error(`no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    const held = (): Held => {
      const end = text.indexOf('\r\n\r\n');
      const head = end === -1 ? text : text.slice(0, end);
      const [statusLine, ...lines] = head.split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of lines) {
        const i = l.indexOf(':');
        if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
      }
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine ?? '')?.[1] ?? 0);
      return { status, headers, body: end === -1 ? '' : text.slice(end + 4), socket, text: () => text, closed: () => closed };
    };
    const check = () => {
      if (settled) return;
      const end = text.indexOf('\r\n\r\n');
      if (end === -1 && !closed) return;
      const h = held();
      const length = h.headers['content-length'];
      if (!closed && length !== undefined && Buffer.byteLength(h.body) < Number(length)) return;
      settled = true;
      clearTimeout(timer);
      resolve(h);
    };
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => {
      text += d;
      check();
    });
    socket.on('close', () => {
      closed = true;
      check();
    });
    socket.on('error', () => undefined);
  });
}

const get = (path: string, key?: string) =>
  `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${key ? `Authorization: Bearer ${key}\r\n` : ''}Connection: keep-alive\r\n\r\n`;

const codeOf = (h: Held): string | undefined => {
  try {
    return (JSON.parse(h.body) as { code?: string }).code;
  } catch {
    return undefined;
  }
};

describe('the default caps sit well below what takes the service down', () => {
  it('lets one address hold a quarter of max_connections and one key 256 streams', () => {
    const c = configFromObject({}, { env: {} });
    expect(c.server.max_connections).toBe(4096);
    expect(connectionsPerAddress(c.server)).toBe(1024);
    expect(c.server.max_streams_per_key).toBe(256);
    expect(connectionsPerAddress(c.server) * 4).toBeLessThanOrEqual(c.server.max_connections);
    // Scaled with max_connections when only that is set.
    expect(connectionsPerAddress(configFromObject({ server: { max_connections: 100 } }, { env: {} }).server)).toBe(25);
  });

  it('refuses a per-address cap that would let one address hold every connection', () => {
    expect(() => configFromObject({ server: { max_connections: 100, max_connections_per_address: 100 } }, { env: {} })).toThrow(ConfigError);
    expect(() => configFromObject({ server: { max_connections: 100, max_connections_per_address: 99 } }, { env: {} })).not.toThrow();
  });
});

describe('3,000 streams from one key', () => {
  let s: TestServer;
  const held: net.Socket[] = [];
  beforeAll(async () => {
    // The default connection caps (4096, 1024 per address); a stream cap small enough that the
    // accepted streams stay cheap on a shared machine.
    s = await startTestServer({ auth: AUTH, server: { max_streams_per_key: 50 } });
  });
  afterAll(async () => {
    for (const c of held) c.destroy();
    await s.stop();
    s.cleanup();
  });

  it('answers 429 with Retry-After past the cap, while /health answers within 2 s and another key still streams', async () => {
    const port = portOf(s);
    const answers: Held[] = [];
    let healthDuring: Promise<{ status: number; ms: number }> | null = null;
    const health = async (from: string) => {
      const t0 = performance.now();
      const h = await open(port, from, `GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
      h.socket.destroy();
      return { status: h.status, ms: performance.now() - t0 };
    };
    // 250 at a time (the listen backlog is 511), every one kept open.
    for (let i = 0; i < 3000; i += 250) {
      if (i === 1500) healthDuring = health('127.0.0.2');
      const batch = await Promise.all(Array.from({ length: 250 }, (_, k) => open(port, '127.0.0.1', get(`/events/flood-${i + k}`, KEYS.reader))));
      for (const a of batch) {
        answers.push(a);
        held.push(a.socket);
      }
    }
    const byStatus = new Map<number, number>();
    for (const a of answers) byStatus.set(a.status, (byStatus.get(a.status) ?? 0) + 1);
    expect(Object.fromEntries(byStatus)).toEqual({ 200: 50, 429: 2950 });
    for (const a of answers.filter((x) => x.status === 429)) {
      expect(a.headers['retry-after']).toMatch(/^\d+$/);
      expect(['AGT_ERR_TOO_MANY_STREAMS', 'AGT_ERR_TOO_MANY_CONNECTIONS']).toContain(codeOf(a));
      expect(JSON.parse(a.body).error).toBe('TooManyRequests');
    }
    // Past 1,024 sockets from one address, the connection itself is refused at accept.
    expect(answers.filter((a) => codeOf(a) === 'AGT_ERR_TOO_MANY_CONNECTIONS').length).toBeGreaterThan(0);
    expect(answers.filter((a) => codeOf(a) === 'AGT_ERR_TOO_MANY_STREAMS').length).toBeGreaterThan(0);

    // The accepted streams are real streams.
    for (const a of answers.filter((x) => x.status === 200).slice(0, 5)) await eventually(() => a.text().includes('event: session'), 5000, 'session frame');

    const during = await healthDuring!;
    expect(during.status).toBe(200);
    expect(during.ms).toBeLessThan(2000);
    const after = await health('127.0.0.2');
    expect(after.status).toBe(200);
    expect(after.ms).toBeLessThan(2000);

    // The cap is the key's, wherever it connects from.
    const sameKeyElsewhere = await open(port, '127.0.0.4', get('/events/elsewhere', KEYS.reader));
    held.push(sameKeyElsewhere.socket);
    expect(sameKeyElsewhere.status).toBe(429);
    expect(codeOf(sameKeyElsewhere)).toBe('AGT_ERR_TOO_MANY_STREAMS');

    // Another key streams.
    const other = await open(port, '127.0.0.3', get('/events/other-session', KEYS.operator));
    held.push(other.socket);
    expect(other.status).toBe(200);
    await eventually(() => other.text().includes('event: session'), 5000, 'session frame of the other key');

    // Closing streams gives their slots back.
    for (const a of answers) a.socket.destroy();
    await eventually(
      async () => {
        const again = await open(port, '127.0.0.1', get('/events/again', KEYS.reader));
        again.socket.destroy();
        return again.status === 200;
      },
      10_000,
      'a stream slot freed',
    );
  }, 180_000);
});

describe('connections per address, and idle sockets (auth off: the address is the client)', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ server: { max_connections: 40, max_streams_per_key: 3, headers_timeout_seconds: 1, body_timeout_seconds: 1 } });
  });
  afterAll(async () => {
    await s.stop();
    s.cleanup();
  });

  it('refuses connections past the per-address cap with 429 at once, and closes idle ones at the header timeout', async () => {
    const port = portOf(s);
    const t0 = performance.now();
    // 25 sockets that never send a byte; the cap is a quarter of 40.
    const idle = await Promise.all(Array.from({ length: 25 }, () => open(port, '127.0.0.1', null, 15_000)));
    const refused = idle.filter((a) => a.status === 429);
    expect(refused.length).toBe(15);
    for (const a of refused) {
      expect(codeOf(a)).toBe('AGT_ERR_TOO_MANY_CONNECTIONS');
      expect(a.headers['retry-after']).toMatch(/^\d+$/);
    }
    // The others were held open until the header timeout (1 s), then answered 408 and closed.
    const timedOut = idle.filter((a) => a.status !== 429);
    expect(timedOut.length).toBe(10);
    for (const a of timedOut) {
      expect(a.status).toBe(408);
      await eventually(() => a.closed(), 5000, 'idle socket closed by the server');
    }
    expect(performance.now() - t0).toBeLessThan(10_000);
    for (const a of idle) a.socket.destroy();
  });

  it('answers /health from another address while one address holds its whole share', async () => {
    const port = portOf(s);
    const idle = await Promise.all(Array.from({ length: 10 }, () => open(port, '127.0.0.1', get('/events/hold'), 15_000)));
    // 3 streams, then 7 refused for the stream cap (auth off: per address).
    const statuses = idle.map((a) => a.status).sort();
    expect(statuses).toEqual([200, 200, 200, 429, 429, 429, 429, 429, 429, 429]);
    for (const a of idle.filter((x) => x.status === 429)) expect(codeOf(a)).toBe('AGT_ERR_TOO_MANY_STREAMS');
    // The refused ones stay connected (keep-alive): the address holds all 10 of its connections.
    const extra = await open(port, '127.0.0.1', get('/health'));
    expect(extra.status).toBe(429);
    expect(codeOf(extra)).toBe('AGT_ERR_TOO_MANY_CONNECTIONS');
    const t0 = performance.now();
    const health = await open(port, '127.0.0.2', get('/health'));
    expect(health.status).toBe(200);
    expect(performance.now() - t0).toBeLessThan(2000);
    const ready = await open(port, '127.0.0.2', get('/ready'));
    expect(ready.status).toBe(200);
    const stream = await open(port, '127.0.0.2', get('/events/other'));
    expect(stream.status).toBe(200);
    for (const a of [...idle, extra, health, ready, stream]) a.socket.destroy();
  });
});
