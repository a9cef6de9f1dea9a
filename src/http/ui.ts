// GET /ui and /ui/*: the dashboard (src/ui/), a static single-page app that talks to the public API
// with the caller's own key. The page itself is public (ROUTE_ACCESS): it holds no data.
//
// Where the files come from: `npm run build` writes them to dist/ui/ next to the bundle, and the
// bundled server reads that folder once, on the first request. Running from source (tests,
// `npm run dev`) there is no build to trust (dist/ may be stale or absent), so the first request
// builds the app in memory with esbuild (scripts/build-ui.mjs, ~100 ms), like /docs is built lazily.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { domainError } from '../errors.js';

export interface UiFile {
  body: Buffer;
  type: string;
}
export type UiFiles = Record<string, UiFile>;

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json; charset=utf-8',
};

// Plain names only, "/"-separated: no dot segments, no encoded bytes, nothing starting with a dot.
const UI_PATH = /^(?:(?!\.)[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}\/){0,8}(?:(?!\.)[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127})?$/;

// Hashed asset names change with their content: cache them for good. The page is revalidated.
const IMMUTABLE = 'public, max-age=31536000, immutable';
// The app loads only its own script and style and talks only to this origin.
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/** What to answer for the path under /ui/ ('' for /ui): an asset name, the page, or nothing. Pure. */
export function resolveUiPath(rest: string, files: UiFiles): string | null {
  if (!UI_PATH.test(rest)) return null;
  if (rest === '' || rest === 'index.html') return 'index.html';
  if (files[rest]) return rest;
  // A client-side route (/ui/runs/run_x) gets the page; a missing file (/ui/app-old.js) a 404.
  const last = rest.split('/').pop() ?? '';
  return last.includes('.') ? null : 'index.html';
}

function readDir(dir: string): UiFiles {
  const files: UiFiles = {};
  for (const name of readdirSync(dir)) files[name] = { body: readFileSync(join(dir, name)), type: TYPES[extname(name)] ?? 'application/octet-stream' };
  return files;
}

async function loadFiles(): Promise<UiFiles> {
  const here = import.meta.url;
  const fromSource = here.endsWith('.ts');
  if (!fromSource) {
    // The bundle is dist/agentd.js (or a chunk in dist/chunks/): the build sits in dist/ui/.
    for (const rel of ['./ui/', '../ui/']) {
      const dir = fileURLToPath(new URL(rel, here));
      if (existsSync(join(dir, 'index.html'))) return readDir(dir);
    }
  }
  const script = fileURLToPath(new URL('../../scripts/build-ui.mjs', here));
  if (!existsSync(script)) throw domainError('AGT_ERR_DASHBOARD_NOT_BUILT', []);
  // A computed specifier: the server bundle must not pull the build script (and esbuild) in.
  const mod = (await import(pathToFileURL(script).href)) as { buildUi: () => Promise<UiFiles> };
  return mod.buildUi();
}

export function installUi(app: FastifyInstance): void {
  let files: Promise<UiFiles> | null = null;
  const load = (): Promise<UiFiles> => {
    if (!files) {
      files = loadFiles();
      // A failed build is not kept: the next request tries again.
      files.catch(() => {
        files = null;
      });
    }
    return files;
  };

  const serve = async (request: FastifyRequest<{ Params: { '*'?: string } }>, reply: FastifyReply) => {
    // The MATCHED wildcard, never request.url (see src/http/docs.ts).
    const rest = request.params['*'] ?? '';
    const all = await load();
    const name = resolveUiPath(rest, all);
    const file = name ? all[name] : undefined;
    if (!name || !file) return reply.callNotFound();
    reply
      .header('content-type', file.type)
      .header('cache-control', name === 'index.html' ? 'no-cache' : IMMUTABLE)
      .header('x-content-type-options', 'nosniff');
    if (name === 'index.html') reply.header('content-security-policy', CSP).header('referrer-policy', 'no-referrer');
    return reply.send(file.body);
  };
  app.get('/ui', { schema: { hide: true } }, serve);
  app.get('/ui/*', { schema: { hide: true } }, serve);
}
