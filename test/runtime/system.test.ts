// The root supervisor and the serial writer: save, reopen, restore, stale-version conflict, and a
// child error that must never crash the process.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { assign, fromPromise, setup, waitFor, type AnyActorRef, type InspectionEvent } from 'xstate';
import { ActorSystem } from '../../src/runtime/system.js';
import { FencedError, RecordWriter } from '../../src/runtime/persistence.js';
import { LevelStore } from '../../src/store/level.js';
import { MemoryStore } from '../../src/store/memory.js';
import { waitFor as waitUntil } from '../helpers/wait.js'; // xstate's waitFor is the one for actors

const counter = setup({
  types: { context: {} as { n: number }, events: {} as { type: 'INC' } | { type: 'BOOM' } },
  actors: { work: fromPromise(async () => 42) },
}).createMachine({
  context: { n: 0 },
  initial: 'idle',
  states: {
    idle: { on: { INC: { actions: assign({ n: ({ context }) => context.n + 1 }) }, BOOM: 'exploding' } },
    exploding: {
      entry: () => {
        throw new Error('child blew up');
      },
    },
  },
});

/**
 * How many of `ids` are children of each of `supervisors`: a run, session or task actor is created
 * directly under its supervisor (`parent`), not among its machine's `children` (system.ts spawn).
 */
function childCounts(system: ActorSystem, supervisors: AnyActorRef[], ids: string[]): number[] {
  return supervisors.map((s) => ids.filter((id) => system.get(id)?._parent === s).length);
}

describe('ActorSystem', () => {
  it('spawns under a systemId, and restores a child from a persisted snapshot', () => {
    const system = new ActorSystem();
    const a = system.spawn('task:one', counter);
    a.send({ type: 'INC' });
    a.send({ type: 'INC' });
    const saved = JSON.parse(JSON.stringify(a.getPersistedSnapshot()));
    system.stop('task:one');
    expect(system.get('task:one')).toBeUndefined();
    const b = system.spawn('task:one', counter, { snapshot: saved });
    expect(b.getSnapshot().context.n).toBe(2);
    b.send({ type: 'INC' });
    expect(b.getSnapshot().context.n).toBe(3);
    system.shutdown();
  });

  it('turns an unobserved child error into a hook call, never a crash', async () => {
    const failures: string[] = [];
    const system = new ActorSystem({ onChildFailed: (id) => failures.push(id) });
    const crashes: unknown[] = [];
    const onCrash = (e: unknown) => crashes.push(e);
    process.on('uncaughtException', onCrash);
    try {
      const child = system.spawn('bgrun:bad', counter);
      child.send({ type: 'BOOM' });
      await waitUntil(() => failures.length > 0, { what: 'the failure hook' });
      expect(failures).toEqual(['bgrun:bad']);
      expect(crashes).toEqual([]);
      // The supervisor keeps working for other children.
      const ok = system.spawn('bgrun:good', counter);
      ok.send({ type: 'INC' });
      expect(ok.getSnapshot().context.n).toBe(1);
    } finally {
      process.off('uncaughtException', onCrash);
      system.shutdown();
    }
  });

  it("keeps a supervisor group's children off the root, reachable by systemId, failures reported", async () => {
    const failures: string[] = [];
    const system = new ActorSystem({ onChildFailed: (id) => failures.push(id) });
    const tasks = system.group('tasks');
    expect(system.group('tasks')).toBe(tasks);
    for (let i = 0; i < 50; i++) tasks.spawn(`task:${i}`, counter);
    system.spawn('run:r1', counter);
    // The root holds only groups: the tasks' and `group:live` (the run), not the 50 tasks.
    expect(Object.keys(system.root.getSnapshot().children)).toHaveLength(2);
    expect(system.get('run:r1')).toBeDefined();
    expect(system.size()).toBe(1);
    expect(tasks.size()).toBe(50);
    system.get('task:7')!.send({ type: 'INC' });
    expect(tasks.get('task:7')!.getSnapshot().context.n).toBe(1);
    tasks.get('task:9')!.send({ type: 'BOOM' });
    await waitUntil(() => failures.length > 0, { what: 'the failure hook' });
    expect(failures).toEqual(['task:9']);
    tasks.stop('task:3');
    expect(system.get('task:3')).toBeUndefined();
    // task:3 stopped, task:9 failed: a child that errored is no longer among its supervisor's children.
    expect(tasks.size()).toBe(48);
    system.shutdown();
  });

  it('spreads a sharded group over shard supervisors, so no supervisor holds thousands of children', async () => {
    // xstate copies a supervisor's children map on each spawn and stop: 10,000 task actors under
    // one supervisor made start-up and shutdown quadratic (27 s and over 15 s measured).
    const failures: string[] = [];
    const system = new ActorSystem({ onChildFailed: (id) => failures.push(id) });
    const tasks = system.group('many', { shards: 16 });
    for (let i = 0; i < 2000; i++) tasks.spawn(`task:${i}`, counter);
    expect(tasks.size()).toBe(2000);
    const supervisors = Object.values(tasks.ref.getSnapshot().children as Record<string, AnyActorRef>);
    expect(supervisors).toHaveLength(16);
    const perShard = childCounts(
      system,
      supervisors,
      Array.from({ length: 2000 }, (_, i) => `task:${i}`),
    );
    expect(perShard.reduce((a, b) => a + b, 0)).toBe(2000);
    expect(Math.max(...perShard)).toBeLessThan(250); // ~125 each
    // Children are reached by systemId, stopped through the group, and their failures reported by name.
    system.get('task:1234')!.send({ type: 'INC' });
    expect(tasks.get('task:1234')!.getSnapshot().context.n).toBe(1);
    tasks.get('task:77')!.send({ type: 'BOOM' });
    await waitUntil(() => failures.length > 0, { what: 'the failure hook' });
    expect(failures).toEqual(['task:77']);
    for (let i = 0; i < 1000; i++) tasks.stop(`task:${i}`);
    expect(system.get('task:5')).toBeUndefined();
    expect(tasks.size()).toBe(1000);
    // A stopped child's id may be spawned again (its shard is the same).
    tasks.spawn('task:5', counter);
    expect(system.get('task:5')).toBeDefined();
    system.shutdown();
  });

  it('keeps runs and sessions spawned on the system in the shards of group:live, off the root', () => {
    // Directly under the root, 2,000 live runs and sessions made each spawn and stop cost 1.2 ms.
    const system = new ActorSystem();
    for (let i = 0; i < 1000; i++) {
      system.spawn(`run:${i}`, counter);
      system.spawn(`session:${i}`, counter);
    }
    expect(system.size()).toBe(2000);
    const rootChildren = Object.values(system.root.getSnapshot().children as Record<string, AnyActorRef>);
    expect(rootChildren.map((c) => c.id)).toHaveLength(1); // group:live
    const shards = Object.values(rootChildren[0].getSnapshot().children as Record<string, AnyActorRef>);
    expect(shards.length).toBeGreaterThan(32);
    const perShard = childCounts(system, shards, Array.from({ length: 1000 }, (_, i) => [`run:${i}`, `session:${i}`]).flat());
    expect(perShard.reduce((a, b) => a + b, 0)).toBe(2000);
    expect(Math.max(...perShard)).toBeLessThan(100);
    system.get('run:500')!.send({ type: 'INC' });
    expect(system.get('run:500')!.getSnapshot().context.n).toBe(1);
    for (let i = 0; i < 1000; i++) system.stop(`run:${i}`);
    expect(system.get('run:1')).toBeUndefined();
    expect(system.size()).toBe(1000);
    system.shutdown();
  });

  it('re-runs a promise effect that was active when the snapshot was saved (fact 3)', async () => {
    let calls = 0;
    const m = setup({ actors: { work: fromPromise(async () => ++calls) } }).createMachine({
      context: { v: 0 },
      initial: 'a',
      states: {
        a: { on: { GO: 'b' } },
        b: { invoke: { src: 'work', onDone: { target: 'c', actions: assign({ v: ({ event }) => event.output }) } } },
        c: { type: 'final' },
      },
    });
    const system = new ActorSystem();
    const a = system.spawn('run:x', m);
    a.send({ type: 'GO' });
    const saved = JSON.parse(JSON.stringify(a.getPersistedSnapshot()));
    system.stop('run:x');
    const b = system.spawn('run:x', m, { snapshot: saved });
    const done = await waitFor(b, (s) => s.status === 'done');
    expect(done.context.v).toBe(2);
    system.shutdown();
  });
});

describe('RecordWriter', () => {
  it('saves record + snapshot in one commit, survives a reopen, and fences a stale writer', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'agentd-writer-'));
    const store = new LevelStore({ path: dir });
    await store.open();
    const created = await store.createRecord('runs', 'r1', { n: 0 }, { status: 'running' });
    const fenced: FencedError[] = [];
    const writer = new RecordWriter<{ n: number }>(
      store,
      'runs',
      'r1',
      created,
      (v) => ({ status: v.n > 1 ? 'done' : 'running' }),
      (e) => fenced.push(e),
    );
    // Queued writes apply in order and resolve when durable.
    const results = await Promise.all(
      [1, 2, 3].map((n) =>
        writer.update(
          (v) => ({ n: v.n + 1 }),
          () => [{ op: 'update', kind: 'snapshots', id: 'r1', value: { snap: n }, expectedVersion: null }],
        ),
      ),
    );
    expect(results.at(-1)!.value.n).toBe(3);
    await store.close();

    const reopened = new LevelStore({ path: dir });
    await reopened.open();
    expect((await reopened.getRecord<{ n: number }>('runs', 'r1'))!.value.n).toBe(3);
    expect((await reopened.getRecord<{ snap: number }>('snapshots', 'r1'))!.value.snap).toBe(3);
    expect(await reopened.countRecords('runs', { name: 'status', value: 'done' })).toBe(1);

    // Another owner takes the record over; our writer's next write is refused.
    const current = (await reopened.getRecord<{ n: number }>('runs', 'r1'))!;
    const mine = new RecordWriter<{ n: number }>(
      reopened,
      'runs',
      'r1',
      current,
      () => ({}),
      (e) => fenced.push(e),
    );
    await reopened.updateRecord('runs', 'r1', { n: 100 }, current.version);
    await expect(mine.update((v) => ({ n: v.n + 1 }))).rejects.toBeInstanceOf(FencedError);
    expect(mine.isFenced).toBe(true);
    expect(fenced).toHaveLength(1);
    expect((await reopened.getRecord<{ n: number }>('runs', 'r1'))!.value.n).toBe(100);
    await expect(mine.update((v) => v)).rejects.toBeInstanceOf(FencedError);
    await reopened.close();
  });

  it('works on the memory store too', async () => {
    const store = new MemoryStore();
    await store.open();
    const created = await store.createRecord('runs', 'm', { n: 0 });
    const writer = new RecordWriter<{ n: number }>(store, 'runs', 'm', created, () => ({}));
    await writer.update((v) => ({ n: v.n + 5 }));
    expect(writer.version).toBe(2);
    expect((await store.getRecord<{ n: number }>('runs', 'm'))!.value.n).toBe(5);
    // The memory store takes a write inside commit(): an update's extra ops and carried events
    // must already be in it (they were lost: the write was handed over before they were added).
    const stored: string[] = [];
    await writer.update(
      (v) => ({ n: v.n + 1 }),
      () => [{ op: 'update', kind: 'snapshots', id: 'm', value: { snap: 6 }, expectedVersion: null }],
      undefined,
      () => ({
        events: [{ event_id: 'e1', event_type: 'x', timestamp: new Date(0).toISOString() }],
        stored: (evs) => stored.push(...evs.map((e) => e.cursor)),
      }),
    );
    expect((await store.getRecord<{ snap: number }>('snapshots', 'm'))?.value.snap).toBe(6);
    expect(stored).toHaveLength(1);
    expect((await store.readEvents({})).events.map((e) => e.event_id)).toEqual(['e1']);
  });

  it('refuses to carry events on a store that does not write them atomically with a commit', async () => {
    const store = new MemoryStore();
    await store.open();
    const created = await store.createRecord('runs', 'p', { n: 0 });
    Object.defineProperty(store, 'capabilities', { value: { ...store.capabilities, atomicCommitEvents: false } });
    const writer = new RecordWriter<{ n: number }>(store, 'runs', 'p', created, () => ({}));
    const carry = () => ({ events: [{ event_id: 'e2', event_type: 'x', timestamp: new Date(0).toISOString() }], stored: () => undefined });
    await expect(writer.update((v) => ({ n: v.n + 1 }), undefined, undefined, carry)).rejects.toThrow(/atomically/);
    expect((await store.getRecord<{ n: number }>('runs', 'p'))!.value.n).toBe(0);
  });

  it("writes itself alone when another writer's optional ops it carries are refused, and is fenced when they are not optional", async () => {
    const store = new MemoryStore();
    await store.open();
    const other = await store.createRecord('bg_runs', 'b', { owner: 'me' });
    // Another owner moved the carried record meanwhile: its CAS (on version 1) is refused.
    await store.updateRecord('bg_runs', 'b', { owner: 'someone else' }, other.version);
    const carried = (optional: boolean, heard: string[]) => () => ({
      ops: [{ op: 'update' as const, kind: 'bg_runs' as const, id: 'b', value: { owner: 'me', done: true }, expectedVersion: other.version }],
      events: [{ event_id: `e-${optional}`, event_type: 'carried', timestamp: new Date(0).toISOString() }],
      optional,
      stored: () => heard.push('stored'),
      failed: (err?: unknown) => heard.push(`failed:${(err as { code?: string })?.code}`),
    });
    const created = await store.createRecord('runs', 'p', { n: 0 });
    const writer = new RecordWriter<{ n: number }>(store, 'runs', 'p', created, () => ({}));
    const heard: string[] = [];
    const written = await writer.update((v) => ({ n: v.n + 1 }), undefined, undefined, carried(true, heard));
    // The writer's own record is written, at the next version; nothing of the carried write is.
    expect(written.version).toBe(2);
    expect((await store.getRecord<{ n: number }>('runs', 'p'))!.value.n).toBe(1);
    expect((await store.getRecord<{ owner: string }>('bg_runs', 'b'))!.value.owner).toBe('someone else');
    expect(heard).toEqual(['failed:stale_version']);
    expect((await store.readEvents({})).events.map((e) => e.event_id)).toEqual([]);
    expect(writer.isFenced).toBe(false);
    // Not optional: the refusal fails both, and fences the writer as any refusal.
    const fenced: unknown[] = [];
    const strict = new RecordWriter<{ n: number }>(
      store,
      'runs',
      'p',
      written,
      () => ({}),
      (e) => fenced.push(e),
    );
    const heard2: string[] = [];
    await expect(strict.update((v) => ({ n: v.n + 1 }), undefined, undefined, carried(false, heard2))).rejects.toBeInstanceOf(FencedError);
    expect(heard2).toEqual(['failed:stale_version']);
    expect(fenced).toHaveLength(1);
    expect((await store.getRecord<{ n: number }>('runs', 'p'))!.value.n).toBe(1);
  });
});

describe('ActorSystem.stop', () => {
  it('forgets children that already reached a final state (no leak)', async () => {
    const done = setup({}).createMachine({ initial: 'a', states: { a: { on: { GO: 'b' } }, b: { type: 'final' } } });
    const system = new ActorSystem();
    for (let i = 0; i < 50; i++) {
      const ref = system.spawn(`run:${i}`, done);
      ref.send({ type: 'GO' });
      system.stop(`run:${i}`);
    }
    expect(system.size()).toBe(0);
    system.shutdown();
  });
});

describe('ActorSystem.shutdown', () => {
  it('stops the children created directly under the groups and their shards, not only the supervisors', () => {
    const system = new ActorSystem();
    const run = system.spawn('run:x', counter); // group:live, sharded
    const bg = system.group('plain').spawn('bgrun:x', counter);
    expect([run.getSnapshot().status, bg.getSnapshot().status]).toEqual(['active', 'active']);
    system.shutdown();
    expect([run.getSnapshot().status, bg.getSnapshot().status]).toEqual(['stopped', 'stopped']);
    expect(system.get('run:x')).toBeUndefined();
    // Nothing starts after shutdown (here in the shard run:x was in): no supervisor would hear it.
    expect(() => system.spawn('run:x', counter)).toThrow(/did not start/);
    expect(() => system.group('plain').spawn('bgrun:y', counter)).toThrow(/did not start/);
    expect(system.get('run:x')).toBeUndefined();
  });
});

describe('a child that ends', () => {
  it("leaves its supervisor in the step that reports its end: the owner's stop() sends nothing", () => {
    const done = setup({}).createMachine({ initial: 'a', states: { a: { on: { GO: 'b' } }, b: { type: 'final' } } });
    const system = new ActorSystem();
    const group = system.group('plain');
    // Every event a supervisor of this system takes, by type (slot ids cut off).
    const taken: string[] = [];
    const sub = system.root.system.inspect((ev: InspectionEvent) => {
      if (ev.type === '@xstate.event' && ev.actorRef === group.ref) taken.push(ev.event.type.replace(/\.c\d+$/, ''));
    });
    const ref = group.spawn('task:one', done);
    const sibling = group.spawn('task:two', done);
    ref.send({ type: 'GO' });
    // Ended: out of the system registry (xstate) and out of the supervisor's slots (this step).
    // The children were created under the supervisor directly: no SPAWN step each (system.ts spawn).
    expect(group.get('task:one')).toBeUndefined();
    expect(sibling._parent).toBe(group.ref);
    expect(group.size()).toBe(1);
    group.stop('task:one');
    expect(taken).toEqual(['xstate.done.actor']);
    // Its slot is free: the next child takes it, and the same systemId may be spawned again.
    const again = group.spawn('task:one', done);
    expect(again.id).toBe(ref.id);
    expect(group.get('task:one')).toBe(again);
    // A running child is stopped by a STOP as before.
    group.stop('task:two');
    expect(group.get('task:two')).toBeUndefined();
    expect(taken.slice(1)).toEqual(['STOP']);
    expect(sibling.getSnapshot().status).toBe('stopped');
    sub.unsubscribe();
    system.shutdown();
  });
});

describe('supervisor slot ids', () => {
  it('recycles child ids, so the event types the supervisor sees stay bounded by live children', () => {
    const done = setup({}).createMachine({ initial: 'a', states: { a: { on: { GO: 'b' } }, b: { type: 'final' } } });
    const system = new ActorSystem();
    const ids = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const ref = system.spawn(`run:${i}`, done);
      ids.add(ref.id);
      ref.send({ type: 'GO' });
      system.stop(`run:${i}`);
    }
    expect(ids.size).toBe(1); // one live child at a time -> one slot id for all 200 runs (in each shard of group:live)
    // systemIds stay unique and addressable while live (slot ids are per shard supervisor).
    const a = system.spawn('run:a', done);
    const b = system.spawn('run:b', done);
    expect(a).not.toBe(b);
    expect(system.get('run:a')).toBe(a);
    expect(system.get('run:b')).toBe(b);
    // Live siblings under one supervisor never share a slot id.
    const plain = system.group('plain');
    const c = plain.spawn('task:c', done);
    const d = plain.spawn('task:d', done);
    expect(c.id).not.toBe(d.id);
    system.shutdown();
  });
});
