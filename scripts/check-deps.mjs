#!/usr/bin/env node
// Dependencies agree with `engines` and are all used:
//   1. every production package (package-lock.json entries that are not dev-only, read from
//      node_modules when installed) accepts the oldest Node we declare (`engines.node`, >=20.20);
//   2. every listed dependency is imported somewhere in src/, scripts/ or bin/.
// `node scripts/check-deps.mjs` prints the findings and exits 1 when there are any;
// test/deps/deps.test.ts runs the same functions in npm test.
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(fileURLToPath(import.meta.url), '../..');

/** `[major, minor, patch]` of a (partial) version; missing parts and wildcards are null. */
function parts(v) {
  const m = /^v?(\d+|[xX*])?(?:\.(\d+|[xX*]))?(?:\.(\d+|[xX*]))?/.exec(v.trim());
  return [1, 2, 3].map((i) => (m?.[i] === undefined || /[xX*]/.test(m[i]) ? null : Number(m[i])));
}

const cmp = (a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2];
const filled = (p) => p.map((n) => n ?? 0);

/** Comparators `[op, version]` a (partial) comparator stands for; [] means "any". */
function expand(token) {
  const m = /^(>=|<=|>|<|=|\^|~>?|)(.*)$/.exec(token);
  const op = m[1];
  const p = parts(m[2]);
  const given = p.findIndex((n) => n === null);
  const n = given === -1 ? 3 : given; // how many parts were given
  if (n === 0) return op === '<' || op === '>' ? [['<', [0, 0, 0]]] : [];
  const bump = (k) => filled(p.map((x, i) => (i < k - 1 ? x : i === k - 1 ? x + 1 : 0)));
  const low = filled(p);
  switch (op) {
    case '>=':
      return [['>=', low]];
    case '<':
      return [['<', low]];
    case '>':
      return n === 3 ? [['>', low]] : [['>=', bump(n)]];
    case '<=':
      return n === 3 ? [['<=', low]] : [['<', bump(n)]];
    case '^': {
      const k = low[0] > 0 || n === 1 ? 1 : low[1] > 0 || n === 2 ? 2 : 3;
      return [
        ['>=', low],
        ['<', bump(k)],
      ];
    }
    case '~':
    case '~>':
      return [
        ['>=', low],
        ['<', bump(n === 1 ? 1 : 2)],
      ];
    default:
      return n === 3
        ? [['=', low]]
        : [
            ['>=', low],
            ['<', bump(n)],
          ];
  }
}

function test(op, v, c) {
  const d = cmp(v, c);
  return op === '>=' ? d >= 0 : op === '>' ? d > 0 : op === '<=' ? d <= 0 : op === '<' ? d < 0 : d === 0;
}

/** Whether `version` satisfies an npm semver range (the subset `engines` fields use). */
export function satisfies(version, range) {
  const v = filled(parts(version));
  return String(range)
    .split('||')
    .some((alt) => {
      let a = alt.trim().replace(/([<>=~^]+)\s+/g, '$1');
      const hyphen = /^(\S+)\s+-\s+(\S+)$/.exec(a);
      if (hyphen) a = `>=${hyphen[1]} <=${hyphen[2]}`;
      if (a === '' || a === '*' || a === 'x') return true;
      return a
        .split(/\s+/)
        .flatMap(expand)
        .every(([op, c]) => test(op, v, c));
    });
}

/** The oldest Node the project declares: `>=20.20` gives 20.20.0. */
export function oldestNode(root = ROOT) {
  const range = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).engines?.node ?? '';
  const m = />=\s*v?(\d+(?:\.\d+){0,2})/.exec(range);
  if (!m) throw new Error(`package.json engines.node (${range}) names no lower bound`);
  return filled(parts(m[1])).join('.');
}

/** Production packages (not dev-only) whose `engines.node` refuses `node`. */
export function enginesProblems(root = ROOT, node = oldestNode(root)) {
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8'));
  const problems = [];
  let checked = 0;
  for (const [path, entry] of Object.entries(lock.packages ?? {})) {
    if (path === '' || entry.dev || entry.link) continue;
    // The installed package.json is the truth after `npm ci`; the lock's copy otherwise.
    const file = join(root, path, 'package.json');
    const pkg = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : entry;
    checked++;
    const range = pkg.engines?.node;
    if (typeof range === 'string' && !satisfies(node, range)) problems.push({ path, version: pkg.version ?? entry.version, engines: range });
  }
  return { node, checked, problems };
}

function sourceFiles(dir, out = []) {
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name === 'dist' || name.startsWith('.')) continue;
    const p = join(dir, name);
    if (statSync(p).isDirectory()) sourceFiles(p, out);
    else if (/\.(m?[jt]sx?|cjs)$/.test(name)) out.push(p);
  }
  return out;
}

/** Listed dependencies that no file in src/, scripts/ or bin/ imports. */
export function unusedDependencies(root = ROOT) {
  const deps = Object.keys(JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).dependencies ?? {});
  const text = ['src', 'scripts', 'bin']
    .flatMap((d) => sourceFiles(join(root, d)))
    .map((f) => readFileSync(f, 'utf8'))
    .join('\n');
  const escape = (s) => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  return deps.filter((name) => !new RegExp(`(?:from\\s*|import\\s*\\(\\s*|require\\s*\\(\\s*)['"]${escape(name)}(?:/[^'"]*)?['"]`).test(text));
}

if (process.argv[1] && relative(process.argv[1], fileURLToPath(import.meta.url)) === '') {
  const engines = enginesProblems();
  const unused = unusedDependencies();
  process.stdout.write(`${engines.checked} production packages checked against Node ${engines.node}\n`);
  for (const p of engines.problems) process.stdout.write(`  needs Node ${p.engines}: ${p.path} ${p.version}\n`);
  for (const d of unused) process.stdout.write(`  unused dependency: ${d}\n`);
  process.exitCode = engines.problems.length > 0 || unused.length > 0 ? 1 : 0;
}
