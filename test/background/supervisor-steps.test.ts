// What the supervisors of the actor system do for one drained background run: hear its two
// actors (`bgrun:<id>` and its agent run's `run:<id>`) end, two steps in all. The actors are
// created under their supervisors directly (src/runtime/system.ts spawn), not by a SPAWN step of
// each (before: four steps). An actor that ended is dropped from its supervisor in the step that
// reports its end (machines/supervisor.machine.ts), so its owner's stop() afterwards sends
// nothing: before that, each of the two ends took a further STOP step.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AnyActorRef, InspectionEvent } from 'xstate';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { api, directModel, waitRun, type Api } from './helpers.js';

let model: ScriptedOpenAI;
let server: TestServer;
let a: Api;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  directModel(model);
  server = await startTestServer({ background: { poll_interval_ms: 50, concurrency: 1 } }, { modelUrl: model.url });
  a = api(server.url);
});

afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
});

/** The child a supervisor's event is about: named in a SPAWN, else the last child created in the slot its type ends with. */
function childOf(bySlot: Map<string, string>, supervisor: AnyActorRef, event: { type: string; systemId?: string; id?: string }): string | undefined {
  if (event.type === 'SPAWN') return event.systemId;
  const slot = event.type === 'STOP' ? event.id : /^xstate\.(?:done|error)\.actor\.(.+)$/.exec(event.type)?.[1];
  return slot ? bySlot.get(`${supervisor.sessionId}/${slot}`) : undefined;
}

/** The name an actor was spawned under (xstate's Actor has it; the ActorRef type does not say so). */
const systemIdOf = (ref: unknown) => (ref as { systemId?: string }).systemId;

describe('the supervisors, per drained background run', () => {
  it('hear each of its two actors end: two steps, no SPAWN, no STOP', async () => {
    expect(
      (await a.post('/background/tasks', { task_id: 'steps', schedule: { type: 'manual' }, query: 'just answer', overlap_policy: 'allow_parallel' })).status,
    ).toBe(200);
    const system = server.runtime.system;
    // Supervisors are the groups and their shards: every actor whose systemId starts with `group:`.
    const steps: string[] = [];
    // Every actor created, by its supervisor and slot: which child a done event's slot names.
    const bySlot = new Map<string, string>();
    let created = 0;
    const sub = system.root.system.inspect((ev: InspectionEvent) => {
      if (ev.type === '@xstate.actor') {
        const ref = ev.actorRef as AnyActorRef;
        // (Inspected before the actor sets its systemId: its options name it already.)
        const id = (ref as { options?: { systemId?: string } }).options?.systemId;
        if (ref._parent && id) bySlot.set(`${ref._parent.sessionId}/${ref.id}`, id);
        if (id?.startsWith('bgrun:') || id?.startsWith('run:')) created++;
      }
      if (ev.type !== '@xstate.event' || !systemIdOf(ev.actorRef)?.startsWith('group:')) return;
      const e = ev.event as { type: string; systemId?: string; id?: string };
      const child = childOf(bySlot, ev.actorRef as AnyActorRef, e);
      if (child?.startsWith('bgrun:') || child?.startsWith('run:')) steps.push(`${e.type.replace(/\.actor\..*$/, '')} ${child.split(':')[0]}`);
    });
    const runs = 5;
    try {
      const r = await a.post('/background/tasks/steps/runs', { runs: Array.from({ length: runs }, () => ({})) });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      for (const x of r.body.runs) expect((await waitRun(a, x.run.run_id)).status).toBe('completed');
    } finally {
      sub.unsubscribe();
    }
    const count = (s: string) => steps.filter((x) => x === s).length;
    expect(created).toBe(2 * runs);
    expect({
      spawnBgrun: count('SPAWN bgrun'),
      spawnRun: count('SPAWN run'),
      doneBgrun: count('xstate.done bgrun'),
      doneRun: count('xstate.done run'),
      stops: steps.filter((x) => x.startsWith('STOP')).length,
      all: steps.length,
    }).toEqual({ spawnBgrun: 0, spawnRun: 0, doneBgrun: runs, doneRun: runs, stops: 0, all: 2 * runs });
  });

  it('per drained run, its actors and their effects take these events, and its two machines three steps each', async () => {
    const system = server.runtime.system;
    // Events taken, by actor: the background run and agent run by systemId, their invoked
    // effects by the name the machine gives them (agentRun, checkInput, callModel).
    const events: Record<string, number> = {};
    const microsteps: Record<string, number> = {};
    let ended = 0;
    let allEnded!: () => void;
    const drained = new Promise<void>((r) => (allEnded = r));
    const runs = 5;
    const kindOf = (ref: unknown) => {
      const id = systemIdOf(ref);
      if (id) return id.split(':')[0];
      const src = (ref as { src?: unknown }).src;
      return typeof src === 'string' ? src : undefined;
    };
    const sub = system.root.system.inspect((ev: InspectionEvent) => {
      const kind = kindOf(ev.actorRef);
      if (!kind || !['bgrun', 'run', 'agentRun', 'checkInput', 'callModel', 'readInbox'].includes(kind)) return;
      if (ev.type === '@xstate.event') events[kind] = (events[kind] ?? 0) + 1;
      if (ev.type === '@xstate.microstep') microsteps[kind] = (microsteps[kind] ?? 0) + 1;
      if (ev.type === '@xstate.snapshot' && kind === 'bgrun' && (ev.snapshot as { status: string }).status === 'done' && ++ended === runs) allEnded();
    });
    try {
      const r = await a.post('/background/tasks/steps/runs', { runs: Array.from({ length: runs }, () => ({})) });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      await drained;
    } finally {
      sub.unsubscribe();
    }
    const per = (m: Record<string, number>) => Object.fromEntries(Object.entries(m).map(([k, v]) => [k, v / runs]));
    // bgrun: init, CLAIM, START, AGENT_DONE. run: init and the end of each of its two effects.
    // checkInput answers within the step that invokes it (src/runtime/sync-effect.ts): its init
    // only, where a promise took a resolve event too, and the run left `checking` a turn later.
    // On a store other instances share (PostgreSQL) too: no inbox read at its step boundary or
    // after its answer, as the run was created here while the change feed listened (RunInbox.born:
    // a steer through another instance would be heard), even in the feed's first 10 s.
    expect(per(events)).toEqual({ bgrun: 4, run: 3, agentRun: 1, checkInput: 1, callModel: 2 });
    expect(per(microsteps)).toEqual({ bgrun: 3, run: 3 });
  });
});
