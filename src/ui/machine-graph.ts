// The machine page's pure parts: where each state goes, and how an event reads. No DOM, so
// test/ui/machine-graph.test.ts checks them directly.

export const W = 128;
export const H = 32;
const DX = 170;
const DY = 52;

/**
 * Layers by breadth-first distance from the initial state (unreachable states go last); within a
 * layer, states are ordered by the mean row of the states that lead to them (the barycentre
 * heuristic), so arrows mostly run straight instead of crossing. Pure.
 */
export function layout(states: string[], transitions: Array<{ source: string; target: string }>, initial: string): Map<string, { x: number; y: number }> {
  const layer = new Map<string, number>([[initial, 0]]);
  const queue = [initial];
  while (queue.length) {
    const s = queue.shift()!;
    for (const t of transitions) {
      if (t.source === s && states.includes(t.target) && !layer.has(t.target)) {
        layer.set(t.target, layer.get(s)! + 1);
        queue.push(t.target);
      }
    }
  }
  const maxLayer = Math.max(0, ...layer.values());
  for (const s of states) if (!layer.has(s)) layer.set(s, maxLayer + 1);
  const layers: string[][] = [];
  for (const s of states) (layers[layer.get(s)!] ??= []).push(s);
  const row = new Map<string, number>();
  layers.forEach((names, l) => {
    if (l > 0) {
      const key = (n: string): number => {
        const from = transitions.filter((t) => t.target === n && layer.get(t.source) !== undefined && layer.get(t.source)! < l && row.has(t.source));
        return from.length ? from.reduce((sum, t) => sum + row.get(t.source)!, 0) / from.length : Number.MAX_SAFE_INTEGER;
      };
      const keys = new Map(names.map((n) => [n, key(n)]));
      names.sort((a, b) => keys.get(a)! - keys.get(b)!);
    }
    names.forEach((n, i) => row.set(n, i));
  });
  const pos = new Map<string, { x: number; y: number }>();
  for (const s of states) pos.set(s, { x: 10 + layer.get(s)! * DX, y: 10 + row.get(s)! * DY });
  return pos;
}

/**
 * An event as a person reads it: XState's generated names (`xstate.done.actor.0.run.budgeting`,
 * `xstate.error.actor.…`, `xstate.after.…`) say which invoked work finished; the rest are ours.
 */
export function eventLabel(event: string | null | undefined): string {
  if (!event) return '';
  const done = /^xstate\.(done|error)\.actor\.(?:.*\.)?([^.]+)$/.exec(event);
  if (done) return `${done[2]} ${done[1] === 'done' ? 'done' : 'failed'}`;
  const after = /^xstate\.after\.(\d+)\./.exec(event);
  if (after) return `after ${after[1]} ms`;
  if (event.startsWith('xstate.done.state.')) return 'done';
  return event;
}
