// POST /run sends its `session` frame as soon as the run is accepted: not after the run's first
// store round, and not after the runs queued before it in the same session have ended (the run
// itself still waits its turn). The run id it names is readable at once.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { getJson, startTestServer, type TestServer } from '../helpers/server.js';
import { readSse, streamRun, type Frame } from '../helpers/sse.js';

const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');

let model: ScriptedOpenAI;
let server: TestServer;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  server = await startTestServer({ agent: { tools: { local: TOOLS, builtin: [] } } }, { modelUrl: model.url });
});

afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
});

describe('POST /run first frame', () => {
  it('the session frame of a run queued behind a busy session arrives at once; the run waits its turn and its id reads meanwhile', async () => {
    // Run A holds the session for ~1.5 s (a slow tool), then answers.
    model.enqueue({ tool_calls: [{ name: 'slow', arguments: { ms: 1500 } }] }, { text: 'A done' });
    const a = await fetch(`${server.url}/run`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ query: 'first' }) });
    const aFrames = readSse(a);
    const aSession = (await aFrames.next()).value as Frame;
    const session_id = aSession.data.session_id as string;
    await model.waitForRequests(1);

    model.enqueue({ text: 'B done' });
    const t0 = performance.now();
    const b = await fetch(`${server.url}/run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: 'second', session_id }),
    });
    const bFrames = readSse(b);
    const first = (await bFrames.next()).value as Frame;
    const firstMs = performance.now() - t0;
    expect(first.event).toBe('session');
    expect(first.data).toMatchObject({ session_id, status: 'started', run_id: expect.stringMatching(/^run_/) });
    // Before: this frame came only once A had ended (~1.5 s).
    expect(firstMs).toBeLessThan(1000);
    const view = await getJson(`${server.url}/runs/${first.data.run_id}`);
    expect(view.status).toBe(200);
    expect(view.body.status).toBe('running');

    const rest: Frame[] = [];
    for await (const f of bFrames) rest.push(f);
    for await (const f of aFrames) void f;
    expect(rest.at(-1)).toMatchObject({ event: 'complete', data: { status: 'success', response: 'B done' } });
    // B ran after A: its model call saw A's conversation.
    expect(model.requests.at(-1)!.messages.map((m) => m.content)).toContain('A done');
  });

  it('a run in a new session streams session first, then its events, to complete', async () => {
    model.enqueue({ text: 'hello' });
    const { status, frames } = await streamRun(server.url, { query: 'hi' });
    expect(status).toBe(200);
    expect(frames[0].event).toBe('session');
    expect(frames[1].event).toBe('user_message');
    expect(frames.at(-1)).toMatchObject({ event: 'complete', data: { status: 'success', response: 'hello' } });
  });
});
