import { readFileSync } from 'node:fs';

/** The running software's version (HealthResponse.version); `0+unknown` when package.json cannot be read. */
export function readVersion(): string {
  for (const rel of ['../package.json', '../../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(rel, import.meta.url), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'agentd' && pkg.version) return pkg.version;
    } catch {
      // try the next location (src/ when run with tsx, dist/src/ when built)
    }
  }
  return '0+unknown';
}
