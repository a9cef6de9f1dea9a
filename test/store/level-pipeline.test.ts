// LevelStore's write queue pipelines its rounds (level-writer.ts, flush): round N+1 is staged while
// round N's batch is written, its batch written only after N's landed. These tests hold and fail
// LevelDB writes to check, through the store API, the order of the batches, that a failed write
// fails the round staged on it, and that the log and the records stay consistent after that.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LevelStore } from '../../src/store/level.js';
import type { EventInput, StoredEvent } from '../../src/store/store.js';

let n = 0;
const ev = (run = 'r'): EventInput => ({ event_id: `event_${++n}`, event_type: 'step', timestamp: '2026-01-01T00:00:00.000Z', run_id: run });

interface Write {
  keys: string[];
  /** Lets a held write go on to LevelDB, or fails it with `err` (nothing written). */
  release(err?: Error): void;
}

interface ChainedBatch {
  put(k: string, v: string): unknown;
  del(k: string): unknown;
  write(o?: unknown): Promise<void>;
  close(): Promise<void>;
}

/**
 * Wraps the store's LevelDB handle: records every batch written (its keys), counts the writes in
 * flight at once, and holds each write while `hold` is set until the test releases it.
 */
function watchWrites(store: LevelStore) {
  const db = (store as unknown as { db: { batch: () => ChainedBatch } }).db;
  const batch = db.batch.bind(db);
  const waiting: Array<{ count: number; resolve: () => void }> = [];
  const w = {
    writes: [] as Write[],
    hold: false,
    inFlight: 0,
    maxInFlight: 0,
    /** Resolves once `count` writes were issued (held or not). */
    reached: (count: number) => new Promise<void>((resolve) => (w.writes.length >= count ? resolve() : waiting.push({ count, resolve }))),
  };
  db.batch = () => {
    const b = batch();
    const keys: string[] = [];
    const put = b.put.bind(b);
    const del = b.del.bind(b);
    const write = b.write.bind(b);
    b.put = (k, v) => (keys.push(k), put(k, v));
    b.del = (k) => (keys.push(k), del(k));
    b.write = async (o) => {
      w.inFlight++;
      w.maxInFlight = Math.max(w.maxInFlight, w.inFlight);
      try {
        let release: Write['release'] = () => undefined;
        const held = w.hold ? new Promise<void>((resolve, reject) => (release = (err) => (err ? reject(err) : resolve()))) : Promise.resolve();
        w.writes.push({ keys, release: (err) => release(err) });
        for (const x of waiting.splice(0))
          if (w.writes.length >= x.count) x.resolve();
          else waiting.push(x);
        try {
          await held;
        } catch (e) {
          await b.close();
          throw e;
        }
        await write(o);
      } finally {
        w.inFlight--;
      }
    };
    return b;
  };
  return w;
}

/** Turns of the event loop (no timers): enough for a round to be taken and staged. */
const turns = async (count = 20) => {
  for (let i = 0; i < count; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};
/** Turns the event loop until `cond` holds, at most `max` turns; returns whether it holds. */
const until = async (cond: () => boolean, max = 200) => {
  for (let i = 0; i < max && !cond(); i++) await turns(1);
  return cond();
};
const eventKeys = (keys: string[]) => keys.filter((k) => k.startsWith('e\0'));
const cursorsOf = (events: StoredEvent[]) => events.map((e) => e.cursor);

describe('LevelStore write pipeline', () => {
  const dirs: string[] = [];
  const stores: LevelStore[] = [];
  const opened = async (dir?: string) => {
    const path = dir ?? (await mkdtemp(join(tmpdir(), 'agentd-store-pipe-')));
    if (!dir) dirs.push(path);
    const s = new LevelStore({ path });
    stores.push(s);
    await s.open();
    return { s, path };
  };
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
    for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
  });

  it('stages the appends sent while a round is being written before it lands and writes them right after it; a commit waits for the landing', async () => {
    const { s } = await opened();
    const w = watchWrites(s);
    w.hold = true;
    const a = s.appendEvents([ev()]);
    await w.reached(1);
    // Sent while round 1's write is held: an append whose stored copy (made when it is staged)
    // reads a getter, and a commit (its ops function is called when it is staged).
    let copied = 0;
    const probe = ev();
    Object.defineProperty(probe, 'probe', { enumerable: true, get: () => ++copied });
    const b = s.appendEvents([probe]);
    let staged = false;
    const c = s.commit(() => ((staged = true), [{ op: 'create', kind: 'runs', id: 'x', value: 1 }]));
    await turns();
    expect(copied).toBe(1); // the append was staged on top of the write in flight
    expect(staged).toBe(false); // the commit waits for it to land
    expect(w.writes).toHaveLength(1); // and nothing is written before it landed
    w.hold = false;
    w.writes[0].release();
    const [[ea], [eb], [x]] = await Promise.all([a, b, c]);
    expect(copied).toBe(1);
    expect(eb.probe).toBe(1);
    expect(w.writes).toHaveLength(2);
    expect(w.maxInFlight).toBe(1);
    expect(eventKeys(w.writes[0].keys)).toEqual([`e\0${ea.cursor}`]);
    expect(eventKeys(w.writes[1].keys)).toEqual([`e\0${eb.cursor}`]);
    expect(w.writes[1].keys).toContain('r\0runs\0x'); // the commit joined the round written next
    expect(eb.cursor > ea.cursor).toBe(true);
    expect(x).toMatchObject({ id: 'x', version: 1 });
  });

  it('puts every append sent while a round is being written, over several turns of the event loop, in the one round written next', async () => {
    const { s } = await opened();
    const w = watchWrites(s);
    w.hold = true;
    const a = s.appendEvents([ev()]);
    await w.reached(1);
    const later: Array<Promise<StoredEvent[]>> = [];
    for (let i = 0; i < 3; i++) {
      later.push(s.appendEvents([ev(`run${i}`)]));
      await turns();
    }
    w.hold = false;
    w.writes[0].release();
    const stored = (await Promise.all(later)).flat();
    await a;
    expect(w.writes).toHaveLength(2);
    expect(eventKeys(w.writes[1].keys)).toEqual(stored.map((e) => `e\0${e.cursor}`));
  });

  it('retention called while a round is written covers the appends sent before the call, also those staged for the next round, and none sent after', async () => {
    const { s } = await opened();
    const w = watchWrites(s);
    w.hold = true;
    const a = s.appendEvents([ev()]);
    await w.reached(1);
    const b = s.appendEvents([ev()]);
    const deleted = s.deleteEventsBefore('2030-01-01T00:00:00.000Z');
    const c = s.appendEvents([ev()]);
    await turns();
    w.hold = false;
    w.writes[0].release();
    await Promise.all([a, b, c]);
    expect(await deleted).toBe(2);
    expect(cursorsOf((await s.readEvents()).events)).toEqual(cursorsOf(await c));
  });

  it('splits 1,000 concurrent single-event appends in two rounds written one after the other; cursors are dense and in call order', async () => {
    const { s } = await opened();
    const w = watchWrites(s);
    const first = (await s.appendEvents([ev()]))[0].cursor;
    const calls = Array.from({ length: 1000 }, (_, i) => s.appendEvents([ev(`run${i % 10}`)]));
    const stored = (await Promise.all(calls)).flat();
    expect(w.writes).toHaveLength(3); // the lone first append, then the 1,000 in two halves
    expect(w.writes.slice(1).map((x) => eventKeys(x.keys).length)).toEqual([500, 500]);
    expect(w.maxInFlight).toBe(1);
    const expected = Array.from({ length: 1000 }, (_, i) => String(Number(first) + 1 + i).padStart(16, '0'));
    expect(cursorsOf(stored)).toEqual(expected);
    expect(eventKeys(w.writes[1].keys.concat(w.writes[2].keys))).toEqual(expected.map((c) => `e\0${c}`));
    const log = await s.readEvents({ after: first, limit: 1000 });
    expect(cursorsOf(log.events)).toEqual(expected);
    expect(log.events.map((e) => e.event_id)).toEqual(stored.map((e) => e.event_id));
    // The postings of both rounds: run0 holds every tenth event, in order.
    const run0 = await s.readEvents({ filters: { run_id: 'run0' }, limit: 1000 });
    expect(cursorsOf(run0.events)).toEqual(expected.filter((_, i) => i % 10 === 0));
  });

  it('fails the round staged on a write that failed, whole: its appends are rejected, nothing of either round is stored, a commit queued behind them and later writes go on', async () => {
    const { s, path } = await opened();
    const [before] = await s.appendEvents([ev()]);
    await s.createRecord('runs', 'kept', { n: 0 }, { status: 'a' });
    const w = watchWrites(s);
    const boom = new Error('disk on fire');
    /** Round 1 sent, held, then round 2 sent and staged on it; round 1's write fails. */
    const failTwoRounds = async (round1: () => Array<Promise<unknown>>, round2: () => Array<Promise<unknown>>) => {
      const writes = w.writes.length;
      w.hold = true;
      const one = round1();
      await w.reached(writes + 1);
      const two = round2();
      await turns(); // round 2 is staged (an open round) within a turn or two
      w.hold = false;
      w.writes[writes].release(boom);
      const settled = await Promise.allSettled([...one, ...two]);
      expect(settled.map((r) => (r.status === 'rejected' ? r.reason : r.status))).toEqual(settled.map(() => boom));
      expect(w.writes).toHaveLength(writes + 1); // round 2 was never written
    };
    // Round 1 appends; round 2 appends.
    await failTwoRounds(
      () => [s.appendEvents([ev('r1')])],
      () => [s.appendEvents([ev('r2'), ev('r2')]), s.appendEvents([ev('r2')])],
    );
    // Round 1 commits; round 2 appends.
    await failTwoRounds(
      () => [s.createRecord('runs', 'first', { n: 1 }, { status: 'a' })],
      () => [s.appendEvents([ev('r3')]), s.appendEvents([ev('r3'), ev('r3')])],
    );
    // A commit queued behind the appends staged on a failed write was not staged on it: it is
    // staged after the failure, on what the disk holds, and written.
    w.hold = true;
    const held = s.appendEvents([ev('r4')]);
    await w.reached(w.writes.length + 1);
    const staged = s.appendEvents([ev('r4')]);
    const behind = s.createRecord('runs', 'second', { n: 2 }, { status: 'a' });
    await turns();
    w.hold = false;
    w.writes[w.writes.length - 1].release(boom);
    await expect(held).rejects.toBe(boom);
    await expect(staged).rejects.toBe(boom);
    await expect(behind).resolves.toMatchObject({ version: 1 });

    // Nothing of those rounds is stored, and the caches learned nothing from them.
    expect(await s.getRecord('runs', 'first')).toBeNull();
    expect(await s.countRecords('runs')).toBe(2);
    expect(cursorsOf((await s.readEvents()).events)).toEqual([before.cursor]);
    expect((await s.readEvents({ filters: { run_id: 'r2' } })).events).toEqual([]);

    // Later writes go on: the same ids can be created, new cursors follow the ones skipped.
    const [again] = await s.commit([{ op: 'create', kind: 'runs', id: 'first', value: { n: 3 }, indexes: { status: 'a' } }]);
    expect(again).toMatchObject({ version: 1, value: { n: 3 } });
    const [after] = await s.appendEvents([ev('r2')]);
    expect(after.cursor > before.cursor).toBe(true);
    expect(cursorsOf((await s.readEvents()).events)).toEqual([before.cursor, after.cursor]);
    expect(cursorsOf((await s.readEvents({ filters: { run_id: 'r2' } })).events)).toEqual([after.cursor]);
    expect(await s.countRecords('runs', { name: 'status', value: 'a' })).toBe(3);

    // And so after a reopen: the numbers handed to the failed rounds are never reused.
    await s.close();
    const { s: t } = await opened(path);
    expect(cursorsOf((await t.readEvents()).events)).toEqual([before.cursor, after.cursor]);
    expect(await t.countRecords('runs')).toBe(3);
    const [next] = await t.appendEvents([ev()]);
    expect(next.cursor > after.cursor).toBe(true);
  });

  it('stages a commit only once a commit being written has landed: its check sees that write, or the disk if the write failed', async () => {
    const { s } = await opened();
    await s.createRecord('runs', 'x', { n: 0 }, { status: 'a' });
    const w = watchWrites(s);
    w.hold = true;
    const first = s.updateRecord('runs', 'x', { n: 1 }, 1, { status: 'b' });
    await w.reached(1);
    let staged = false;
    const second = s.commit(() => ((staged = true), [{ op: 'update', kind: 'runs', id: 'x', value: { n: 2 }, expectedVersion: 2, indexes: { status: 'c' } }]));
    await turns();
    expect(staged).toBe(false);
    w.writes[0].release();
    await expect(first).resolves.toMatchObject({ version: 2 });
    expect(await until(() => staged)).toBe(true);
    await w.reached(2);
    // The second write fails: a commit sent meanwhile is staged after it, on what the disk holds.
    const third = s.updateRecord('runs', 'x', { n: 3 }, 2, { status: 'd' });
    await turns();
    w.hold = false;
    w.writes[1].release(new Error('no space'));
    await expect(second).rejects.toThrow('no space');
    await expect(third).resolves.toMatchObject({ version: 3, value: { n: 3 } });
    expect(await s.countRecords('runs', { name: 'status', value: 'c' })).toBe(0);
    expect(await s.countRecords('runs', { name: 'status', value: 'd' })).toBe(1);
    expect(await s.countRecords('runs', { name: 'status', value: 'b' })).toBe(0);
  });
});
