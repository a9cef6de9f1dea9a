// The run machine alone, with its effects stubbed: the loop, pauses and terminations are pure logic.
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, waitFor, type AnyActorRef } from 'xstate';
import {
  effectRunId,
  runMachine,
  type EffectInput,
  recordStatusOf,
  type ApprovalState,
  type InboxRead,
  type ModelStepResult,
  type ReserveResult,
  type RunContext,
  type ToolOutcome,
} from '../../machines/run.machine.js';
import type { ModelCallResult } from '../../src/agent/model/types.js';

const RUN = 'run';
const input = { run_id: 'run_1', session_id: 's', agent_name: 'a', max_steps: 5, messages: [{ role: 'user' as const, content: 'hi' }], query: 'hi' };
const usage = { input_tokens: 10, output_tokens: 5, total_tokens: 15 };
const reply = (r: Partial<ModelCallResult>): { result: ModelCallResult; cost_usd: number } => ({
  result: { text: '', tool_calls: [], usage, finish_reason: 'stop', model: 'm', ...r },
  cost_usd: 0.01,
});

function machineWith(opts: {
  replies: Array<ReturnType<typeof reply>>;
  reserve?: (phase: string, ctx: RunContext) => ReserveResult;
  approvals?: ApprovalState[];
  allowed?: boolean;
  execute?: (ctx: RunContext) => ToolOutcome[];
  /** The inbox as the runtime would hand it over (default: empty); called at every boundary. */
  inbox?: (ctx: RunContext) => InboxRead;
  /** The runtime's guards (default: the machine's own, which always read and always reserve). */
  guards?: { inboxMaybe?: () => boolean; budgeted?: () => boolean };
}) {
  const replies = [...opts.replies];
  const steps: string[] = [];
  /** How many times each effect was invoked. */
  const invoked: Record<string, number> = {};
  const count = (name: string) => void (invoked[name] = (invoked[name] ?? 0) + 1);
  // Effects read the run's context from the actor, as the runtime's do (their inputs carry only
  // the run id): every actor of these tests is created with systemId RUN (see start below).
  const ctx = (system: { get(id: string): AnyActorRef | undefined }): RunContext => (system.get(RUN)!.getSnapshot() as { context: RunContext }).context;
  const logic = runMachine.provide({
    actors: {
      checkInput: fromPromise<RunContext['guardrail_result'], { query: string; run_id: string }>(async () =>
        opts.allowed === false ? { allowed: false, rule: 'deny_pattern', message: 'no' } : { allowed: true },
      ),
      reserveBudget: fromPromise(async ({ input: i, system }) => (count('reserveBudget'), opts.reserve?.(i.phase, ctx(system)) ?? { ok: true as const })),
      callModel: fromPromise(async () => {
        const next = replies.shift();
        if (!next) throw new Error('no more replies');
        return next;
      }),
      governTools: fromPromise(async ({ system }) => ({
        decisions: ctx(system).pending.map((c) => ({ tool_call_id: c.id, effect: 'allow' as const, reason: null })),
        approvals: opts.approvals ?? [],
      })),
      executeTools: fromPromise(
        async ({ system }) =>
          opts.execute?.(ctx(system)) ??
          ctx(system).pending.map((c) => ({ tool_call_id: c.id, tool_name: c.name, content: `ran ${c.name}`, outcome: 'success' as const })),
      ),
      readInbox: fromPromise(async ({ system }) => (count('readInbox'), opts.inbox?.(ctx(system)) ?? { messages: [], interrupt_id: null })),
    },
    actions: { notify: (_a, p) => void steps.push(p.kind) },
    ...(opts.guards ? { guards: opts.guards } : {}),
  });
  return { logic, steps, invoked };
}

describe('run machine', () => {
  it('loops model -> tools -> model until a final answer, adding usage', async () => {
    const { logic, steps } = machineWith({ replies: [reply({ tool_calls: [{ id: 'c1', name: 'clock', arguments: {} }] }), reply({ text: 'done' })] });
    const actor = createActor(logic, { systemId: RUN, input }).start();
    const snap = await waitFor(actor, (s) => s.status === 'done');
    expect(snap.value).toBe('completed');
    expect(snap.context).toMatchObject({
      response: 'done',
      step: 2,
      termination_reason: 'stop',
      usage: { requests: 2, total_tokens: 30, estimated_cost_usd: 0.02 },
    });
    expect(snap.context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(steps).toEqual(['step', 'step', 'final']);
  });

  it('reads the inbox at every boundary and reserves before every call unless the runtime says there is nothing to read or hold', async () => {
    const toolThenAnswer = () => [reply({ tool_calls: [{ id: 'c1', name: 'clock', arguments: {} }] }), reply({ text: 'done' })];
    const run = async (guards?: { inboxMaybe?: () => boolean; budgeted?: () => boolean }) => {
      const m = machineWith({ replies: toolThenAnswer(), ...(guards ? { guards } : {}) });
      const snap = await waitFor(createActor(m.logic, { systemId: RUN, input }).start(), (s) => s.status === 'done');
      return { snap, steps: m.steps, invoked: m.invoked };
    };
    // The machine alone: two boundaries and the final answer's read; model, tools, model reservations.
    const full = await run();
    expect(full.invoked).toEqual({ readInbox: 3, reserveBudget: 3 });
    // Empty inbox, no budget: neither effect runs, and the run ends the same way.
    const lean = await run({ inboxMaybe: () => false, budgeted: () => false });
    expect(lean.invoked).toEqual({});
    expect(lean.snap.value).toBe('completed');
    expect(lean.steps).toEqual(full.steps);
    expect(lean.snap.context).toEqual(full.snap.context);
    // Each guard on its own.
    expect((await run({ inboxMaybe: () => false })).invoked).toEqual({ reserveBudget: 3 });
    expect((await run({ budgeted: () => false })).invoked).toEqual({ readInbox: 3 });
  });

  it('a skipped boundary read still stops for max_steps, and a steer hint makes the next boundary read', async () => {
    let maybe = false;
    const m = machineWith({
      replies: [reply({ tool_calls: [{ id: 'c1', name: 'x', arguments: {} }] }), reply({ text: 'after steer' })],
      inbox: () => ({ messages: [{ message_id: 'm1', content: 'steered' }], interrupt_id: null }),
      execute: (ctx) => ((maybe = true), ctx.pending.map((c) => ({ tool_call_id: c.id, tool_name: c.name, content: 'ok', outcome: 'success' as const }))),
      guards: { inboxMaybe: () => maybe, budgeted: () => false },
    });
    const snap = await waitFor(createActor(m.logic, { systemId: RUN, input }).start(), (s) => s.status === 'done');
    expect(snap.value).toBe('completed');
    expect(snap.context.steered).toEqual(['m1']);
    expect(snap.context.messages.some((x) => x.content === 'steered')).toBe(true);
    const capped = machineWith({
      replies: [reply({ tool_calls: [{ id: 'c1', name: 'x', arguments: {} }] })],
      guards: { inboxMaybe: () => false, budgeted: () => false },
    });
    const end = await waitFor(createActor(capped.logic, { systemId: RUN, input: { ...input, max_steps: 1 } }).start(), (s) => s.status === 'done');
    expect(end.value).toBe('failed');
    expect(end.context.termination_reason).toBe('max_steps');
  });

  it('ends with max_steps when the model never answers', async () => {
    const call = () => reply({ tool_calls: [{ id: `c${Math.random()}`, name: 'x', arguments: {} }] });
    const { logic } = machineWith({ replies: [call(), call(), call()] });
    const actor = createActor(logic, { systemId: RUN, input: { ...input, max_steps: 2 } }).start();
    const snap = await waitFor(actor, (s) => s.status === 'done');
    expect(snap.value).toBe('failed');
    expect(snap.context.termination_reason).toBe('max_steps');
  });

  it('blocks guarded input without calling the model', async () => {
    const { logic } = machineWith({ replies: [], allowed: false });
    const snap = await waitFor(createActor(logic, { systemId: RUN, input }).start(), (s) => s.status === 'done');
    expect(snap.value).toBe('blocked');
    expect(snap.context.termination_reason).toBe('guardrail');
    expect(recordStatusOf('blocked')).toBe('blocked');
  });

  it('waits for approval, then executes after APPROVALS_DECIDED; the persisted snapshot restores the wait', async () => {
    const pending: ApprovalState = {
      approval_id: 'ap1',
      status: 'pending',
      tool_name: 'pay',
      tool_call_id: 'c1',
      arguments: {},
      reason: null,
      created_at: '',
      expires_at: '',
      approver: null,
      note: null,
      decided_at: null,
      edited_arguments: null,
    };
    const { logic } = machineWith({
      replies: [reply({ tool_calls: [{ id: 'c1', name: 'pay', arguments: {} }] }), reply({ text: 'paid' })],
      approvals: [pending],
    });
    const actor = createActor(logic, { systemId: RUN, input }).start();
    await waitFor(actor, (s) => s.value === 'awaitingApproval');
    const saved = JSON.parse(JSON.stringify(actor.getPersistedSnapshot()));
    actor.stop();
    const restored = createActor(logic, { systemId: RUN, snapshot: saved, input }).start();
    expect(restored.getSnapshot().value).toBe('awaitingApproval');
    restored.send({ type: 'APPROVALS_DECIDED', approvals: [{ ...pending, status: 'approved', approver: 'x' }] });
    const done = await waitFor(restored, (s) => s.status === 'done');
    expect(done.value).toBe('completed');
    expect(done.context.approvals[0].status).toBe('used');
  });

  it('pauses for budget; a grant retries the reservation, a denial fails the run', async () => {
    let grants = 0;
    const reserve = (): ReserveResult =>
      grants > 0
        ? { ok: true }
        : {
            ok: false,
            on_exhausted: 'pause',
            request: {
              request_id: 'b1',
              key: 'run:r:total',
              scope: 'run',
              meter: 'tokens',
              limit: 1,
              used: 1,
              needed: 5,
              shortfall: 5,
              status: 'pending',
              asked_at: '',
              phase: 'model',
            },
          };
    const granted = machineWith({ replies: [reply({ text: 'ok' })], reserve });
    const a = createActor(granted.logic, { systemId: RUN, input }).start();
    const waiting = await waitFor(a, (s) => s.value === 'awaitingBudget');
    expect(waiting.context.budget_request?.shortfall).toBe(5);
    grants = 1;
    a.send({ type: 'BUDGET_GRANTED', request: { ...waiting.context.budget_request!, status: 'granted' } });
    expect((await waitFor(a, (s) => s.status === 'done')).value).toBe('completed');

    grants = 0;
    const denied = machineWith({ replies: [], reserve });
    const b = createActor(denied.logic, { systemId: RUN, input }).start();
    await waitFor(b, (s) => s.value === 'awaitingBudget');
    b.send({ type: 'BUDGET_DENIED', request: { ...b.getSnapshot().context.budget_request!, status: 'denied', approver: 'x' } });
    const end = await waitFor(b, (s) => s.status === 'done');
    expect(end.value).toBe('failed');
    expect(end.context.termination_reason).toBe('budget_exhausted');
  });

  it('terminates at once when the budget says terminate', async () => {
    const { logic } = machineWith({
      replies: [],
      reserve: () => ({
        ok: false,
        on_exhausted: 'terminate',
        request: {
          request_id: 'b',
          key: 'k',
          scope: 'run',
          meter: 'tokens',
          limit: 1,
          used: 1,
          needed: 2,
          shortfall: 2,
          status: 'pending',
          asked_at: '',
          phase: 'model',
        },
      }),
    });
    const end = await waitFor(createActor(logic, { systemId: RUN, input }).start(), (s) => s.status === 'done');
    expect(end.value).toBe('failed');
    expect(end.context.termination_reason).toBe('budget_exhausted');
  });

  it('CANCEL and TIMEOUT end the run from any state', async () => {
    const { logic } = machineWith({ replies: [] });
    const hang = logic.provide({ actors: { callModel: fromPromise<ModelStepResult, EffectInput>(() => new Promise<never>(() => {})) } });
    const a = createActor(hang, { systemId: RUN, input }).start();
    await waitFor(a, (s) => s.value === 'calling');
    a.send({ type: 'CANCEL' });
    expect(a.getSnapshot().value).toBe('cancelled');
    expect(a.getSnapshot().context.termination_reason).toBe('cancelled');
    const b = createActor(hang, { systemId: RUN, input }).start();
    await waitFor(b, (s) => s.value === 'calling');
    b.send({ type: 'TIMEOUT' });
    expect(b.getSnapshot().value).toBe('timedOut');
  });

  it('a model failure ends the run with provider_error', async () => {
    const { logic } = machineWith({ replies: [] });
    const end = await waitFor(createActor(logic, { systemId: RUN, input }).start(), (s) => s.status === 'done');
    expect(end.value).toBe('failed');
    expect(end.context.termination_reason).toBe('provider_error');
  });

  describe('steer and interrupt (issue 14)', () => {
    const steer = (id: string, content = `msg ${id}`) => ({ message_id: id, content });

    it('a steer message joins the conversation once, as a user message, before the next model call', async () => {
      // The inbox keeps handing over the same message: the saved context decides what is new.
      const seen: string[][] = [];
      const { logic } = machineWith({
        replies: [reply({ tool_calls: [{ id: 'c1', name: 'clock', arguments: {} }] }), reply({ text: 'done' })],
        inbox: (ctx) => {
          seen.push([...(ctx.steered ?? [])]);
          return { messages: ctx.step >= 1 ? [steer('s1', 'use UTC')] : [], interrupt_id: null };
        },
      });
      const snap = await waitFor(createActor(logic, { systemId: RUN, input }).start(), (s) => s.status === 'done');
      expect(snap.value).toBe('completed');
      expect(snap.context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'user', 'assistant']);
      expect(snap.context.messages[3]).toEqual({ role: 'user', content: 'use UTC' });
      expect(snap.context.steered).toEqual(['s1']);
      // Read at both step boundaries and once more after the final answer.
      expect(seen).toEqual([[], [], ['s1']]);
      expect(snap.context.messages.filter((m) => m.role === 'system')).toEqual([]);
    });

    it('a steer that arrives during the final model call gets one more step', async () => {
      let calls = 0;
      const { logic } = machineWith({
        replies: [reply({ text: 'first answer' }), reply({ text: 'answer to the steer' })],
        inbox: () => ({ messages: calls++ >= 1 ? [steer('s1')] : [], interrupt_id: null }),
      });
      const snap = await waitFor(createActor(logic, { systemId: RUN, input }).start(), (s) => s.status === 'done');
      expect(snap.value).toBe('completed');
      expect(snap.context.response).toBe('answer to the steer');
      expect(snap.context.step).toBe(2);
      expect(snap.context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant']);
    });

    it('no extra step for a late steer when no step is left', async () => {
      let calls = 0;
      const { logic } = machineWith({
        replies: [reply({ text: 'only answer' })],
        inbox: () => ({ messages: calls++ >= 1 ? [steer('s1')] : [], interrupt_id: null }),
      });
      const snap = await waitFor(createActor(logic, { systemId: RUN, input: { ...input, max_steps: 1 } }).start(), (s) => s.status === 'done');
      expect(snap.value).toBe('completed');
      expect(snap.context.response).toBe('only answer');
    });

    it('an interrupt request stops the run at the boundary after the tool batch; RESUME goes on from there, once', async () => {
      let interrupt: string | null = null;
      const ran: string[] = [];
      const { logic, steps } = machineWith({
        replies: [reply({ tool_calls: [{ id: 'c1', name: 'pay', arguments: {} }] }), reply({ text: 'done' })],
        execute: (ctx) => {
          interrupt = 'int_1'; // requested while the tool runs: the tool still finishes
          ran.push(...ctx.pending.map((c) => c.id));
          return ctx.pending.map((c) => ({ tool_call_id: c.id, tool_name: c.name, content: 'paid', outcome: 'success' as const }));
        },
        inbox: () => ({ messages: interrupt ? [steer('s1', 'then stop')] : [], interrupt_id: interrupt }),
      });
      const actor = createActor(logic, { systemId: RUN, input }).start();
      const stopped = await waitFor(actor, (s) => s.value === 'interrupted');
      expect(recordStatusOf('interrupted')).toBe('interrupted');
      expect(ran).toEqual(['c1']);
      expect(stopped.context).toMatchObject({ step: 1, interrupt_handled: 'int_1', steered: ['s1'] });
      expect(stopped.context.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'user']);
      // Saved and restored, as the runtime parks and resumes it.
      const saved = JSON.parse(JSON.stringify(actor.getPersistedSnapshot()));
      actor.stop();
      const restored = createActor(logic, { systemId: RUN, snapshot: saved, input }).start();
      expect(restored.getSnapshot().value).toBe('interrupted');
      restored.send({ type: 'RESUME' });
      const done = await waitFor(restored, (s) => s.status === 'done');
      expect(done.value).toBe('completed');
      expect(done.context.steered).toEqual(['s1']); // not delivered twice
      expect(done.context.messages.filter((m) => m.role === 'user')).toHaveLength(2);
      expect(steps).toContain('resumed_interrupt');
      expect(ran).toEqual(['c1']);
    });

    it('a v1 snapshot (no steered / interrupt_handled) restores and still takes steer messages', async () => {
      const pending: ApprovalState = {
        approval_id: 'ap1',
        status: 'pending',
        tool_name: 'pay',
        tool_call_id: 'c1',
        arguments: {},
        reason: null,
        created_at: '',
        expires_at: '',
        approver: null,
        note: null,
        decided_at: null,
        edited_arguments: null,
      };
      let open = false;
      const { logic } = machineWith({
        replies: [reply({ tool_calls: [{ id: 'c1', name: 'pay', arguments: {} }] }), reply({ text: 'paid' })],
        approvals: [pending],
        inbox: () => ({ messages: open ? [steer('s1', 'pay in EUR')] : [], interrupt_id: null }),
      });
      const a = createActor(logic, { systemId: RUN, input }).start();
      await waitFor(a, (s) => s.value === 'awaitingApproval');
      const v1 = JSON.parse(JSON.stringify(a.getPersistedSnapshot()));
      a.stop();
      delete v1.context.steered;
      delete v1.context.interrupt_handled;
      open = true;
      const restored = createActor(logic, { systemId: RUN, snapshot: v1, input }).start();
      restored.send({ type: 'APPROVALS_DECIDED', approvals: [{ ...pending, status: 'approved', approver: 'x' }] });
      const done = await waitFor(restored, (s) => s.status === 'done');
      expect(done.value).toBe('completed');
      expect(done.context.steered).toEqual(['s1']);
      expect(done.context.messages.filter((m) => m.role === 'user' && m.content === 'pay in EUR')).toHaveLength(1);
    });

    it('CANCEL ends an interrupted run', async () => {
      const { logic } = machineWith({ replies: [], inbox: () => ({ messages: [], interrupt_id: 'i1' }) });
      const a = createActor(logic, { systemId: RUN, input }).start();
      await waitFor(a, (s) => s.value === 'interrupted');
      a.send({ type: 'CANCEL' });
      expect(a.getSnapshot().value).toBe('cancelled');
    });
  });
});

describe('persisted snapshot size (issue 15)', () => {
  it('a snapshot in `calling` holds the conversation once: at most the context + 10 %', async () => {
    // ~40 KB of history: an effect input carrying the context would double the snapshot.
    const history = Array.from({ length: 40 }, (_, i) => ({
      role: (i % 2 ? 'assistant' : 'user') as 'user' | 'assistant',
      content: `turn ${i} ${'x'.repeat(1000)}`,
    }));
    const { logic } = machineWith({ replies: [] });
    const hang = logic.provide({ actors: { callModel: fromPromise<ModelStepResult, EffectInput>(() => new Promise<never>(() => {})) } });
    const a = createActor(hang, { systemId: RUN, input: { ...input, messages: [...history, ...input.messages] } }).start();
    await waitFor(a, (s) => s.value === 'calling');
    const persisted = JSON.stringify(a.getPersistedSnapshot());
    const context = JSON.stringify(a.getSnapshot().context);
    a.stop();
    expect(context.length).toBeGreaterThan(40_000);
    expect(persisted.length).toBeLessThanOrEqual(context.length * 1.1);
  });

  it('effects find their run from v3 inputs and from the `{ctx}` inputs v1/v2 snapshots persisted', () => {
    expect(effectRunId({ run_id: 'run_3' })).toBe('run_3');
    expect(effectRunId({ ctx: { run_id: 'run_2' } })).toBe('run_2');
  });
});
