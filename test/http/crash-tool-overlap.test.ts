// SIGKILL right after a non-idempotent tool returned, while its completion write and the next model
// request are in flight together (the completion is saved without waiting for it, so the write's
// fsync overlaps the model's round trip). The process dies the moment the second model
// request arrives. Whatever the disk got, a restart must not run the tool again, and the run ends
// with the tool's real result (the completion was durable) or as `unknown` (it was not), the model
// told accordingly.
import { expect, it } from 'vitest';
import { useCrashRig } from '../helpers/model-ledger.js';
import {
  crashConfig,
  eventually,
  getJson,
  postJson,
  readLedger,
  requestsOf,
  startAgentd,
  waitForRunStatus,
  writeConfig,
  type AgentdChild,
  type TurnScript,
} from '../crash/harness.js';

const scripts = new Map<string, TurnScript>();
const rig = useCrashRig(scripts);

it('a non-idempotent call that returned is never run again when the process dies with its completion write and the next model call in flight', async () => {
  const dataDir = rig.dir();
  const cfg = writeConfig(dataDir, crashConfig(rig.model.url, { runs: { orphan_sweep: { interval_seconds: 3600 } } }));
  let child: AgentdChild | undefined;
  let killed = false;
  scripts.set('pay', (turn) => {
    if (turn === 0) return { tool_calls: [{ name: 'ledger_write', arguments: { entry: 'pay-1' } }] };
    if (!killed) {
      // Synchronously, as the request arrives: the run is between handing the tool's completion to
      // the store and reading the model's answer.
      killed = true;
      process.kill(child!.pid, 'SIGKILL');
      return { hang: true };
    }
    return { text: 'paid' };
  });

  child = await startAgentd({ configFile: cfg, dataDir, env: { AGENTD_TEST_LEDGER: rig.ledger } });
  // Not launchRun: its poll for the run id can lose the race with the kill (the tool and the second
  // model request come within milliseconds); the run id is read from the restarted process instead.
  void postJson(`${child.url}/run/sync`, { query: '[pay] pay the invoice', session_id: 'sess-pay' }, 600_000).catch(() => undefined);
  await eventually(() => killed, 15_000, 'second model request');
  expect((await child.exited).signal).toBe('SIGKILL');

  child = await startAgentd({ configFile: cfg, dataDir, env: { AGENTD_TEST_LEDGER: rig.ledger } });
  const runId = await eventually(
    async () => ((await getJson(`${child!.url}/runs?session_id=sess-pay`)).body?.runs?.[0]?.run_id as string | undefined) ?? null,
    10_000,
    'the run of session sess-pay',
  );
  const lines = () => readLedger(rig.ledger).filter((l) => l.run_id === runId);
  try {
    const done = await waitForRunStatus(child.url, runId, ['completed', 'failed']);
    expect(done).toMatchObject({ status: 'completed', response: 'paid' });
    // Ran once, before the kill; never again.
    expect(lines().map((l) => l.phase)).toEqual(['started', 'done']);
    expect(done.tool_calls).toHaveLength(1);
    const call = done.tool_calls[0];
    expect(call).toMatchObject({ tool_name: 'ledger_write', idempotent: false, state: 'completed' });
    expect(['success', 'unknown']).toContain(call.outcome);
    // The model, asked again after the recovery, is told what the store knows: the result that was
    // sent before the kill when the completion was durable, `unknown` when it was not.
    const turn1 = requestsOf(rig.model, 'pay').filter((r) => r.turn === 1);
    expect(turn1).toHaveLength(2);
    const after = turn1[1].toolMessages;
    expect(after).toHaveLength(1);
    expect(after[0].tool_call_id).toBe(call.tool_call_id);
    if (call.outcome === 'success') expect(after).toEqual(turn1[0].toolMessages);
    else expect(after[0].content).toMatch(/unknown.*not idempotent/s);
  } finally {
    await child.kill('SIGKILL');
  }
}, 60_000);
