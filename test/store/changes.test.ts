// The PostgreSQL change feed (src/store/changes.ts) on a real server: notifications reach every
// listener; a listener whose connection is killed reconnects, says so, and hears what follows;
// an oversized payload is dropped, never sent.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PgChanges, CHANGE_CHANNELS, MAX_CHANGE_PAYLOAD } from '../../src/store/changes.js';
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
