import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresStore } from '../../src/store/postgres.js';
import { escText, unescText } from '../../src/store/pg-text.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { queueRun } from './queue-claims.contract.js';
import { runStoreContract } from './store.contract.js';
import { repos } from '../../src/store/repos/index.js';
import { waitFor } from '../helpers/wait.js';

// One database for the file; each test gets an empty schema by truncating (a new database per
// test would cost ~100 ms each).
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  const s = new PostgresStore({ url: db.url });
  await s.open(); // migrates
  await s.close();
});
afterAll(async () => {
  await db?.drop();
});

runStoreContract('postgres', async () => {
  const store = new PostgresStore({ url: db.url, poolSize: 4 });
  await store.open();
  await store.queries.query({ text: 'TRUNCATE agentd.records, agentd.record_ix, agentd.events; UPDATE agentd.counters SET value = 0' }, false);
  return { store, cleanup: () => store.close() };
});

describe('PostgreSQL text escaping (ids and index values; text cannot hold NUL)', () => {
  it('is a bijection that leaves ordinary text alone', () => {
    const samples = ['', 'run_1', 'a\\b', '\\0', '\u0000', 'a\u0000b\\\u0000', '\\\\0', 'é✓\u0001'];
    for (const s of samples) {
      const e = escText(s);
      expect(e).not.toContain('\u0000');
      expect(unescText(e)).toBe(s);
    }
    expect(escText('run_abc-1')).toBe('run_abc-1');
    expect(new Set(samples.map(escText)).size).toBe(samples.length);
  });
});

describe('PostgreSQL queue claims (FOR UPDATE SKIP LOCKED)', () => {
  const T0 = Date.parse('2030-01-01T00:00:00.000Z');
  const open = async () => {
    const s = new PostgresStore({ url: db.url, poolSize: 4, changes: false });
    await s.open();
    return s;
  };

  it('two claimers on two connections pools never get the same row, and together get every due row', async () => {
    const [a, b] = [await open(), await open()];
    try {
      await a.queries.query({ text: 'TRUNCATE agentd.records, agentd.record_ix' }, false);
      for (let i = 0; i < 120; i++) await queueRun(a, `run_${String(i).padStart(3, '0')}`);
      const drain = async (s: PostgresStore) => {
        const pass = repos(s).bgRuns.claimPass(T0, 10_000);
        const got: string[] = [];
        while (!pass.done) got.push(...(await pass.claimQueued(7)).map((r) => r.id));
        return { pass, got };
      };
      // Several rounds of two concurrent passes, the holds kept until both are done.
      const [ra, rb] = await Promise.all([drain(a), drain(b)]);
      expect(ra.got.filter((id) => rb.got.includes(id))).toEqual([]);
      expect([...ra.got, ...rb.got].sort()).toHaveLength(120);
      expect(new Set([...ra.got, ...rb.got]).size).toBe(120);
      // While held, a third pass gets nothing; once released, everything is queued again.
      expect(await repos(a).bgRuns.claimPass(T0, 10_000).claimQueued(10)).toEqual([]);
      await Promise.all([ra.pass.release(), rb.pass.release()]);
      expect(await repos(b).bgRuns.claimPass(T0, 10_000).claimQueued(10)).toHaveLength(10);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it("ends a claimed row's hold in the claim's own write: the pass releases only the rows it did not claim", async () => {
    const s = await open();
    try {
      await s.queries.query({ text: 'TRUNCATE agentd.records, agentd.record_ix' }, false);
      for (const id of ['a', 'b', 'c']) await queueRun(s, id);
      const pass = repos(s).bgRuns.claimPass(T0, 10_000);
      const handed = await pass.claimQueued(3);
      expect(handed.map((r) => r.id)).toEqual(['a', 'b', 'c']);
      // 'a' and 'b' are claimed: each one's CAS write (here: back to queued, so a pass could see it).
      for (const row of handed.slice(0, 2)) {
        pass.taken(row.id);
        await s.updateRecord('bg_runs', row.id, { ...(row.value as object), claimed: true }, row.version);
      }
      // 'c' was taken too, but its claim did not happen.
      pass.taken('c');
      pass.untaken('c');
      const sent: Array<{ name?: string; values?: unknown[] }> = [];
      const query = s.queries.query.bind(s.queries);
      s.queries.query = ((q: { name?: string; values?: unknown[] }, idem: boolean) => (sent.push(q), query(q as never, idem))) as typeof s.queries.query;
      await pass.release();
      expect(sent.map((q) => [q.name, q.values?.[1]])).toEqual([['agentd_claim_release', ['c']]]);
      // No hold is left: another pass gets all three at once, not after the 10 s hold.
      expect(
        (
          await repos(s)
            .bgRuns.claimPass(T0 + 1, 10_000)
            .claimQueued(5)
        ).map((r) => r.id),
      ).toEqual(['a', 'b', 'c']);
    } finally {
      await s.close();
    }
  });

  it('hands a held row out again once its hold lapsed (a claimer that died mid-pass)', async () => {
    const s = await open();
    try {
      await s.queries.query({ text: 'TRUNCATE agentd.records, agentd.record_ix' }, false);
      await queueRun(s, 'lonely');
      expect((await repos(s).bgRuns.claimPass(T0, 1_000).claimQueued(5)).map((r) => r.id)).toEqual(['lonely']);
      expect(
        await repos(s)
          .bgRuns.claimPass(T0 + 999, 1_000)
          .claimQueued(5),
      ).toEqual([]);
      expect(
        (
          await repos(s)
            .bgRuns.claimPass(T0 + 1_000, 1_000)
            .claimQueued(5)
        ).map((r) => r.id),
      ).toEqual(['lonely']);
    } finally {
      await s.close();
    }
  });
});

describe('PostgreSQL holders op across processes', () => {
  it("two stores (two processes' pools) adding holders of one new key at once: exactly the limit gets in, the rest are refused 'full'", async () => {
    const open = async () => {
      const s = new PostgresStore({ url: db.url, poolSize: 4, changes: false });
      await s.open();
      return s;
    };
    const [a, b] = [await open(), await open()];
    try {
      await a.queries.query({ text: 'TRUNCATE agentd.records, agentd.record_ix' }, false);
      for (let round = 0; round < 5; round++) {
        const id = `flow_key:race${round}`;
        const add = (s: PostgresStore, i: number) =>
          s.commit([{ op: 'holders', kind: 'meta', id, add: { run_id: `run_${i}`, since: 1, limit: 3 } }]).then(
            () => 'ok',
            (e: { code?: string }) => e.code,
          );
        // Each store sends its adds in one turn: each a round of its own, both creating the record.
        const got = await Promise.all(Array.from({ length: 10 }, (_, i) => add(i % 2 ? a : b, i)));
        expect(got.filter((g) => g === 'ok')).toHaveLength(3);
        expect(got.filter((g) => g !== 'ok').every((g) => g === 'full')).toBe(true);
        expect((await a.getRecord<{ holders: unknown[] }>('meta', id))?.value.holders).toHaveLength(3);
      }
    } finally {
      await a.close();
      await b.close();
    }
  });
});

const ev = (event_id: string, run_id: string) => ({ event_id, event_type: 'run.step', timestamp: '2030-01-01T00:00:00.000Z', run_id });

describe('PostgreSQL round trips per run (pg-scale)', () => {
  const open = async () => {
    const s = new PostgresStore({ url: db.url, poolSize: 4, changes: false });
    await s.open();
    await s.queries.query({ text: 'TRUNCATE agentd.records, agentd.record_ix, agentd.events; UPDATE agentd.counters SET value = 0' }, false);
    return s;
  };
  /** Counts the statements the store sends (PgQueries.query, store.queries, is the one way to the database). */
  const counting = (s: PostgresStore) => {
    const names: string[] = [];
    const orig = s.queries.query.bind(s.queries);
    s.queries.query = ((q: { name?: string; text: string }, idem: boolean) => {
      names.push(q.name ?? q.text.slice(0, 30));
      return orig(q as never, idem);
    }) as typeof s.queries.query;
    return names;
  };

  it("stores a commit's events in the commit's own transaction: while the event counter is locked, neither is visible", async () => {
    const s = await open();
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    try {
      await repos(s).bgRuns.create('r1', { n: 1 });
      const names = counting(s);
      // Another transaction holds the event counter's row: the statement that appends events waits for it.
      await locker.query('BEGIN');
      await locker.query("SELECT value FROM agentd.counters WHERE name = 'event_cursor' FOR UPDATE");
      const write = s.commitWithEvents([{ op: 'update', kind: 'bg_runs', id: 'r1', value: { n: 2 }, expectedVersion: 1 }], [ev('e1', 'r1'), ev('e2', 'r1')]);
      await waitFor(
        async () =>
          (await locker.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")).rows[0].n > 0,
        { what: 'the write waiting on the counter lock' },
      );
      // Were the events a round of their own behind the commit, the record would be visible now.
      const seen = await locker.query("SELECT value FROM agentd.records WHERE kind = 'bg_runs' AND id = 'r1'");
      expect(JSON.parse(seen.rows[0].value)).toEqual({ n: 1 });
      await locker.query('COMMIT');
      const r = await write;
      expect(r.records[0]?.version).toBe(2);
      expect(r.events.map((e) => e.event_id)).toEqual(['e1', 'e2']);
      // One statement: the commit and its events.
      expect(names).toEqual(['agentd_write_round']);
      expect((await s.readEvents({ filters: { run_id: 'r1' } })).events.map((e) => [e.event_id, e.cursor])).toEqual(
        r.events.map((e) => [e.event_id, e.cursor]),
      );
    } finally {
      await locker.query('ROLLBACK').catch(() => undefined);
      await locker.end();
      await s.close();
    }
  });

  it('point reads asked in one turn go as one statement per kind, each answered with its own row (or null)', async () => {
    const s = await open();
    try {
      await repos(s).sessions.create('s1', { n: 1 });
      await repos(s).sessions.create('s2', { n: 2 });
      await repos(s).runs.create('r1', { n: 3 });
      const names = counting(s);
      const got = await Promise.all([
        s.getRecord('sessions', 's1'),
        s.getRecord('sessions', 's2'),
        s.getRecord('sessions', 's1'),
        s.getRecord('sessions', 'missing'),
        s.getRecord('runs', 'r1'),
      ]);
      expect(names.sort()).toEqual(['agentd_get', 'agentd_get_many']);
      expect(got.map((r) => (r ? [r.id, r.version, r.value] : null))).toEqual([
        ['s1', 1, { n: 1 }],
        ['s2', 1, { n: 2 }],
        ['s1', 1, { n: 1 }],
        null,
        ['r1', 1, { n: 3 }],
      ]);
      // Two callers of the same row get objects of their own.
      expect(got[0]!.value).not.toBe(got[2]!.value);
      // A read asked after a write was acknowledged sees it.
      await s.updateRecord('sessions', 's1', { n: 10 }, 1);
      expect((await s.getRecord('sessions', 's1'))!.value).toEqual({ n: 10 });
    } finally {
      await s.close();
    }
  });

  it('a failed batch of point reads fails every read in it', async () => {
    const s = await open();
    try {
      s.queries.query = (() => Promise.reject(new Error('boom'))) as typeof s.queries.query;
      const rs = await Promise.allSettled([s.getRecord('sessions', 'a'), s.getRecord('sessions', 'b')]);
      expect(rs.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    } finally {
      await s.close();
    }
  });

  it('writes JSON texts the array literals would have had to escape, and nulls, exactly (values, indexes, event bodies)', async () => {
    const s = await open();
    try {
      const odd = { q: 'a "quoted" \\ back\\slash, {braces}, commas, NULL', sep: '\u001e\u001f\u0000', empty: '', uni: 'é✓\ud83d\ude00' };
      const ids = ['x,y', 'quote"d', 'back\\slash', 'sep\u001eid', 'nul\u0000id'];
      const done = await Promise.all([
        ...ids.map((id, i) => s.createRecord('sessions', id, { ...odd, i }, { by: `v,"${i}"\u001e` })),
        s.createRecord('meta', 'str', ''),
        s.createRecord('meta', 'nil', null),
      ]);
      expect(done.map((r) => r.version)).toEqual([1, 1, 1, 1, 1, 1, 1]);
      for (const [i, id] of ids.entries()) {
        expect((await s.getRecord('sessions', id))!.value).toEqual({ ...odd, i });
        const page = await s.listRecords('sessions', { index: { name: 'by', value: `v,"${i}"\u001e` } });
        expect(page.items.map((r) => r.id)).toEqual([id]);
      }
      expect((await s.getRecord('meta', 'str'))!.value).toBe('');
      expect((await s.getRecord('meta', 'nil'))!.value).toBeNull();
      // One commit that creates, updates and deletes (a NULL value among JSON texts), in one round with others.
      const [a, b] = await Promise.all([
        s.commit([
          { op: 'update', kind: 'sessions', id: 'x,y', value: { v: 2 }, expectedVersion: 1 },
          { op: 'delete', kind: 'sessions', id: 'quote"d', expectedVersion: 1 },
          { op: 'create', kind: 'sessions', id: 'new', value: odd },
        ]),
        s.commit([{ op: 'delete', kind: 'meta', id: 'nil' }]),
      ]);
      expect(a.map((r) => r && [r.id, r.version, r.value])).toEqual([['x,y', 2, { v: 2 }], null, ['new', 1, odd]]);
      expect(b).toEqual([null]);
      expect(await s.getRecord('sessions', 'quote"d')).toBeNull();
      expect(await s.getRecord('meta', 'nil')).toBeNull();
      const evs = await s.appendEvents([
        { event_id: 'e1', event_type: 'x', timestamp: '2030-01-01T00:00:00.000Z', run_id: 'r\u001e', metadata: odd },
        { event_id: 'e2', event_type: 'x', timestamp: '2030-01-01T00:00:00.000Z', metadata: {} },
      ]);
      const read = await s.readEvents({ filters: { run_id: 'r\u001e' } });
      expect(read.events).toEqual([evs[0]]);
      expect(read.events[0].metadata).toEqual(odd);
    } finally {
      await s.close();
    }
  });

  it('leaves half of each page of agentd.records free, so the updates that follow a create stay on its page (HOT)', async () => {
    const s = await open();
    try {
      const r = await s.queries.query<{ opts: string[] | null }>(
        { text: "SELECT reloptions AS opts FROM pg_class WHERE oid = 'agentd.records'::regclass" },
        true,
      );
      expect(r.rows[0].opts).toContain('fillfactor=50');
    } finally {
      await s.close();
    }
  });

  it('appended events carry the JSON text a stream sends (serialised once), equal to what a replay reads', async () => {
    const { storedEventText } = await import('../../src/store/event-text.js');
    const s = await open();
    try {
      const stored = await s.appendEvents([
        { event_id: 'e1', event_type: 'a', timestamp: '2030-01-01T00:00:00.000Z', run_id: 'r1', metadata: { k: 'v "q"' } },
        { event_id: 'e2', event_type: 'b', timestamp: '2030-01-01T00:00:00.000Z', run_id: 'r1' },
      ]);
      const texts = (await s.readEventsJson({ filters: { run_id: 'r1' } })).events;
      expect(stored.map((e) => storedEventText.get(e))).toEqual(texts);
      expect(texts.map((t) => JSON.parse(t))).toEqual(stored);
    } finally {
      await s.close();
    }
  });
});
