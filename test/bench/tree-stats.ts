// What a folder holds on disk, for the benchmarks that watch the data dir and the background run
// workspaces grow (benchmarks/background.ts, profile.ts).
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Files and folders under `dir` (a missing folder counts as empty). With `bytes`, also their
 * apparent sizes, which costs a stat per file.
 */
export function treeStats(dir: string, opts: { bytes?: boolean } = {}): { files: number; dirs: number; bytes: number } {
  let files = 0;
  let dirs = 0;
  let bytes = 0;
  const walk = (d: string) => {
    let entries;
    try {
      entries = readdirSync(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const p = join(d, e.name);
      if (e.isDirectory()) {
        dirs++;
        walk(p);
        continue;
      }
      files++;
      if (!opts.bytes) continue;
      try {
        bytes += statSync(p).size;
      } catch {
        // removed meanwhile (a LevelDB log rotated)
      }
    }
  };
  walk(dir);
  return { files, dirs, bytes };
}
