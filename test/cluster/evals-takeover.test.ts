// An evaluation taken over by another instance on PostgreSQL (docs/contract.md §3.7): A drives it
// and is SIGKILLed mid-way; B takes it over once A's lease lapses, recovers the replays A left in
// flight (the run orphan sweep continues them from their recording) and finishes: every item
// replayed exactly once (one replay run each), the ledger-writing tool never run by a replay.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, killAllChildren, postJson, readLedger } from '../crash/harness.js';
import { startCluster, type Cluster } from './helpers.js';

const RUNS = 24;
let model: ScriptedOpenAI;
let variant: ScriptedOpenAI;
let cluster: Cluster;

beforeAll(async () => {
  [model, variant] = await Promise.all([startScriptedOpenAI(), startScriptedOpenAI()]);
  // Originals and replays alike: a ledger write of the query, then an answer. The variant is slow
  // enough that the evaluation is mid-way when A dies.
  const script = (answer: string, delay: number) => (req: { messages: Array<{ role: string; content?: unknown }> }) => {
    const last = req.messages.at(-1)!;
    if (last.role === 'tool') return { text: `${answer}: ${String(last.content)}`, chunkDelayMs: delay };
    return { tool_calls: [{ name: 'ledger_write', arguments: { entry: String(last.content) } }], chunkDelayMs: delay };
  };
  model.setDefault(script('original', 0));
  variant.setDefault(script('variant', 60));
  cluster = await startCluster(2, model.url, { agents: { model_hosts: [new URL(variant.url).host] } });
}, 60_000);

afterAll(async () => {
  await cluster?.destroy();
  await killAllChildren();
  await Promise.all([model?.close(), variant?.close()]);
});

describe('an evaluation across instances', () => {
  it('driven by A, SIGKILLed mid-way, is taken over by B and finishes with one replay per item', async () => {
    const [a, b] = cluster.instances;
    const runIds: string[] = [];
    for (let i = 0; i < RUNS; i++) {
      const r = await postJson(`${a.url}/run/sync`, { query: `pay ${i}` });
      expect(r.body.status, JSON.stringify(r.body)).toBe('success');
      runIds.push(r.body.run_id);
    }
    const originalWrites = readLedger(cluster.ledger).filter((l) => l.phase === 'done');
    expect(originalWrites).toHaveLength(RUNS);

    const created = await postJson(`${a.url}/evals`, {
      name: 'takeover',
      source: { run_ids: runIds },
      variant: { model: { provider: 'openai-compatible', base_url: variant.url, model: 'variant' } },
      scorer: { type: 'contains', text: 'variant' },
      concurrency: 3,
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const evalId = created.body.eval_id as string;
    // A drives it (it was made there); B sees it through the shared store.
    const atKill = await eventually(async () => {
      const d = (await getJson(`${b.url}/evals/${evalId}`)).body;
      return d.progress.done >= 4 && d.items.some((i: { status: string }) => i.status === 'running') ? d : null;
    }, 60_000);
    await a.kill('SIGKILL');
    expect(atKill.progress.done).toBeLessThan(RUNS);
    const askedBeforeKill = variant.requests.length;

    const done = await eventually(
      async () => {
        const d = (await getJson(`${b.url}/evals/${evalId}`)).body;
        return d.status === 'completed' ? d : null;
      },
      120_000,
      'the evaluation completed on B',
    );
    // B did the rest: the variant was asked again after A died.
    expect(variant.requests.length).toBeGreaterThan(askedBeforeKill);
    expect(done.progress).toEqual({ total: RUNS, done: RUNS, failed: 0 });
    const items = done.items as Array<{ run_id: string; replay_run_id: string; score: number; status: string }>;
    expect(new Set(items.map((i) => i.run_id))).toEqual(new Set(runIds));
    expect(new Set(items.map((i) => i.replay_run_id)).size).toBe(RUNS);
    expect(items.every((i) => i.status === 'done' && i.score === 1)).toBe(true);
    // Exactly one replay run per item, each ended: none was started a second time by B.
    const replays: Array<{ run_id: string; status: string }> = [];
    let cursor: string | null = null;
    do {
      const page: { runs: Array<{ run_id: string; status: string }>; next_cursor: string | null } = (
        await getJson(`${b.url}/runs?limit=500${cursor ? `&cursor=${cursor}` : ''}`)
      ).body;
      replays.push(...page.runs.filter((r) => r.run_id.startsWith('evalrun_')));
      cursor = page.next_cursor;
    } while (cursor);
    expect(replays.map((r) => r.run_id).sort()).toEqual(items.map((i) => i.replay_run_id).sort());
    expect(replays.every((r) => r.status === 'completed')).toBe(true);
    // The ledger-writing tool never ran during a replay, on either instance.
    expect(readLedger(cluster.ledger).filter((l) => l.run_id.startsWith('evalrun_'))).toEqual([]);
    expect(readLedger(cluster.ledger).filter((l) => l.phase === 'done')).toHaveLength(RUNS);
  }, 240_000);
});
