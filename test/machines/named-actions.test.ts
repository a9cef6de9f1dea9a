// Every transition action of these machines is named in setup({ actions }): the
// inspector and GET /machines/live then show what a step did (`applyClaim`, `markPaused`), not
// `xstate.assign`, and `.provide()` can replace any of them in a test. An inline `assign(...)`,
// `stopChild(...)` or arrow function in a transition is a function in the machine's definition;
// a named action is a string or a `{ type, params }` object.
import { describe, expect, it } from 'vitest';
import type { AnyStateMachine, AnyStateNode } from 'xstate';
import { backgroundRunMachine } from '../../machines/background-run.machine.js';
import { runMachine } from '../../machines/run.machine.js';
import { sessionMachine } from '../../machines/session.machine.js';
import { supervisorMachine } from '../../machines/supervisor.machine.js';
import { taskMachine } from '../../machines/task.machine.js';

/** `state.event: action` for every action in a transition, entry or exit that is not named. */
function inlineActions(machine: AnyStateMachine): string[] {
  const found: string[] = [];
  const check = (where: string, actions: readonly unknown[]) => {
    for (const a of actions) {
      const named = typeof a === 'string' || (typeof a === 'object' && a !== null && typeof (a as { type: unknown }).type === 'string');
      if (!named) found.push(`${where}: ${(a as { type?: string }).type ?? 'an inline function'}`);
    }
  };
  const visit = (node: AnyStateNode) => {
    check(`${node.id} entry`, node.entry);
    check(`${node.id} exit`, node.exit);
    for (const [event, transitions] of node.transitions) for (const t of transitions) check(`${node.id} ${event}`, t.actions);
    for (const t of node.always ?? []) check(`${node.id} (always)`, t.actions);
    for (const child of Object.values(node.states)) visit(child);
  };
  visit(machine.root);
  return found;
}

describe('machine actions are named', () => {
  const machines: Record<string, AnyStateMachine> = {
    run: runMachine as unknown as AnyStateMachine,
    session: sessionMachine,
    supervisor: supervisorMachine,
    task: taskMachine,
    backgroundRun: backgroundRunMachine as unknown as AnyStateMachine,
  };
  for (const [name, machine] of Object.entries(machines)) {
    it(`${name}: no inline action in any transition`, () => {
      expect(inlineActions(machine)).toEqual([]);
    });
  }

  it('the check sees an inline assign', async () => {
    const { assign, setup } = await import('xstate');
    const inline = setup({}).createMachine({ context: { n: 0 }, on: { GO: { actions: assign({ n: 1 }) } } });
    expect(inlineActions(inline)).toEqual(['(machine) GO: xstate.assign']);
  });
});
