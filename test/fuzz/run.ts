// `npm run fuzz [-- --requests N --seed S --concurrency C --json FILE]`: the long fuzz run (not in
// CI). Starts the two fuzz targets (without and with API keys), sends N generated requests over
// every route of the OpenAPI document, prints the counts as Markdown (for docs/reliability.md) and
// every failure, and exits 1 when there is any: a 5xx, a hang, an error body that is not JSON in a
// documented shape, a server that stopped answering /health, a 5xx the server logged, a crash.
import { writeFileSync } from 'node:fs';
import { reportMarkdown, runFuzz, type Failure } from './openapi-fuzz.js';
import { fetchDoc, startTarget } from './target.js';
import { waitFor } from '../helpers/wait.js';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

const requests = arg('requests', 20_000);
const seed = arg('seed', 1);
const concurrency = arg('concurrency', 4);
const jsonIndex = process.argv.indexOf('--json');
const jsonOut = jsonIndex > 0 ? process.argv[jsonIndex + 1] : null;

// A crash of the server is a crash of this process (the server runs in it): count it and go on,
// so the report says what happened instead of nothing at all.
const crashes: string[] = [];
process.on('uncaughtException', (err) => void crashes.push(`uncaughtException: ${err?.stack ?? err}`));
process.on('unhandledRejection', (err) => void crashes.push(`unhandledRejection: ${(err as Error)?.stack ?? err}`));

const targets = [await startTarget('open'), await startTarget('auth')];
const doc = await fetchDoc(targets[0]);
const rssBefore = process.memoryUsage().rss;
const t0 = Date.now();
process.stderr.write(`fuzz: ${requests} requests, seed ${seed}, concurrency ${concurrency}\n`);
const report = await runFuzz(doc, targets, {
  seed,
  requests,
  concurrency,
  healthEvery: 500,
  onProgress: (done, r) => process.stderr.write(`  ${done}/${requests} requests, ${r.failures.length} failures, ${Math.round((Date.now() - t0) / 1000)} s\n`),
});
const logged: Failure[] = targets.flatMap((t) =>
  t.serverErrors.map((e) => ({
    server: t.name,
    op: `${e.method} ${e.route ?? '(no route)'}`,
    category: 'server log',
    method: e.method,
    target: '',
    status: e.status,
    reason: `logged 5xx: ${e.error.name}: ${e.error.message}`,
    requestBody: '',
    answer: '',
  })),
);
// A closed stream releases its bus subscription once its run or replay notices: give that 10 s.
// Nothing may stay (what is left after that is reported below).
await waitFor(() => targets.every((t) => t.server.runtime.bus.size === 0), {
  timeoutMs: 10_000,
  intervalMs: 100,
  what: 'every stream subscription released',
}).catch(() => undefined);
const streamsLeft = targets.map((t) => t.server.runtime.bus.size);
for (const t of targets) await t.stop();

const command = `npm run fuzz -- --requests ${requests} --seed ${seed}${concurrency !== 4 ? ` --concurrency ${concurrency}` : ''}`;
process.stdout.write(`${reportMarkdown(report, command)}\n\n`);
process.stdout.write(
  `RSS of the process (servers and fuzzer): ${Math.round(rssBefore / 2 ** 20)} MB before, ${Math.round(process.memoryUsage().rss / 2 ** 20)} MB after. Stream subscriptions left after the run: ${streamsLeft.join(', ')}.\n`,
);
const failures = [...report.failures, ...logged];
targets.forEach((t, i) => {
  if (streamsLeft[i] > 0)
    failures.push({
      server: t.name,
      op: '(streams)',
      category: 'leak',
      method: '',
      target: '',
      status: 0,
      reason: `${streamsLeft[i]} bus subscriptions left 10 s after every client closed its stream`,
      requestBody: '',
      answer: '',
    });
});
for (const c of crashes) process.stdout.write(`CRASH ${c}\n`);
if (failures.length > 0) {
  process.stdout.write(`\n${failures.length} failures:\n`);
  for (const f of failures)
    process.stdout.write(
      `- [${f.server}] ${f.reason}: ${f.method} ${f.target} (${f.category}) -> ${f.status} ${f.answer}${f.requestBody ? `\n    body: ${f.requestBody}` : ''}\n`,
    );
}
if (jsonOut) writeFileSync(jsonOut, JSON.stringify({ command, report, logged, crashes }, null, 2));
process.exit(failures.length > 0 || crashes.length > 0 ? 1 : 0);
