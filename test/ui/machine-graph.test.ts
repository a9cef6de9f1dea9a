// The machine page's layout and event labels (src/ui/machine-graph.ts), without a browser.
import { describe, expect, it } from 'vitest';
import { eventLabel, layout } from '../../src/ui/machine-graph.js';
import { describeMachines } from '../../src/runtime/machines-info.js';

describe('eventLabel', () => {
  it('names the invoked work XState generated events are about, and keeps ours', () => {
    expect(eventLabel('xstate.done.actor.0.run.budgeting')).toBe('budgeting done');
    expect(eventLabel('xstate.error.actor.3.run.calling')).toBe('calling failed');
    expect(eventLabel('xstate.after.5000.run.awaitingApproval')).toBe('after 5000 ms');
    expect(eventLabel('xstate.done.state.run.stepping')).toBe('done');
    expect(eventLabel('APPROVE')).toBe('APPROVE');
    expect(eventLabel(null)).toBe('');
  });
});

/** Pairs of forward edges between the same two layers that cross. */
function crossings(pos: Map<string, { x: number; y: number }>, edges: Array<{ source: string; target: string }>): number {
  const fwd = edges.map((e) => [pos.get(e.source)!, pos.get(e.target)!] as const).filter(([a, b]) => b.x > a.x);
  let n = 0;
  for (let i = 0; i < fwd.length; i++)
    for (let j = i + 1; j < fwd.length; j++) {
      const [a1, b1] = fwd[i];
      const [a2, b2] = fwd[j];
      if (a1.x === a2.x && b1.x === b2.x && (a1.y - a2.y) * (b1.y - b2.y) < 0) n++;
    }
  return n;
}

describe('layout', () => {
  it('orders a layer by where its states are reached from, so edges do not cross', () => {
    // a -> (b, c); b -> y, c -> x: declared x before y, which crossed before.
    const edges = [
      { source: 'a', target: 'b' },
      { source: 'a', target: 'c' },
      { source: 'b', target: 'y' },
      { source: 'c', target: 'x' },
    ];
    const pos = layout(['a', 'b', 'c', 'x', 'y'], edges, 'a');
    expect(crossings(pos, edges)).toBe(0);
    expect(pos.get('y')!.y).toBeLessThan(pos.get('x')!.y);
  });

  it('draws every state of the real machines at a distinct place', () => {
    for (const m of describeMachines() as Array<{
      id: string;
      states: string[];
      transitions: Array<{ source: string; target: string }>;
      definition?: { initial?: unknown };
    }>) {
      if (m.states.length === 0) continue;
      const initial = typeof m.definition?.initial === 'string' ? m.definition.initial : m.states[0];
      const pos = layout(
        m.states,
        m.transitions.filter((t) => t.source !== 'any'),
        initial,
      );
      expect(new Set([...pos.values()].map((p) => `${p.x},${p.y}`)).size, m.id).toBe(m.states.length);
    }
  });
});
