// `npm start` builds first when any source is newer than the last build, so a fresh clone needs
// only `npm install && npm start`.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const marker = 'dist/src/cli.js';
function newest(dir) {
  let t = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    t = Math.max(t, entry.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}
const stale = !existsSync(marker) || Math.max(newest('src'), newest('machines'), statSync('package.json').mtimeMs) > statSync(marker).mtimeMs;
if (stale) {
  process.stderr.write('agentd: building (tsc)...\n');
  execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.build.json'], { stdio: 'inherit' });
}
