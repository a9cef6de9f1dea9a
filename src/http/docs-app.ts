// The instance behind GET /openapi.json and /docs, built on first request (see docs.ts for why).
// It is never listened on: the main app forwards /docs requests to it with inject().
import Fastify, { type FastifyInstance } from 'fastify';
import { fastifySwagger } from '@fastify/swagger';
import { fastifySwaggerUi } from '@fastify/swagger-ui';
import { fastifySSE } from '@fastify/sse';
import type { AppDeps } from './deps.js';
import { registerApiRoutes } from './routes.js';
import { openApiObjectTransform, openApiRouteTransform } from './openapi.js';
import { jsonSerializerCompiler, zodValidatorCompiler } from './validation.js';

export async function buildDocsApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({ logger: false });
  // The routes' schemas are zod: the same compilers as the main app (their handlers never run here).
  app.setValidatorCompiler(zodValidatorCompiler);
  app.setSerializerCompiler(jsonSerializerCompiler);
  await app.register(fastifySwagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'agentd', description: 'Serve one configured LLM agent over HTTP, safely.', version: deps.version },
      // Declared whether or not this service has keys: the document is the same everywhere (see
      // openapi.ts); the description says when the key is really required.
      components: {
        securitySchemes: {
          bearer: {
            type: 'http',
            scheme: 'bearer',
            description:
              'An API key from auth.api_keys, as `Authorization: Bearer <key>`. Required only when the service has keys configured; without keys every route is open.',
          },
        },
      },
    },
    transform: openApiRouteTransform,
    transformObject: openApiObjectTransform,
  });
  await app.register(fastifySwaggerUi, { routePrefix: '/docs', staticCSP: true });
  // POST /run declares the `sse` route option, which this plugin understands.
  await app.register(fastifySSE, { heartbeatInterval: 15_000 });
  // The API routes are registered only so the document describes them. Their handlers are
  // replaced: this instance must never serve API data (it has no authentication of its own), so a
  // request that reaches one of them, however spelled, gets a 404.
  await app.register(async (scope) => {
    scope.addHook('onRoute', (route) => {
      route.handler = async (_request, reply) => reply.code(404).send();
      route.preHandler = undefined;
      route.onRequest = undefined;
      delete (route as { sse?: unknown }).sse;
    });
    registerApiRoutes(scope, deps);
  });
  await app.ready();
  return app;
}
