// promtool lookup and a minimal parser of Prometheus text, for the metrics tests.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/** promtool's path (Debian's `prometheus` package; .ci/run installs it), or null. */
export function findPromtool(): string | null {
  for (const p of ['/usr/bin/promtool', '/usr/local/bin/promtool']) if (existsSync(p)) return p;
  const which = spawnSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' });
  return which.status === 0 && which.stdout.trim() ? which.stdout.trim() : null;
}

/** `promtool check metrics` on a text: its findings (empty when clean) and exit status. */
export function promtoolCheck(promtool: string, text: string): { output: string; status: number | null } {
  const check = spawnSync(promtool, ['check', 'metrics'], { input: text, encoding: 'utf8' });
  return { output: `${check.stdout}${check.stderr}`.trim(), status: check.status };
}

/** Sample lines as `name{labels}` -> value (labels as written by prom-client). */
export function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}
