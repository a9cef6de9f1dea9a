// The tool list and conversation the model-path tests send (test/agent/model/direct-stream and
// chat-completions-stream): every message shape a run's history holds, so two paths that must
// send the same request are compared on all of them.
import type { ChatMessage, ToolDeclaration } from '../../src/agent/model/index.js';

/** A tool with a schema and one with none; `required` adds a required property to the first. */
export function clockTools(opts: { required?: boolean } = {}): ToolDeclaration[] {
  const properties = { timezone: { type: 'string' } };
  return [
    {
      name: 'clock',
      description: 'Current time',
      input_schema: opts.required ? { type: 'object', properties, required: ['timezone'] } : { type: 'object', properties },
    },
    { name: 'noschema', description: 'No properties given', input_schema: {} },
  ];
}

/**
 * Leading system, user, assistant with and without text next to tool calls, two results of one
 * batch, a later system message, plain answers. `query` is the first user message's text;
 * `emptyAssistant` adds an assistant message with neither text nor tool calls after the answer.
 */
export function everyShapeConversation(opts: { query?: string; emptyAssistant?: boolean } = {}): ChatMessage[] {
  return [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: opts.query ?? 'What time is it in two zones?' },
    {
      role: 'assistant',
      content: '',
      tool_calls: [
        { id: 'c1', name: 'clock', arguments: { timezone: 'UTC' } },
        { id: 'c2', name: 'clock', arguments: { timezone: 'CET' } },
      ],
    },
    { role: 'tool', tool_call_id: 'c1', tool_name: 'clock', content: '12:00' },
    { role: 'tool', tool_call_id: 'c2', tool_name: 'clock', content: '13:00' },
    { role: 'assistant', content: 'Checking once more.', tool_calls: [{ id: 'c3', name: 'noschema', arguments: {} }] },
    { role: 'tool', tool_call_id: 'c3', tool_name: 'noschema', content: 'ok' },
    { role: 'assistant', content: 'It is 12:00 UTC.' },
    ...(opts.emptyAssistant ? [{ role: 'assistant', content: '' } as const] : []),
    { role: 'system', content: 'Answer in one line.' },
    { role: 'user', content: 'And now?' },
  ];
}
