// Pure tests of the two background machines: no store, no timers; effects are recorded.
import { describe, expect, it } from 'vitest';
import { BACKGROUND_RUN_STATUSES } from '../../machines/background-types.js';
import { createActor, fromCallback } from 'xstate';
import {
  backgroundRunMachine,
  backgroundRunIdOf,
  agentRunIdFor,
  persistedSnapshotOf,
  stateOfStatus,
  type BackgroundRunContext,
  type BackgroundRunEvent,
  type RecordParams,
  type StartAgentParams,
  type AgentRunChildEvent,
} from '../../machines/background-run.machine.js';
import { taskMachine, type DispatchParams, type DropParams, type TaskInput } from '../../machines/task.machine.js';
import type { RetryPolicy } from '../../machines/policies/retry.js';

const T0 = Date.parse('2030-01-01T00:00:00Z');
const at = (s: number) => new Date(T0 + s * 1000).toISOString();

function ctx(retry: RetryPolicy = {}, maxAttempts = (retry.max_retries ?? 0) + 1): BackgroundRunContext {
  return {
    run: {
      run_id: 'r1',
      task_id: 't1',
      agent_id: 'default',
      query_snapshot: 'q',
      trigger_type: 'manual',
      session_id: 's',
      workspace_path: '/w',
      status: 'queued',
      attempt: 0,
      max_attempts: maxAttempts,
      lease_generation: 0,
      lease_owner: null,
      lease_token: null,
      occurrence_id: null,
      error: null,
      result_preview: null,
      triggered_at: at(0),
      queued_at: at(0),
      claimed_at: null,
      started_at: null,
      heartbeat_at: null,
      lease_expires_at: null,
      finished_at: null,
      cancel_requested_at: null,
      due_at: null,
      metadata: {},
      trigger_metadata: {},
    },
    internal: {
      trace_id: 'trace_1',
      span_id: 'span_1',
      agent_run_id: null,
      continue_agent: false,
      next_reason: null,
      retry_at: null,
      not_before: null,
      retry_policy: retry,
      timeout_seconds: null,
      overlap_policy: 'skip_if_running',
      write_events_jsonl: true,
      write_run_json: true,
      current_attempt: null,
      last_closed_attempt: null,
    },
  };
}

function harness(input: BackgroundRunContext, restore = false) {
  const records: Array<{ status: string; params: RecordParams }> = [];
  const starts: StartAgentParams[] = [];
  const cancels: Array<string | null> = [];
  const told: Array<{ agent_run_id: string; type: string }> = [];
  /** The latest agent run child's way back to its parent. */
  const child: { sendBack: (e: BackgroundRunEvent) => void } = { sendBack: () => {} };
  const machine = backgroundRunMachine.provide({
    actions: {
      record: ({ context }, params) => records.push({ status: context.run.status, params }),
      cancelAgent: (_a, params) => cancels.push(params.agent_run_id),
    },
    actors: {
      // The agent run child: its input is how the attempt's agent run starts; what it is told is recorded.
      agentRun: fromCallback<AgentRunChildEvent, StartAgentParams>(({ input, receive, sendBack }) => {
        starts.push(input);
        child.sendBack = sendBack;
        receive((e) => told.push({ agent_run_id: input.agent_run_id, type: e.type }));
      }),
    },
  });
  const actor = restore ? createActor(machine, { snapshot: persistedSnapshotOf(input) as never, input: undefined as never }) : createActor(machine, { input });
  actor.start();
  const send = (e: BackgroundRunEvent) => actor.send(e);
  const events = () => records.flatMap((r) => r.params.events.map((e) => e.type));
  return {
    actor,
    send,
    records,
    starts,
    cancels,
    told,
    child,
    events,
    run: () => actor.getSnapshot().context.run,
    internal: () => actor.getSnapshot().context.internal,
  };
}

const claim = (n: number): BackgroundRunEvent => ({ type: 'CLAIM', at: at(n), worker_id: 'w1', lease_token: `lease_${n}`, lease_expires_at: at(n + 30) });
const start = (n: number): BackgroundRunEvent => ({ type: 'START', at: at(n), attempt_id: `attempt_${n}` });
const done = (
  n: number,
  agent: string,
  outcome: Extract<BackgroundRunEvent, { type: 'AGENT_DONE' }>['outcome'],
  extra: Partial<Extract<BackgroundRunEvent, { type: 'AGENT_DONE' }>> = {},
): BackgroundRunEvent => ({
  type: 'AGENT_DONE',
  at: at(n),
  agent_run_id: agent,
  outcome,
  error: outcome === 'completed' ? null : 'boom',
  result_preview: outcome === 'completed' ? 'answer' : null,
  retryable: true,
  side_effects: [],
  ...extra,
});

describe('background-run machine', () => {
  it('queued -> claimed -> running -> completed, with a fenced lease and one attempt', () => {
    const h = harness(ctx());
    h.send(claim(1));
    expect(h.run()).toMatchObject({ status: 'claimed', lease_owner: 'w1', lease_token: 'lease_1', lease_generation: 1, claimed_at: at(1) });
    h.send(start(2));
    expect(h.run()).toMatchObject({ status: 'running', attempt: 1, started_at: at(2) });
    expect(h.starts).toEqual([{ mode: 'fresh', agent_run_id: 'r1', attempt: 1 }]);
    h.send({ type: 'HEARTBEAT', at: at(3), lease_expires_at: at(33) });
    expect(h.run()).toMatchObject({ heartbeat_at: at(3), lease_expires_at: at(33) });
    h.send(done(4, 'r1', 'completed'));
    expect(h.actor.getSnapshot().status).toBe('done');
    expect(h.run()).toMatchObject({
      status: 'completed',
      finished_at: at(4),
      result_preview: 'answer',
      lease_owner: null,
      lease_token: null,
      lease_expires_at: null,
    });
    expect(h.events()).toEqual(['background_run_claimed', 'background_run_started', 'background_run_heartbeat', 'background_run_completed']);
    // The attempt opened at start and closed at the end rode along with the record effects.
    expect(h.records[1].params.attempts[0]).toMatchObject({ attempt_number: 1, status: 'running', reason: 'initial', worker_id: 'w1', lease_token: 'lease_1' });
    expect(h.records[3].params.attempts[0]).toMatchObject({ attempt_number: 1, status: 'completed', finished_at: at(4) });
  });

  it('retries with the policy delay and a fresh agent run id, then fails when attempts are used up', () => {
    const h = harness(ctx({ max_retries: 1, initial_delay_seconds: 5 }));
    h.send(claim(1));
    h.send(start(1));
    h.send(done(2, 'r1', 'failed'));
    expect(h.run().status).toBe('retrying');
    expect(h.internal().retry_at).toBe(at(7));
    expect(h.records.at(-1)!.params.attempts[0]).toMatchObject({ status: 'failed', retry_delay_seconds: 5 });
    h.send({ type: 'RETRY_DUE', at: at(7) });
    expect(h.run().status).toBe('queued');
    h.send(claim(8));
    h.send(start(8));
    expect(h.run()).toMatchObject({ status: 'running', attempt: 2 });
    expect(h.starts.at(-1)).toEqual({ mode: 'fresh', agent_run_id: 'r1.a2', attempt: 2 });
    expect(h.records.at(-1)!.params.attempts[0]).toMatchObject({ attempt_number: 2, reason: 'retry', agent_run_id: 'r1.a2' });
    // A late answer from the first agent run changes nothing.
    h.send(done(9, 'r1', 'completed'));
    expect(h.run().status).toBe('running');
    h.send(done(10, 'r1.a2', 'failed'));
    expect(h.run()).toMatchObject({ status: 'failed', error: 'boom' });
    expect(h.events()).toEqual([
      'background_run_claimed',
      'background_run_started',
      'background_run_retrying',
      'background_run_queued',
      'background_run_claimed',
      'background_run_started',
      'background_run_failed',
    ]);
  });

  it('backs off exponentially, capped at max_delay_seconds', () => {
    const h = harness(ctx({ max_retries: 5, initial_delay_seconds: 2, backoff: 'exponential', max_delay_seconds: 5 }));
    const delays: Array<number | null> = [];
    for (let i = 0; i < 3; i++) {
      h.send(claim(i * 100));
      h.send(start(i * 100));
      h.send(done(i * 100 + 1, h.internal().agent_run_id!, 'failed'));
      delays.push(h.records.at(-1)!.params.attempts[0].retry_delay_seconds);
      h.send({ type: 'RETRY_DUE', at: at(i * 100 + 50) });
    }
    expect(delays).toEqual([2, 4, 5]);
  });

  it('never retries from scratch after a non-idempotent call with effect, nor a cancelled or blocked run', () => {
    const side = [{ tool_call_id: 'c1', tool_name: 'send_email', outcome: 'success' }];
    const h = harness(ctx({ max_retries: 3, initial_delay_seconds: 0 }));
    h.send(claim(1));
    h.send(start(1));
    h.send(done(2, 'r1', 'failed', { side_effects: side }));
    expect(h.run()).toMatchObject({ status: 'failed', metadata: { side_effects: side } });

    const b = harness(ctx({ max_retries: 3 }));
    b.send(claim(1));
    b.send(start(1));
    b.send(done(2, 'r1', 'failed', { retryable: false }));
    expect(b.run().status).toBe('failed');

    const c = harness(ctx({ max_retries: 3 }));
    c.send(claim(1));
    c.send(start(1));
    c.send({ type: 'CANCEL', at: at(2) });
    // The running attempt's agent run is the run's child: it is told, no separate effect runs.
    expect(c.told).toEqual([{ agent_run_id: 'r1', type: 'CANCEL' }]);
    expect(c.cancels).toEqual([]);
    expect(c.run()).toMatchObject({ status: 'running', cancel_requested_at: at(2) });
    c.send(done(3, 'r1', 'failed'));
    expect(c.run().status).toBe('failed');
  });

  it('the agent run is a child of `running`: started on entry, told TIMEOUT, its end sent back, stopped on leaving', () => {
    const h = harness(ctx());
    h.send(claim(1));
    h.send(start(1));
    expect(h.actor.getSnapshot().children.agent).toBeDefined();
    h.send({ type: 'TIMEOUT', at: at(2), agent_run_id: 'r0' }); // an older attempt's: nothing
    h.send({ type: 'TIMEOUT', at: at(2), agent_run_id: 'r1' });
    expect(h.told).toEqual([{ agent_run_id: 'r1', type: 'TIMEOUT' }]);
    expect(h.records).toHaveLength(2); // a timeout writes nothing until the agent run's end
    // The child sends the agent run's end back to its parent.
    h.child.sendBack(done(3, 'r1', 'timeout'));
    expect(h.run().status).toBe('timeout');
    expect(h.actor.getSnapshot().children.agent).toBeUndefined();
  });

  it('a row restored `running` has no child here: a cancel stops the agent run through the cancelAgent effect', () => {
    const base = ctx();
    const running: BackgroundRunContext = {
      run: { ...base.run, status: 'running', attempt: 1, lease_owner: 'w9', lease_token: 'l9', lease_generation: 1 },
      internal: { ...base.internal, agent_run_id: 'r1' },
    };
    const h = harness(running, true);
    expect(h.starts).toEqual([]);
    h.send({ type: 'CANCEL', at: at(2) });
    expect(h.cancels).toEqual(['r1']);
    expect(h.run()).toMatchObject({ status: 'running', cancel_requested_at: at(2) });
  });

  it('a timeout retries only when retry_on includes it, and ends `timeout` otherwise', () => {
    const h = harness(ctx({ max_retries: 1, retry_on: ['exception'] }));
    h.send(claim(1));
    h.send(start(1));
    h.send(done(2, 'r1', 'timeout'));
    expect(h.run().status).toBe('timeout');
    expect(h.events().at(-1)).toBe('background_run_timeout');
    expect(h.records.at(-1)!.params.attempts[0]).toMatchObject({ status: 'timeout' });

    const r = harness(ctx({ max_retries: 1, initial_delay_seconds: 0 }));
    r.send(claim(1));
    r.send(start(1));
    r.send(done(2, 'r1', 'timeout'));
    expect(r.run().status).toBe('retrying');
    expect(r.events().slice(-2)).toEqual(['background_run_timeout', 'background_run_retrying']);
  });

  it('cancels from queued, claimed, retrying and awaiting; terminal states take nothing', () => {
    const q = harness(ctx());
    q.send({ type: 'CANCEL', at: at(1) });
    expect(q.run()).toMatchObject({ status: 'cancelled', cancel_requested_at: at(1), finished_at: at(1) });
    expect(q.actor.getSnapshot().can({ type: 'CANCEL', at: at(2) })).toBe(false);

    const c = harness(ctx());
    c.send(claim(1));
    c.send({ type: 'CANCEL', at: at(2) });
    expect(c.run().status).toBe('cancelled');
    c.send(start(3));
    expect(c.starts).toEqual([]);

    const w = harness(ctx());
    w.send(claim(1));
    w.send(start(1));
    w.send(done(2, 'r1', 'awaiting_approval'));
    expect(w.run()).toMatchObject({ status: 'awaiting_approval', lease_owner: null });
    w.send({ type: 'CANCEL', at: at(3) });
    expect(w.run().status).toBe('cancelled');
    expect(w.cancels).toEqual(['r1']);
    expect(w.records.at(-1)!.params.attempts[0]).toMatchObject({ status: 'cancelled' });
  });

  it('a run paused for a person resumes through the queue and continues the same agent run and attempt', () => {
    const h = harness(ctx());
    h.send(claim(1));
    h.send(start(1));
    h.send(done(2, 'r1', 'awaiting_budget'));
    expect(h.run().status).toBe('awaiting_budget');
    expect(h.records.at(-1)!.params.events).toEqual([]);
    h.send({ type: 'RESUME', at: at(3) });
    expect(h.run().status).toBe('queued');
    h.send(claim(4));
    h.send(start(4));
    // Re-queued after the decision, it still reads as queued before it started.
    expect(h.run()).toMatchObject({ queued_at: at(0), started_at: at(1) });
    expect(h.run()).toMatchObject({ status: 'running', attempt: 1, lease_generation: 2 });
    expect(h.starts.at(-1)).toEqual({ mode: 'continue', agent_run_id: 'r1', attempt: 1 });
    h.send(done(5, 'r1', 'completed'));
    expect(h.run().status).toBe('completed');
  });

  it('recovers a lapsed lease: claimed -> queued; running -> next attempt continues the same agent run, else failed', () => {
    const c = harness(ctx());
    c.send(claim(1));
    c.send({ type: 'RECOVER', at: at(40), worker_id: 'w2', lease_token: 'l2', lease_expires_at: at(70), attempt_id: 'a2', previous_owner: 'w1' });
    expect(c.run()).toMatchObject({ status: 'queued', lease_owner: null });
    expect(c.events().at(-1)).toBe('background_run_recovered');
    c.send(claim(41));
    c.send(start(41));
    expect(c.records.at(-1)!.params.attempts[0]).toMatchObject({ attempt_number: 1, reason: 'lease_expired' });

    const r = harness(ctx({ max_retries: 1 }));
    r.send(claim(1));
    r.send(start(1));
    r.send({ type: 'RECOVER', at: at(40), worker_id: 'w2', lease_token: 'l2', lease_expires_at: at(70), attempt_id: 'a2', previous_owner: 'w1' });
    expect(r.run()).toMatchObject({ status: 'running', attempt: 2, lease_owner: 'w2', lease_token: 'l2', lease_generation: 2 });
    expect(r.starts.at(-1)).toEqual({ mode: 'continue', agent_run_id: 'r1', attempt: 2 });
    expect(r.records.at(-1)!.params.attempts).toEqual([
      expect.objectContaining({ attempt_number: 1, status: 'interrupted' }),
      expect.objectContaining({ attempt_number: 2, status: 'running', reason: 'recovery', agent_run_id: 'r1', worker_id: 'w2' }),
    ]);
    expect(r.events().slice(-2)).toEqual(['background_run_recovered', 'background_run_started']);

    const x = harness(ctx());
    x.send(claim(1));
    x.send(start(1));
    x.send({ type: 'RECOVER', at: at(40), worker_id: 'w2', lease_token: 'l2', lease_expires_at: at(70), attempt_id: 'a2' });
    expect(x.run()).toMatchObject({ status: 'failed', error: expect.stringContaining('no attempts remain') });
    expect(x.records.at(-1)!.params.attempts[0]).toMatchObject({ status: 'interrupted' });
  });

  it("a RECOVER that carries its agent run's end or park settles the run from it, in one step, restored from the row", () => {
    const recover = (agent: Extract<BackgroundRunEvent, { type: 'RECOVER' }>['agent']): BackgroundRunEvent => ({
      type: 'RECOVER',
      at: at(40),
      worker_id: 'w2',
      lease_token: 'l2',
      lease_expires_at: at(70),
      attempt_id: 'a2',
      previous_owner: 'w1',
      agent,
    });
    const running = () => {
      const h = harness(ctx({ max_retries: 1 }));
      h.send(claim(1));
      h.send(start(1));
      // The lapsed owner's row, restored by the finder: no child, no entry action replayed.
      return harness(h.actor.getSnapshot().context, true);
    };
    const settled = { error: null, result_preview: 'answer', retryable: true, side_effects: [], decided: false };

    const c = running();
    c.send(recover({ ...settled, outcome: 'completed' }));
    expect(c.run()).toMatchObject({ status: 'completed', attempt: 1, result_preview: 'answer', lease_owner: null });
    expect(c.records).toHaveLength(1); // one step, one row write
    expect(c.events()).toEqual(['background_run_completed']);
    expect(c.starts).toEqual([]); // nothing runs again

    const f = running();
    f.send(recover({ ...settled, outcome: 'failed', error: 'boom', result_preview: null }));
    expect(f.run()).toMatchObject({ status: 'retrying', attempt: 1 }); // the retry policy decides, as for AGENT_DONE

    const p = running();
    p.send(recover({ ...settled, outcome: 'awaiting_approval', result_preview: null }));
    expect(p.run()).toMatchObject({ status: 'awaiting_approval', lease_owner: null });

    const d = running();
    d.send(recover({ ...settled, outcome: 'awaiting_approval', result_preview: null, decided: true }));
    expect(d.run()).toMatchObject({ status: 'queued', attempt: 1 });
    expect(d.records.map((r) => r.status)).toEqual(['awaiting_approval', 'queued']); // both steps in one send
    expect(d.events()).toEqual(['background_run_queued']);

    // Nothing read (or still running): the attempt is recovered and continues the agent run.
    const r = running();
    r.send(recover(null));
    expect(r.run()).toMatchObject({ status: 'running', attempt: 2, lease_owner: 'w2' });
    expect(r.starts).toEqual([{ mode: 'continue', agent_run_id: 'r1', attempt: 2 }]);
  });

  it('restores from a stored row alone and goes on from its status', () => {
    const h = harness(ctx());
    h.send(claim(1));
    h.send(start(1));
    const saved = h.actor.getSnapshot().context;
    const r = harness(saved, true);
    expect(r.actor.getSnapshot().value).toBe('running');
    expect(r.records).toEqual([]); // no entry action replays
    r.send(done(2, 'r1', 'completed'));
    expect(r.run().status).toBe('completed');
    const parked = { ...saved, run: { ...saved.run, status: 'awaiting_approval' as const } };
    expect(harness(parked, true).actor.getSnapshot().value).toBe('awaiting');
  });

  it("restores from the same persisted snapshot xstate builds, for every status (the state's part built once)", () => {
    // Every status the machine knows (machines/background-types.ts), so a new one is checked too.
    for (const status of BACKGROUND_RUN_STATUSES) {
      const c = { ...ctx(), run: { ...ctx().run, status } };
      const built = backgroundRunMachine.getPersistedSnapshot(backgroundRunMachine.resolveState({ value: stateOfStatus(status), context: c }));
      // Twice: the second comes from the state's cached part, with this row's context in it.
      for (let i = 0; i < 2; i++) {
        const snap = persistedSnapshotOf(c) as unknown as { context: unknown };
        expect(snap, status).toEqual(built);
        expect(snap.context).toBe(c);
      }
    }
  });

  it('maps agent run ids to background run ids', () => {
    expect(agentRunIdFor('bgrun_x', 1)).toBe('bgrun_x');
    expect(agentRunIdFor('bgrun_x', 3)).toBe('bgrun_x.a3');
    expect(backgroundRunIdOf('bgrun_x.a3')).toBe('bgrun_x');
    expect(backgroundRunIdOf('bgrun_x')).toBe('bgrun_x');
  });
});

describe('task machine', () => {
  function task(input: Partial<TaskInput> = {}) {
    const dispatched: DispatchParams[] = [];
    const dropped: DropParams[] = [];
    const actor = createActor(
      taskMachine.provide({
        actions: { dispatch: (_a, p) => dispatched.push(p), drop: (_a, p) => dropped.push(p) },
      }),
      { input: { task_id: 't1', overlap_policy: 'skip_if_running', enabled: true, paused: false, ...input } },
    );
    actor.start();
    return { actor, dispatched, dropped };
  }
  const occ = { occurrence_id: 'interval:1:2030-01-01T00:00:00.000Z', trigger_type: 'interval' as const, due_at: at(0), run_at: at(0), missed: false };
  const idle = { activeRunIds: [], queuedRunIds: [] };
  const busy = { activeRunIds: ['r1'], queuedRunIds: ['r2'] };

  it('turns a due occurrence into one dispatch with the overlap decision', () => {
    const t = task();
    t.actor.send({ type: 'DUE', occurrence: occ, inFlight: idle });
    t.actor.send({ type: 'DUE', occurrence: occ, inFlight: busy });
    expect(t.dispatched.map((d) => [d.trigger, d.decision.action])).toEqual([
      ['schedule', 'start'],
      ['schedule', 'skip'],
    ]);
    expect(t.dispatched[0].occurrence).toEqual(occ);
  });

  it('follows the overlap policy it is updated to', () => {
    const t = task();
    for (const policy of ['queue_next', 'cancel_previous', 'allow_parallel'] as const) {
      t.actor.send({ type: 'UPDATE', overlap_policy: policy });
      t.actor.send({ type: 'MANUAL', query: 'x', inFlight: busy });
    }
    expect(t.dispatched.map((d) => d.decision)).toEqual([
      { action: 'queue', cancel: [] },
      { action: 'cancel_then_queue', cancel: ['r1', 'r2'] },
      { action: 'start', cancel: [] },
    ]);
    expect(t.dispatched.every((d) => d.trigger === 'manual' && d.query === 'x')).toBe(true);
  });

  it('paused drops due occurrences but still runs by hand; resume schedules again', () => {
    const t = task({ paused: true, paused_reason: 'ops' });
    expect(t.actor.getSnapshot().value).toBe('paused');
    t.actor.send({ type: 'DUE', occurrence: occ, inFlight: idle });
    expect(t.dropped).toEqual([{ task_id: 't1', occurrence: occ, reason: 'paused' }]);
    t.actor.send({ type: 'MANUAL', query: null, inFlight: idle });
    expect(t.dispatched).toHaveLength(1);
    t.actor.send({ type: 'RESUME' });
    expect(t.actor.getSnapshot().value).toBe('scheduling');
    t.actor.send({ type: 'PAUSE', reason: 'again' });
    expect(t.actor.getSnapshot().context).toMatchObject({ paused: true, paused_reason: 'again' });
  });

  it('disabled runs nothing until enabled', () => {
    const t = task({ enabled: false });
    expect(t.actor.getSnapshot().value).toBe('disabled');
    t.actor.send({ type: 'MANUAL', query: null, inFlight: idle });
    t.actor.send({ type: 'DUE', occurrence: occ, inFlight: idle });
    expect(t.dispatched).toEqual([]);
    expect(t.dropped.map((d) => d.reason)).toEqual(['disabled', 'disabled']);
    t.actor.send({ type: 'ENABLE' });
    expect(t.actor.getSnapshot().value).toBe('scheduling');
    t.actor.send({ type: 'DISABLE' });
    expect(t.actor.getSnapshot().value).toBe('disabled');
  });
});
