// Steer and interrupt across the death of the process: agentd runs in a CHILD
// process that the test SIGKILLs, then restarts on the same data dir (test/crash/harness.ts). The
// scripted model lives in this process, so it sees every request across the deaths.
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import {
  crashConfig,
  eventually,
  getJson,
  getRun,
  killAllChildren,
  launchRun,
  postJson,
  readLedger,
  startAgentd,
  tempDir,
  waitForRunStatus,
  writeConfig,
  type AgentdChild,
} from '../crash/harness.js';

let model: ScriptedOpenAI;
let dataDir: string;
let ledger: string;
let release = false;

const text = (m: Record<string, unknown>) => String(m.content ?? '');
/** How often each model request that contains `needle` contains it. */
const sightings = (needle: string) => model.requests.map((r) => r.messages.filter((m) => text(m).includes(needle)).length).filter((n) => n > 0);

beforeAll(async () => {
  model = await startScriptedOpenAI();
  dataDir = tempDir();
  ledger = join(dataDir, 'ledger.jsonl');
  writeFileSync(ledger, '');
  model.setDefault((req) => {
    const last = req.messages.at(-1)!;
    const first = req.messages.find((m) => m.role === 'user' && /^\[[a-z]\]/.test(text(m)));
    const tag = /^\[([a-z])\]/.exec(first ? text(first) : '')?.[1];
    if (text(last).includes('STEER-KILL')) return { text: 'heard the steer' };
    if (text(last).includes('STEER-M')) return release ? { text: 'm heard' } : { hang: true };
    if (last.role === 'tool') return { text: `${tag} done` };
    if (tag === 'k') return release ? { tool_calls: [{ name: 'counted_echo', arguments: { text: 'k' } }] } : { hang: true };
    if (tag === 'i') return { tool_calls: [{ name: 'counted_echo', arguments: { text: 'i', ms: 1500 } }] };
    if (tag === 'm') return { tool_calls: [{ name: 'counted_echo', arguments: { text: 'm', ms: 1500 } }] };
    return { text: 'no script' };
  });
});

afterAll(async () => {
  await killAllChildren();
  await model.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('steer and interrupt through a SIGKILL', () => {
  let cfg: string;
  let child: AgentdChild;
  const ids: Record<string, string> = {};

  it('before the kill: a steer is queued while the model call hangs; one is delivered; another run is interrupted', async () => {
    cfg = writeConfig(dataDir, crashConfig(model.url, { runs: { orphan_sweep: { interval_seconds: 3600 } } }));
    child = await startAgentd({ configFile: cfg, dataDir, env: { AGENTD_TEST_LEDGER: ledger } });
    ids.k = await launchRun(child.url, '[k] work on it', 'sess-k');
    await eventually(() => model.requests.some((r) => text(r.messages.at(-1)!).startsWith('[k]')), 10_000, 'k: model call sent');
    const steer = await postJson(`${child.url}/runs/${ids.k}/steer`, { message: 'STEER-KILL: mind the deadline', sender: 'carol' });
    expect(steer.status).toBe(200);
    expect(steer.body.status).toBe('queued');

    ids.i = await launchRun(child.url, '[i] echo slowly', 'sess-i');
    await eventually(() => readLedger(ledger).some((l) => l.run_id === ids.i && l.phase === 'started'), 10_000, 'i: tool started');
    expect((await postJson(`${child.url}/runs/${ids.i}/interrupt`, {})).body.status).toBe('interrupt_requested');
    await waitForRunStatus(child.url, ids.i, ['interrupted']);

    // m: a steer delivered (its model call sent) before the kill.
    ids.m = await launchRun(child.url, '[m] echo then listen', 'sess-m');
    await eventually(() => readLedger(ledger).some((l) => l.run_id === ids.m && l.phase === 'started'), 10_000, 'm: tool started');
    expect((await postJson(`${child.url}/runs/${ids.m}/steer`, { message: 'STEER-M: one more thing' })).status).toBe(200);
    await eventually(() => sightings('STEER-M').length === 1, 10_000, 'm: the steered model call');

    expect(sightings('STEER-KILL')).toEqual([]); // not delivered yet
    expect((await child.kill('SIGKILL')).signal).toBe('SIGKILL');
  });

  it('after the restart: the recovered run delivers the steer exactly once; the interrupted run waits for resume', async () => {
    release = true;
    child = await startAgentd({ configFile: cfg, dataDir, env: { AGENTD_TEST_LEDGER: ledger } });
    const done = await waitForRunStatus(child.url, ids.k, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', response: 'heard the steer' });
    expect(sightings('STEER-KILL')).toEqual([1]);
    const delivered = model.requests.find((r) => r.messages.some((m) => text(m).includes('STEER-KILL')))!;
    expect(delivered.messages.at(-1)).toMatchObject({ role: 'user' });
    expect(text(delivered.messages.at(-1)!)).toMatch(/^\[Message from carol/);

    // m: its steered model call is sent again after the recovery (the reply was never saved),
    // with the message in it once: the saved context already held it, the inbox is not re-read into it.
    const m = await waitForRunStatus(child.url, ids.m, ['completed', 'failed']);
    expect(m).toMatchObject({ status: 'completed', response: 'm heard' });
    expect(sightings('STEER-M')).toEqual([1, 1]);

    // The start-up sweep resumed k (orphaned), not i (interrupted on request). Part of the
    // scenario: proves i stays put for a while (k's completion above shows the sweep ran).
    await new Promise((r) => setTimeout(r, 300));
    expect((await getRun(child.url, ids.i)).status).toBe('interrupted');
    const resumed = await postJson(`${child.url}/runs/${ids.i}/resume`, {});
    expect(resumed.status).toBe(200);
    expect(resumed.body).toMatchObject({ status: 'success', response: 'i done' });
    // Its tool ran once, before the interrupt.
    expect(readLedger(ledger).filter((l) => l.run_id === ids.i && l.phase === 'started')).toHaveLength(1);
    const events = await getJson(`${child.url}/telemetry/events?run_id=${ids.i}&event_type=run_resumed`);
    expect(events.body.events.map((e: { metadata: Record<string, unknown> }) => e.metadata.cause)).toEqual(['interrupted']);
    await child.kill('SIGKILL');
  });
});
