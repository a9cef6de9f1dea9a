import { describe, expect, it } from 'vitest';
import {
  createModelProvider,
  DemoModel,
  ModelCallError,
  withRetries,
  type ChatMessage,
  type ModelCallResult,
  type ToolDeclaration,
} from '../../../src/agent/model/index.js';

const clock: ToolDeclaration = {
  name: 'clock',
  description: 'Current date and time',
  input_schema: { type: 'object', properties: { timezone: { type: 'string', default: 'UTC' } } },
};
const write: ToolDeclaration = {
  name: 'workspace_write',
  description: 'Write a file',
  input_schema: {
    type: 'object',
    properties: { path: { type: 'string' }, content: { type: 'string' }, append: { type: 'boolean' } },
    required: ['path', 'content', 'append'],
  },
};
const counter: ToolDeclaration = {
  name: 'counter',
  description: 'Counts',
  input_schema: { type: 'object', properties: { by: { type: 'integer' }, label: { type: 'string', examples: ['hits'] } }, required: ['by', 'label'] },
};
const tools = [clock, write, counter];
const sys: ChatMessage = { role: 'system', content: 'You are helpful.' };

async function call(model: DemoModel, messages: ChatMessage[], t = tools): Promise<{ r: ModelCallResult; deltas: string[] }> {
  const deltas: string[] = [];
  const r = await model.call({ messages, tools: t, onDelta: (d) => deltas.push(d) });
  return { r, deltas };
}

/** Plays a run loop: executes tool calls with `execute` until the model answers. */
async function runLoop(model: DemoModel, query: string, execute: (name: string, args: Record<string, unknown>) => string) {
  const messages: ChatMessage[] = [sys, { role: 'user', content: query }];
  const calls: string[] = [];
  for (let step = 0; step < 5; step++) {
    const r = await model.call({ messages, tools });
    if (r.tool_calls.length === 0) return { text: r.text, calls, messages };
    messages.push({ role: 'assistant', content: r.text, tool_calls: r.tool_calls });
    for (const c of r.tool_calls) {
      calls.push(c.name);
      messages.push({ role: 'tool', tool_call_id: c.id, tool_name: c.name, content: execute(c.name, c.arguments) });
    }
  }
  throw new Error('demo model did not finish');
}

describe('demo model', () => {
  it('is the default offline provider and answers deterministically, streaming word by word', async () => {
    const p = createModelProvider({ provider: 'demo' });
    expect(p.provider).toBe('demo');
    expect(p.model).toBe('demo');
    const messages: ChatMessage[] = [sys, { role: 'user', content: 'Tell me a story please' }];
    const a = await call(p as DemoModel, messages);
    const b = await call(p as DemoModel, messages);
    expect(a.r).toEqual(b.r);
    expect(a.deltas).toEqual(b.deltas);
    expect(a.r.text).toContain('Tell me a story please');
    expect(a.r.tool_calls).toEqual([]);
    expect(a.r.finish_reason).toBe('stop');
    expect(a.deltas.length).toBeGreaterThan(5);
    expect(a.deltas.join('')).toBe(a.r.text);
    expect(a.r.usage.output_tokens).toBe(Math.ceil(a.r.text.length / 4));
    expect(a.r.usage.input_tokens).toBe(p.estimateInputTokens(messages, tools));
    expect(a.r.usage.total_tokens).toBe(a.r.usage.input_tokens + a.r.usage.output_tokens);
  });

  it('calls a tool named in the query, with arguments built from its schema', async () => {
    const m = new DemoModel();
    const { r, deltas } = await call(m, [sys, { role: 'user', content: 'Please use workspace_write to save "buy milk" into list.txt.' }]);
    expect(r.finish_reason).toBe('tool_calls');
    expect(r.text).toBe('');
    expect(deltas).toEqual([]);
    expect(r.tool_calls).toEqual([{ id: 'call_demo_1', name: 'workspace_write', arguments: { path: 'list.txt', content: 'buy milk', append: false } }]);
    const r2 = (await call(m, [{ role: 'user', content: 'counter label=visits' }])).r;
    expect(r2.tool_calls).toEqual([{ id: 'call_demo_1', name: 'counter', arguments: { by: 1, label: 'visits' } }]);
    const r3 = (await call(m, [{ role: 'user', content: 'bump the counter by=3' }])).r;
    expect(r3.tool_calls[0].arguments).toEqual({ by: 3, label: 'hits' });
    // The name with underscores read as spaces also counts.
    const r4 = (await call(m, [{ role: 'user', content: 'workspace write path=a.md content="# Title"' }])).r;
    expect(r4.tool_calls[0]).toMatchObject({ name: 'workspace_write', arguments: { path: 'a.md', content: '# Title', append: false } });
  });

  it('calls clock on a time question, then answers quoting the result', async () => {
    const m = new DemoModel();
    const out = await runLoop(m, 'What day is it today?', (name) => (name === 'clock' ? '2026-03-04T05:06:07Z (Wednesday)' : 'n/a'));
    expect(out.calls).toEqual(['clock']);
    expect(out.text).toBe('The clock tool says: 2026-03-04T05:06:07Z (Wednesday)');
    const first = out.messages[2];
    expect(first).toMatchObject({ role: 'assistant', tool_calls: [{ name: 'clock', arguments: {} }] });
    // Optional properties are left to the tool's defaults unless the user names them.
    const tz = await call(m, [{ role: 'user', content: 'clock timezone=Europe/Paris' }]);
    expect(tz.r.tool_calls[0].arguments).toEqual({ timezone: 'Europe/Paris' });
    // No clock when it is not declared, and none for unrelated questions.
    const noClock = await call(m, [{ role: 'user', content: 'what time is it' }], [write]);
    expect(noClock.r.tool_calls).toEqual([]);
    const unrelated = await call(m, [{ role: 'user', content: 'hello there' }]);
    expect(unrelated.r.tool_calls).toEqual([]);
  });

  it('says so when a tool call was denied, and never calls the same tool twice per user message', async () => {
    const m = new DemoModel();
    const out = await runLoop(m, 'check the clock and the counter', () => 'Denied by alice: not today');
    expect(out.calls.sort()).toEqual(['clock', 'counter']);
    expect(out.text).toContain('not allowed to use the clock tool');
    expect(out.text).toContain('Denied by alice: not today');
    expect(out.text).toContain('counter');
    // A later user message starts a new turn: the tool may be called again, with a fresh id.
    const next = [...out.messages, { role: 'assistant' as const, content: out.text }, { role: 'user' as const, content: 'clock again' }];
    const again = await m.call({ messages: next, tools });
    expect(again.tool_calls).toEqual([{ id: 'call_demo_3', name: 'clock', arguments: {} }]);
  });

  it('streams its answer after tool results and respects max_output_tokens', async () => {
    const m = new DemoModel();
    const messages: ChatMessage[] = [
      { role: 'user', content: 'time?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'c1', name: 'clock', arguments: {} }] },
      { role: 'tool', tool_call_id: 'c1', tool_name: 'clock', content: 'noon' },
    ];
    const { r, deltas } = await call(m, messages);
    expect(r.text).toBe('The clock tool says: noon');
    expect(deltas).toEqual(['The ', 'clock ', 'tool ', 'says: ', 'noon']);
    const short = await m.call({ messages: [{ role: 'user', content: 'a long question that goes on and on' }], tools: [], max_output_tokens: 3 });
    expect(short.finish_reason).toBe('length');
    expect(short.text.length).toBeLessThanOrEqual(12);
  });

  it('stops on abort, including during a chunk delay', async () => {
    const m = new DemoModel({ chunkDelayMs: 5 });
    const ac = new AbortController();
    const deltas: string[] = [];
    const err = await m
      .call({
        messages: [{ role: 'user', content: 'one two three four five' }],
        tools: [],
        signal: ac.signal,
        onDelta: (d) => {
          deltas.push(d);
          ac.abort();
        },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ModelCallError);
    expect((err as ModelCallError).kind).toBe('aborted');
    expect(deltas).toHaveLength(1);
  });

  it('passes through withRetries unchanged', async () => {
    const p = withRetries(createModelProvider({ provider: 'demo' }));
    const r = await p.call({ messages: [{ role: 'user', content: 'hi' }], tools: [] });
    expect(r.text).toContain('hi');
    expect(p.provider).toBe('demo');
  });
});
