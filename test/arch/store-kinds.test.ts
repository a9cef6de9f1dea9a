// Record kinds live in src/store/ only: code above the store reads and writes
// records through the typed repositories (src/store/repos/), never with a string kind of its own.
// Every file is converted; a file that must wait for its conversion goes on the list below, and an
// entry that no longer needs it fails too, so the list only shrinks.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');

const NOT_CONVERTED_YET = new Set<string>([]);

/** The kinds of the RecordKind union in src/store/store.ts. */
function recordKinds(): string[] {
  const src = readFileSync(join(ROOT, 'src/store/store.ts'), 'utf8');
  const union = /export type RecordKind =([\s\S]*?);/.exec(src)![1];
  return [...union.matchAll(/'([a-z_]+)'/g)].map((m) => m[1]);
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return sourceFiles(p);
    return /\.tsx?$/.test(name) ? [p] : [];
  });
}

/** Where `text` names a record kind in a store call, a write op or a prefetch entry: the matches. */
export function kindUses(text: string, kinds: string[]): string[] {
  const k = `'(?:${kinds.join('|')})'`;
  const patterns = [
    // store.getRecord('runs', …), listRecords<T>('bg_runs', …), countRecords('meta')
    new RegExp(`\\.(?:getRecord|getRecords|createRecord|updateRecord|deleteRecord|listRecords|countRecords)(?:<[^()]*>)?\\(\\s*${k}`, 'g'),
    // { op: 'update', kind: 'runs', … } and prefetch entries { kind: 'traces', … }
    new RegExp(`\\bkind: ${k}`, 'g'),
    // const KIND = 'budget_ledger' as const, kind: 'bg_schedule' as const
    new RegExp(`${k} as const`, 'g'),
  ];
  return patterns.flatMap((re) => [...text.matchAll(re)].map((m) => m[0]));
}

describe('record kinds stay inside src/store/', () => {
  const kinds = recordKinds();

  it('finds the kinds and the uses it looks for', () => {
    expect(kinds).toEqual(expect.arrayContaining(['runs', 'bg_runs', 'meta', 'webhook_subs']));
    expect(kindUses("await store.getRecord<RunRecord>('runs', id)", kinds)).toHaveLength(1);
    expect(kindUses("store.listRecords('bg_runs', { limit: 1 })", kinds)).toHaveLength(1);
    expect(kindUses("ops.push({ op: 'delete', kind: 'bg_attempts', id })", kinds)).toHaveLength(1);
    expect(kindUses("const KIND = 'budget_ledger' as const;", kinds)).toHaveLength(1);
    expect(kindUses("tags: ['runs'], repos(store).runs.get(id)", kinds)).toEqual([]);
  });

  it('no file outside src/store/ names a kind in a store call, except the ones not converted yet', () => {
    const offenders: string[] = [];
    const stillNeeded = new Set<string>();
    for (const file of sourceFiles(join(ROOT, 'src'))) {
      const rel = relative(ROOT, file).split('\\').join('/');
      if (rel.startsWith('src/store/')) continue;
      const uses = kindUses(readFileSync(file, 'utf8'), kinds);
      if (uses.length === 0) continue;
      if (NOT_CONVERTED_YET.has(rel)) stillNeeded.add(rel);
      else offenders.push(`${rel}: ${uses.join(', ')}`);
    }
    expect(offenders, 'use the repositories of src/store/repos/ (repos(store).<kind>)').toEqual([]);
    expect(
      [...NOT_CONVERTED_YET].filter((f) => !stillNeeded.has(f)),
      'converted: remove from NOT_CONVERTED_YET',
    ).toEqual([]);
  });
});
