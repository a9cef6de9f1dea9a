import type { AnyStateMachine } from 'xstate';
import { toDirectedGraph } from 'xstate/graph';
import { RUN_MACHINE_VERSION, runMachine } from '../../machines/run.machine.js';
import { SESSION_MACHINE_VERSION, sessionMachine } from '../../machines/session.machine.js';
import { SUPERVISOR_MACHINE_VERSION, supervisorMachine } from '../../machines/supervisor.machine.js';

export interface MachineInfo {
  id: string;
  version: number;
  states: string[];
  transitions: Array<{ source: string; target: string; event: string }>;
  mermaid: string;
  /** machine.toJSON() as plain JSON (implementations are functions: JSON drops them). */
  definition: Record<string, unknown>;
}

/** Every machine of the actor system; the background machines register here too. */
const MACHINES: Array<{ machine: AnyStateMachine; version: number }> = [
  { machine: runMachine as unknown as AnyStateMachine, version: RUN_MACHINE_VERSION },
  { machine: sessionMachine as unknown as AnyStateMachine, version: SESSION_MACHINE_VERSION },
  { machine: supervisorMachine as unknown as AnyStateMachine, version: SUPERVISOR_MACHINE_VERSION },
];

export function registerMachine(machine: AnyStateMachine, version: number): void {
  if (!MACHINES.some((m) => m.machine.id === machine.id)) MACHINES.push({ machine, version });
}

/** States and transitions from xstate/graph, drawn as a Mermaid state diagram for offline viewing. */
export function describeMachine(machine: AnyStateMachine, version: number): MachineInfo {
  const root = toDirectedGraph(machine);
  const states: string[] = [];
  const transitions: MachineInfo['transitions'] = [];
  // Root-level transitions (CANCEL, TIMEOUT) apply in every state: draw them from "any".
  const short = (id: string) => (id === root.id ? 'any' : id.split('.').slice(1).join('.') || id);
  // `xstate.done.actor.0.run.calling` -> `done`; `xstate.error.actor...` -> `error`.
  const label = (text: string) => (/^xstate\.done\.actor/.test(text) ? 'done' : /^xstate\.error\.actor/.test(text) ? 'error' : text || '(always)');
  const walk = (node: ReturnType<typeof toDirectedGraph>) => {
    if (node.id !== root.id) states.push(short(node.id));
    for (const e of node.edges) {
      const guardName = guardLabel((e.transition as { guard?: unknown }).guard);
      transitions.push({ source: short(e.source.id), target: short(e.target.id), event: `${label(e.label.text)}${guardName ? ` [${guardName}]` : ''}` });
    }
    // Eventless transitions are not edges in the directed graph; read them from the config.
    const always = (node.stateNode.config as { always?: unknown }).always;
    for (const t of (Array.isArray(always) ? always : always ? [always] : []) as Array<{ target?: string; guard?: unknown }>) {
      if (!t.target) continue;
      const name = guardLabel(t.guard);
      const guard = name ? ` [${name}]` : '';
      transitions.push({ source: short(node.id), target: t.target.replace(/^\./, ''), event: `(always)${guard}` });
    }
    for (const c of node.children) walk(c);
  };
  walk(root);
  const initial = (machine.root.config as { initial?: string }).initial;
  const safe = (s: string) => s.replace(/[^A-Za-z0-9_]/g, '_');
  const lines = ['stateDiagram-v2'];
  if (initial) lines.push(`  [*] --> ${safe(initial)}`);
  for (const t of transitions) lines.push(`  ${safe(t.source)} --> ${safe(t.target)}: ${t.event.replace(/[:;]/g, ' ')}`);
  for (const s of states) {
    const node = machine.root.states[s];
    if (node && (node.config as { type?: string }).type === 'final') lines.push(`  ${safe(s)} --> [*]`);
  }
  return { id: machine.id, version, states, transitions, mermaid: lines.join('\n'), definition: definitionOf(machine) };
}

// Machines never change while the process runs: each definition is serialised once.
const definitions = new WeakMap<AnyStateMachine, Record<string, unknown>>();
function definitionOf(machine: AnyStateMachine): Record<string, unknown> {
  let d = definitions.get(machine);
  if (!d) {
    d = JSON.parse(JSON.stringify(machine.toJSON())) as Record<string, unknown>;
    definitions.set(machine, d);
  }
  return d;
}

export function describeMachines(): MachineInfo[] {
  return MACHINES.map(({ machine, version }) => describeMachine(machine, version));
}

/**
 * A guard as the diagrams name it: its name, or for xstate's `and` / `or` / `not` (functions that
 * carry their operands in `guards`) the expression, e.g. `stepsLeft && !inboxMaybe`.
 */
function guardLabel(g: unknown): string | undefined {
  if (typeof g === 'string') return g;
  if (typeof g === 'function') {
    const parts = (g as { guards?: unknown[] }).guards;
    if (!Array.isArray(parts)) return undefined;
    const inner = parts.map((p) => guardLabel(p) ?? '?');
    if (g.name === 'not') return `!${inner[0]}`;
    return inner.join(g.name === 'or' ? ' || ' : ' && ');
  }
  return (g as { type?: string } | undefined)?.type;
}
