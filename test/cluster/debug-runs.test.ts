// Fork and replay of a run written by another instance, on PostgreSQL (docs/contract.md §3.4-3.5):
// the run is made on A; its checkpoints are read, and it is forked and replayed, through B.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { getJson, killAllChildren, postJson, readLedger, routeByTag, type TurnScript } from '../crash/harness.js';
import { startCluster, type Cluster } from './helpers.js';

let model: ScriptedOpenAI;
let cluster: Cluster;
const scripts = new Map<string, TurnScript>();

beforeAll(async () => {
  model = await startScriptedOpenAI();
  routeByTag(model, (tag) => scripts.get(tag));
  cluster = await startCluster(2, model.url);
}, 60_000);

afterAll(async () => {
  await cluster?.destroy();
  await killAllChildren();
  await model?.close();
});

describe('debugging across instances', () => {
  it('a run made on A is read, forked and replayed through B; the replay writes no ledger entry', async () => {
    scripts.set('dbg', (turn, req) =>
      turn === 0 ? { tool_calls: [{ name: 'ledger_write', arguments: { entry: 'pay-dbg' } }] } : { text: `done: ${String(req.messages.at(-1)!.content)}` },
    );
    const [A, B] = cluster.instances.map((i) => i.url);
    const original = (await postJson(`${A}/run/sync`, { query: '[dbg] pay' })).body;
    expect(original.status, JSON.stringify(original)).toBe('success');
    const written = () => readLedger(cluster.ledger).filter((l) => l.tool === 'ledger_write' && l.phase === 'done');
    expect(written()).toHaveLength(1);

    const cps = (await getJson(`${B}/runs/${original.run_id}/checkpoints`)).body;
    expect(cps.checkpoints.map((c: { state: string }) => c.state)).toEqual(['calling', 'calling', 'completed']);

    const callId = await toolCallId(B, original.run_id);
    const fork = await postJson(`${B}/runs/${original.run_id}/fork`, { checkpoint_id: 'cp_2', edits: { tool_results: { [callId]: 'refused by the bank' } } });
    expect(fork.status, JSON.stringify(fork.body)).toBe(200);
    expect(fork.body.response).toBe('done: refused by the bank');
    expect(fork.body.forked_from).toEqual({ run_id: original.run_id, checkpoint_id: 'cp_2' });

    const replay = await postJson(`${B}/runs/${original.run_id}/replay`, { variant: { system_instruction: 'be careful' } });
    expect(replay.status, JSON.stringify(replay.body)).toBe(200);
    expect(replay.body.response).toBe('done: {"written":"pay-dbg"}');
    expect(written()).toHaveLength(1); // the ledger-writing tool never ran again
  }, 60_000);
});

/** The id of the run's first tool call, from its checkpoint's conversation. */
async function toolCallId(url: string, runId: string): Promise<string> {
  const cp = (await getJson(`${url}/runs/${runId}/checkpoints/cp_2`)).body;
  return cp.messages.find((m: { role: string }) => m.role === 'tool').tool_call_id;
}
