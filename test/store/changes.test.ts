// The PostgreSQL change feed (src/store/changes.ts) on a real server: notifications reach every
// listener; a listener whose connection is killed reconnects, says so, and hears what follows;
// an oversized payload is dropped, never sent. The PostgreSQL store sends them inside its group
// commit's rounds.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { PostgresStore } from '../../src/store/postgres.js';
import { PgWriter } from '../../src/store/pg-writer.js';
import { StoreError } from '../../src/store/store.js';
import { PgChanges } from '../../src/store/changes.js';
import { CHANGE_CHANNELS, MAX_CHANGE_PAYLOAD } from '../../src/store/change-feed.js';
import { adminQuery, createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { eventually } from '../helpers/server.js';

let db: TestDatabase;
const feeds: PgChanges[] = [];

beforeAll(async () => {
  db = await createTestDatabase('agentd_changes');
});
afterAll(async () => {
  for (const f of feeds) await f.close();
  await db?.drop();
});

describe('PgChanges', () => {
  it('delivers to every listener, reconnects after its connection is killed, drops oversized payloads', async () => {
    const a = new PgChanges({ url: db.url });
    const b = new PgChanges({ url: db.url });
    feeds.push(a, b);
    await a.start();
    await b.start();
    const gotA: string[] = [];
    const gotB: string[] = [];
    a.subscribe(CHANGE_CHANNELS.tasks, (p) => gotA.push(p));
    b.subscribe(CHANGE_CHANNELS.tasks, (p) => gotB.push(p));
    await a.notify(CHANGE_CHANNELS.tasks, 'one');
    await eventually(() => gotA.includes('one') && gotB.includes('one'), 5_000, 'both heard one');

    let reconnected = 0;
    b.onReconnect(() => reconnected++);
    // Kill every feed connection of this database: both reconnect.
    await adminQuery(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'agentd-changes'`, [db.name]);
    await eventually(() => reconnected > 0, 10_000, 'b reconnected');
    await eventually(
      async () => {
        await a.notify(CHANGE_CHANNELS.tasks, 'two');
        return gotB.includes('two');
      },
      10_000,
      'b hears after the reconnect',
    );

    await a.notify(CHANGE_CHANNELS.tasks, 'x'.repeat(MAX_CHANGE_PAYLOAD + 1));
    await a.notify(CHANGE_CHANNELS.tasks, 'three');
    await eventually(() => gotB.includes('three'), 5_000, 'three');
    expect(gotB.some((p) => p.length > MAX_CHANGE_PAYLOAD)).toBe(false);
  });
});

describe('PgChanges.listening', () => {
  it('is null until connected, then counts connections: a reconnect is a new generation', async () => {
    const feed = new PgChanges({ url: db.url });
    feeds.push(feed);
    expect(feed.listening()).toBeNull();
    await feed.start();
    expect(feed.listening()?.generation).toBe(1);
    await adminQuery(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'agentd-changes'`, [db.name]);
    await eventually(() => (feed.listening()?.generation ?? 0) === 2, 10_000, 'the feed reconnected: generation 2');
  });
});

describe('PostgresStore notifications', () => {
  it('ride in the group commit: a commit and a notification issued together are ONE statement, delivered when it commits', async () => {
    const store = new PostgresStore({ url: db.url, poolSize: 3 });
    await store.open();
    const listener = new PgChanges({ url: db.url });
    feeds.push(listener);
    await listener.start();
    const heard: string[] = [];
    listener.subscribe(CHANGE_CHANNELS.events, (p) => heard.push(p));
    // Every statement the store's connections send (its pool and its feed), LISTEN aside.
    const sent: string[] = [];
    const query = pg.Client.prototype.query;
    pg.Client.prototype.query = function (this: pg.Client, config: unknown, ...rest: unknown[]) {
      const app = (this as unknown as { connectionParameters: { application_name?: string } }).connectionParameters.application_name;
      const text = typeof config === 'string' ? config : ((config as { text?: string })?.text ?? '');
      if (app?.startsWith('agentd') && !text.startsWith('LISTEN')) sent.push(text);
      return (query as (...a: unknown[]) => unknown).call(this, config, ...rest);
    } as typeof pg.Client.prototype.query;
    try {
      // Issued in one turn of the event loop: one round.
      const [created] = await Promise.all([
        store.commit([{ op: 'create', kind: 'runs', id: 'r1', value: { n: 1 } }]),
        store.changes!.notify(CHANGE_CHANNELS.events, 'with-a-commit'),
      ]);
      expect(created).toHaveLength(1);
      expect(sent).toHaveLength(1);
      expect(sent[0]).toContain('agentd.write_round');
      expect(sent[0]).toContain('pg_notify');
      await eventually(() => heard.includes('with-a-commit'), 5_000, 'the notification of the round');

      // A commit refused inside the round (its subtransaction undone) does not lose the notification.
      sent.length = 0;
      const [refused] = await Promise.allSettled([
        store.commit([{ op: 'create', kind: 'runs', id: 'r1', value: { n: 2 } }]),
        store.changes!.notify(CHANGE_CHANNELS.events, 'with-a-refused-commit'),
        store.appendEvents([{ event_id: 'e1', event_type: 'x', timestamp: new Date().toISOString() }]),
      ]);
      expect(refused.status).toBe('rejected');
      expect(sent).toHaveLength(1);
      await eventually(() => heard.includes('with-a-refused-commit'), 5_000, 'the notification of the refused round');

      // A payload over PostgreSQL's 8000-byte limit (3 bytes a character) is dropped before the
      // round: it would fail the round's statement, and every write in it would be sent again alone.
      sent.length = 0;
      await Promise.all([
        store.commit([{ op: 'create', kind: 'runs', id: 'r2', value: { n: 1 } }]),
        store.changes!.notify(CHANGE_CHANNELS.events, '€'.repeat(3000)),
        store.changes!.notify(CHANGE_CHANNELS.events, 'beside-an-oversized-one'),
      ]);
      expect(sent).toHaveLength(1);
      await eventually(() => heard.includes('beside-an-oversized-one'), 5_000, 'the notification beside an oversized one');
      expect(heard.some((p) => p.startsWith('€'))).toBe(false);

      // Alone: one statement of its own.
      sent.length = 0;
      await store.changes!.notify(CHANGE_CHANNELS.events, 'alone');
      expect(sent).toHaveLength(1);
      await eventually(() => heard.includes('alone'), 5_000, 'the notification alone');
    } finally {
      pg.Client.prototype.query = query;
      await store.close();
    }
  });
});

describe('PgWriter notifications after a failed round', () => {
  it("go out with the next round (the failed round's commits are refused, not sent again); dropped after 3 failed rounds", async () => {
    const calls: string[] = [];
    let failures = 1;
    const db = {
      query: async (q: { name?: string }) => {
        calls.push(q.name ?? '');
        if (failures-- > 0) throw new StoreError('unavailable', 'the connection was lost');
        return { rows: [{ n: 1 }] } as never;
      },
    };
    const writer = new PgWriter(db);
    const [commit, notified] = await Promise.allSettled([
      writer.commit([{ op: 'create', kind: 'runs', id: 'r1', value: {} }]),
      writer.notify(CHANGE_CHANNELS.events, 'again'),
    ]);
    expect(commit.status).toBe('rejected');
    expect(notified.status).toBe('fulfilled');
    expect(calls).toEqual(['agentd_write_round_notify', 'agentd_notify']);

    calls.length = 0;
    failures = 100;
    await writer.notify(CHANGE_CHANNELS.events, 'never');
    expect(calls).toEqual(['agentd_notify', 'agentd_notify', 'agentd_notify']);
  });

  it('wait in a bounded share of the write queue: a flood of them while the database hangs never refuses a commit', async () => {
    let release: () => void = () => undefined;
    const held = new Promise<void>((r) => (release = r));
    const sent: string[] = [];
    const db = {
      query: async (q: { name?: string; values?: unknown[] }) => {
        if (q.name === 'agentd_notify') sent.push(...(q.values![0] as string[]));
        if (q.name === 'agentd_write_round_notify') sent.push(...(q.values![18] as string[]));
        await held;
        const op = { r_version: 1, r_seq: null, r_err: null, r_msg: null };
        const notified = { r_version: null, r_seq: '1', r_err: null, r_msg: null };
        return { rows: q.name === 'agentd_notify' ? [{ n: 1 }] : q.name === 'agentd_write_round_notify' ? [op, notified] : [op] } as never;
      },
    };
    const writer = new PgWriter(db);
    const first = writer.notify(CHANGE_CHANNELS.events, 'first'); // its round hangs with the database
    await new Promise((r) => setImmediate(r));
    const flood = Array.from({ length: 25_000 }, (_, i) => writer.notify(CHANGE_CHANNELS.events, `n${i}`));
    // An inbox notification is never dropped for room: its reader trusts the feed to tell it.
    const inbox = writer.notify(CHANGE_CHANNELS.inbox, '{"r":"run_1"}');
    const commit = writer.commit([{ op: 'create', kind: 'runs', id: 'r1', value: {} }]);
    release();
    await expect(commit).resolves.toHaveLength(1);
    await Promise.all([first, ...flood, inbox]);
    // The first (in the hung round) and the 1,000 that found room; the rest were dropped.
    expect(sent.filter((c) => c === CHANGE_CHANNELS.events)).toHaveLength(1001);
    expect(sent).toContain(CHANGE_CHANNELS.inbox);
  });
});
