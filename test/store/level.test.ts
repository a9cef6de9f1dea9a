import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Level } from 'level';
import { afterEach, describe, expect, it } from 'vitest';
import { LevelStore } from '../../src/store/level.js';
import { openStore } from '../../src/store/open.js';
import { runStoreContract, storeErrorCode } from './store.contract.js';

const tempDir = () => mkdtemp(join(tmpdir(), 'agentd-store-level-'));

runStoreContract('level', async () => {
  const dir = await tempDir();
  const store = new LevelStore({ path: dir });
  await store.open();
  return {
    store,
    cleanup: async () => {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
});

describe('LevelStore on disk', () => {
  const dirs: string[] = [];
  const stores: LevelStore[] = [];
  const fresh = async () => {
    const dir = await tempDir();
    dirs.push(dir);
    return dir;
  };
  const opened = async (path: string) => {
    const s = new LevelStore({ path });
    stores.push(s);
    await s.open();
    return s;
  };
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
    for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
  });

  it('keeps ~8 MB of writes in its memtable (32 MB, not the 4 MB LevelDB default): no table is flushed, and all of it reads back after a reopen', async () => {
    const dir = await fresh();
    const a = await opened(dir);
    const pad = 'x'.repeat(1000);
    for (let i = 0; i < 80; i++) {
      await a.appendEvents(
        Array.from({ length: 100 }, (_, j) => ({ event_id: `e${i}-${j}`, event_type: 'bulk', timestamp: '2026-01-01T00:00:00Z', run_id: `r${i}`, pad })),
      );
    }
    await a.close();
    stores.splice(stores.indexOf(a), 1);
    // A 4 MB memtable would have been flushed to a level-0 table (.ldb) at least once by now.
    expect((await readdir(dir)).filter((f) => f.endsWith('.ldb'))).toEqual([]);
    const b = await opened(dir);
    const page = await b.readEvents({ filters: { run_id: 'r79' }, limit: 1000 });
    expect(page.events).toHaveLength(100);
  });

  it('keeps data across close and reopen; seq and cursor continue', async () => {
    const dir = await fresh();
    const a = await opened(dir);
    await a.createRecord('runs', 'r1', { n: 1 }, { status: 'running' });
    const r2 = await a.createRecord('runs', 'r2', { n: 2 }, { status: 'running' });
    await a.updateRecord('runs', 'r1', { n: 11 }, 1, { status: 'completed' });
    const evs = await a.appendEvents([
      { event_id: 'e1', event_type: 'x', timestamp: '2026-01-01T00:00:00Z', run_id: 'r1' },
      { event_id: 'e2', event_type: 'x', timestamp: '2026-01-01T00:00:01Z', run_id: 'r2' },
    ]);
    // remove the newest record and every event: numbers must still not be reused
    await a.deleteRecord('runs', 'r2');
    await a.close();

    const b = await opened(dir);
    expect(await b.getRecord('runs', 'r1')).toMatchObject({ version: 2, value: { n: 11 } });
    expect(await b.countRecords('runs')).toBe(1);
    expect(await b.countRecords('runs', { name: 'status', value: 'completed' })).toBe(1);
    expect(await b.countRecords('runs', { name: 'status', value: 'running' })).toBe(0);
    expect((await b.readEvents({ filters: { run_id: 'r2' } })).events.map((e) => e.event_id)).toEqual(['e2']);
    expect(await b.lastEventCursor()).toBe(evs[1].cursor);
    expect(await b.deleteEventsBefore('2030-01-01T00:00:00Z')).toBe(2);
    await b.close();

    const c = await opened(dir);
    const r3 = await c.createRecord('runs', 'r3', {});
    expect(r3.seq).toBeGreaterThan(r2.seq);
    const [e3] = await c.appendEvents([{ event_id: 'e3', event_type: 'x', timestamp: '2026-01-02T00:00:00Z' }]);
    expect(e3.cursor > evs[1].cursor).toBe(true);
  });

  it('writes one index posting per value and round, and retention removes every one', async () => {
    const dir = await fresh();
    const a = await opened(dir);
    const t0 = Date.UTC(2026, 0, 1);
    // One append: 6 events over 2 runs, one type; task_id null gets no index entry.
    await a.appendEvents(
      Array.from({ length: 6 }, (_, i) => ({
        event_id: `e${i}`,
        event_type: 't',
        timestamp: new Date(t0 + i).toISOString(),
        run_id: `r${i % 2}`,
        task_id: null,
      })),
    );
    await a.close();
    const raw = new Level<string, string>(dir, { keyEncoding: 'utf8', valueEncoding: 'utf8' });
    const indexKeys = async () => (await raw.iterator({ gte: 'x\u0000', lt: 'x\u0001' }).all()).map(([k, v]) => [k.split('\u0000').slice(1).join('/'), v]);
    await raw.open();
    expect(await indexKeys()).toEqual([
      ['event_type/t/0000000000000006', ['1', '2', '3', '4', '5', '6'].map((n) => n.padStart(16, '0')).join('')],
      ['run_id/r0/0000000000000005', ['1', '3', '5'].map((n) => n.padStart(16, '0')).join('')],
      ['run_id/r1/0000000000000006', ['2', '4', '6'].map((n) => n.padStart(16, '0')).join('')],
    ]);
    await raw.close();
    const b = await opened(dir);
    await b.appendEvents([{ event_id: 'single', event_type: 't', timestamp: new Date(t0 + 10).toISOString() }]);
    expect(await b.deleteEventsBefore(new Date(t0 + 3).toISOString())).toBe(3); // stops inside the posting
    expect((await b.readEvents({ filters: { event_type: 't' } })).events.map((e) => e.event_id)).toEqual(['e3', 'e4', 'e5', 'single']);
    expect(await b.deleteEventsBefore(new Date(t0 + 100).toISOString())).toBe(4);
    await b.close();
    await raw.open();
    expect(await indexKeys()).toEqual([]);
    await raw.close();
  });

  it('gives the same counts and conflicts with prefetches in play (used, consumed by another write, or outdated)', async () => {
    const s = await opened(await fresh());
    // A valid prefetch: the create finds the row absent and the counter at 0 without a disk read.
    s.prefetch([{ kind: 'runs', id: 'p1', indexes: { session_id: 'S' } }]);
    await s.createRecord('runs', 'p1', { n: 1 }, { session_id: 'S' });
    // Prefetches made outdated by another round's write before their own round: read again.
    s.prefetch([
      { kind: 'runs', id: 'p2', indexes: { session_id: 'S' } },
      { kind: 'runs', id: 'p3', indexes: { session_id: 'S' } },
    ]);
    await s.createRecord('runs', 'p2', { n: 2 }, { session_id: 'S' }); // consumes p2's, makes p3's stale
    await s.createRecord('runs', 'p3', { n: 3 }, { session_id: 'S' });
    expect(await s.countRecords('runs', { name: 'session_id', value: 'S' })).toBe(3);
    expect(await s.countRecords('runs')).toBe(3);
    s.prefetch([{ kind: 'runs', id: 'p4' }]);
    await s.commit([{ op: 'create', kind: 'runs', id: 'p4', value: { n: 4 } }]);
    await expect(s.createRecord('runs', 'p4', { n: 5 })).rejects.toMatchObject({ code: 'conflict' });
    expect((await s.getRecord('runs', 'p4'))?.value).toEqual({ n: 4 });
  });

  it("counts the fsync'd group-commit rounds it wrote (stats), across a reopen; none without sync", async () => {
    const dir = await fresh();
    const a = await opened(dir);
    expect(a.stats.groupCommitRounds).toBe(0);
    // Two writes issued in the same turn share one round; an append after it is a second round.
    await Promise.all([a.createRecord('runs', 'r1', { n: 1 }), a.createRecord('runs', 'r2', { n: 2 })]);
    expect(a.stats.groupCommitRounds).toBe(1);
    await a.appendEvents([{ event_id: 'e1', event_type: 'x', timestamp: '2026-01-01T00:00:00Z' }]);
    expect(a.stats.groupCommitRounds).toBe(2);
    await a.getRecord('runs', 'r1'); // a read is no round
    await a.close();
    expect(a.stats.groupCommitRounds).toBe(2);
    await a.open();
    await a.createRecord('runs', 'r3', { n: 3 });
    expect(a.stats.groupCommitRounds).toBe(3);
    await a.close();
    const unsynced = new LevelStore({ path: dir, sync: false });
    stores.push(unsynced);
    await unsynced.open();
    await unsynced.createRecord('runs', 'r4', { n: 4 });
    expect(unsynced.stats.groupCommitRounds).toBe(0);
  });

  it('refuses a second store on the same directory with locked', async () => {
    const dir = await fresh();
    const a = await opened(dir);
    const b = new LevelStore({ path: dir });
    expect(await storeErrorCode(b.open())).toBe('locked');
    expect(b.isOpen()).toBe(false);
    await a.close();
    await b.open(); // free again once the holder closed
    stores.push(b);
    expect(b.isOpen()).toBe(true);
  });

  it('reopens the same instance after close', async () => {
    const dir = await fresh();
    const a = await opened(dir);
    await a.createRecord('meta', 'k', 1);
    await a.close();
    await a.open();
    expect((await a.getRecord('meta', 'k'))?.value).toBe(1);
  });

  it('shares one open and one close between concurrent callers', async () => {
    const dir = await fresh();
    const a = new LevelStore({ path: dir });
    stores.push(a);
    await Promise.all([a.open(), a.open()]);
    expect(a.isOpen()).toBe(true);
    const write = a.createRecord('meta', 'k', 1);
    await Promise.all([a.close(), a.close()]);
    await write;
    expect(a.isOpen()).toBe(false);
    await Promise.all([a.open(), a.close()]); // close waits for the open, then closes
    expect(a.isOpen()).toBe(false);
    await a.open();
    expect((await a.getRecord('meta', 'k'))?.value).toBe(1);
  });

  it('durably writes everything that was pending when close was called', async () => {
    const dir = await fresh();
    const a = await opened(dir);
    const pending = Array.from({ length: 200 }, (_, i) =>
      i % 2 ? a.appendEvents([{ event_id: `e${i}`, event_type: 'x', timestamp: '2026-01-01T00:00:00Z', run_id: 'r' }]) : a.createRecord('runs', `r${i}`, i),
    );
    await a.close();
    await Promise.all(pending);
    const b = await opened(dir);
    expect(await b.countRecords('runs')).toBe(100);
    expect((await b.readEvents({ filters: { run_id: 'r' }, limit: 1000 })).events).toHaveLength(100);
  });
});

describe('openStore', () => {
  it('opens a memory store', async () => {
    const s = await openStore({ kind: 'memory' });
    expect(s.adapter).toBe('memory');
    expect(s.isOpen()).toBe(true);
    await s.close();
  });

  it('opens a level store and needs a path for it', async () => {
    const dir = await tempDir();
    try {
      const s = await openStore({ kind: 'level', path: dir });
      expect(s.adapter).toBe('level');
      expect(s.isOpen()).toBe(true);
      await s.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    await expect(openStore({ kind: 'level' })).rejects.toThrow(/path/);
  });

  it('needs a url for postgres, and refuses an unknown kind', async () => {
    await expect(openStore({ kind: 'postgres' })).rejects.toThrow(/'postgres' needs a url/);
    await expect(openStore({ kind: 'nope' } as unknown as Parameters<typeof openStore>[0])).rejects.toThrow(/unknown store kind 'nope'/);
  });
});

describe('LevelStore write-queue cache', () => {
  it('keeps a round correct when it touches more records than the cache holds', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'agentd-store-cache-'));
    const store = new LevelStore({ path: dir, rowCacheSize: 4 });
    await store.open();
    try {
      const ids = Array.from({ length: 10 }, (_, i) => `r${i}`);
      for (const id of ids) await store.createRecord('runs', id, { n: 0 }, { status: 'a' });
      // The cache now holds the newest 4; this round reads 4 hits and 6 misses.
      const written = await store.commit(
        ids.map((id) => ({ op: 'update' as const, kind: 'runs' as const, id, value: { n: 1 }, expectedVersion: 1, indexes: { status: 'b' } })),
      );
      expect(written.map((w) => w!.version)).toEqual(ids.map(() => 2));
      expect(await store.countRecords('runs', { name: 'status', value: 'b' })).toBe(10);
      expect(await store.countRecords('runs', { name: 'status', value: 'a' })).toBe(0);
      // A stale writer is still refused when its row comes from the cache.
      await expect(store.updateRecord('runs', 'r9', { n: 2 }, 1)).rejects.toMatchObject({ code: 'stale_version' });
    } finally {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('answers a count from the counter cache: a repeated count reads no disk, and counts follow every write, also one racing the read', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'agentd-store-cache-'));
    // A first store writes the counters, so the second one starts with an empty cache.
    const first = new LevelStore({ path: dir });
    await first.open();
    for (let i = 0; i < 3; i++) await first.createRecord('runs', `r${i}`, { n: i }, { status: 'a' });
    await first.close();
    const store = new LevelStore({ path: dir });
    await store.open();
    try {
      const db = (store as unknown as { db: { get: (k: string) => Promise<unknown> } }).db;
      const get = db.get.bind(db);
      let diskReads = 0;
      db.get = (k: string) => {
        diskReads++;
        return get(k);
      };
      const index = { name: 'status', value: 'a' };
      expect(await store.countRecords('runs', index)).toBe(3);
      expect(diskReads).toBe(1);
      expect(await store.countRecords('runs', index)).toBe(3);
      expect(await store.countRecords('runs', { name: 'status', value: 'a' })).toBe(3);
      expect(diskReads).toBe(1);
      // A count whose read races a write that moves it: never cached stale.
      const racing = store.countRecords('runs', { name: 'status', value: 'b' });
      const write = store.updateRecord('runs', 'r0', { n: 9 }, 1, { status: 'b' });
      expect([0, 1]).toContain(await racing);
      await write;
      expect(await store.countRecords('runs', { name: 'status', value: 'b' })).toBe(1);
      expect(await store.countRecords('runs', index)).toBe(2);
      expect(await store.countRecords('runs')).toBe(3);
      await store.deleteRecord('runs', 'r1');
      expect(await store.countRecords('runs', index)).toBe(1);
      expect(await store.countRecords('runs')).toBe(2);
    } finally {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('reads from the disk only what no cache holds: a row read once, listed bodies it wrote, a prefetch across an unrelated write', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'agentd-store-cache-'));
    const first = new LevelStore({ path: dir });
    await first.open();
    await first.createRecord('runs', 'old', { n: 0 }, { status: 'x' });
    await first.close();
    const store = new LevelStore({ path: dir });
    await store.open();
    try {
      const db = (store as unknown as { db: { get: (k: string) => Promise<unknown>; getMany: (k: string[], o?: unknown) => Promise<unknown> } }).db;
      const reads: string[] = [];
      const get = db.get.bind(db);
      const getMany = db.getMany.bind(db);
      db.get = (k) => (reads.push(k), get(k));
      db.getMany = (ks, o) => (reads.push(...ks), getMany(ks, o));
      const recordReads = () => reads.filter((k) => k.startsWith('r\0')).length;
      // A row read once is cached: a second read is no disk read; so is a known-absent one.
      expect((await store.getRecord('runs', 'old'))?.value).toEqual({ n: 0 });
      expect((await store.getRecord('runs', 'old'))?.value).toEqual({ n: 0 });
      expect(await store.getRecord('runs', 'none')).toBeNull();
      expect(await store.getRecord('runs', 'none')).toBeNull();
      expect(recordReads()).toBe(2);
      // Rows this store wrote are listed from the cache; one that left the index is not listed.
      for (let i = 0; i < 5; i++) await store.createRecord('runs', `q${i}`, { n: i }, { status: 'x' });
      await store.updateRecord('runs', 'q1', { n: 11 }, 1, { status: 'y' });
      const before = recordReads();
      const page = await store.listRecords('runs', { index: { name: 'status', value: 'x' } });
      expect(page.items.map((i) => i.id)).toEqual(['old', 'q0', 'q2', 'q3', 'q4']);
      expect(recordReads()).toBe(before);
      // A prefetch stays good across a write of other keys: its own write reads nothing more.
      store.prefetch([{ kind: 'runs', id: 'p1', indexes: { status: 'z' } }]);
      const prefetched = reads.length;
      await store.createRecord('bg_runs', 'other', { n: 1 });
      const unrelated = reads.length;
      await store.createRecord('runs', 'p1', { n: 1 }, { status: 'z' });
      expect(reads.length).toBe(unrelated);
      expect(prefetched).toBeGreaterThan(before);
      expect(await store.countRecords('runs', { name: 'status', value: 'z' })).toBe(1);
      // ... but not across a write of its own key: then the round reads again and sees that write.
      store.prefetch([{ kind: 'runs', id: 'p2' }]);
      await store.createRecord('runs', 'p2', { n: 2 });
      await expect(store.createRecord('runs', 'p2', { n: 3 })).rejects.toMatchObject({ code: 'conflict' });
      // A row read while its prefetch is in flight waits for that read (no second disk read), and
      // the write after it reads nothing either: a row read before its write (a kind the absence
      // filter does not watch: sessions are, test/store/level-absent.test.ts).
      const ahead = recordReads();
      store.prefetch([{ kind: 'outcomes', id: 'named' }]);
      expect(await store.getRecord('outcomes', 'named')).toBeNull();
      await store.createRecord('outcomes', 'named', { n: 1 });
      expect(recordReads()).toBe(ahead + 1);
      expect((await store.getRecord('outcomes', 'named'))?.value).toEqual({ n: 1 });
      // A write landing on the key meanwhile: the concurrent read sees it or not, every later one does.
      store.prefetch([{ kind: 'outcomes', id: 'moved' }]);
      const read = store.getRecord<{ n: number }>('outcomes', 'moved');
      await store.createRecord('outcomes', 'moved', { n: 2 });
      expect([null, 2]).toContain((await read)?.value.n ?? null);
      expect((await store.getRecord<{ n: number }>('outcomes', 'moved'))?.value).toEqual({ n: 2 });
      await expect(store.createRecord('outcomes', 'moved', { n: 3 })).rejects.toMatchObject({ code: 'conflict' });
      // Prefetches made in one turn while one is being read go to the disk as one read: one
      // thread-pool trip and one LevelDB snapshot for many starting runs, not one each.
      let calls = 0;
      db.getMany = (ks, o) => (calls++, reads.push(...ks), getMany(ks, o));
      store.prefetch([{ kind: 'outcomes', id: 'c0' }]); // nothing in flight: read at once
      for (let i = 1; i <= 5; i++) store.prefetch([{ kind: 'outcomes', id: `c${i}` }]);
      await store.createRecord('outcomes', 'c3', { n: 3 });
      const got = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => store.getRecord<{ n: number }>('outcomes', `c${i}`)));
      expect(got.map((r) => r?.value.n ?? null)).toEqual([null, null, null, 3, null, null]);
      expect(calls).toBe(2);
    } finally {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
