// Guard rails for the layout (docs/architecture.md "Guard rails"): the dependency rules as ESLint
// `no-restricted-imports` (eslint.config.js), no import circle (scripts/check-cycles.mjs), no class
// of 25 members or more (scripts/class-sizes.mjs), and no unused file, export or dependency
// (knip.jsonc). Each also runs alone: `npx eslint src machines`, `node scripts/check-cycles.mjs`,
// `node scripts/class-sizes.mjs`, `npx knip`; and every file formatted by Prettier (.prettierrc.json).
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs script without type declarations
import { circleProblems, findCycles, importGraph, moduleImports } from '../../scripts/check-cycles.mjs';
// @ts-expect-error: a plain .mjs script without type declarations
import { MAX, allClassSizes, classSizes } from '../../scripts/class-sizes.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const run = promisify(execFile);

/** Rule ids and messages ESLint reports for `code` as if it were the file `path`. */
async function lint(path: string, code: string): Promise<string[]> {
  const eslint = new ESLint({ cwd: ROOT });
  const [result] = await eslint.lintText(code, { filePath: join(ROOT, path) });
  return result!.messages.map((m) => `${m.ruleId}: ${m.message}`);
}

describe('dependency rules (ESLint)', () => {
  it('src/ and machines/ break none of them', async () => {
    const eslint = new ESLint({ cwd: ROOT });
    const results = await eslint.lintFiles(['src', 'machines']);
    const problems = results.flatMap((r) => r.messages.map((m) => `${r.filePath.slice(ROOT.length + 1)}:${m.line} ${m.ruleId}: ${m.message}`));
    expect(results.length).toBeGreaterThan(100);
    expect(problems).toEqual([]);
  }, 60_000);

  it('machines/ import nothing from src/, no Node built-in, no clock, no timer', async () => {
    expect(await lint('machines/x.machine.ts', "import type { ChatMessage } from '../src/agent/model/types.js';")).toEqual([
      expect.stringMatching(/^no-restricted-imports: .*machines\/ import nothing from src\//),
    ]);
    expect(await lint('machines/policies/x.ts', "import { readFileSync } from 'node:fs';")).toHaveLength(1);
    expect(await lint('machines/x.ts', "import { z } from 'zod';")).toHaveLength(1);
    expect(await lint('machines/x.ts', 'export const t = Date.now() + Math.random(); setTimeout(() => {}, 1);')).toHaveLength(3);
    expect(await lint('machines/x.ts', "import { setup } from 'xstate';\nimport { decideOverlap } from './policies/overlap.js';")).toEqual([]);
  });

  it('src/http imports the Store interface but no store adapter or storage library', async () => {
    expect(await lint('src/http/x.ts', "import type { Store } from '../store/store.js';")).toEqual([]);
    for (const adapter of ['level', 'memory', 'postgres', 'pg-migrate', 'pg-url', 'changes', 'open']) {
      expect(await lint('src/http/x.ts', `import { x } from '../store/${adapter}.js';`)).toEqual([
        expect.stringMatching(/^no-restricted-imports: .*src\/http imports no store adapter/),
      ]);
    }
    expect(await lint('src/http/x.ts', "import pg from 'pg';")).toHaveLength(1);
    expect(await lint('src/app.ts', "import { LevelStore } from './store/level.js';")).toHaveLength(1);
  });

  it('agent/, telemetry/, calendar/ import neither the runtime nor the background manager nor HTTP', async () => {
    for (const from of ['src/agent/x.ts', 'src/agent/tools/x.ts', 'src/telemetry/x.ts', 'src/calendar/x.ts']) {
      const up = from.split('/').length === 4 ? '../../' : '../';
      for (const layer of ['runtime/runs', 'background/engine', 'http/validation']) {
        expect(await lint(from, `import { x } from '${up}${layer}.js';`), `${from} → ${layer}`).toHaveLength(1);
      }
    }
    expect(
      await lint('src/agent/x.ts', "import type { Store } from '../store/store.js';\nimport { retryDecision } from '../../machines/policies/retry.js';"),
    ).toEqual([]);
  });

  it('runtime/ and background/ do not import HTTP; store/ imports nothing above it', async () => {
    expect(await lint('src/background/x.ts', "import { RequestValidationError } from '../http/validation.js';")).toHaveLength(1);
    expect(await lint('src/runtime/x.ts', "import { buildApp } from '../app.js';")).toHaveLength(1);
    expect(await lint('src/background/x.ts', "import { RequestValidationError } from '../errors.js';")).toEqual([]);
    expect(await lint('src/store/x.ts', "import { AppError } from '../errors.js';")).toHaveLength(1);
  });

  it('background/ imports runtime/, never the other way round; neither imports the composition root', async () => {
    expect(await lint('src/background/x.ts', "import { RunService } from '../runtime/runs.js';")).toEqual([]);
    expect(await lint('src/runtime/x.ts', "import type { BgRunRow } from '../background/types.js';")).toEqual([
      expect.stringMatching(/^no-restricted-imports: .*runtime\/ sits below background\//),
    ]);
    expect(await lint('src/runtime/debug/x.ts', "import { RunEngine } from '../../background/engine.js';")).toHaveLength(1);
    expect(await lint('src/runtime/x.ts', "import { Runtime } from '../composition-root.js';")).toHaveLength(1);
    expect(await lint('src/background/x.ts', "import { Runtime } from '../composition-root.js';")).toHaveLength(1);
  });

  it('only config.ts (and the composition root) reads process.env', async () => {
    expect(await lint('src/runtime/x.ts', 'export const a = process.env.A;')).toEqual([
      expect.stringMatching(/^no-restricted-properties: .*only reader of process.env/),
    ]);
    expect(await lint('src/config.ts', 'export const a = process.env.A;')).toEqual([]);
    expect(await lint('src/cli/x.ts', 'export const a = process.env.A;')).toEqual([]);
  });

  it('what can reach an answer throws an AgentdFailure, not a plain Error', async () => {
    expect(await lint('src/http/x.ts', "export const f = () => { throw new Error('x'); };")).toEqual([
      expect.stringMatching(/^no-restricted-syntax: raise an AgentdFailure/),
    ]);
    expect(
      await lint('src/runtime/x.ts', "import { domainError } from '../errors.js';\nexport const f = () => { throw domainError('AGT_ERR_CONFLICT', ['x']); };"),
    ).toEqual([]);
    // An invariant says why; the store (bottom layer) raises StoreError and is not checked.
    expect(
      await lint('src/runtime/x.ts', "// eslint-disable-next-line no-restricted-syntax -- an invariant\nexport const f = () => { throw new Error('x'); };"),
    ).toEqual([]);
    expect(await lint('src/store/x.ts', "export const f = () => { throw new Error('x'); };")).toEqual([]);
  });

  it('no file of src/ or machines/ is over 500 lines', async () => {
    const lines = (n: number) => Array.from({ length: n }, (_, i) => `export const v${i} = ${i};`).join('\n');
    expect(await lint('src/runtime/x.ts', lines(500))).toEqual([]);
    expect(await lint('src/runtime/x.ts', lines(501))).toEqual([expect.stringMatching(/^max-lines: /)]);
    expect(await lint('machines/x.ts', lines(501))).toEqual([expect.stringMatching(/^max-lines: /)]);
  });

  it('src/client and src/ui stay on the public API', async () => {
    expect(await lint('src/client/x.ts', "import { x } from '../runtime/runs.js';")).toHaveLength(1);
    expect(await lint('src/ui/x.tsx', "import { readSseFrames } from '../client/sse.js';\nimport { h } from 'preact';")).toEqual([]);
    expect(await lint('src/ui/x.tsx', "import { x } from '../schemas/index.js';")).toHaveLength(1);
    expect(await lint('src/ui/x.tsx', "import { z } from 'zod';")).toHaveLength(1);
  });
});

describe('import circles', () => {
  it('finds strongly connected components, type-only imports included', () => {
    expect(findCycles({ a: ['b'], b: ['c'], c: ['a'], d: ['a'] })).toEqual([['a', 'b', 'c']]);
    expect(findCycles({ a: ['a'] })).toEqual([['a']]);
    expect(findCycles({ a: ['b'], b: [] })).toEqual([]);
    const specs = moduleImports(
      [
        "import { a } from './a.js';",
        "import type { B } from './b.js';",
        "import { type C } from './c.js';",
        "export { d } from './d.js';",
        "export type { E } from './e.js';",
        "const f = () => import('./f.js');",
        "let g: import('./g.js').G;",
      ].join('\n'),
    );
    expect(specs).toEqual(['./a.js', './b.js', './c.js', './d.js', './e.js', './f.js', './g.js']);
  });

  it('a known circle is reported but allowed; a known one that is gone is stale', () => {
    expect(
      circleProblems(
        [
          ['a', 'b'],
          ['c', 'd'],
        ],
        [['b', 'a']],
      ),
    ).toEqual({ unexpected: [['c', 'd']], stale: [] });
    expect(circleProblems([], [['a', 'b']])).toEqual({ unexpected: [], stale: [['a', 'b']] });
  });

  it('src/ and machines/ have none but the known ones (app.ts → http/docs.ts → http/docs-app.ts was one)', () => {
    const graph = importGraph();
    expect(Object.keys(graph).length).toBeGreaterThan(100);
    // The graph follows dynamic imports: docs.ts loads docs-app.ts lazily.
    expect(graph['src/http/docs.ts']).toContain('src/http/docs-app.ts');
    // Type-only: store.ts names the change feed's interface, subagents.ts the tool source's.
    expect(graph['src/store/store.ts']).toContain('src/store/change-feed.ts');
    expect(circleProblems(findCycles(graph))).toEqual({ unexpected: [], stale: [] });
  });
});

describe('class sizes', () => {
  it('counts methods, accessors, the constructor and its parameter properties, not fields', () => {
    const text = [
      'export class A {',
      '  private x = 1;',
      '  readonly y: number;',
      '  constructor(private readonly deps: D, other: number, public z = 2) { this.y = other; }',
      '  get n() { return 1; }',
      '  f() {}',
      '  private async g() {}',
      '  static h() {}',
      '}',
      'const B = class { m() {} };',
    ].join('\n');
    expect(classSizes(text)).toEqual([
      { name: 'A', members: 7, line: 1 },
      { name: '(anonymous)', members: 1, line: 10 },
    ]);
  });

  it(`no class in src/ or machines/ has ${MAX} members or more (callers talk to the part that owns the decision)`, () => {
    const sizes = allClassSizes() as Array<{ name: string; members: number; file: string }>;
    expect(sizes.length).toBeGreaterThan(50);
    expect(sizes.filter((c) => c.members >= MAX).map((c) => `${c.name} ${c.file}: ${c.members}`)).toEqual([]);
  });
});

describe('knip', () => {
  it('finds no unused file, export, type or dependency', async () => {
    const bin = join(ROOT, 'node_modules', 'knip', 'bin', 'knip.js');
    const out = await run(process.execPath, [bin, '--no-progress', '--reporter', 'compact'], { cwd: ROOT, timeout: 120_000, maxBuffer: 8 << 20 }).then(
      ({ stdout }) => stdout,
      (err: { stdout?: string; stderr?: string }) => `${err.stdout ?? ''}${err.stderr ?? ''}` || String(err),
    );
    expect(out.trim()).toBe('');
  }, 150_000);
});

describe('prettier', () => {
  it('every source, test and script file is formatted (`npm run format` fixes it)', async () => {
    const bin = join(ROOT, 'node_modules', 'prettier', 'bin', 'prettier.cjs');
    const globs = ['src/**/*.{ts,tsx}', 'machines/**/*.ts', 'test/**/*.{ts,mjs}', 'scripts/**/*.{ts,mjs}', '*.{ts,mjs,js}'];
    const out = await run(process.execPath, [bin, '--list-different', ...globs], { cwd: ROOT, timeout: 120_000, maxBuffer: 8 << 20 }).then(
      ({ stdout }) => stdout,
      (err: { stdout?: string; stderr?: string }) => `${err.stdout ?? ''}${err.stderr ?? ''}` || String(err),
    );
    expect(out.trim()).toBe('');
  }, 150_000);
});
