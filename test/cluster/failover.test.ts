// Three agentd processes on one PostgreSQL database: an instance SIGKILLed
// mid-run has every run recovered by the others (its lease lapses, any live instance's sweep
// claims it) with no non-idempotent tool call repeated; an interval task served by all three,
// one of them killed on the way, dispatches each occurrence exactly once.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, killAllChildren, launchRun, postJson, readLedger, routeByTag, type TurnScript } from '../crash/harness.js';
import { FAST_RECOVERY, startCluster, type Cluster } from './helpers.js';

let model: ScriptedOpenAI;
let cluster: Cluster;
const scripts = new Map<string, TurnScript>();
const TERMINAL = ['completed', 'failed', 'cancelled', 'timeout', 'blocked'];

beforeAll(async () => {
  model = await startScriptedOpenAI();
  routeByTag(model, (tag) => scripts.get(tag.replace(/-\d+$/, '')));
  cluster = await startCluster(3, model.url);
}, 60_000);

afterAll(async () => {
  await cluster?.destroy();
  await killAllChildren();
  await model?.close();
});

describe('three instances, one database', () => {
  it('an instance SIGKILLed mid-run: the others recover every run, no non-idempotent call repeated', async () => {
    // A non-idempotent write, then a slow idempotent step (where most runs are when the kill comes).
    scripts.set('kill', (turn, req) => {
      const n = /\[kill-(\d+)\]/.exec(JSON.stringify(req.messages))?.[1] ?? '?';
      if (turn === 0) return { tool_calls: [{ name: 'ledger_write', arguments: { entry: `pay-${n}`, ms: Number(n) === 0 ? 4_000 : 100 } }] };
      if (turn === 1) return { tool_calls: [{ name: 'counted_echo', arguments: { text: `after-${n}`, ms: 2_500 } }] };
      return { text: `kill-${n} done` };
    });
    const victim = cluster.instances[2];
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push(await launchRun(victim.url, `[kill-${i}] go`, `sess-kill-${i}`));
    const ledger = () => readLedger(cluster.ledger).filter((l) => ids.includes(l.run_id));
    // Runs 1-5 are in their slow idempotent step; run 0 is inside its non-idempotent write.
    await eventually(() => ledger().filter((l) => l.tool === 'counted_echo' && l.phase === 'started').length >= 5, 10_000, 'five runs in their second step');
    expect(ledger().some((l) => l.run_id === ids[0] && l.tool === 'ledger_write' && l.phase === 'started')).toBe(true);
    const killedAt = Date.now();
    await victim.kill('SIGKILL');
    const survivor = cluster.instances[0].url;
    const ended = await eventually(
      async () => {
        const runs = await Promise.all(ids.map(async (id) => (await getJson(`${survivor}/runs/${id}`)).body));
        return runs.every((r) => TERMINAL.includes(r.status)) ? runs : null;
      },
      20_000,
      'every run of the killed instance at rest',
    );
    const recoveredIn = Date.now() - killedAt;
    // Lease + sweep interval + the runs' own remaining work (2.5 s step) + slack.
    expect(recoveredIn).toBeLessThan((FAST_RECOVERY.runs.lease_seconds + FAST_RECOVERY.runs.orphan_sweep.interval_seconds) * 1000 + 2_500 + 5_000);
    for (const [i, r] of ended.entries()) {
      const writes = ledger().filter((l) => l.run_id === ids[i] && l.tool === 'ledger_write' && l.phase === 'started');
      expect(writes, `run ${i}: the non-idempotent write ran once`).toHaveLength(1);
      // The runs whose write had finished complete on another instance.
      if (i > 0) expect(r.status, JSON.stringify(r.error)).toBe('completed');
    }
    // Recovered by the survivors, after a lapsed lease.
    for (const id of ids.slice(1)) {
      const ev = await getJson(`${survivor}/telemetry/events?run_id=${id}&event_type=run_resumed`);
      expect(ev.body.events.length).toBeGreaterThanOrEqual(1);
      expect(ev.body.events[0].metadata.cause).toBe('recovered_after_lapsed_lease');
    }
    await cluster.start(2); // back to three for the next test
  });

  it('a stale owner (SIGSTOPped past its lease, then continued) is fenced: its writes are refused and the run completes once', async () => {
    scripts.set('stop', (turn) => {
      if (turn === 0) return { tool_calls: [{ name: 'ledger_write', arguments: { entry: 'stop-pay', ms: 50 } }] };
      if (turn === 1) return { tool_calls: [{ name: 'counted_echo', arguments: { text: 'stop-echo', ms: 3_000 } }] };
      return { text: 'stop done' };
    });
    const stale = cluster.instances[1];
    const other = cluster.instances[0].url;
    const runId = await launchRun(stale.url, '[stop] go', 'sess-stop');
    await eventually(
      () => readLedger(cluster.ledger).some((l) => l.run_id === runId && l.tool === 'counted_echo' && l.phase === 'started'),
      10_000,
      'the slow step started',
    );
    process.kill(stale.pid, 'SIGSTOP');
    let resumed: { metadata: { cause: string; previous_owner: string }; actor: { id: string } } | undefined;
    try {
      const done = await eventually(
        async () => {
          const r = (await getJson(`${other}/runs/${runId}`)).body;
          return r.status === 'completed' ? r : null;
        },
        20_000,
        'completed by another instance while the owner is stopped',
      );
      expect(done.response).toBe('stop done');
      resumed = (await getJson(`${other}/telemetry/events?run_id=${runId}&event_type=run_resumed`)).body.events[0];
      expect(resumed?.metadata.cause).toBe('recovered_after_lapsed_lease');
    } finally {
      process.kill(stale.pid, 'SIGCONT');
    }
    // The stopped owner wakes up, its tool call ends, and its next write is refused.
    await eventually(() => stale.stderr().includes('run lease lost to another owner'), 10_000, 'the stale owner fenced');
    const final = (await getJson(`${other}/runs/${runId}`)).body;
    expect(final.status).toBe('completed');
    expect(final.response).toBe('stop done');
    expect(final.owner ?? null).toBeNull();
    expect(resumed!.metadata.previous_owner).not.toBe(resumed!.actor.id);
    const writes = readLedger(cluster.ledger).filter((l) => l.run_id === runId && l.tool === 'ledger_write' && l.phase === 'started');
    expect(writes).toHaveLength(1);
  }, 45_000);

  it('an interval task on three instances (one killed on the way) dispatches each occurrence exactly once', async () => {
    scripts.set('tick', () => ({ text: 'tock' }));
    const a = cluster.instances[0].url;
    const created = await postJson(`${a}/background/tasks`, {
      task_id: 'tick-task',
      query: '[tick] once per second',
      schedule: { type: 'interval', seconds: 1 },
      overlap_policy: 'allow_parallel',
    });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const t0 = Date.now();
    // Part of the scenario: the 1 s schedule ticks for 8 s, then 12 s more after a kill.
    await new Promise((r) => setTimeout(r, 8_000));
    await cluster.instances[1].kill('SIGKILL'); // one dispatcher dies mid-way; the others go on
    await new Promise((r) => setTimeout(r, 12_000));
    expect((await postJson(`${a}/background/tasks/tick-task/pause`, {})).status).toBe(200);
    const elapsed = (Date.now() - t0) / 1000;
    // Part of the scenario: a tick dispatched by another instance just before the pause lands in the listing.
    await new Promise((r) => setTimeout(r, 500));
    const runs: Array<{ occurrence_id: string; due_at: string }> = [];
    let cursor: string | null = null;
    do {
      const page: { body: { runs: typeof runs; next_cursor: string | null } } = await getJson(
        `${a}/background/runs?task_id=tick-task&limit=500${cursor ? `&cursor=${cursor}` : ''}`,
      );
      runs.push(...page.body.runs);
      cursor = page.body.next_cursor;
    } while (cursor);
    const occurrences = runs.map((r) => r.occurrence_id);
    expect(new Set(occurrences).size, 'no occurrence dispatched twice').toBe(occurrences.length);
    // Every second had its run: none lost while an instance died.
    expect(runs.length).toBeGreaterThanOrEqual(Math.floor(elapsed) - 2);
    expect(runs.length).toBeLessThanOrEqual(Math.ceil(elapsed) + 1);
    const due = runs.map((r) => Date.parse(r.due_at)).sort((x, y) => x - y);
    for (let i = 1; i < due.length; i++) expect(due[i] - due[i - 1]).toBe(1000);
  }, 60_000);
});
