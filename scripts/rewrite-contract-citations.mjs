// Rewrites citations of the contract's two former files outside the repository (decisions.md and
// service-spec.md) into citations of docs/contract.md, which a clone has, in src/, machines/, test/,
// scripts/, docs/ and README.md:
//   decisions.md §6.3                        -> docs/contract.md §6.3 (the numbering is the same)
//   decisions.md preamble                    -> docs/contract.md §0
//   service-spec.md "Health, readiness, ..." -> docs/contract.md §12.19 (the heading map at the top
//                                               of docs/contract.md; "Background*" -> the common
//                                               parent of every heading it matches)
//   service-spec.md resources                -> docs/contract.md §12 (a heading starting with the word)
//   bare decisions.md / service-spec.md      -> docs/contract.md
// and joins what that leaves doubled ("docs/contract.md §12, docs/contract.md §1" -> "docs/contract.md
// §12, §1"). Idempotent: a second run changes nothing. It also lists, without changing them, the
// lines that carry "issue N" tags.
//
//   node scripts/rewrite-contract-citations.mjs           rewrite and report
//   node scripts/rewrite-contract-citations.mjs --check   report only; exit 1 if anything would change
import { readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const ROOT = join(import.meta.dirname, '..');
const CONTRACT = join(ROOT, 'docs', 'contract.md');
/** Where citations are rewritten. docs/ too, so docs/http-api.md stays what scripts/gen-docs.ts writes. */
const DIRS = ['src', 'machines', 'test', 'scripts', 'docs'];
const EXTRA_FILES = ['README.md'];
const EXTENSIONS = /\.(ts|tsx|mts|mjs|js|md)$/;
/** Generated or self-referring files that must not be rewritten. */
const SKIP = new Set(['docs/contract.md', 'scripts/rewrite-contract-citations.mjs', 'src/client/openapi-types.ts']);

const contract = readFileSync(CONTRACT, 'utf8');

/** Section numbers of docs/contract.md: "## 6. Durable ..." -> "6", "### 6.3 What ..." -> "6.3". */
const sections = new Set([...contract.matchAll(/^#{2,4} (\d+(?:\.\d+)*)\.? /gm)].map((m) => m[1]));

/** The table at the top of docs/contract.md: service-spec.md heading -> section. */
const headingMap = new Map();
for (const m of contract.matchAll(/^\| ([^|\n]+?) \| §(\d+(?:\.\d+)*) \|$/gm)) headingMap.set(m[1].trim().toLowerCase(), m[2]);
if (headingMap.size === 0) throw new Error('docs/contract.md has no heading map (| heading | §N | rows)');

/** The deepest section that contains every one of these (§12.5 and §12.14 -> §12). */
function commonParent(secs) {
  const parts = secs.map((s) => s.split('.'));
  const out = [];
  for (let i = 0; parts.every((p) => i < p.length && p[i] === parts[0][i]); i++) out.push(parts[0][i]);
  return out.join('.');
}

/** Section for a quoted service-spec.md heading; a trailing "*" stands for the rest of one word ("Background*": the Background... schemas). */
function sectionOfHeading(heading) {
  const h = heading.trim().toLowerCase();
  if (h.endsWith('*')) {
    const prefix = h.slice(0, -1);
    const secs = [...headingMap].filter(([k]) => k.startsWith(prefix) && k.length > prefix.length && !/\s/.test(k.slice(prefix.length))).map(([, s]) => s);
    return secs.length === 0 ? null : commonParent(secs) || null;
  }
  return headingMap.get(h) ?? null;
}

/** Section for the word after an unquoted service-spec.md, when a heading starts with it. */
function sectionOfWord(word) {
  const w = word.toLowerCase();
  if (w.length < 4) return null;
  for (const [k, s] of headingMap) if (k === w || k.startsWith(`${w} `)) return s;
  return null;
}

const warnings = [];

function rewrite(text, file) {
  let out = text;
  // decisions.md §X (X may be "6", "6.3", "8.2") and the preamble.
  out = out.replace(/(?<![\w./-])decisions\.md preamble\b/g, 'docs/contract.md §0');
  out = out.replace(/(?<![\w./-])decisions\.md( §(\d+(?:\.\d+)*))?/g, (all, tail, sec) => {
    if (sec && !sections.has(sec)) warnings.push(`${file}: decisions.md §${sec} has no section in docs/contract.md`);
    return `docs/contract.md${tail ?? ''}`;
  });
  // service-spec.md "Heading" / service-spec.md word / service-spec.md.
  out = out.replace(/(?<![\w./-])service-spec\.md(?: (?:"([^"\n]+)"|'([^'\n]+)'|([A-Za-z][A-Za-z-]*)))?/g, (all, dq, sq, word) => {
    const quoted = dq ?? sq;
    if (quoted !== undefined) {
      const sec = sectionOfHeading(quoted);
      if (sec) return `docs/contract.md §${sec}`;
      warnings.push(`${file}: service-spec.md "${quoted}" matches no heading of docs/contract.md's map; pointed at the file`);
      return `docs/contract.md ("${quoted}")`;
    }
    if (word !== undefined) {
      const sec = sectionOfWord(word);
      return sec ? `docs/contract.md §${sec}` : `docs/contract.md ${word}`;
    }
    return 'docs/contract.md';
  });
  // "docs/contract.md §12, docs/contract.md §1 and §9" -> "docs/contract.md §12, §1 and §9".
  const doubled = /docs\/contract\.md (§\d+(?:\.\d+)*(?:(?:, | and |, and )§\d+(?:\.\d+)*)*)(, | and |, and |; )docs\/contract\.md §/g;
  for (let prev = ''; prev !== out;) {
    prev = out;
    out = out.replace(doubled, 'docs/contract.md $1$2§');
  }
  return out;
}

function* files(dir) {
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name === 'dist' || name.startsWith('.')) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* files(path);
    else if (EXTENSIONS.test(name)) yield path;
  }
}

const check = process.argv.includes('--check');
const all = [...DIRS.flatMap((d) => [...files(join(ROOT, d))]), ...EXTRA_FILES.map((f) => join(ROOT, f))];
let changedFiles = 0;
let changedLines = 0;
const issueTags = [];

for (const path of all) {
  const rel = relative(ROOT, path).split('\\').join('/');
  if (SKIP.has(rel)) continue;
  const before = readFileSync(path, 'utf8');
  const after = rewrite(before, rel);
  const beforeLines = before.split('\n');
  const afterLines = after.split('\n');
  if (after !== before) {
    changedFiles++;
    for (let i = 0; i < beforeLines.length; i++) {
      if (beforeLines[i] !== afterLines[i]) {
        changedLines++;
        console.log(`${rel}:${i + 1}\n  - ${beforeLines[i].trim()}\n  + ${afterLines[i].trim()}`);
      }
    }
    if (!check) writeFileSync(path, after);
  }
  if (/\.(ts|tsx|mts|mjs|js)$/.test(rel)) {
    afterLines.forEach((line, i) => {
      const m = /\bissue \d+/i.exec(line);
      if (!m) return;
      const before = line.slice(0, m.index);
      const inComment = /^\s*(\/\/|\/?\*)/.test(line) || before.includes('//') || before.includes('/*');
      issueTags.push(`${rel}:${i + 1}: ${inComment ? '' : '[not a comment] '}${line.trim()}`);
    });
  }
}

console.log(`\n${check ? 'would change' : 'changed'} ${changedLines} line(s) in ${changedFiles} file(s)`);
for (const w of warnings) console.log(`warning: ${w}`);
console.log(`\n"issue N" tags in code (listed, not changed; ${issueTags.length}):`);
for (const t of issueTags) console.log(`  ${t}`);
if (check && changedLines > 0) process.exitCode = 1;
