#!/usr/bin/env node
// No import circle among the project's own modules (docs/architecture.md "Guard rails").
// Reads every .ts/.tsx file under src/ and machines/ with the TypeScript parser, follows relative
// imports, re-exports and dynamic `import()` (a lazy import is still an edge: it only moves the
// circle to run time), and prints each strongly connected component of more than one file.
// Type-only imports and exports count too: they are erased at run time, but a type circle still
// ties two modules together (neither can be read, moved or tested without the other).
// `node scripts/check-cycles.mjs` exits 1 when there is a circle not in KNOWN_CIRCLES (or an entry
// there that is no longer one); test/arch/layout.test.ts runs
// the same functions in npm test.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = join(fileURLToPath(import.meta.url), '../..');
const DIRS = ['src', 'machines'];

/** The TypeScript sources under `dir` (no declarations, no node_modules or dot folders); also scripts/class-sizes.mjs's. */
export function sourceFiles(dir, out = []) {
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name.startsWith('.')) continue;
    const p = join(dir, name);
    if (statSync(p).isDirectory()) sourceFiles(p, out);
    else if (/\.tsx?$/.test(name) && !name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

/**
 * The module specifiers of one file: static imports and re-exports (type-only ones too), dynamic
 * `import()` and `import('…').T` type references.
 */
export function moduleImports(text, fileName = 'x.ts') {
  const sf = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, false, fileName.endsWith('x') ? ts.ScriptKind.TSX : ts.ScriptKind.TS);
  const specs = [];
  const visit = (node) => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      specs.push(node.moduleSpecifier.text);
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments.length > 0 &&
      ts.isStringLiteralLike(node.arguments[0])
    ) {
      specs.push(node.arguments[0].text);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
      specs.push(node.argument.literal.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return specs;
}

/** The file a relative specifier names (`./x.js` is `./x.ts`; the dashboard's `./x` is `./x.tsx`). */
function resolveSpecifier(from, spec, files) {
  if (!spec.startsWith('.')) return null;
  const base = resolve(dirname(from), spec);
  const stem = base.replace(/\.(m?js|jsx)$/, '');
  for (const candidate of [base, `${stem}.ts`, `${stem}.tsx`, join(base, 'index.ts'), join(base, 'index.tsx')]) {
    if (files.has(candidate)) return candidate;
  }
  return null;
}

/** `{file: [files it imports]}` over src/ and machines/, paths relative to `root`. */
export function importGraph(root = ROOT) {
  const files = new Set(DIRS.flatMap((d) => sourceFiles(join(root, d))));
  const graph = {};
  for (const file of files) {
    const targets = moduleImports(readFileSync(file, 'utf8'), file)
      .map((spec) => resolveSpecifier(file, spec, files))
      .filter((t) => t !== null);
    graph[relative(root, file)] = [...new Set(targets.map((t) => relative(root, t)))].sort();
  }
  return graph;
}

/** Strongly connected components of more than one node (or a node importing itself), Tarjan's. */
export function findCycles(graph) {
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const out = [];
  const strong = (v) => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph[v] ?? []) {
      if (!idx.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const comp = [];
      let w;
      do {
        w = stack.pop();
        onStack.delete(w);
        comp.push(w);
      } while (w !== v);
      if (comp.length > 1 || (graph[v] ?? []).includes(v)) out.push(comp.sort());
    }
  };
  for (const v of Object.keys(graph).sort()) if (!idx.has(v)) strong(v);
  return out;
}

/**
 * Circles known and tolerated for a while: reported, but not failing the check. An entry that no
 * longer matches a circle fails it. Empty: the last one (eight files of src/background/) is gone,
 * its parts now share their types through src/background/host-types.ts.
 */
export const KNOWN_CIRCLES = [];

/** The circles not in `known`, and the `known` entries that are no longer a circle (both must be empty). */
export function circleProblems(cycles, known = KNOWN_CIRCLES) {
  const key = (c) => [...c].sort().join(' ');
  const knownKeys = new Set(known.map(key));
  const foundKeys = new Set(cycles.map(key));
  return {
    unexpected: cycles.filter((c) => !knownKeys.has(key(c))),
    stale: known.filter((c) => !foundKeys.has(key(c))),
  };
}

if (process.argv[1] && relative(process.argv[1], fileURLToPath(import.meta.url)) === '') {
  const graph = importGraph();
  const cycles = findCycles(graph);
  const { unexpected, stale } = circleProblems(cycles);
  process.stdout.write(`${Object.keys(graph).length} modules, ${cycles.length} import circle(s), ${cycles.length - unexpected.length} of them known\n`);
  for (const c of cycles) process.stdout.write(`  ${unexpected.includes(c) ? 'circle' : 'known circle'}: ${c.join(' ↔ ')}\n`);
  for (const c of stale) process.stdout.write(`  no longer a circle, delete it from KNOWN_CIRCLES: ${c.join(' ↔ ')}\n`);
  process.exitCode = unexpected.length > 0 || stale.length > 0 ? 1 : 0;
}
