// The xstate upgrade check. xstate is pinned to one exact version; a bump is
// checked by running this file (with test/runtime and test/background/snapshot-fixtures.test.ts,
// which do the same through a real server): every snapshot fixture in test/fixtures/snapshots/
// (sync run snapshots run-v*, background-run rows bg-run-v* with the agent-run snapshots they hold)
// is restored with today's machines on the installed xstate and driven to a final state, with
// every effect stubbed. A bump that changes how xstate restores or steps a snapshot fails here.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, waitFor, type AnyActorRef } from 'xstate';
import { BACKGROUND_RUN_MACHINE_VERSION, backgroundRunMachine, persistedSnapshotOf, type BackgroundRunContext } from '../../machines/background-run.machine.js';
import { RUN_MACHINE_VERSION, runMachine, type ApprovalState, type BudgetRequest, type RunContext } from '../../machines/run.machine.js';

const ROOT = join(import.meta.dirname, '../..');
const FIXTURES = join(ROOT, 'test/fixtures/snapshots');
const json = (path: string) => JSON.parse(readFileSync(path, 'utf8'));

interface Fixture {
  scenario: string;
  machine_version: number;
  run_id: string;
  records: Array<{ kind: string; id: string; value: any }>;
}
const fixtures = readdirSync(FIXTURES)
  .filter((f) => f.endsWith('.json'))
  .sort()
  .map((f) => [f, json(join(FIXTURES, f)) as Fixture] as const);

/**
 * The run being driven. Since run machine v3 the effects are invoked with the run id only and read
 * the context from the actor (as src/runtime/run-effects.ts does), so the stubs read it here.
 */
let driven: AnyActorRef | null = null;

/** The run machine with every effect answering at once: a final answer, no tools, budget ok. */
const stubbedRun = runMachine.provide({
  actors: {
    checkInput: fromPromise(async () => ({ allowed: true })) as never,
    readInbox: fromPromise(async () => ({ messages: [], interrupt_id: null })) as never,
    reserveBudget: fromPromise(async () => ({ ok: true as const })) as never,
    callModel: fromPromise(async () => ({
      result: { text: 'done', tool_calls: [], usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2 }, finish_reason: 'stop', model: 'stub' },
      cost_usd: 0,
    })) as never,
    governTools: fromPromise(async () => ({ decisions: [], approvals: [] })) as never,
    executeTools: fromPromise(async ({ input }: { input: { ctx?: RunContext } }) =>
      (input.ctx ?? (driven!.getSnapshot().context as RunContext)).pending.map((p) => ({ tool_call_id: p.id, tool_name: p.name, content: 'ok' })),
    ) as never,
  },
});

/** Restores a run snapshot, gives it what it waits for (a decision, a grant) and waits for its end. */
async function driveRun(snapshot: unknown): Promise<string> {
  const actor = createActor(stubbedRun, { snapshot } as never) as AnyActorRef;
  driven = actor;
  actor.start();
  const s = actor.getSnapshot();
  if (s.value === 'awaitingApproval') {
    const approvals = (s.context as RunContext).approvals.map((a: ApprovalState) =>
      a.status === 'pending' ? { ...a, status: 'approved' as const, approver: 'upgrade-test' } : a,
    );
    actor.send({ type: 'APPROVALS_DECIDED', approvals });
  } else if (s.value === 'awaitingBudget') {
    actor.send({ type: 'BUDGET_GRANTED', request: { ...(s.context as RunContext).budget_request!, status: 'granted' } as BudgetRequest });
  }
  const end = await waitFor(actor, (x) => x.status !== 'active');
  actor.stop();
  return end.value as string;
}

/** Restores a background-run row the way run-host.ts does and takes it through one attempt to completed. */
function driveBackgroundRun(row: BackgroundRunContext): string {
  const logic = backgroundRunMachine.provide({ actions: { record: () => {}, cancelAgent: () => {} } });
  const actor = createActor(logic, { snapshot: persistedSnapshotOf(row) } as never).start();
  const lease = { worker_id: 'w', lease_token: 'l', lease_expires_at: '2100-01-01T00:00:00.000Z' };
  const at = '2100-01-01T00:00:00.000Z';
  const send = (e: Parameters<typeof actor.send>[0]) => actor.send(e);
  let s = actor.getSnapshot();
  if (s.value === 'awaiting') send({ type: 'RESUME', at });
  if (actor.getSnapshot().value === 'running') send({ type: 'RECOVER', at, attempt_id: 'recovery', ...lease });
  if (actor.getSnapshot().value === 'queued') send({ type: 'CLAIM', at, ...lease });
  if (actor.getSnapshot().value === 'claimed') send({ type: 'START', at, attempt_id: 'attempt' });
  s = actor.getSnapshot();
  send({
    type: 'AGENT_DONE',
    at,
    agent_run_id: s.context.internal.agent_run_id!,
    outcome: 'completed',
    error: null,
    result_preview: 'done',
    retryable: true,
    side_effects: [],
  });
  s = actor.getSnapshot();
  actor.stop();
  return `${s.status}:${String(s.value)}`;
}

describe('xstate is pinned', () => {
  it('package.json names one exact version, the lockfile and node_modules hold that version', () => {
    const pinned = json(join(ROOT, 'package.json')).dependencies.xstate as string;
    expect(pinned).toMatch(/^\d+\.\d+\.\d+$/);
    const lock = json(join(ROOT, 'package-lock.json'));
    expect(lock.packages[''].dependencies.xstate).toBe(pinned);
    expect(lock.packages['node_modules/xstate'].version).toBe(pinned);
    expect(json(join(ROOT, 'node_modules/xstate/package.json')).version).toBe(pinned);
  });
});

describe("every snapshot fixture restores on the installed xstate and today's machines", () => {
  it('there are sync and background fixtures', () => {
    expect(fixtures.filter(([f]) => f.startsWith('run-v')).length).toBeGreaterThanOrEqual(3);
    expect(fixtures.filter(([f]) => f.startsWith('bg-run-v')).length).toBeGreaterThanOrEqual(2);
  });

  for (const [file, fixture] of fixtures) {
    it(`${file}: its run snapshots end completed`, async () => {
      const snapshots = fixture.records.filter((r) => r.kind === 'snapshots');
      expect(snapshots.length).toBeGreaterThan(0);
      for (const r of snapshots) {
        expect(r.value.machine_version ?? 1).toBeLessThanOrEqual(RUN_MACHINE_VERSION);
        expect(await driveRun(r.value.snapshot), r.id).toBe('completed');
      }
    });

    if (file.startsWith('bg-run-v')) {
      it(`${file}: the background run ends completed`, () => {
        const row = fixture.records.find((r) => r.kind === 'bg_runs' && r.id === fixture.run_id)!.value;
        expect(row.machine_version).toBeLessThanOrEqual(BACKGROUND_RUN_MACHINE_VERSION);
        const { machine_version: _v, event_seq: _s, outbox: _o, ...ctx } = row;
        expect(driveBackgroundRun(ctx as BackgroundRunContext)).toBe('done:completed');
      });
    }
  }
});
