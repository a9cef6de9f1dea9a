import Fastify, { type FastifyInstance } from 'fastify';
import { fastifySSE } from '@fastify/sse';
import { newId } from './ids.js';
import { installErrorHandling } from './http/error-handler.js';
import { jsonSerializerCompiler, zodValidatorCompiler } from './http/validation.js';
import { installAuth } from './http/auth.js';
import type { AppDeps } from './http/deps.js';
import { installLazyDocs } from './http/docs.js';
import { healthRoutes } from './http/health.js';
import { ROUTE_MODULES } from './http/routes.js';

export type { AppDeps } from './http/deps.js';

declare module 'fastify' {
  interface FastifyInstance {
    routeList: Array<{ method: string; url: string; hidden: boolean }>;
  }
}

/**
 * Builds the HTTP app without listening (tests use `inject()` or listen themselves).
 * Routes only parse (zod), delegate to a runtime service, and serialise.
 */
export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const { config } = deps;
  const app = Fastify({
    logger: deps.logger ?? false,
    bodyLimit: config.server.max_body_bytes,
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && /^[\w.-]{1,128}$/.test(given) ? given : newId('req');
    },
    // Fastify's default 'x-request-id' handling plus our own id format above.
    requestIdHeader: false,
    return503OnClosing: true,
    forceCloseConnections: true,
  });
  // Every route, so a test can check that the OpenAPI document lists all of them.
  const routes: Array<{ method: string; url: string; hidden: boolean }> = [];
  app.decorate('routeList', routes);
  app.addHook('onRoute', (r) => {
    const methods = Array.isArray(r.method) ? r.method : [r.method];
    const hidden = Boolean((r.schema as { hide?: boolean } | undefined)?.hide) || r.url.startsWith('/docs');
    for (const m of methods) if (m !== 'HEAD') routes.push({ method: m, url: r.url, hidden });
  });
  // A JSON API: any other body type is a 415, not a string that fails validation.
  app.removeContentTypeParser('text/plain');
  app.setValidatorCompiler(zodValidatorCompiler);
  app.setSerializerCompiler(jsonSerializerCompiler);
  app.addHook('onSend', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });
  installErrorHandling(app);

  await app.register(fastifySSE, { heartbeatInterval: 15_000 });
  installAuth(app, deps);

  await app.register(async (scope) => registerApiRoutes(scope, deps));

  // GET /openapi.json and /docs: built on first request (src/http/docs.ts), not at start-up.
  installLazyDocs(app, deps);
  await app.ready();
  return app;
}

/** Every API route; the documentation instance (src/http/docs-app.ts) registers the same ones. */
export function registerApiRoutes(scope: FastifyInstance, deps: AppDeps): void {
  healthRoutes(scope, deps);
  for (const register of ROUTE_MODULES) register(scope, deps);
}
