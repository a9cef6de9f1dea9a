import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { encodeCursor, type StoredEvent } from '../../src/store/store.js';
import { EventBus, StreamOverflowError, replayThenFollow, type OverflowInfo } from '../../src/telemetry/bus.js';

let n = 0;
const ev = (fields: Partial<StoredEvent> = {}): StoredEvent => {
  n++;
  return { event_id: `event_${n}`, event_type: 'agent_step', timestamp: '2026-01-01T00:00:00.000Z', cursor: encodeCursor(n), ...fields };
};

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe('EventBus routing', () => {
  it('delivers by session, run, trace, task, combined and empty filters', () => {
    const bus = new EventBus();
    const got: Record<string, string[]> = { s1: [], r1: [], t1: [], k1: [], s1r2: [], all: [] };
    bus.subscribe({ session_id: 's1' }, (e) => void got.s1.push(e.event_id));
    bus.subscribe({ run_id: 'r1' }, (e) => void got.r1.push(e.event_id));
    bus.subscribe({ trace_id: 't1' }, (e) => void got.t1.push(e.event_id));
    bus.subscribe({ task_id: 'k1' }, (e) => void got.k1.push(e.event_id));
    bus.subscribe({ session_id: 's1', run_id: 'r2' }, (e) => void got.s1r2.push(e.event_id));
    bus.subscribe({}, (e) => void got.all.push(e.event_id));

    bus.publish(ev({ event_id: 'a', session_id: 's1', run_id: 'r1', trace_id: 't1' }));
    bus.publish(ev({ event_id: 'b', session_id: 's1', run_id: 'r2', trace_id: 't2' }));
    bus.publish(ev({ event_id: 'c', session_id: 's2', run_id: 'r3', task_id: 'k1' }));
    // Records made outside createEventRecord may carry the ids only in metadata.
    bus.publish(ev({ event_id: 'd', metadata: { session_id: 's1', run_id: 'r1' } }));

    expect(got).toEqual({
      s1: ['a', 'b', 'd'],
      r1: ['a', 'd'],
      t1: ['a'],
      k1: ['c'],
      s1r2: ['b'],
      all: ['a', 'b', 'c', 'd'],
    });
  });

  it('publish work does not grow with subscribers of other sessions', () => {
    // Count reads of the event's fields: a bus that scanned every subscriber would read them
    // once per subscriber.
    const countReads = (bus: EventBus): number => {
      let reads = 0;
      const target = ev({ session_id: 'mine', run_id: 'r' });
      const proxy = new Proxy(target, {
        get(t, key, recv) {
          if (key === 'session_id' || key === 'run_id') reads++;
          return Reflect.get(t, key, recv);
        },
      });
      bus.publish(proxy);
      return reads;
    };
    const small = new EventBus();
    small.subscribe({ session_id: 'mine' }, () => {});
    small.subscribe({ session_id: 'other-0' }, () => {});
    const large = new EventBus();
    large.subscribe({ session_id: 'mine' }, () => {});
    for (let i = 0; i < 2000; i++) large.subscribe({ session_id: `other-${i}` }, () => {});
    for (let i = 0; i < 2000; i++) large.subscribe({ run_id: `run-${i}` }, () => {});
    expect(large.size).toBe(4001);
    expect(countReads(large)).toBe(countReads(small));
  });

  it('unsubscribe stops delivery, is idempotent, and works from inside a handler', () => {
    const bus = new EventBus();
    const got: string[] = [];
    let unsubscribeSelf: () => void = () => {};
    unsubscribeSelf = bus.subscribe({ session_id: 's' }, (e) => {
      got.push(e.event_id);
      unsubscribeSelf();
    });
    const other: string[] = [];
    const unsubOther = bus.subscribe({ session_id: 's' }, (e) => void other.push(e.event_id));
    bus.publish(ev({ event_id: 'x', session_id: 's' }));
    bus.publish(ev({ event_id: 'y', session_id: 's' }));
    expect(got).toEqual(['x']);
    expect(other).toEqual(['x', 'y']);
    unsubOther();
    unsubOther();
    bus.publish(ev({ event_id: 'z', session_id: 's' }));
    expect(other).toEqual(['x', 'y']);
    expect(bus.size).toBe(0);
  });

  it('a throwing handler is dropped with onError; the publisher and other subscribers are unaffected', () => {
    const bus = new EventBus();
    const errors: unknown[] = [];
    bus.subscribe(
      { session_id: 's' },
      () => {
        throw new Error('bad handler');
      },
      { onError: (e) => errors.push(e) },
    );
    const got: string[] = [];
    bus.subscribe({ session_id: 's' }, (e) => void got.push(e.event_id));
    expect(() => bus.publish(ev({ event_id: 'a', session_id: 's' }))).not.toThrow();
    bus.publish(ev({ event_id: 'b', session_id: 's' }));
    expect(errors).toHaveLength(1);
    expect(got).toEqual(['a', 'b']);
    expect(bus.size).toBe(1);
  });
});

describe('EventBus backpressure', () => {
  it('queues behind an async handler in order', async () => {
    const bus = new EventBus();
    const got: string[] = [];
    const gates: Array<{ promise: Promise<void>; resolve: () => void }> = [];
    bus.subscribe({ run_id: 'r' }, (e) => {
      got.push(e.event_id);
      const d = deferred();
      gates.push(d);
      return d.promise;
    });
    bus.publish(ev({ event_id: '1', run_id: 'r' }));
    bus.publish(ev({ event_id: '2', run_id: 'r' }));
    bus.publish(ev({ event_id: '3', run_id: 'r' }));
    expect(got).toEqual(['1']);
    gates[0].resolve();
    await gates[0].promise;
    await Promise.resolve();
    expect(got).toEqual(['1', '2']);
    gates[1].resolve();
    await gates[1].promise;
    await Promise.resolve();
    expect(got).toEqual(['1', '2', '3']);
  });

  it('drops a subscriber more than maxLag behind and calls onOverflow once', async () => {
    const bus = new EventBus();
    const overflows: OverflowInfo[] = [];
    const first = deferred();
    let calls = 0;
    const firstEvent = ev({ run_id: 'r' });
    bus.subscribe(
      { run_id: 'r' },
      () => {
        calls++;
        return calls === 1 ? Promise.resolve() : first.promise;
      },
      { maxLag: 3, onOverflow: (i) => overflows.push(i) },
    );
    bus.publish(firstEvent); // delivered, resolves at once
    await Promise.resolve();
    await Promise.resolve();
    bus.publish(ev({ run_id: 'r' })); // in the handler, never resolves
    for (let i = 0; i < 3; i++) bus.publish(ev({ run_id: 'r' })); // 3 queued: at the limit
    expect(overflows).toEqual([]);
    expect(bus.size).toBe(1);
    bus.publish(ev({ run_id: 'r' })); // the 4th queued: over
    bus.publish(ev({ run_id: 'r' }));
    expect(overflows).toEqual([{ lag: 4, last_cursor: firstEvent.cursor }]);
    expect(bus.size).toBe(0);
    first.resolve();
    await first.promise;
    expect(calls).toBe(2);
  });

  it('a synchronous handler never overflows', () => {
    const bus = new EventBus();
    let count = 0;
    const overflow: OverflowInfo[] = [];
    bus.subscribe({}, () => void count++, { maxLag: 2, onOverflow: (i) => overflow.push(i) });
    for (let i = 0; i < 100; i++) bus.publish(ev());
    expect(count).toBe(100);
    expect(overflow).toEqual([]);
  });
});

/** A store stand-in: append gives a cursor; `publish` is separate so tests control the gap. */
class FakeLog {
  events: StoredEvent[] = [];
  constructor(
    readonly bus: EventBus,
    readonly pageSize = 2,
  ) {}
  store(fields: Partial<StoredEvent> = {}): StoredEvent {
    const e = ev({ session_id: 's', ...fields });
    this.events.push(e);
    return e;
  }
  append(fields: Partial<StoredEvent> = {}): StoredEvent {
    const e = this.store(fields);
    this.bus.publish(e);
    return e;
  }
  async readPage(after: string | null): Promise<{ events: StoredEvent[]; next_cursor: string | null }> {
    await Promise.resolve();
    const rest = this.events.filter((e) => e.session_id === 's' && (after === null || e.cursor > after));
    const events = rest.slice(0, this.pageSize);
    return { events, next_cursor: rest.length > this.pageSize ? events[events.length - 1].cursor : null };
  }
}

async function take(iter: AsyncIterator<StoredEvent>, count: number): Promise<string[]> {
  const out: string[] = [];
  while (out.length < count) {
    const r = await iter.next();
    // Fail instead of spinning on microtasks (which would also starve the test timeout).
    if (r.done) throw new Error(`iterator ended after ${out.length} of ${count} events`);
    out.push(r.value.cursor);
  }
  return out;
}

const follow = (
  log: FakeLog,
  after: string | null,
  extra: { maxLag?: number; signal?: AbortSignal; readPage?: (a: string | null) => Promise<{ events: StoredEvent[]; next_cursor: string | null }> } = {},
) =>
  replayThenFollow({
    readPage: extra.readPage ?? ((a) => log.readPage(a)),
    subscribe: (onEvent, opts) => log.bus.subscribe({ session_id: 's' }, onEvent, opts),
    after,
    maxLag: extra.maxLag,
    signal: extra.signal,
  });

describe('replayThenFollow', () => {
  it('replays stored events after the cursor, then follows live ones', async () => {
    const log = new FakeLog(new EventBus());
    const stored = [log.append(), log.append(), log.append(), log.append(), log.append()];
    log.append({ session_id: 'other' });
    const it = follow(log, stored[1].cursor);
    expect(await take(it, 3)).toEqual(stored.slice(2).map((e) => e.cursor));
    const live = [log.append(), log.append()];
    expect(await take(it, 2)).toEqual(live.map((e) => e.cursor));
    await it.return!();
    expect(log.bus.size).toBe(0);
  });

  it('has no gap and no duplicate when events arrive during replay', async () => {
    const log = new FakeLog(new EventBus());
    const expected: string[] = [];
    for (let i = 0; i < 5; i++) expected.push(log.append().cursor);
    let calls = 0;
    const it = follow(log, null, {
      readPage: async (after) => {
        calls++;
        // A replay that never catches up is the caller's overflow case; stop feeding it after a few pages.
        if (calls > 4) return log.readPage(after);
        // Before reading: stored and published, so it is both in this page and in the live buffer.
        expected.push(log.append().cursor);
        const page = await log.readPage(after);
        // After reading: too late for this page. Only live delivery (or a later page) carries it.
        expected.push(log.append().cursor);
        // Stored now, published later: the replay may read it and the bus delivers it afterwards.
        const late = log.store();
        expected.push(late.cursor);
        queueMicrotask(() => log.bus.publish(late));
        return page;
      },
    });
    // `expected` grows while the replay reads pages, so read until it is met.
    const got: string[] = [];
    while (got.length < expected.length) got.push(...(await take(it, 1)));
    expect(calls).toBeGreaterThan(2);
    expect(got).toEqual(expected);
    // Nothing more is pending: the next live event is the next thing delivered.
    const next = log.append();
    expect(await take(it, 1)).toEqual([next.cursor]);
    await it.return!();
  });

  it('delivers an event stored after the last page was read', async () => {
    const log = new FakeLog(new EventBus(), 100);
    const a = log.append();
    let extra: StoredEvent | null = null;
    const it = follow(log, null, {
      readPage: async (after) => {
        const page = await log.readPage(after);
        extra ??= log.append();
        return page;
      },
    });
    expect(await take(it, 2)).toEqual([a.cursor, extra!.cursor]);
    await it.return!();
  });

  it('keeps every event exactly once for random interleavings', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 8 }),
        fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 12 }),
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 0, max: 6 }),
        async (initial, appendsPerRead, pageSize, afterIndex) => {
          const log = new FakeLog(new EventBus(), pageSize);
          for (let i = 0; i < initial; i++) log.append();
          const after = afterIndex < log.events.length ? log.events[afterIndex].cursor : null;
          let read = 0;
          let appending = true;
          const it = follow(log, after, {
            readPage: async (a) => {
              // Each read appends the next count from the list, then no more (so the replay ends).
              const k = appending && read < appendsPerRead.length ? appendsPerRead[read++] : 0;
              for (let i = 0; i < k; i++) log.append();
              return log.readPage(a);
            },
          });
          const tail = 3;
          const want = () => log.events.filter((e) => after === null || e.cursor > after).map((e) => e.cursor);
          // Consume whatever replay yields, then publish a few live events and expect them too.
          const got: string[] = [];
          while (got.length < want().length) got.push(...(await take(it, 1)));
          appending = false;
          for (let i = 0; i < tail; i++) log.append();
          while (got.length < want().length) got.push(...(await take(it, 1)));
          await it.return!();
          expect(got).toEqual(want());
          expect(log.bus.size).toBe(0);
        },
      ),
      { numRuns: 150 },
    );
  });

  it('throws StreamOverflowError when more than maxLag live events wait, and unsubscribes', async () => {
    const log = new FakeLog(new EventBus());
    const a = log.append();
    const it = follow(log, null, { maxLag: 3 });
    expect(await take(it, 1)).toEqual([a.cursor]);
    for (let i = 0; i < 3; i++) log.append();
    expect(log.bus.size).toBe(1);
    log.append();
    expect(log.bus.size).toBe(0);
    const err = await it.next().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StreamOverflowError);
    expect((err as StreamOverflowError).info.last_cursor).toBe(a.cursor);
    expect(await it.next()).toEqual({ done: true, value: undefined });
  });

  it('does not count events the replay already sent towards the lag', async () => {
    const log = new FakeLog(new EventBus(), 1);
    const it = follow(log, null, {
      maxLag: 2,
      // Every page read stores and publishes one event, which the replay then also reads; a full
      // page says more may follow. Without pruning, the live buffer would pass maxLag at read 3.
      readPage: async (after) => {
        if (log.events.length < 10) log.append();
        const page = await log.readPage(after);
        const last = page.events[page.events.length - 1];
        return { events: page.events, next_cursor: page.events.length === log.pageSize ? last.cursor : null };
      },
    });
    const got = await take(it, 10);
    expect(got).toEqual(log.events.map((e) => e.cursor));
    await it.return!();
  });

  it('return() ends a pending next() and unsubscribes; an aborted signal does the same', async () => {
    const log = new FakeLog(new EventBus());
    const it = follow(log, null);
    const pending = it.next();
    await new Promise((r) => setImmediate(r));
    expect(log.bus.size).toBe(1);
    await it.return!();
    expect(await pending).toEqual({ done: true, value: undefined });
    expect(log.bus.size).toBe(0);

    const ac = new AbortController();
    const it2 = follow(log, null, { signal: ac.signal });
    const pending2 = it2.next();
    await new Promise((r) => setImmediate(r));
    expect(log.bus.size).toBe(1);
    ac.abort();
    expect(await pending2).toEqual({ done: true, value: undefined });
    expect(log.bus.size).toBe(0);
  });

  it('a failing readPage rejects next() and unsubscribes', async () => {
    const log = new FakeLog(new EventBus());
    const it = follow(log, null, {
      readPage: async () => {
        throw new Error('store closed');
      },
    });
    await expect(it.next()).rejects.toThrow('store closed');
    expect(log.bus.size).toBe(0);
  });

  it('bounds the live backlog by bytes too (a lone event of any size is kept), reports the overflow at once, and counts heldBytes', async () => {
    const log = new FakeLog(new EventBus());
    const a = log.append();
    const overflows: OverflowInfo[] = [];
    const it = replayThenFollow({
      readPage: (x) => log.readPage(x),
      subscribe: (onEvent, opts) => log.bus.subscribe({ session_id: 's' }, onEvent, opts),
      after: null,
      maxLag: 100,
      maxLagBytes: 250,
      sizeOf: (e) => (typeof e.output === 'string' ? e.output.length : 0),
      onOverflow: (info) => overflows.push(info),
    });
    expect(await take(it, 1)).toEqual([a.cursor]);
    log.append({ output: 'x'.repeat(1000) }); // alone: kept, whatever its size
    expect(it.heldBytes).toBe(1000);
    expect(await take(it, 1)).toHaveLength(1);
    expect(it.heldBytes).toBe(0);
    log.append({ output: 'y'.repeat(200) });
    expect(overflows).toEqual([]);
    log.append({ output: 'z'.repeat(100) }); // 300 bytes waiting: over 250
    // The consumer is told without calling next() (it may be waiting on a socket), once.
    expect(overflows).toHaveLength(1);
    expect(overflows[0].last_cursor).toBe(log.events[1].cursor);
    expect(log.bus.size).toBe(0);
    expect(it.heldBytes).toBe(0);
    await expect(it.next()).rejects.toBeInstanceOf(StreamOverflowError);
  });
});
