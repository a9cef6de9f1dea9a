// Provider-neutral model types. They are plain JSON on purpose: messages and results are saved in
// run snapshots and must restore with any provider (or SDK version), so nothing SDK-shaped
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

export interface ToolDeclaration {
  name: string;
  description: string;
  /** JSON Schema object. */
  input_schema: Record<string, unknown>;
}

export interface ModelUsage {
  input_tokens: number;
  output_tokens: number;
  total_tokens: number;
}

export interface ModelCallRequest {
  messages: ChatMessage[];
  tools: ToolDeclaration[];
  max_output_tokens?: number;
  temperature?: number;
  signal?: AbortSignal;
  /** Text deltas, in order; their concatenation equals the result's `text`. */
  onDelta?: (text: string) => void;
}

export type ModelFinishReason = 'stop' | 'tool_calls' | 'length' | 'error' | 'other';

export interface ModelCallResult {
  text: string;
  tool_calls: ToolCallRequest[];
  usage: ModelUsage;
  finish_reason: ModelFinishReason;
  model: string;
}

export interface ModelProvider {
  readonly provider: string;
  readonly model: string;
  /** One model call. Tools are declared, never executed here. Throws ModelCallError. */
  call(req: ModelCallRequest): Promise<ModelCallResult>;
  /** A cheap upper-ish estimate used to reserve budget before the call. */
  estimateInputTokens(messages: ChatMessage[], tools: ToolDeclaration[]): number;
}

export type ModelErrorKind =
  | 'rate_limited'
  | 'server'
  | 'connection'
  | 'timeout'
  | 'bad_request'
  | 'auth'
  | 'aborted'
  | 'unknown';

const RETRYABLE_KINDS: ReadonlySet<ModelErrorKind> = new Set(['rate_limited', 'server', 'connection', 'timeout']);

export interface ModelCallErrorOptions {
  status?: number;
  retryable?: boolean;
  retryAfterMs?: number;
  cause?: unknown;
  /** True when some text of this call already reached onDelta before it failed. */
  partialOutput?: boolean;
}

export class ModelCallError extends Error {
  readonly kind: ModelErrorKind;
  readonly status?: number;
  retryable: boolean;
  readonly retryAfterMs?: number;
  partialOutput: boolean;

  constructor(kind: ModelErrorKind, message: string, opts: ModelCallErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'ModelCallError';
    this.kind = kind;
    if (opts.status !== undefined) this.status = opts.status;
    this.retryable = opts.retryable ?? RETRYABLE_KINDS.has(kind);
    if (opts.retryAfterMs !== undefined) this.retryAfterMs = opts.retryAfterMs;
    this.partialOutput = opts.partialOutput ?? false;
  }

  /** JSON-safe shape for telemetry `error` fields and snapshots (no cause, no stack). */
  toJSON(): { type: string; kind: ModelErrorKind; message: string; status?: number; retryable: boolean; retry_after_ms?: number } {
    return {
      type: 'ModelCallError',
      kind: this.kind,
      message: this.message,
      ...(this.status !== undefined ? { status: this.status } : {}),
      retryable: this.retryable,
      ...(this.retryAfterMs !== undefined ? { retry_after_ms: this.retryAfterMs } : {}),
    };
  }
}

export function isModelCallError(err: unknown): err is ModelCallError {
  return err instanceof ModelCallError;
}
