// An evaluation over 50 runs survives a SIGKILL of the agentd child in the middle (docs/contract.md
// §3.7): after the restart it finishes with every run replayed exactly once (one replay run per
// item), and the ledger-writing non-idempotent tool never ran during any replay.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { crashConfig, eventually, getJson, killAllChildren, postJson, readLedger, startAgentd, writeConfig } from '../crash/harness.js';
import { startModelWithLedger, stopModelAndDirs } from '../helpers/model-ledger.js';

const RUNS = 50;
const dirs: string[] = [];
let model: ScriptedOpenAI;
let variant: ScriptedOpenAI;
let ledger: string;

beforeAll(async () => {
  ({ model, ledger } = await startModelWithLedger(dirs));
  variant = await startScriptedOpenAI();
  // Originals and replays alike: first a ledger write of the query, then an answer.
  const script = (answer: string, delay: number) => (req: { messages: Array<{ role: string; content?: unknown }> }) => {
    const last = req.messages.at(-1)!;
    if (last.role === 'tool') return { text: `${answer}: ${String(last.content)}`, chunkDelayMs: delay };
    return { tool_calls: [{ name: 'ledger_write', arguments: { entry: String(last.content) } }], chunkDelayMs: delay };
  };
  model.setDefault(script('original', 0));
  variant.setDefault(script('variant', 40));
});
afterAll(async () => {
  await killAllChildren();
  await variant.close();
  await stopModelAndDirs(model, dirs);
});

it('finishes after a SIGKILL mid-way with one replay per run and no ledger write replayed', async () => {
  const dir = dirs[0];
  const config = writeConfig(dir, crashConfig(model.url, { agents: { model_hosts: [new URL(variant.url).host] } }));
  const env = { AGENTD_TEST_LEDGER: ledger };
  let child = await startAgentd({ configFile: config, dataDir: `${dir}/data`, env });
  const runIds: string[] = [];
  for (let i = 0; i < RUNS; i++) {
    const r = await postJson(`${child.url}/run/sync`, { query: `pay ${i}` });
    expect(r.body.status, JSON.stringify(r.body)).toBe('success');
    runIds.push(r.body.run_id);
  }
  const written = readLedger(ledger).filter((l) => l.phase === 'done');
  expect(written).toHaveLength(RUNS);

  const created = await postJson(`${child.url}/evals`, {
    name: 'crash',
    source: { run_ids: runIds },
    variant: { model: { provider: 'openai-compatible', base_url: variant.url, model: 'variant' } },
    scorer: { type: 'contains', text: 'variant' },
    concurrency: 4,
  });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const evalId = created.body.eval_id as string;
  // Killed once some items are done and others are in flight.
  await eventually(async () => ((await getJson(`${child.url}/evals/${evalId}`)).body.progress.done >= 8 ? true : null), 60_000);
  await child.kill('SIGKILL');
  const before = variant.requests.length;
  expect(before).toBeLessThan(RUNS * 2);

  child = await startAgentd({ configFile: config, dataDir: `${dir}/data`, env });
  const done = await eventually(async () => {
    const d = (await getJson(`${child.url}/evals/${evalId}`)).body;
    return d.status === 'completed' ? d : null;
  }, 120_000);
  expect(done.progress).toEqual({ total: RUNS, done: RUNS, failed: 0 });
  const items = done.items as Array<{ run_id: string; replay_run_id: string; score: number; status: string }>;
  expect(new Set(items.map((i) => i.run_id))).toEqual(new Set(runIds));
  expect(new Set(items.map((i) => i.replay_run_id)).size).toBe(RUNS);
  expect(items.every((i) => i.score === 1)).toBe(true);
  // Exactly one replay run per item: no other run was started from these originals.
  const all: Array<{ run_id: string }> = [];
  let cursor: string | null = null;
  do {
    const page: { runs: Array<{ run_id: string }>; next_cursor: string | null } = (
      await getJson(`${child.url}/runs?limit=500${cursor ? `&cursor=${cursor}` : ''}`)
    ).body;
    all.push(...page.runs);
    cursor = page.next_cursor;
  } while (cursor);
  const replays = all.filter((r) => r.run_id.startsWith('evalrun_'));
  expect(replays).toHaveLength(RUNS);
  // The ledger-writing tool never ran during a replay, before or after the kill.
  expect(readLedger(ledger).filter((l) => l.run_id.startsWith('evalrun_'))).toEqual([]);
  expect(readLedger(ledger).filter((l) => l.phase === 'done')).toHaveLength(RUNS);
  await child.kill('SIGTERM');
}, 240_000);
