// Provider-neutral model types that machines/run.machine.ts keeps in its context. They live here,
// beside the machine (machines/ import nothing from src/); src/agent/model/types.ts re-exports
// them with the provider interface. They are plain JSON on purpose: messages and results are saved
// in run snapshots and must restore with any provider (or SDK version), so nothing SDK-shaped
// (provider metadata, class instances) may leak in here.

export type ChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string }
  | { role: 'assistant'; content: string; tool_calls?: ToolCallRequest[] }
  | { role: 'tool'; tool_call_id: string; tool_name: string; content: string };

export interface ToolCallRequest {
  id: string;
  name: string;
  /** Parsed arguments. A model that emitted unparsable JSON yields `{}` (validation then tells it why). */
  arguments: Record<string, unknown>;
}

export interface ModelUsage {
  input_tokens: number;
  output_tokens: number;
  total_tokens: number;
}

export type ModelFinishReason = 'stop' | 'tool_calls' | 'length' | 'error' | 'other';

export interface ModelCallResult {
  text: string;
  tool_calls: ToolCallRequest[];
  usage: ModelUsage;
  finish_reason: ModelFinishReason;
  model: string;
  /** The provider's id of this response (OTLP gen_ai.response.id), when it gave one. */
  response_id?: string;
}
