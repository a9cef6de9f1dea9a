// A live run's telemetry chain (src/runtime/run-events.ts): `done` resolves once every event
// pushed so far is stored and published, whichever way each went (on its own, held with a new
// run's delayed creating write, riding in a record write), and it is a count of what is out, not
// a chain of Promise.all: pushing an event makes one promise (the append's), not four.
import { createHook } from 'node:async_hooks';
import { describe, expect, it } from 'vitest';
import { RunEventChain } from '../../src/runtime/run-events.js';
import type { StoredEvent } from '../../src/store/store.js';
import type { EventRecordInput } from '../../src/telemetry/record.js';

/** A telemetry whose appends land when the test says so, in the order they were made. */
function fakeTelemetry() {
  const appends: Array<{ events: EventRecordInput[]; land: () => void }> = [];
  const publishedTypes: string[] = [];
  return {
    appends,
    publishedTypes,
    emitManySafe(events: EventRecordInput[]): Promise<void> {
      return new Promise<void>((land) => appends.push({ events, land }));
    },
    recordsOf: (events: EventRecordInput[]) => events as never,
    published(stored: StoredEvent[]) {
      for (const e of stored) publishedTypes.push((e as unknown as EventRecordInput).event_type);
    },
  };
}

const ev = (event_type: string): EventRecordInput => ({ event_type, trace_id: 't', span_id: 's', actor: { type: 'system', id: 'x' }, metadata: {} });

/** Whether `p` has settled (after the microtasks queued so far ran). */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(() => (done = true));
  for (let i = 0; i < 5; i++) await Promise.resolve();
  return done;
}

describe('RunEventChain', () => {
  it('done waits for every event appended on its own, in the order they were handed on', async () => {
    const t = fakeTelemetry();
    const chain = new RunEventChain(t, false);
    expect(await settled(chain.done)).toBe(true);
    chain.push(ev('a'));
    chain.push(ev('b'));
    const done = chain.done;
    expect(t.appends.map((a) => a.events[0]!.event_type)).toEqual(['a', 'b']);
    t.appends[1]!.land();
    expect(await settled(done)).toBe(false);
    t.appends[0]!.land();
    expect(await settled(done)).toBe(true);
    expect(await settled(chain.done)).toBe(true);
  });

  it("a new run's held events wait for its creating write, then go first", async () => {
    const t = fakeTelemetry();
    const chain = new RunEventChain(t, true);
    chain.push(ev('user_message'));
    expect(t.appends).toHaveLength(0);
    const done = chain.done;
    expect(await settled(done)).toBe(false);
    chain.release();
    expect(t.appends.map((a) => a.events.map((e) => e.event_type))).toEqual([['user_message']]);
    expect(await settled(done)).toBe(false);
    t.appends[0]!.land();
    expect(await settled(done)).toBe(true);
    // Held and nothing pushed: done once released.
    const empty = new RunEventChain(t, true);
    expect(await settled(empty.done)).toBe(false);
    empty.release();
    expect(await settled(empty.done)).toBe(true);
  });

  it('riding events are out until the write that took them is stored, or go on their own when it failed', async () => {
    const t = fakeTelemetry();
    let open = true;
    const chain = new RunEventChain(t, false, () => open);
    chain.push(ev('model_call'));
    chain.push(ev('model_response'));
    expect(t.appends).toHaveLength(0);
    const carried = chain.take()!;
    expect(carried.events.map((e) => (e as unknown as EventRecordInput).event_type)).toEqual(['model_call', 'model_response']);
    expect(await settled(chain.done)).toBe(false);
    carried.stored(carried.events as unknown as StoredEvent[]);
    expect(t.publishedTypes).toEqual(['model_call', 'model_response']);
    expect(await settled(chain.done)).toBe(true);
    chain.push(ev('final_answer'));
    open = false;
    chain.failed();
    expect(t.appends.map((a) => a.events[0]!.event_type)).toEqual(['final_answer']);
    expect(await settled(chain.done)).toBe(false);
    t.appends[0]!.land();
    expect(await settled(chain.done)).toBe(true);
  });

  it('pushing five events makes one promise each (their appends) and one for done', () => {
    const t = fakeTelemetry();
    const chain = new RunEventChain(t, false);
    let promises = 0;
    const hook = createHook({ init: (_id, type) => void (type === 'PROMISE' && promises++) });
    hook.enable();
    try {
      for (let i = 0; i < 5; i++) void chain.push(ev(`e${i}`));
    } finally {
      hook.disable();
    }
    // Per event: the fake's append and the chain's .then on it; done: made once, by the first push.
    // (Before: Promise.all of done and the append, and its two .then: four more per event.)
    expect(promises).toBe(5 * 2 + 1);
  });
});
