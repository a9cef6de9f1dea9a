// One run's items (src/protocols/run-events.ts) as AI SDK UI message stream chunks, the wire
// `useChat` reads (the `UIMessageChunk` union of the `ai` package, v1 of
// `x-vercel-ai-ui-message-stream`). Pure: the route writes what this returns.
//
// agentd's tools are not declared by the client, so every call is a `dynamic-tool` part. Its input
// goes out with the model's answer (`model_response`), before governance looks at it, so that an
// approval request (`tool-approval-request`, with agentd's approval id) has a part to attach to.
import type { RunRecord } from '../../runtime/run-record.js';
import type { StoredEvent } from '../../store/store.js';
import type { RunItem } from '../run-events.js';
import type { SseFrame } from '../../http/sse.js';
import { TextDeltaFrames } from '../text-delta-frame.js';

/** A UI message stream chunk (the `ai` package's UIMessageChunk; only the members agentd sends). */
export type UiChunk =
  | { type: 'start'; messageId?: string; messageMetadata?: UiMessageMetadata }
  | { type: 'start-step' }
  | { type: 'finish-step' }
  | { type: 'text-start'; id: string }
  | { type: 'text-delta'; id: string; delta: string }
  | { type: 'text-end'; id: string }
  | { type: 'tool-input-available'; toolCallId: string; toolName: string; input: unknown; dynamic: true }
  | { type: 'tool-approval-request'; approvalId: string; toolCallId: string }
  | { type: 'tool-output-available'; toolCallId: string; output: unknown; dynamic: true }
  | { type: 'tool-output-error'; toolCallId: string; errorText: string; dynamic: true }
  | { type: 'tool-output-denied'; toolCallId: string }
  | { type: 'data-agentd-budget'; id: string; data: Record<string, unknown> }
  | { type: 'error'; errorText: string }
  | { type: 'abort'; reason?: string }
  | { type: 'finish'; finishReason?: 'stop' | 'length' | 'tool-calls' | 'error' | 'other'; messageMetadata?: UiMessageMetadata };

/** The assistant message's metadata: which agentd run it is (and, at the end, how it settled). */
export interface UiMessageMetadata {
  run_id: string;
  session_id: string;
  trace_id: string;
  status?: string;
}

interface ModelOutput {
  text?: string;
  tool_calls?: Array<{ id: string; name: string; arguments: unknown }>;
}

export class UiMessageChunks {
  private textId: string | null = null;
  private texts = 0;
  /** The current model call's text came as deltas (its model_response does not repeat it). */
  private streamed = false;
  private stepOpen = false;
  private readonly announced = new Set<string>();
  private readonly deltaFrames = new TextDeltaFrames((id) => ({ type: 'text-delta', id }), 'delta');

  /** `partIds`: what this stream's text part ids start with (unique per stream: a continuation appends to the same message). */
  constructor(
    private readonly meta: UiMessageMetadata,
    private readonly partIds: string,
  ) {}

  /** The first chunk: the assistant message (`messageId`: the one a continuation appends to). */
  start(messageId: string): UiChunk {
    return { type: 'start', messageId, messageMetadata: this.meta };
  }

  /**
   * A text delta inside an open text part (every model chunk after a part's first) as its frame,
   * ready to write (src/protocols/text-delta-frame.ts); null when it takes more than that (it
   * opens a part): write item()'s chunks then.
   */
  deltaFrame(text: string): SseFrame | null {
    if (!this.textId) return null;
    this.streamed = true;
    return this.deltaFrames.frame(this.textId, text);
  }

  /** The chunks of one item, in order. */
  item(item: RunItem): UiChunk[] {
    switch (item.kind) {
      case 'delta':
        this.streamed = true;
        return [...this.openText(), { type: 'text-delta', id: this.textId!, delta: item.text }];
      case 'event':
        return this.event(item.event);
      case 'settled':
        return this.settled(item.record);
      case 'failed':
        return [...this.closeText(), { type: 'error', errorText: item.message }, ...this.closeStep(), { type: 'finish', finishReason: 'error' }];
    }
  }

  private event(ev: StoredEvent): UiChunk[] {
    const meta = (ev.metadata ?? {}) as { tool_call_id?: string; tool_name?: string };
    switch (ev.event_type) {
      case 'agent_step':
        return [...this.closeText(), ...this.closeStep(), this.openStep()];
      case 'model_call':
        this.streamed = false;
        return this.closeText();
      case 'model_response': {
        const out = (ev.output ?? {}) as ModelOutput;
        const chunks: UiChunk[] = [];
        if (this.textId) chunks.push(...this.closeText());
        else if (!this.streamed && out.text) chunks.push(...this.openText(), { type: 'text-delta', id: this.textId!, delta: out.text }, ...this.closeText());
        for (const call of out.tool_calls ?? []) chunks.push(...this.announce(call.id, call.name, call.arguments));
        return chunks;
      }
      case 'tool_call': {
        const input = (ev.input ?? {}) as { arguments?: unknown; edited?: boolean };
        if (!meta.tool_call_id) return [];
        // An approver's edited arguments replace what the model asked for: the part shows what ran.
        if (input.edited) this.announced.delete(meta.tool_call_id);
        return this.announce(meta.tool_call_id, meta.tool_name ?? 'tool', input.arguments);
      }
      case 'tool_result':
        return meta.tool_call_id ? [{ type: 'tool-output-available', toolCallId: meta.tool_call_id, output: ev.output, dynamic: true }] : [];
      case 'tool_error': {
        if (!meta.tool_call_id) return [];
        const error = (ev.error ?? {}) as { type?: string; message?: string };
        return error.type === 'denied'
          ? [{ type: 'tool-output-denied', toolCallId: meta.tool_call_id }]
          : [{ type: 'tool-output-error', toolCallId: meta.tool_call_id, errorText: error.message ?? 'the tool failed', dynamic: true }];
      }
      default:
        return [];
    }
  }

  private settled(r: RunRecord): UiChunk[] {
    const chunks: UiChunk[] = [...this.closeText()];
    const metadata = { ...this.meta, trace_id: r.trace_id, status: r.status };
    switch (r.status) {
      case 'awaiting_approval':
        for (const a of r.approvals) {
          if (a.status !== 'pending') continue;
          chunks.push(...this.announce(a.tool_call_id, a.tool_name, a.arguments));
          chunks.push({ type: 'tool-approval-request', approvalId: a.approval_id, toolCallId: a.tool_call_id });
        }
        return [...chunks, ...this.closeStep(), { type: 'finish', finishReason: 'tool-calls', messageMetadata: metadata }];
      case 'awaiting_budget': {
        const req = r.budget_request;
        if (req) chunks.push({ type: 'data-agentd-budget', id: req.request_id, data: { run_id: r.run_id, ...req } });
        return [...chunks, ...this.closeStep(), { type: 'finish', finishReason: 'other', messageMetadata: metadata }];
      }
      case 'completed':
        return [
          ...chunks,
          ...this.closeStep(),
          { type: 'finish', finishReason: r.termination_reason === 'max_steps' ? 'length' : 'stop', messageMetadata: metadata },
        ];
      case 'cancelled':
        return [...chunks, ...this.closeStep(), { type: 'abort', reason: 'cancelled' }];
      default:
        return [
          ...chunks,
          { type: 'error', errorText: r.error?.message ?? `the run ended ${r.status}` },
          ...this.closeStep(),
          { type: 'finish', finishReason: 'error', messageMetadata: metadata },
        ];
    }
  }

  private announce(toolCallId: string, toolName: string, input: unknown): UiChunk[] {
    if (this.announced.has(toolCallId)) return [];
    this.announced.add(toolCallId);
    return [{ type: 'tool-input-available', toolCallId, toolName, input: input ?? {}, dynamic: true }];
  }

  private openText(): UiChunk[] {
    if (this.textId) return [];
    this.textId = `${this.partIds}_${++this.texts}`;
    return [{ type: 'text-start', id: this.textId }];
  }

  private closeText(): UiChunk[] {
    if (!this.textId) return [];
    const id = this.textId;
    this.textId = null;
    return [{ type: 'text-end', id }];
  }

  private openStep(): UiChunk {
    this.stepOpen = true;
    return { type: 'start-step' };
  }

  private closeStep(): UiChunk[] {
    if (!this.stepOpen) return [];
    this.stepOpen = false;
    return [{ type: 'finish-step' }];
  }
}
