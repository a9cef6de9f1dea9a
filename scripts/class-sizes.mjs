#!/usr/bin/env node
// No class of 25 members or more in src/ or machines/ (docs/architecture.md "Guard rails"): a class
// that grows past that is a bundle of parts, and callers should talk to the part that owns the
// decision (e.g. `engine.operator.cancel(...)`), not to a facade of delegations.
// Counts, per class, its members that are not property declarations (methods, accessors, the
// constructor, index signatures...) plus the constructor's parameter properties
// (`constructor(private readonly x: X)`), read with the TypeScript parser.
// `node scripts/class-sizes.mjs` prints the largest classes (`--all`: every class) and exits 1 when
// one has MAX or more; `npm run lint` runs it, test/arch/layout.test.ts runs the same functions.
import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { sourceFiles } from './check-cycles.mjs';

const ROOT = join(fileURLToPath(import.meta.url), '../..');
const DIRS = ['src', 'machines'];
export const MAX = 25;

/** The classes of one file with their member counts: `[{ name, members, line }]`. */
export function classSizes(text, fileName = 'x.ts') {
  const sf = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, false, fileName.endsWith('x') ? ts.ScriptKind.TSX : ts.ScriptKind.TS);
  const out = [];
  const visit = (node) => {
    if (ts.isClassDeclaration(node) || ts.isClassExpression(node)) {
      let members = 0;
      for (const m of node.members) {
        if (ts.isPropertyDeclaration(m) || ts.isSemicolonClassElement(m)) continue;
        members++;
        if (ts.isConstructorDeclaration(m)) members += m.parameters.filter((p) => ts.getModifiers(p)?.length).length;
      }
      const name = node.name?.text ?? '(anonymous)';
      out.push({ name, members, line: sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/** Every class of src/ and machines/, largest first: `[{ name, members, line, file }]`. */
export function allClassSizes() {
  const all = [];
  for (const dir of DIRS) {
    for (const file of sourceFiles(join(ROOT, dir))) {
      for (const c of classSizes(readFileSync(file, 'utf8'), file)) all.push({ ...c, file: relative(ROOT, file) });
    }
  }
  return all.sort((a, b) => b.members - a.members);
}

function main() {
  const all = allClassSizes();
  const over = all.filter((c) => c.members >= MAX);
  const top = process.argv.includes('--all') ? all : all.slice(0, 8);
  for (const c of top) console.log(`${String(c.members).padStart(3)}  ${c.name}  ${c.file}:${c.line}`);
  if (over.length > 0) {
    console.error(`class-sizes: ${over.length} class(es) with ${MAX} or more members (methods, accessors, constructor and its parameter properties)`);
    process.exit(1);
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
