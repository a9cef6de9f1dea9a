// Fair use of the service's connections: no one client can hold all of them. Two bounds, both
// answered 429 with Retry-After, so a client knows to back off rather than that it is broken:
//  - connections per client address (`server.max_connections_per_address`), counted at accept,
//    before a socket costs a parser or a request; always below `server.max_connections`, so
//    other clients and the health checks (/health, /ready) still get a connection;
//  - open SSE streams per API key (or per address with auth off: `server.max_streams_per_key`),
//    checked on every route that answers with a stream (a route with the `sse` option).
// An idle socket that never sends a request is closed by Node's header timeout (src/app.ts).
import { STATUS_CODES, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, onRequestHookHandler } from 'fastify';
import { domainError } from '../errors.js';
import type { Config } from '../config.js';
import { errorBody } from './error-handler.js';

/** Seconds a client refused for fair use is told to wait (Retry-After). */
const RETRY_AFTER_SECONDS = 5;
/** A refused socket that does not close after reading its 429 is destroyed after this. */
const REFUSED_SOCKET_GRACE_MS = 1000;

/** Connections one address may hold: the configured value, or a quarter of max_connections. */
export function connectionsPerAddress(server: Config['server']): number {
  return server.max_connections_per_address ?? Math.max(1, Math.floor(server.max_connections / 4));
}

/** The address a socket comes from, IPv4-mapped IPv6 written as IPv4 (one client, one count). */
function addressOf(socket: Socket): string {
  const a = socket.remoteAddress ?? 'unknown';
  return a.startsWith('::ffff:') ? a.slice(7) : a;
}

/**
 * Counts open connections per client address and refuses one past the cap: it gets a 429 in the
 * error shape and is closed, without reaching the HTTP parser. Wraps the server's own connection
 * listeners (Node's HTTP handling), so an accepted socket is handled exactly as before.
 */
export function installConnectionCap(server: Server, perAddress: number): void {
  const open = new Map<string, number>();
  const listeners = server.listeners('connection') as Array<(socket: Socket) => void>;
  server.removeAllListeners('connection');
  server.on('connection', (socket: Socket) => {
    const address = addressOf(socket);
    const n = open.get(address) ?? 0;
    if (n >= perAddress) return refuse(socket, perAddress);
    open.set(address, n + 1);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left <= 0) open.delete(address);
      else open.set(address, left);
    });
    for (const listener of listeners) listener.call(server, socket);
  });
}

function refuse(socket: Socket, perAddress: number): void {
  const body = JSON.stringify(errorBody('AGT_ERR_TOO_MANY_CONNECTIONS', perAddress));
  socket.on('error', () => undefined);
  // Read (and drop) whatever the client sends: closing with unread bytes would reset the
  // connection, and the client could lose the 429 before reading it.
  socket.resume();
  socket.end(
    `HTTP/1.1 429 ${STATUS_CODES[429]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
      `Retry-After: ${RETRY_AFTER_SECONDS}\r\nConnection: close\r\n\r\n${body}`,
  );
  setTimeout(() => socket.destroy(), REFUSED_SOCKET_GRACE_MS).unref();
}

/**
 * Caps the SSE streams one client holds open: the API key's name with auth on, else the client
 * address. Added to every stream route (its `sse` option) when the route is registered, after the
 * route's auth check; the slot is released when the response closes, however it ends.
 */
export function installStreamCap(app: FastifyInstance, perKey: number): void {
  const open = new Map<string, number>();
  app.addHook('onRoute', (route) => {
    if (!(route as { sse?: unknown }).sse) return;
    const acquire: onRequestHookHandler = (request, reply, done) => {
      const owner = request.apiKeyName !== undefined ? `key ${request.apiKeyName}` : `address ${addressOf(request.raw.socket)}`;
      const n = open.get(owner) ?? 0;
      if (n >= perKey) return done(domainError('AGT_ERR_TOO_MANY_STREAMS', [perKey], { headers: { 'retry-after': String(RETRY_AFTER_SECONDS) } }));
      open.set(owner, n + 1);
      reply.raw.once('close', () => {
        const left = (open.get(owner) ?? 1) - 1;
        if (left <= 0) open.delete(owner);
        else open.set(owner, left);
      });
      done();
    };
    route.onRequest = route.onRequest ? [...[route.onRequest].flat(), acquire] : acquire;
  });
}
