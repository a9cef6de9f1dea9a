// What the supervisors of the actor system do for one drained background run: spawn its two
// actors (`bgrun:<id>` and its agent run's `run:<id>`) and hear each one end, four steps in all.
// An actor that ended is dropped from its supervisor in the step that reports its end
// (machines/supervisor.machine.ts), so its owner's stop() afterwards sends nothing: before, each
// of the two ends took a further STOP step.
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

/** The child a supervisor's event is about: named in a SPAWN, else in the slot its type ends with. */
function childOf(supervisor: AnyActorRef, event: { type: string; systemId?: string; id?: string }): string | undefined {
  if (event.type === 'SPAWN') return event.systemId;
  const slot = event.type === 'STOP' ? event.id : /^xstate\.(?:done|error)\.actor\.(.+)$/.exec(event.type)?.[1];
  const child = slot ? (supervisor.getSnapshot().children as Record<string, AnyActorRef | undefined>)[slot] : undefined;
  return child ? systemIdOf(child) : undefined;
}

/** The name an actor was spawned under (xstate's Actor has it; the ActorRef type does not say so). */
const systemIdOf = (ref: unknown) => (ref as { systemId?: string }).systemId;

describe('the supervisors, per drained background run', () => {
  it('spawn its two actors and hear each end: four steps, no STOP', async () => {
    expect(
      (await a.post('/background/tasks', { task_id: 'steps', schedule: { type: 'manual' }, query: 'just answer', overlap_policy: 'allow_parallel' })).status,
    ).toBe(200);
    const system = server.runtime.system;
    // Supervisors are the groups and their shards: every actor whose systemId starts with `group:`.
    const steps: string[] = [];
    const sub = system.root.system.inspect((ev: InspectionEvent) => {
      if (ev.type !== '@xstate.event' || !systemIdOf(ev.actorRef)?.startsWith('group:')) return;
      const e = ev.event as { type: string; systemId?: string; id?: string };
      const child = childOf(ev.actorRef as AnyActorRef, e);
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
    expect({
      spawnBgrun: count('SPAWN bgrun'),
      spawnRun: count('SPAWN run'),
      doneBgrun: count('xstate.done bgrun'),
      doneRun: count('xstate.done run'),
      stops: steps.filter((x) => x.startsWith('STOP')).length,
      all: steps.length,
    }).toEqual({ spawnBgrun: runs, spawnRun: runs, doneBgrun: runs, doneRun: runs, stops: 0, all: 4 * runs });
  });
});
