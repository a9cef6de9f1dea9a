// Provider-neutral model types: the provider interface and its errors. The plain-JSON types a run
// keeps in its snapshot (messages, tool calls, results) live beside the run machine, in
// machines/model-types.ts (machines/ import nothing from src/), and are re-exported here.
import type { ChatMessage, ModelCallResult } from '../../../machines/model-types.js';

export type { ChatMessage, ModelCallResult, ModelFinishReason, ModelUsage, ToolCallRequest } from '../../../machines/model-types.js';

export interface ToolDeclaration {
  name: string;
  description: string;
  /** JSON Schema object. */
  input_schema: Record<string, unknown>;
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

export interface ModelProvider {
  readonly provider: string;
  readonly model: string;
  /** The sampling temperature the provider sends when a call sets none (config); unset: the provider's default. */
  readonly temperature?: number;
  /** One model call. Tools are declared, never executed here. Throws ModelCallError. */
  call(req: ModelCallRequest): Promise<ModelCallResult>;
  /** A cheap upper-ish estimate used to reserve budget before the call. */
  estimateInputTokens(messages: ChatMessage[], tools: ToolDeclaration[]): number;
}

export type ModelErrorKind = 'rate_limited' | 'server' | 'connection' | 'timeout' | 'bad_request' | 'auth' | 'aborted' | 'unknown';

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
