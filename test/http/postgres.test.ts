// The real server on the PostgreSQL store (store.kind "postgres"), through HTTP: a run, a
// restart on the same database, the run and its events read back; /ready reports the database,
// and turns false (without the process falling over) when the database goes away; a second
// process follows a run of the first live, through notifications sent inside the write rounds.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { ReadinessResponse, RunResponse } from '../../src/schemas/index.js';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { readSse, type Frame } from '../helpers/sse.js';
import { CHANGE_CHANNELS } from '../../src/store/change-feed.js';

let model: ScriptedOpenAI;
let db: TestDatabase;
const servers: TestServer[] = [];

beforeAll(async () => {
  model = await startScriptedOpenAI({ defaultReply: { text: 'stored in postgres' } });
  db = await createTestDatabase();
});
afterAll(async () => {
  for (const s of servers) {
    await s.stop().catch(() => {});
    s.cleanup();
  }
  await model.close();
  await db.drop();
});

const start = async () => {
  const s = await startTestServer({ store: { kind: 'postgres', url: db.url, pool_size: 4 } }, { modelUrl: model.url });
  servers.push(s);
  return s;
};

describe('agentd on PostgreSQL', () => {
  it('runs, restarts on the same database, and reads the run, its session and its events back', async () => {
    const a = await start();
    const ready = ReadinessResponse.parse((await getJson(`${a.url}/ready`)).body);
    expect(ready).toMatchObject({ ready: true, store: { adapter: 'postgres', ok: true } });

    const res = await postJson(`${a.url}/run/sync`, { query: 'remember this' });
    expect(res.status).toBe(200);
    const run = RunResponse.parse(res.body);
    expect(run).toMatchObject({ status: 'success', response: 'stored in postgres' });
    const before = await getJson(`${a.url}/runs/${run.run_id}`);
    expect(before.status).toBe(200);
    const eventsBefore = await getJson(`${a.url}/telemetry/events?run_id=${run.run_id}`);
    expect(eventsBefore.body.events.length).toBeGreaterThan(0);
    await a.stop();

    // A second process (another data dir: nothing is shared but the database).
    const b = await start();
    expect(b.dataDir).not.toBe(a.dataDir);
    const after = await getJson(`${b.url}/runs/${run.run_id}`);
    expect(after.status).toBe(200);
    expect(after.body).toEqual(before.body);
    const eventsAfter = await getJson(`${b.url}/telemetry/events?run_id=${run.run_id}`);
    expect(eventsAfter.body.events).toEqual(eventsBefore.body.events);
    const history = await getJson(`${b.url}/sessions/${run.session_id}/history`);
    expect(history.status).toBe(200);
    expect(JSON.stringify(history.body)).toContain('remember this');
    // The session continues on the new process.
    const next = await postJson(`${b.url}/run/sync`, { query: 'and this', session_id: run.session_id });
    expect(next.status).toBe(200);
    const listed = await getJson(`${b.url}/runs?session_id=${run.session_id}`);
    expect(listed.body.runs.map((r: { run_id: string }) => r.run_id)).toEqual([run.run_id, next.body.run_id]);
  });

  it('a stream on B follows a run on A live; the notifications ride in the write rounds: the feed connections only LISTEN', async () => {
    const a = await start();
    const b = await start();
    // The statements of every agentd connection in this process, by application_name (LISTEN aside).
    const sent: Array<{ app: string; text: string; values: unknown[] }> = [];
    const query = pg.Client.prototype.query;
    pg.Client.prototype.query = function (this: pg.Client, config: unknown, ...rest: unknown[]) {
      const app = (this as unknown as { connectionParameters: { application_name?: string } }).connectionParameters.application_name ?? '';
      const text = typeof config === 'string' ? config : ((config as { text?: string })?.text ?? '');
      const values = typeof config === 'string' ? [] : ((config as { values?: unknown[] })?.values ?? []);
      if (app.startsWith('agentd') && !text.startsWith('LISTEN')) sent.push({ app, text, values });
      return (query as (...a: unknown[]) => unknown).call(this, config, ...rest);
    } as typeof pg.Client.prototype.query;
    const controller = new AbortController();
    try {
      const res = await fetch(`${b.url}/events/sess-ride`, { signal: controller.signal, headers: { accept: 'text/event-stream' } });
      expect(res.status).toBe(200);
      const frames: Frame[] = [];
      const reading = (async () => {
        try {
          for await (const f of readSse(res)) frames.push(f);
        } catch {
          // aborted
        }
      })();
      await eventually(() => frames.some((f) => f.event === 'session'), 5_000, 'the stream on B is open');
      const run = await postJson(`${a.url}/run/sync`, { query: 'ride along', session_id: 'sess-ride' });
      expect(run.status).toBe(200);
      // B streams what A stored, live (B holds no run: it hears A's notifications).
      await eventually(() => frames.some((f) => f.event === 'final_answer'), 10_000, 'final_answer on B');
      controller.abort();
      await reading;
      const stored = await getJson(`${a.url}/telemetry/events?session_id=sess-ride&limit=1000`);
      expect(frames.filter((f) => f.id).map((f) => f.id)).toEqual(stored.body.events.map((e: { cursor: string }) => e.cursor));
      // Every notification went out inside a statement of the pool (a write round, or one alone).
      expect(sent.filter((s) => s.app !== 'agentd')).toEqual([]);
      // The announcements of A's appends went out in the rounds that stored them: not one is a
      // statement of its own (a notification alone, or one riding in a round of other writes).
      const alone = sent.filter((s) => !s.text.includes('write_round') && s.text.includes('pg_notify'));
      expect(alone.filter((s) => JSON.stringify(s.values).includes(CHANGE_CHANNELS.events))).toEqual([]);
      expect(sent.filter((s) => s.text.includes('write_round') && JSON.stringify(s.values.slice(-2)).includes(CHANGE_CHANNELS.events))).toEqual([]);
      // A's appends were announced by the rounds that stored them (write_round's announcement: its 17th argument).
      expect(sent.some((s) => s.text.includes('write_round') && typeof s.values[16] === 'string' && String(s.values[16]).startsWith('{"o":'))).toBe(true);
    } finally {
      controller.abort();
      pg.Client.prototype.query = query;
    }
  });

  it('/ready turns false with the reason while the database is gone; the process keeps answering', async () => {
    const c = servers.at(-1) ?? (await start());
    expect((await getJson(`${c.url}/ready`)).body.ready).toBe(true);
    await db.drop(); // WITH (FORCE): every connection of the pool is terminated
    const ready = await eventually(
      async () => {
        const r = await getJson(`${c.url}/ready`);
        return r.body.ready === false ? r : null;
      },
      8000,
      '/ready false',
    );
    expect(ready.status).toBe(200);
    expect(ready.body.store).toMatchObject({ adapter: 'postgres', ok: false, error: expect.stringMatching(/does not exist|terminat/) });
    expect(JSON.stringify(ready.body)).not.toContain(db.url);
    expect((await getJson(`${c.url}/health`)).status).toBe(200);
    // A request that needs the database gets 503 (retry later), not a 500 or a dead process.
    const r = await getJson(`${c.url}/runs`);
    expect(r.status).toBe(503);
    expect(r.body).toMatchObject({ error: 'ServerBusy', message: expect.stringContaining('store is unavailable') });
    expect(r.headers.get('retry-after')).toBe('1');
    expect((await getJson(`${c.url}/health`)).status).toBe(200);
  });
});
