// The dashboard's build (src/ui/ -> dist/ui/): one esbuild bundle of the Preact app plus its CSS,
// and an index.html naming them by content hash (so the assets can be cached for good and the page
// itself never). Used by scripts/build.mjs (`npm run build`, written to dist/ui/) and, when agentd
// runs from source (tests, `npm run dev`), by src/http/ui.ts in memory on the first /ui request.
import { createHash } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * Builds the dashboard. Returns its files as { name: { body: Buffer, type } }; with `outdir`, also
 * writes them there (replacing what was there).
 */
export async function buildUi({ outdir } = {}) {
  const esbuild = await import('esbuild');
  const result = await esbuild.build({
    absWorkingDir: ROOT,
    entryPoints: ['src/ui/main.tsx'],
    bundle: true,
    write: false,
    outdir: 'ui-out',
    format: 'esm',
    platform: 'browser',
    target: ['es2020', 'chrome100', 'firefox100', 'safari15'],
    jsx: 'automatic',
    jsxImportSource: 'preact',
    minify: true,
    legalComments: 'none',
    logLevel: 'silent',
  });
  const files = {};
  const names = {};
  for (const f of result.outputFiles) {
    const ext = f.path.endsWith('.css') ? 'css' : 'js';
    const hash = createHash('sha256').update(f.contents).digest('hex').slice(0, 10);
    const name = `app-${hash}.${ext}`;
    names[ext] = name;
    files[name] = { body: Buffer.from(f.contents), type: ext === 'css' ? 'text/css; charset=utf-8' : 'text/javascript; charset=utf-8' };
  }
  const css = names.css ? `<link rel="stylesheet" href="/ui/${names.css}">` : '';
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>agentd</title>
${css}
</head>
<body>
<div id="app"></div>
<script type="module" src="/ui/${names.js}"></script>
</body>
</html>
`;
  files['index.html'] = { body: Buffer.from(html), type: 'text/html; charset=utf-8' };
  if (outdir) {
    rmSync(outdir, { recursive: true, force: true });
    mkdirSync(outdir, { recursive: true });
    for (const [name, f] of Object.entries(files)) writeFileSync(join(outdir, name), f.body);
  }
  return files;
}
