// Opt-in message content on OTLP spans, as the OpenTelemetry GenAI semantic conventions put it
// (gen_ai.input.messages, gen_ai.output.messages, gen_ai.tool.call.arguments/result): off unless
// telemetry.otlp.capture_message_content is true (or OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT,
// src/telemetry/otlp-env.ts). The values come from the stored events, which are already redacted and
// bounded (the model_call prompt to 24 KiB, every payload to 64 KB; src/runtime/run-effects.ts), and
// the exporter redacts every attribute string once more (otlp.ts redactAttributes). With
// `telemetry.capture: metadata_only` the events hold no content, so there is none to send.
import type { Attributes } from '@opentelemetry/api';
import type { EventInput } from '../store/store.js';

const obj = (v: unknown): Record<string, unknown> | null => (v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null);

/** One stored ChatMessage (machines/model-types.ts) in the conventions' message shape. */
function toSemconvMessage(m: unknown): unknown {
  const msg = obj(m);
  if (!msg) return m;
  const role = typeof msg.role === 'string' ? msg.role : 'user';
  const parts: unknown[] = [];
  if (role === 'tool') {
    parts.push({ type: 'tool_call_response', id: msg.tool_call_id ?? null, response: msg.content ?? null });
  } else {
    if (typeof msg.content === 'string' && msg.content.length > 0) parts.push({ type: 'text', content: msg.content });
    if (Array.isArray(msg.tool_calls))
      for (const c of msg.tool_calls) {
        const call = obj(c);
        if (call) parts.push({ type: 'tool_call', id: call.id ?? null, name: call.name ?? null, arguments: call.arguments ?? null });
      }
  }
  return { role, parts };
}

const json = (v: unknown): string => JSON.stringify(v);

/** The content attributes of one span, from its events (empty when they carry none). */
export function genAiContentAttributes(spanName: string, events: readonly EventInput[]): Attributes {
  const attrs: Attributes = {};
  if (spanName === 'model.call') {
    const call = events.find((e) => e.event_type === 'model_call');
    const prompt = obj(call?.input)?.prompt;
    if (Array.isArray(prompt)) {
      const system = prompt.filter((m) => obj(m)?.role === 'system').map((m) => ({ type: 'text', content: obj(m)?.content ?? '' }));
      if (system.length > 0) attrs['gen_ai.system_instructions'] = json(system);
      attrs['gen_ai.input.messages'] = json(prompt.filter((m) => obj(m)?.role !== 'system').map(toSemconvMessage));
    }
    const response = events.find((e) => e.event_type === 'model_response');
    const out = obj(response?.output);
    if (out) {
      const message = toSemconvMessage({ role: 'assistant', content: out.text, tool_calls: out.tool_calls }) as Record<string, unknown>;
      attrs['gen_ai.output.messages'] = json([{ ...message, finish_reason: out.finish_reason ?? null }]);
    }
  } else if (spanName === 'tool.call') {
    const call = events.find((e) => e.event_type === 'tool_call');
    const args = obj(call?.input)?.arguments;
    if (args !== undefined) attrs['gen_ai.tool.call.arguments'] = json(args);
    const result = events.find((e) => e.event_type === 'tool_result');
    if (result && result.output !== undefined && result.output !== null)
      attrs['gen_ai.tool.call.result'] = typeof result.output === 'string' ? result.output : json(result.output);
  }
  return attrs;
}
