import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type onResponseHookHandler } from 'fastify';
import { fastifySSE } from '@fastify/sse';
import { newRequestId } from './ids.js';
import {
  clientErrorHandler,
  frameworkErrorReply,
  installErrorHandling,
  logServerErrorToRequestLog,
  type ServerErrorEntry,
  type ServerErrorLog,
} from './http/error-handler.js';
import { redactLogFields, redactorForConfig } from './telemetry/secrets.js';
import { createLogger, loggerSettings } from './telemetry/logger.js';
import { installJsonBodyParser } from './http/json-body.js';
import { jsonSerializerCompiler, zodValidatorCompiler } from './http/validation.js';
import { installAuth } from './http/auth.js';
import { installTenancy } from './http/tenancy.js';
import { installHostCheck } from './http/host-check.js';
import { serverPathScrubber } from './http/server-paths.js';
import { connectionsPerAddress, installConnectionCap, installStreamCap } from './http/fair-use.js';
import type { AppDeps } from './http/deps.js';
import { installLazyDocs } from './http/docs.js';
import { installUi } from './http/ui.js';
import { registerApiRoutes } from './http/routes.js';
import { installCorsHeaders, installCorsPreflight } from './protocols/cors.js';

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
/**
 * Longest path parameter the router accepts. Ids are at most 256 characters (SafeId), so an id the
 * API accepts can always be routed; 257..MAX_PARAM_LENGTH gets a 422 naming the parameter, and
 * only longer segments a 414.
 */
export const MAX_PARAM_LENGTH = 1024;

export async function buildApp(deps: AppDeps & { logServerError?: ServerErrorLog }): Promise<FastifyInstance> {
  const { config } = deps;
  const s = config.server;
  const headersMs = s.headers_timeout_seconds * 1000;
  const app = Fastify({
    // One logger for the process (src/telemetry/logger.ts); each request gets a child with its
    // `reqId`. Request lines only with AGENTD_LOG_REQUESTS=1; 5xx lines always (error handler).
    loggerInstance: (deps.logger ?? createLogger({ ...loggerSettings(config.log), redactor: redactorForConfig(config) })) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: !deps.logRequests }),
    // A child logger per request costs on every request (a third of GET /health's throughput in
    // the bench); without request logging nothing logs through it, so requests share the process
    // logger and a 5xx line binds its reqId when it is written.
    childLoggerFactory: deps.logRequests ? undefined : (logger) => logger,
    bodyLimit: s.max_body_bytes,
    // Time limits on what a client sends (not on responses: SSE streams and long synchronous runs
    // stay open, bounded by request_timeout_seconds and kept alive by pings). Fastify's default
    // requestTimeout of 0 also switched off Node's header timeout, so half-sent requests held
    // sockets forever. Node checks both every connectionsCheckingInterval.
    requestTimeout: Math.max(s.body_timeout_seconds * 1000, headersMs),
    keepAliveTimeout: s.keep_alive_timeout_seconds * 1000,
    http: { headersTimeout: headersMs, connectionsCheckingInterval: Math.min(1000, headersMs) },
    clientErrorHandler,
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    // Router errors (bad percent-encoding, an over-long segment) go through the error handler.
    frameworkErrors: frameworkErrorReply,
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && /^[\w.-]{1,128}$/.test(given) ? given : newRequestId();
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
  installJsonBodyParser(app, s.max_json_depth);
  app.setValidatorCompiler(zodValidatorCompiler);
  app.setSerializerCompiler(jsonSerializerCompiler);
  // Set on arrival too: an SSE stream writes its headers itself (no onSend), and must carry it.
  // Set on arrival, so every answer has it: an SSE stream writes its own headers (no onSend), and
  // an error answer keeps the headers set before it. Callback hooks, not async ones: these run on
  // every request, and an async hook costs a promise each.
  const metrics = deps.runtime.metrics;
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    done();
  });
  // By route pattern, never the raw URL (ids in paths, scanners' paths): bounded label values.
  // One hook per route, which knows its pattern: asking a request for it (request.routeOptions)
  // builds a fresh object of a dozen fields in Fastify 5, on every request.
  app.addHook('onRoute', (route) => {
    const pattern = route.url;
    const count: onResponseHookHandler = (request, reply, done) => {
      metrics.httpRequest(request.method, pattern, reply.statusCode, reply.elapsedTime / 1000);
      done();
    };
    route.onResponse = route.onResponse ? [count, ...[route.onResponse].flat()] : count;
  });
  // A request no route matched (Fastify's 404 route has no onRoute).
  app.addHook('onResponse', (request, reply, done) => {
    if (request.is404) metrics.httpRequest(request.method, null, reply.statusCode, reply.elapsedTime / 1000);
    done();
  });
  // A 5xx line carries an error message, which may quote a credential (a provider echoing the key).
  const logServerError = deps.logServerError ?? logServerErrorToRequestLog;
  installErrorHandling(
    app,
    (entry, request) => logServerError(redactLogFields({ ...entry }, config) as unknown as ServerErrorEntry, request),
    serverPathScrubber(config),
  );

  await app.register(fastifySSE, { heartbeatInterval: 15_000 });
  // Before auth: a request to a host not listed learns nothing, not even that a key is needed.
  installHostCheck(app, config);
  installAuth(app, deps);
  installTenancy(app, deps);
  installStreamCap(app, s.max_streams_per_key);
  // Before the routes: its headers go on every answer, an auth refusal's too.
  installCorsHeaders(app, deps);

  await app.register(async (scope) => registerApiRoutes(scope, deps));

  // GET /openapi.json and /docs: built on first request (src/http/docs.ts), not at start-up.
  installLazyDocs(app, deps);
  // GET /ui: the dashboard's static files (src/http/ui.ts).
  installUi(app);
  // Last: a preflight route for every path registered above.
  installCorsPreflight(app, deps);
  await app.ready();
  // More sockets than this are closed on accept, before they cost a file descriptor for long.
  app.server.maxConnections = s.max_connections;
  // Below that, one address holds at most its share (src/http/fair-use.ts).
  installConnectionCap(app.server, connectionsPerAddress(s));
  return app;
}
