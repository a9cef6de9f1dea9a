// GET /machines/live: one actor's machine state, live, from the actor system's inspection events
// (the dashboard's machine view and what --inspect feeds).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readSse, type Frame } from '../helpers/sse.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

describe('GET /machines/live', () => {
  let s: TestServer;
  beforeAll(async () => {
    // The demo model reads the clock for "What time is it?"; reading it needs a person here.
    s = await startTestServer({ governance: { rules: [{ tools: ['clock'], effect: 'ask', reason: 'a person decides' }] } });
  });
  afterAll(async () => {
    await s.stop();
    s.cleanup();
  });

  it('follows a run across its pause: not live while it waits, then every state of its resumed actor until done', async () => {
    const paused = await postJson(`${s.url}/run/sync`, { query: 'What time is it?', session_id: 'live-1' });
    expect(paused.body.status).toBe('awaiting_approval');
    const runId = paused.body.run_id as string;
    const approvalId = paused.body.approvals[0].approval_id as string;

    const res = await fetch(`${s.url}/machines/live?actor=${encodeURIComponent(`run:${runId}`)}`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const frames: Frame[] = [];
    const reading = (async () => {
      for await (const f of readSse(res)) frames.push(f);
    })();
    // A paused run has no actor: the first frame says so.
    await expect.poll(() => frames.length, { timeout: 5000 }).toBeGreaterThan(0);
    expect(frames[0]).toMatchObject({ event: 'watch', data: { actor: `run:${runId}`, live: false } });
    expect(s.runtime.liveStates.size).toBe(1);

    const decided = await postJson(`${s.url}/runs/${runId}/approvals/${approvalId}`, { decision: 'approve', approver: 'me' });
    expect(decided.status).toBe(200);
    // The stream ends by itself when the actor is done.
    await reading;
    const states = frames.filter((f) => f.event === 'state').map((f) => f.data);
    expect(states.length).toBeGreaterThan(1);
    for (const st of states) expect(st.actor).toBe(`run:${runId}`);
    expect(states.at(-1)).toMatchObject({ status: 'done', value: 'completed' });
    // Each state names the event that led to it.
    expect(states.every((st) => typeof st.event === 'string')).toBe(true);
    // The record follows the actor (its last write may land just after the stream ends).
    await expect.poll(async () => (await getJson(`${s.url}/runs/${runId}`)).body.status, { timeout: 5000 }).toBe('completed');
    // Nobody watches any more: the inspection observer is gone with the last watcher.
    await expect.poll(() => s.runtime.liveStates.size, { timeout: 5000 }).toBe(0);
  });

  it('refuses an actor id that is not run:, bgrun:, task: or session:', async () => {
    const bad = await getJson(`${s.url}/machines/live?actor=${encodeURIComponent('group:tasks')}`);
    expect(bad.status).toBe(422);
    expect(bad.body.detail[0].loc).toEqual(['query', 'actor']);
    expect((await getJson(`${s.url}/machines/live`)).status).toBe(422);
  });

  it('releases the watch when the client goes away', async () => {
    const ac = new AbortController();
    const res = await fetch(`${s.url}/machines/live?actor=task:nobody`, { signal: ac.signal });
    expect(res.status).toBe(200);
    await expect.poll(() => s.runtime.liveStates.size, { timeout: 5000 }).toBe(1);
    ac.abort();
    await expect.poll(() => s.runtime.liveStates.size, { timeout: 5000 }).toBe(0);
  });
});
