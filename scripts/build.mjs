// `npm run build`: bundles the service with esbuild into dist/agentd.js (+ lazily loaded chunks in
// dist/chunks/). This is what `npm start`, `bin/agentd.js` and the start-up benchmark run.
//
// Why a bundle and not tsc's one-file-per-module output: start-up to ready is a benchmark target
// (<= 1 s on a busy 2-core box). Loading ~900 separate files through Node's module loader (resolve,
// stat, read, compile each) was the largest share of start-up; one bundle is read and compiled
// once. Type checking is `npm run typecheck`; the tests run src/ through vitest, not this output.
//
// Usage: node scripts/build.mjs [--outdir DIR]   (the benchmark builds its private copy this way)
import { cpSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const i = process.argv.indexOf('--outdir');
const outdir = resolve(ROOT, i > 0 ? process.argv[i + 1] : 'dist');

let esbuild;
try {
  esbuild = await import('esbuild');
} catch {
  process.stderr.write('agentd: the build needs esbuild (a devDependency): run `npm install` first\n');
  process.exit(1);
}

const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));

// A rebuild must not leave chunks of the previous one behind (their names carry a content hash).
rmSync(join(outdir, 'chunks'), { recursive: true, force: true });
rmSync(join(outdir, 'agentd.js'), { force: true });

// zod re-exports every one of its ~50 message locales (`z.locales`, 358 KB of the 3.4 MB start-up
// code) and uses only English unless told otherwise; agentd never selects another, so the bundle
// keeps `en` alone. (Calling z.locales.<other>() in src/ would fail loudly at start-up.)
const zodEnglishOnly = {
  name: 'zod-english-only',
  setup(build) {
    build.onResolve({ filter: /^\.\.\/locales\/index\.js$/ }, (args) =>
      /[\\/]zod[\\/]v4[\\/](classic|core)$/.test(args.resolveDir)
        ? { path: join(args.resolveDir, '..', 'locales', 'en-only.js'), namespace: 'zod-locales' }
        : undefined,
    );
    build.onLoad({ filter: /.*/, namespace: 'zod-locales' }, (args) => ({
      contents: `export { default as en } from ${JSON.stringify(join(dirname(args.path), 'en.js'))};`,
      resolveDir: dirname(args.path),
    }));
  },
};

const result = await esbuild.build({
  absWorkingDir: ROOT,
  entryPoints: { agentd: 'src/cli.ts' },
  outdir,
  entryNames: '[name]',
  chunkNames: 'chunks/[name]-[hash]',
  bundle: true,
  // Dynamic import()s (model providers + AI SDK, MCP SDK, OTLP exporters, the OpenAPI/docs app,
  // the Stately inspector) stay separate chunks, loaded only when configured or first requested.
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  // Not minified: stack traces keep readable names and the output stays debuggable.
  minify: false,
  legalComments: 'none',
  logLevel: 'warning',
  // Packages that read files next to their own sources (__dirname) or load a native addon stay
  // in node_modules and are imported at run time: classic-level (LevelDB's prebuilt binary),
  // @fastify/swagger (reads its package.json) and @fastify/swagger-ui (serves its static assets).
  // pg-native: node-postgres's optional libpq binding, required only when asked for (agentd never is).
  external: ['classic-level', '@fastify/swagger', '@fastify/swagger-ui', 'pg-native'],
  // Bundled CommonJS dependencies call require() for Node built-ins; an ES module has no require,
  // so every output file gets one.
  banner: { js: "import { createRequire as __agentdCreateRequire } from 'node:module'; const require = __agentdCreateRequire(import.meta.url);" },
  // The bundle does not sit next to package.json in every layout (the benchmark's private copy),
  // so the version is baked in (src/version.ts reads package.json when running from source).
  define: { __AGENTD_BUILD_VERSION__: JSON.stringify(version) },
  plugins: [zodEnglishOnly],
  metafile: process.argv.includes('--metafile'),
});
// The PostgreSQL store's SQL migrations (read at run time by src/store/pg-migrate.ts, which looks
// in dist/migrations/ when bundled).
rmSync(join(outdir, 'migrations'), { recursive: true, force: true });
cpSync(join(ROOT, 'src/store/migrations'), join(outdir, 'migrations'), { recursive: true });
// The dashboard (GET /ui): its own browser bundle in <outdir>/ui/, served by src/http/ui.ts.
const { buildUi } = await import('./build-ui.mjs');
await buildUi({ outdir: join(outdir, 'ui') });
if (result.metafile) {
  const { writeFileSync } = await import('node:fs');
  writeFileSync(join(outdir, 'meta.json'), JSON.stringify(result.metafile));
}
// The typed client (`agentd/client` in package.json exports): its own bundle and declarations.
const { buildClient } = await import('./build-client.mjs');
await buildClient({ outdir });
