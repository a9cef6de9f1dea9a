// GET /openapi.json and /docs (Swagger UI), built on their first request instead of at start-up.
//
// Why: @fastify/swagger and @fastify/swagger-ui (with YAML, JSON-schema tooling and a static file
// server) cost ~85 ms of CPU to load and register, about a fifth of start-up, for pages that most
// processes never serve. Start-up to ready is a benchmark target, so the documentation lives in a
// second Fastify instance (src/http/docs-app.ts) created on first use; it registers the same route
// modules (their handlers never run there) so the document describes exactly the routes served.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { AppDeps } from './deps.js';

// Swagger UI's own paths: '', 'json', 'yaml', 'static/<file>', '<file>'. Dot segments are refused.
const DOCS_ASSET = /^(?:(?:static\/)?(?!\.)[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127})?$/;

function pickHeaders(request: FastifyRequest): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of ['accept', 'accept-encoding', 'if-none-match', 'if-modified-since']) {
    const v = request.headers[name];
    if (typeof v === 'string') out[name] = v;
  }
  return out;
}

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
  // The inner path is rebuilt from the MATCHED wildcard, never from request.url: forwarding the raw
  // URL let `/docs/%2e%2e/runs` reach API routes of the inner app past authentication. Only plain
  // asset names pass (no dot segments, no encoded bytes), and the inner app has no API handlers.
  const forward = async (request: FastifyRequest<{ Params: { '*'?: string } }>, reply: FastifyReply) => {
    const rest = request.params['*'];
    if (rest !== undefined && !DOCS_ASSET.test(rest)) return reply.callNotFound();
    const url = rest === undefined ? '/docs' : `/docs/${rest}`;
    // Always GET: for a HEAD request Fastify's HEAD route runs this handler and drops the body.
    // Only the headers a static page needs go in; never the caller's credentials.
    const inner = await (await docsApp()).inject({ method: 'GET', url, headers: pickHeaders(request) });
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
    if (pending)
      await pending.then(
        (d) => d.close(),
        () => undefined,
      );
  });
}
