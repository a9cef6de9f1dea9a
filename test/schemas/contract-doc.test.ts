// docs/contract.md (the contract in prose) kept in step with the OpenAPI document the running app
// serves (the contract's machine-readable form, which wins where they disagree): the §1 endpoint
// table and the document list the same (method, path) pairs, every error code is documented, and
// every section a citation names exists.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DOMAIN_ERRORS } from '../../src/error-codes.js';
import { getJson, startTestServer, type TestServer } from '../helpers/server.js';

/** Served, and in the §1 table, but hidden from the OpenAPI document: the document itself, its page, the dashboard. */
const SERVED_OUTSIDE_THE_DOCUMENT = ['GET /openapi.json', 'GET /docs', 'GET /ui'];

const ROOT = join(import.meta.dirname, '..', '..');
const contract = readFileSync(join(ROOT, 'docs', 'contract.md'), 'utf8');
const errorsDoc = readFileSync(join(ROOT, 'docs', 'errors.md'), 'utf8');

/** The text of one numbered section of docs/contract.md ("2" → from "## 2." up to the next "## "). */
function section(n: string): string {
  const start = contract.search(new RegExp(`^## ${n.replace('.', '\\.')}\\. `, 'm'));
  if (start < 0) throw new Error(`docs/contract.md has no section ${n}`);
  const rest = contract.slice(start + 1);
  const end = rest.search(/^## /m);
  return end < 0 ? rest : rest.slice(0, end);
}

/** `METHOD /path` of every row of the §1 table: `| GET | \`/runs\` | …`. */
function tableRoutes(): string[] {
  return [...section('1').matchAll(/^\| (GET|POST|PUT|PATCH|DELETE) \| `([^`]+)` \|/gm)].map((m) => `${m[1]} ${m[2]}`);
}

/** Section numbers of docs/contract.md's headings ("6", "6.3", "12.19"). */
const sectionNumbers = new Set([...contract.matchAll(/^#{2,4} (\d+(?:\.\d+)*)\.? /gm)].map((m) => m[1]));

let server: TestServer;
let documented: string[];

beforeAll(async () => {
  server = await startTestServer();
  const doc = (await getJson(`${server.url}/openapi.json`)).body as { paths: Record<string, Record<string, unknown>> };
  documented = Object.entries(doc.paths).flatMap(([path, methods]) => Object.keys(methods).map((m) => `${m.toUpperCase()} ${path}`));
});

afterAll(async () => {
  await server?.stop();
  server?.cleanup();
});

describe('docs/contract.md §1 and the OpenAPI document', () => {
  it('the table has one row per route, each once', () => {
    const rows = tableRoutes();
    expect(rows.length).toBeGreaterThan(40);
    expect(rows.filter((r, i) => rows.indexOf(r) !== i)).toEqual([]);
  });

  it('lists every operation of the document', () => {
    const rows = new Set(tableRoutes());
    expect(documented.filter((r) => !rows.has(r))).toEqual([]);
  });

  it('lists no route the document lacks, except the ones served outside it', () => {
    const inDoc = new Set(documented);
    expect(tableRoutes().filter((r) => !inDoc.has(r) && !SERVED_OUTSIDE_THE_DOCUMENT.includes(r))).toEqual([]);
  });

  it('the routes served outside the document are in the table and do answer', async () => {
    const rows = tableRoutes();
    for (const route of SERVED_OUTSIDE_THE_DOCUMENT) {
      expect(rows, route).toContain(route);
      const res = await fetch(`${server.url}${route.split(' ')[1]}`);
      const code = res.headers.get('content-type')?.includes('json') ? ((await res.json()) as { code?: string }).code : (await res.arrayBuffer(), undefined);
      // The dashboard answers 404 AGT_ERR_DASHBOARD_NOT_BUILT when its bundle is missing: still a route.
      expect(code, route).not.toBe('AGT_ERR_ROUTE_NOT_FOUND');
    }
  });
});

describe('docs/contract.md §2 and the error codes', () => {
  it('§2 points at docs/errors.md, and every AGT_ERR_* code is named there or in §2', () => {
    const s2 = section('2');
    expect(s2).toContain('(errors.md)');
    const named = `${errorsDoc}\n${s2}`;
    expect(Object.keys(DOMAIN_ERRORS).filter((code) => !named.includes(`\`${code}\``))).toEqual([]);
  });
});

describe('docs/contract.md sections', () => {
  it("keeps the decisions' numbering: §1-§11 with §3.1-§3.3, §6.1-§6.3, §8.1-§8.3", () => {
    for (const n of ['0', '1', '2', '3', '3.1', '3.2', '3.3', '4', '5', '6', '6.1', '6.2', '6.3', '7', '8', '8.1', '8.2', '8.3', '9', '10', '11']) {
      expect(sectionNumbers.has(n), `§${n}`).toBe(true);
    }
  });

  it('maps every service-spec heading to a section that exists', () => {
    const map = [...contract.matchAll(/^\| ([^|\n]+?) \| §(\d+(?:\.\d+)*) \|$/gm)];
    expect(map.length).toBeGreaterThan(30);
    expect(map.filter((m) => !sectionNumbers.has(m[2])).map((m) => `${m[1]} → §${m[2]}`)).toEqual([]);
  });

  it('every section a comment or doc cites (docs/contract.md §N, or §N of the former decisions file) exists', () => {
    const missing: string[] = [];
    const walk = (dir: string): string[] =>
      readdirSync(dir).flatMap((name) => {
        const path = join(dir, name);
        if (name === 'node_modules' || name === 'dist' || name.startsWith('.')) return [];
        return statSync(path).isDirectory() ? walk(path) : /\.(ts|tsx|mts|mjs|md)$/.test(name) ? [path] : [];
      });
    for (const file of ['src', 'machines', 'test', 'scripts', 'docs'].flatMap((d) => walk(join(ROOT, d)))) {
      const text = readFileSync(file, 'utf8');
      // "§1, §4, §5" and "§1 and §9" after a file name cite several sections.
      for (const m of text.matchAll(/(?:docs\/contract\.md|decisions\.md) (§\d+(?:\.\d+)*(?:(?:,| and|, and) §\d+(?:\.\d+)*)*)/g)) {
        for (const s of m[1].matchAll(/§(\d+(?:\.\d+)*)/g)) {
          if (!sectionNumbers.has(s[1])) missing.push(`${relative(ROOT, file)}: §${s[1]}`);
        }
      }
    }
    expect(missing).toEqual([]);
  });
});
