// CORS for browser frontends (a `useChat` page, a CopilotKit app on another origin): off unless
// `server.cors.origins` names origins, which must match a request's `Origin` exactly. Keys travel
// in the Authorization header only (no cookies), so Access-Control-Allow-Credentials is never sent.
import type { FastifyInstance } from 'fastify';
import type { AppDeps } from '../http/deps.js';

/** Request headers a browser may send cross-origin (besides the CORS-safelisted ones). */
const ALLOWED_HEADERS =
  'authorization, content-type, idempotency-key, last-event-id, x-request-id, x-agentd-session-id, x-agentd-concurrency-key, x-agentd-concurrency-limit, x-agentd-priority';
/** Response headers a browser script may read. */
const EXPOSED_HEADERS = 'x-request-id, x-vercel-ai-ui-message-stream, retry-after, www-authenticate';
const MAX_AGE_SECONDS = '600';

/**
 * The CORS headers of every answer (an error too: a browser reads a 401 only with them). Called
 * before the routes are registered, so the hook runs ahead of each route's own (its auth check).
 */
export function installCorsHeaders(app: FastifyInstance, deps: AppDeps): void {
  const origins = new Set(deps.config.server.cors.origins);
  if (origins.size === 0) return;
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('vary', 'Origin');
    const origin = request.headers.origin;
    if (typeof origin === 'string' && origins.has(origin)) {
      reply.header('access-control-allow-origin', origin);
      reply.header('access-control-expose-headers', EXPOSED_HEADERS);
    }
    done();
  });
}

/**
 * A preflight route (OPTIONS, public: a preflight carries no credentials) for every path the app
 * serves, answering with the methods registered there. Called once every route is registered.
 */
export function installCorsPreflight(app: FastifyInstance, deps: AppDeps): void {
  const origins = new Set(deps.config.server.cors.origins);
  if (origins.size === 0) return;
  const methodsByUrl = new Map<string, Set<string>>();
  for (const r of app.routeList) {
    const set = methodsByUrl.get(r.url) ?? new Set<string>();
    set.add(r.method);
    if (r.method === 'GET') set.add('HEAD');
    methodsByUrl.set(r.url, set);
  }
  for (const [url, methods] of methodsByUrl) {
    if (methods.has('OPTIONS')) continue;
    const allow = [...methods, 'OPTIONS'].join(', ');
    app.options(url, { schema: { hide: true } }, (request, reply) => {
      const origin = request.headers.origin;
      // Not an allowed origin: no CORS headers, so the browser refuses the real request.
      if (typeof origin === 'string' && origins.has(origin)) {
        reply.header('access-control-allow-methods', allow);
        reply.header('access-control-allow-headers', ALLOWED_HEADERS);
        reply.header('access-control-max-age', MAX_AGE_SECONDS);
      }
      reply.header('allow', allow);
      return reply.code(204).send();
    });
  }
}
