// The providers' fetch over node:http answers like the built-in fetch: status, headers and body of
// a real HTTP server, the same error shapes (refused, cut mid-body, aborted), a bounded body stream.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNodeFetch } from '../../../src/agent/model/node-fetch.js';
import { toModelCallError } from '../../../src/agent/model/errors.js';

let server: Server;
let base = '';
const seen: Array<{ method: string; headers: Record<string, unknown>; body: string }> = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', headers: req.headers, body: Buffer.concat(parts).toString() });
      if (req.url === '/json') {
        res.writeHead(201, { 'content-type': 'application/json', 'x-request-id': 'abc', 'set-cookie': ['a=1', 'b=2'] });
        res.end('{"ok":true,"text":"héllo"}');
      } else if (req.url === '/cut') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: one\n\n', () => setTimeout(() => req.socket.destroy(), 20));
      } else if (req.url === '/hang') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: first\n\n');
      } else if (req.url === '/empty') {
        res.writeHead(204);
        res.end();
      } else {
        res.writeHead(404);
        res.end('nope');
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

describe('createNodeFetch', () => {
  const nodeFetch = createNodeFetch();

  it('answers a POST like the built-in fetch: status, headers, body; sends method, headers, body', async () => {
    const init = { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer k' }, body: '{"q":"ü"}' };
    const [a, b] = [await nodeFetch(`${base}/json`, init), await fetch(`${base}/json`, init)];
    expect(a.status).toBe(b.status);
    expect(a.ok).toBe(true);
    expect(a.headers.get('x-request-id')).toBe('abc');
    expect(a.headers.get('content-type')).toBe(b.headers.get('content-type'));
    expect(await a.text()).toBe(await b.text());
    const [sa, sb] = seen.slice(-2);
    expect(sa.body).toBe(sb.body);
    expect(sa.headers['content-length']).toBe(sb.headers['content-length']);
    expect(sa.headers.authorization).toBe('Bearer k');
    const empty = await nodeFetch(`${base}/empty`, { method: 'POST', body: '' });
    expect(empty.status).toBe(204);
    expect(await empty.text()).toBe('');
    const missing = await nodeFetch(`${base}/nowhere`);
    expect(missing.status).toBe(404);
    expect(await missing.text()).toBe('nope');
  });

  it('fails like the built-in fetch: refused before a response, terminated mid-body, aborted', async () => {
    const refused = await nodeFetch('http://127.0.0.1:1/x', { method: 'POST', body: '{}' }).catch((e: unknown) => e as TypeError);
    expect(refused).toBeInstanceOf(TypeError);
    expect((refused as TypeError).message).toBe('fetch failed');
    expect(toModelCallError(refused).kind).toBe('connection');

    const cut = await nodeFetch(`${base}/cut`, { method: 'POST', body: '{}' });
    const err = await cut.text().catch((e: unknown) => e as TypeError);
    expect(err).toBeInstanceOf(TypeError);
    expect(toModelCallError(err).kind).toBe('connection');

    const ac = new AbortController();
    const hang = await nodeFetch(`${base}/hang`, { method: 'POST', body: '{}', signal: ac.signal });
    const reader = hang.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('data: first\n\n');
    ac.abort();
    const aborted = await reader.read().catch((e: unknown) => e as Error);
    expect((aborted as Error).name).toBe('AbortError');
    expect(toModelCallError(aborted, ac.signal).kind).toBe('aborted');
    await expect(nodeFetch(`${base}/json`, { method: 'POST', body: '{}', signal: ac.signal })).rejects.toMatchObject({ name: 'AbortError' });
  });
});
