// `npm start` builds first when any source is newer than the last build, so a fresh clone needs
// only `npm install && npm start`. The build is scripts/build.mjs (the esbuild bundle, ~2 s).
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const marker = 'dist/agentd.js';
function newest(dir) {
  let t = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    t = Math.max(t, entry.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}
const inputs = Math.max(
  newest('src'),
  newest('machines'),
  statSync('package.json').mtimeMs,
  statSync('scripts/build.mjs').mtimeMs,
  statSync('scripts/build-ui.mjs').mtimeMs,
);
// The dashboard (dist/ui/) is part of the build: a build without it is rebuilt too.
if (!existsSync(marker) || !existsSync('dist/ui/index.html') || inputs > statSync(marker).mtimeMs) {
  process.stderr.write('agentd: building (esbuild bundle)...\n');
  execFileSync(process.execPath, ['scripts/build.mjs'], { stdio: 'inherit' });
}
