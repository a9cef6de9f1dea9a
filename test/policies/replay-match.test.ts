// The replay's matching of tool calls against the recording (machines/policies/replay-match.ts).
import { describe, expect, it } from 'vitest';
import { canonicalArguments, matchRecorded, replayAnswer, type RecordedCall } from '../../machines/policies/replay-match.js';
import type { ChatMessage } from '../../machines/model-types.js';

const rec = (tool_name: string, args: Record<string, unknown>, content: string): RecordedCall => ({
  tool_name,
  arguments_key: canonicalArguments(args),
  content,
  outcome: 'success',
});
const assistant = (...calls: Array<[string, string, Record<string, unknown>]>): ChatMessage => ({
  role: 'assistant',
  content: '',
  tool_calls: calls.map(([id, name, args]) => ({ id, name, arguments: args })),
});

describe('replay matching', () => {
  it('canonicalises key order at every depth', () => {
    expect(canonicalArguments({ b: 1, a: { d: [{ y: 1, x: 2 }], c: 2 } })).toBe(canonicalArguments({ a: { c: 2, d: [{ x: 2, y: 1 }] }, b: 1 }));
    expect(canonicalArguments({ a: [1, 2] })).not.toBe(canonicalArguments({ a: [2, 1] }));
  });

  it('matches in order, each recorded call once, whatever the call ids', () => {
    const recorded = [rec('pay', { n: 1 }, 'first'), rec('pay', { n: 1 }, 'second'), rec('echo', { t: 'x' }, 'echoed')];
    const m = matchRecorded(recorded, [
      assistant(['a', 'pay', { n: 1 }]),
      assistant(['b', 'pay', { n: 1 }], ['c', 'pay', { n: 1 }], ['d', 'echo', { t: 'y' }]),
    ]);
    expect(m.get('a')?.content).toBe('first');
    expect(m.get('b')?.content).toBe('second');
    expect(m.has('c')).toBe(false); // the recording had two
    expect(m.has('d')).toBe(false); // other arguments
  });

  it('answers: recorded when matched; unmatched by mode; a non-idempotent tool never runs', () => {
    const matched = new Map([['a', rec('pay', {}, 'paid')]]);
    const call = (id: string) => ({ id, name: 'pay', arguments: {} });
    expect(replayAnswer(call('a'), matched, 'live', false)).toEqual({ content: 'paid', outcome: 'success', matched: true });
    expect(replayAnswer(call('b'), matched, 'recorded', true)?.content).toContain('no recorded result');
    expect(replayAnswer(call('b'), matched, 'live', false)?.content).toContain('not executed during a replay');
    expect(replayAnswer(call('b'), matched, 'live', undefined)?.content).toContain('not executed during a replay');
    expect(replayAnswer(call('b'), matched, 'live', true)).toBeNull();
  });
});
