// No file system path of the server in an answer: an error message may quote one (Node's
// "Cannot find package … imported from /srv/…/tools.mjs", a list of configured folders), and it
// tells a caller how the server is laid out. Only paths under the server's own folders are
// rewritten, each to its last segment (the file's or folder's name), so URL paths in messages
// ("no route GET /runs/x") and what a caller sent stay as they are.
import { tmpdir } from 'node:os';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Config } from '../config.js';

/** The folders whose paths never leave the server: the checkout, the data and tools folders, temp. */
function serverRoots(config: Config): string[] {
  const roots = [
    process.cwd(),
    resolve(dirname(fileURLToPath(import.meta.url)), '../..'), // the package (src/http or dist/chunks, two up)
    config.data_dir,
    config.store.path,
    config.background.workspace_root,
    ...config.agents.tools_dirs,
    ...(config.agent.tools.local ? [dirname(config.agent.tools.local)] : []),
    ...(config.config_path ? [dirname(config.config_path)] : []),
    tmpdir(),
  ];
  // Longest first, so a folder inside another is matched whole; never the file system root.
  return [...new Set(roots.filter((r): r is string => typeof r === 'string' && r.length > 1).map((r) => r.replace(/\/+$/, '')))].sort(
    (a, b) => b.length - a.length,
  );
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A function that rewrites every path under the server's folders in a text to its last segment. */
export function serverPathScrubber(config: Config): (text: string) => string {
  const roots = serverRoots(config);
  if (roots.length === 0) return (t) => t;
  // A root, then the rest of the path up to a quote, space or closing bracket; with file:// too.
  const re = new RegExp(`(?:file://)?(?:${roots.map(escape).join('|')})(?=/|\\b|$)[^\\s'"\`),;]*`, 'g');
  return (text) =>
    text.includes('/')
      ? text.replace(re, (p) => {
          const segments = p
            .replace(/^file:\/\//, '')
            .split('/')
            .filter(Boolean);
          return segments.at(-1) ?? '.';
        })
      : text;
}
