// The typed client's build (part of `npm run build`): `agentd/client` in package.json `exports`
// points at <outdir>/client/index.js (one ES module, no dependencies, for Node >= 20 and browsers)
// and its declarations <outdir>/client/index.d.ts (+ openapi-types.d.ts, sse.d.ts), emitted by tsc.
import { rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const ENTRY = join(ROOT, 'src', 'client', 'index.ts');

export async function buildClient({ outdir }) {
  const out = join(outdir, 'client');
  rmSync(out, { recursive: true, force: true });
  const esbuild = await import('esbuild');
  await esbuild.build({
    absWorkingDir: ROOT,
    entryPoints: [ENTRY],
    outfile: join(out, 'index.js'),
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    legalComments: 'none',
    logLevel: 'warning',
  });
  const { default: ts } = await import('typescript');
  const program = ts.createProgram([ENTRY], {
    declaration: true,
    emitDeclarationOnly: true,
    outDir: out,
    rootDir: dirname(ENTRY),
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    // fetch, Response, ReadableStream, AbortSignal: Node's globals (lib.dom costs seconds more).
    lib: ['lib.es2023.d.ts'],
    types: ['node'],
    strict: true,
    skipLibCheck: true,
  });
  const result = program.emit();
  // Type errors are `npm run typecheck`'s business; only a failed emit stops the build.
  const problems = [...result.diagnostics].filter((d) => d.category === ts.DiagnosticCategory.Error);
  if (problems.length > 0) {
    throw new Error(
      `client declarations: ${ts.formatDiagnostics(problems, { getCanonicalFileName: (f) => f, getCurrentDirectory: () => ROOT, getNewLine: () => '\n' })}`,
    );
  }
}
