// Errors an adapter catches and drops are reported through the store's injected onSwallowed hook
// (src/store may not import telemetry; src/main.ts passes reportSwallowed): here the change feed's,
// on a fake connection, wired to the real reportSwallowed as the server wires it.
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { PgChanges } from '../../src/store/changes.js';
import { CHANGE_CHANNELS } from '../../src/store/change-feed.js';
import { reportSwallowed, swallowedCount } from '../../src/telemetry/swallowed.js';

/** A connection that LISTENs, delivers what it is told to, and fails to close. */
class FakeClient extends EventEmitter {
  ended = 0;
  async connect(): Promise<void> {}
  async query(): Promise<unknown> {
    return { rows: [] };
  }
  async end(): Promise<void> {
    this.ended++;
    throw new Error('connection already reset');
  }
  deliver(channel: string, payload: string): void {
    this.emit('notification', { channel, payload });
  }
}

describe("the store's onSwallowed hook", () => {
  it('gets a change-feed connection that fails to close and a listener that throws, and the others still hear', async () => {
    const seen: Array<{ site: string; err: string }> = [];
    const client = new FakeClient();
    const feed = new PgChanges({ url: 'postgres://unused', client: async () => client, onSwallowed: (site, err) => seen.push({ site, err: String(err) }) });
    await feed.start();
    const heard: string[] = [];
    feed.subscribe(CHANGE_CHANNELS.tasks, () => {
      throw new Error('listener bug');
    });
    feed.subscribe(CHANGE_CHANNELS.tasks, (p) => heard.push(p));
    client.deliver(CHANGE_CHANNELS.tasks, 'one');
    expect(heard).toEqual(['one']);
    await feed.close();
    expect(client.ended).toBe(1);
    expect(seen).toEqual([
      { site: 'store.changes.listener', err: 'Error: listener bug' },
      { site: 'store.changes.end', err: 'Error: connection already reset' },
    ]);
  });

  it('wired to reportSwallowed (as src/main.ts does), counts in agentd_swallowed_errors_total{site}', async () => {
    const before = await swallowedCount('store.changes.end');
    const client = new FakeClient();
    const feed = new PgChanges({ url: 'postgres://unused', client: async () => client, onSwallowed: reportSwallowed });
    await feed.start();
    await feed.close();
    expect(await swallowedCount('store.changes.end')).toBe(before + 1);
  });
});
