// What one agent run (POST /run/sync, one model call, an agent with local tools) costs in work
// that is the same run after run, counted in the server's process: JSON.stringify calls by the
// file that makes them. The tools' declarations are the same objects run after run
// (src/runtime/run-effects.ts toolDeclarations), so their schemas are serialised once per agent,
// not per call: for the request's `tools` (chat-completions-body.ts toolsJson) and for the token
// estimate (tokens.ts, twice per call: the budget's reservation, the rate limiter's admission).
// The model_call event's prompt is bounded without serialising its messages (run-effects.ts
// promptOf) and the request body's model name and numbers are not serialised per call either.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const TOOLS = join(import.meta.dirname, '../fixtures/tools-module.mjs');
let model: ScriptedOpenAI;
let server: TestServer;

beforeAll(async () => {
  model = await startScriptedOpenAI({ defaultReply: { text: 'Hello from the model.' } });
  server = await startTestServer({ agent: { tools: { local: TOOLS, builtin: [] } } }, { modelUrl: model.url });
});

afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
});

const body = JSON.stringify({ query: 'Say hello.' });
async function runSync(): Promise<void> {
  const r = await fetch(`${server.url}/run/sync`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  const text = await r.text();
  expect(r.status, text).toBe(200);
  expect(text).toContain('"status":"success"');
}

/** JSON.stringify calls made by src/ while `during` runs, by file (the caller's), per run. */
async function stringifyBySrcFile(runs: number, during: () => Promise<void>): Promise<Record<string, number>> {
  const original = JSON.stringify;
  const by: Record<string, number> = {};
  JSON.stringify = function (this: unknown, ...args: Parameters<typeof JSON.stringify>) {
    // The frame under this wrapper is the caller.
    const caller = new Error().stack?.split('\n')[2] ?? '';
    const m = /\/(src\/[^:)]+)/.exec(caller);
    if (m) by[m[1]] = (by[m[1]] ?? 0) + 1;
    return original.apply(JSON, args);
  } as typeof JSON.stringify;
  try {
    await during();
  } finally {
    JSON.stringify = original;
  }
  return Object.fromEntries(Object.entries(by).map(([k, v]) => [k, v / runs]));
}

describe('one agent run, counted', () => {
  it('serialises no tool schema, prompt message, model name or number per model call', async () => {
    for (let i = 0; i < 3; i++) await runSync(); // the agent's declarations are made on its first run
    const runs = 5;
    const by = await stringifyBySrcFile(runs, async () => {
      for (let i = 0; i < runs; i++) await runSync();
    });
    const count = (file: string) => by[file] ?? 0;
    // Before: tokens.ts 6 (each of the 6 tools' schemas, per estimate), run-effects.ts 2 (promptOf:
    // the system and user messages), chat-completions-body.ts 4 (model, max_tokens, messages, tools).
    expect({
      tokens: count('src/agent/model/tokens.ts'),
      effects: count('src/runtime/run-effects.ts'),
      // The messages only: the conversation changes from call to call.
      body: count('src/agent/model/chat-completions-body.ts'),
    }).toEqual({ tokens: 0, effects: 0, body: 1 });
  });

  it("the model_call event's prompt: every message while they fit 24 KiB, then the newest that fit", async () => {
    const session = `prompt-${Date.now()}`;
    const ask = async (query: string) => {
      const r = await fetch(`${server.url}/run/sync`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ query, session_id: session }),
      });
      expect(r.status).toBe(200);
      const runId = ((await r.json()) as { run_id: string }).run_id;
      const events = (await (await fetch(`${server.url}/telemetry/events?run_id=${runId}&event_type=model_call`)).json()) as {
        events: Array<{ input: { messages: number; prompt: Array<{ content: string }>; prompt_omitted: number } }>;
      };
      return events.events[0]!.input;
    };
    // Short turns: all of it (the bound says so without measuring). A quote and a newline are escaped in JSON.
    const first = await ask('short "quoted"\nquestion');
    expect(first.prompt_omitted).toBe(0);
    expect(first.prompt).toHaveLength(first.messages);
    expect(first.prompt.at(-1)!.content).toBe('short "quoted"\nquestion');
    // Turns of 13 KB (two are over 24 KiB, so promptOf measures exactly): the third turn's call
    // keeps the newest messages that fit and leaves the 13 KB one before them out.
    const big = (c: string) => c.repeat(13_000);
    await ask(big('a'));
    const third = await ask(big('b'));
    expect(third.prompt_omitted).toBeGreaterThan(0);
    expect(third.prompt.length + third.prompt_omitted).toBe(third.messages);
    expect(third.prompt.at(-1)!.content).toBe(big('b'));
    expect(third.prompt.some((m) => m.content === big('a'))).toBe(false);
    const bytes = third.prompt.reduce((n, m) => n + Buffer.byteLength(JSON.stringify(m)), 0);
    expect(bytes).toBeLessThanOrEqual(24 * 1024);
  });
});
