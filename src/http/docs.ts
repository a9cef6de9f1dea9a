// GET /openapi.json and /docs (Swagger UI), built on their first request instead of at start-up.
//
// Why: @fastify/swagger and @fastify/swagger-ui (with YAML, JSON-schema tooling and a static file
// server) cost ~85 ms of CPU to load and register, about a fifth of start-up, for pages that most
// processes never serve. Start-up to ready is a benchmark target, so the documentation lives in a
// second Fastify instance (src/http/docs-app.ts) created on first use; it registers the same route
// modules (their handlers never run there) so the document describes exactly the routes served.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { AppDeps } from './deps.js';

// Hop-by-hop and length headers belong to the inner response, not the one we send.
const SKIP_HEADERS = new Set(['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'date']);

export function installLazyDocs(app: FastifyInstance, deps: AppDeps): void {
  let docs: Promise<FastifyInstance> | null = null;
  const docsApp = (): Promise<FastifyInstance> => {
    if (!docs) {
      docs = import('./docs-app.js').then((m) => m.buildDocsApp(deps));
      // A failed build is not kept: the next request tries again.
      docs.catch(() => {
        docs = null;
      });
    }
    return docs;
  };

  app.get('/openapi.json', { schema: { hide: true } }, async () => (await docsApp()).swagger());

  // Everything under /docs is answered by the docs instance (Swagger UI's page, assets, /docs/json).
  const forward = async (request: FastifyRequest, reply: FastifyReply) => {
    // Always GET: for a HEAD request Fastify's HEAD route runs this handler and drops the body.
    const inner = await (await docsApp()).inject({ method: 'GET', url: request.url, headers: request.headers });
    // An unknown path gets the service's own 404 body (ErrorResponse), like every other route.
    if (inner.statusCode === 404) return reply.callNotFound();
    reply.code(inner.statusCode);
    for (const [name, value] of Object.entries(inner.headers)) {
      if (value !== undefined && !SKIP_HEADERS.has(name)) reply.header(name, value);
    }
    return reply.send(inner.rawPayload);
  };
  app.get('/docs', { schema: { hide: true } }, forward);
  app.get('/docs/*', { schema: { hide: true } }, forward);

  app.addHook('onClose', async () => {
    const pending = docs;
    if (pending) await pending.then((d) => d.close(), () => undefined);
  });
}
