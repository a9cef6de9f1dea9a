import { readFileSync } from 'node:fs';

// Set by scripts/build.mjs in the bundle (which does not always sit next to package.json).
declare const __AGENTD_BUILD_VERSION__: string | undefined;

/** The running software's version (HealthResponse.version); `0+unknown` when package.json cannot be read. */
export function readVersion(): string {
  if (typeof __AGENTD_BUILD_VERSION__ === 'string') return __AGENTD_BUILD_VERSION__;
  for (const rel of ['../package.json', '../../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(rel, import.meta.url), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'agentd' && pkg.version) return pkg.version;
    } catch {
      // try the next location (src/ when run with tsx, dist/src/ when compiled by tsc)
    }
  }
  return '0+unknown';
}
