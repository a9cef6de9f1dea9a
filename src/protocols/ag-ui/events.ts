// One run's items (src/protocols/run-events.ts) as AG-UI 1.0 events (`@ag-ui/core`), in the order
// the client's verifier accepts: RUN_STARTED, CUSTOM `agentd.run`, steps, text messages, tool
// calls, then RUN_FINISHED (success, interrupt or cancelled) or RUN_ERROR. Pure: the route writes
// what this returns.
//
// A tool call goes out whole (START, ARGS, END) with the model's answer, before governance looks
// at it, so an approval interrupt names a call the client has seen; its result (or error) follows
// as TOOL_CALL_RESULT once the tool ran.
import { EventType, type BaseEvent, type Interrupt } from '@ag-ui/core';
import type { RunRecord } from '../../runtime/run-record.js';
import type { StoredEvent } from '../../store/store.js';
import type { RunItem } from '../run-events.js';
import type { SseFrame } from '../../http/sse.js';
import { TextDeltaFrames } from '../text-delta-frame.js';

type ApprovalState = RunRecord['approvals'][number];
type BudgetRequest = NonNullable<RunRecord['budget_request']>;

interface ModelOutput {
  text?: string;
  tool_calls?: Array<{ id: string; name: string; arguments: unknown }>;
}

/** What the client answers an approval interrupt with (RunAgentInput.resume[].payload). */
const APPROVAL_RESPONSE_SCHEMA = {
  type: 'object',
  properties: {
    decision: { enum: ['approve', 'deny'] },
    arguments: { type: 'object', description: 'Edited arguments to run the tool with (approve only).' },
    note: { type: 'string' },
  },
  required: ['decision'],
};

/** What the client answers a budget interrupt with. */
const BUDGET_RESPONSE_SCHEMA = {
  type: 'object',
  properties: {
    decision: { enum: ['grant', 'deny'] },
    amount: { type: 'number', exclusiveMinimum: 0, description: 'How much more to grant (default: the shortfall).' },
    note: { type: 'string' },
  },
  required: ['decision'],
};

export function approvalInterrupt(a: ApprovalState): Interrupt {
  return {
    id: a.approval_id,
    reason: 'tool_approval',
    toolCallId: a.tool_call_id,
    message: `${a.tool_name} needs approval${a.reason ? `: ${a.reason}` : ''}`,
    responseSchema: APPROVAL_RESPONSE_SCHEMA,
    expiresAt: a.expires_at,
  };
}

export function budgetInterrupt(r: BudgetRequest): Interrupt {
  return {
    id: r.request_id,
    reason: 'budget_exhausted',
    message: `the ${r.scope} budget (${r.meter}) is exhausted; ${r.shortfall} more needed`,
    responseSchema: BUDGET_RESPONSE_SCHEMA,
  };
}

export class AgUiEvents {
  private messageId: string | null = null;
  private messages = 0;
  private streamed = false;
  private step: string | null = null;
  private readonly announced = new Set<string>();
  private readonly contentFrames = new TextDeltaFrames((messageId) => ({ type: EventType.TEXT_MESSAGE_CONTENT, messageId }), 'delta');

  /** `threadId`/`runId`: the client's (echoed); `ids`: what this stream's message ids start with. */
  constructor(
    private readonly threadId: string,
    private readonly runId: string,
    private readonly ids: string,
  ) {}

  /** The first events: RUN_STARTED, then which agentd run this is. */
  start(run: { run_id: string; trace_id: string }): BaseEvent[] {
    return [
      { type: EventType.RUN_STARTED, threadId: this.threadId, runId: this.runId } as BaseEvent,
      { type: EventType.CUSTOM, name: 'agentd.run', value: { run_id: run.run_id, trace_id: run.trace_id } } as BaseEvent,
    ];
  }

  /**
   * A text delta inside an open text message (every model chunk after a message's first) as its
   * frame, ready to write (src/protocols/text-delta-frame.ts); null when it takes more than that
   * (it opens a message, or is empty): write item()'s events then.
   */
  deltaFrame(text: string): SseFrame | null {
    if (!this.messageId || !text) return null;
    this.streamed = true;
    return this.contentFrames.frame(this.messageId, text);
  }

  item(item: RunItem): BaseEvent[] {
    switch (item.kind) {
      case 'delta':
        if (!item.text) return [];
        this.streamed = true;
        return [...this.openText(), { type: EventType.TEXT_MESSAGE_CONTENT, messageId: this.messageId!, delta: item.text } as BaseEvent];
      case 'event':
        return this.event(item.event);
      case 'settled':
        return this.settled(item.record);
      case 'failed':
        return [...this.closeText(), ...this.closeStep(), { type: EventType.RUN_ERROR, message: item.message, code: 'AGT_ERR_INTERNAL' } as BaseEvent];
    }
  }

  private event(ev: StoredEvent): BaseEvent[] {
    const meta = (ev.metadata ?? {}) as { tool_call_id?: string; tool_name?: string; step?: number };
    switch (ev.event_type) {
      case 'agent_step': {
        const closing = [...this.closeText(), ...this.closeStep()];
        this.step = `step ${meta.step ?? ''}`.trim();
        return [...closing, { type: EventType.STEP_STARTED, stepName: this.step } as BaseEvent];
      }
      case 'model_call':
        this.streamed = false;
        return this.closeText();
      case 'model_response': {
        const out = (ev.output ?? {}) as ModelOutput;
        const events: BaseEvent[] = [];
        if (this.messageId) events.push(...this.closeText());
        else if (!this.streamed && out.text)
          events.push(
            ...this.openText(),
            { type: EventType.TEXT_MESSAGE_CONTENT, messageId: this.messageId!, delta: out.text } as BaseEvent,
            ...this.closeText(),
          );
        for (const call of out.tool_calls ?? []) events.push(...this.announce(call.id, call.name, call.arguments));
        return events;
      }
      case 'tool_call': {
        if (!meta.tool_call_id) return [];
        return this.announce(meta.tool_call_id, meta.tool_name ?? 'tool', (ev.input as { arguments?: unknown } | null)?.arguments);
      }
      case 'tool_result':
        return meta.tool_call_id ? [this.result(meta.tool_call_id, ev.output)] : [];
      case 'tool_error':
        return meta.tool_call_id ? [this.result(meta.tool_call_id, (ev.error as { message?: string } | null)?.message ?? 'the tool failed')] : [];
      default:
        return [];
    }
  }

  private settled(r: RunRecord): BaseEvent[] {
    const events: BaseEvent[] = [...this.closeText()];
    const finished = (outcome: Record<string, unknown>, result?: unknown): BaseEvent =>
      ({ type: EventType.RUN_FINISHED, threadId: this.threadId, runId: this.runId, outcome, ...(result !== undefined ? { result } : {}) }) as BaseEvent;
    switch (r.status) {
      case 'awaiting_approval': {
        const pending = r.approvals.filter((a) => a.status === 'pending');
        for (const a of pending) events.push(...this.announce(a.tool_call_id, a.tool_name, a.arguments));
        return [...events, ...this.closeStep(), finished({ type: 'interrupt', interrupts: pending.map(approvalInterrupt) })];
      }
      case 'awaiting_budget':
        return [...events, ...this.closeStep(), finished({ type: 'interrupt', interrupts: r.budget_request ? [budgetInterrupt(r.budget_request)] : [] })];
      case 'completed':
        return [...events, ...this.closeStep(), finished({ type: 'success' }, r.response ?? undefined)];
      case 'cancelled':
        return [...events, ...this.closeStep(), finished({ type: 'cancelled' })];
      default:
        return [
          ...events,
          ...this.closeStep(),
          { type: EventType.RUN_ERROR, message: r.error?.message ?? `the run ended ${r.status}`, code: r.error?.type ?? r.status } as BaseEvent,
        ];
    }
  }

  private result(toolCallId: string, output: unknown): BaseEvent {
    return {
      type: EventType.TOOL_CALL_RESULT,
      messageId: `${this.ids}_result_${toolCallId}`,
      toolCallId,
      content: typeof output === 'string' ? output : JSON.stringify(output ?? null),
      role: 'tool',
    } as BaseEvent;
  }

  private announce(toolCallId: string, toolName: string, args: unknown): BaseEvent[] {
    if (this.announced.has(toolCallId)) return [];
    this.announced.add(toolCallId);
    return [
      ...this.closeText(),
      { type: EventType.TOOL_CALL_START, toolCallId, toolCallName: toolName } as BaseEvent,
      { type: EventType.TOOL_CALL_ARGS, toolCallId, delta: JSON.stringify(args ?? {}) } as BaseEvent,
      { type: EventType.TOOL_CALL_END, toolCallId } as BaseEvent,
    ];
  }

  private openText(): BaseEvent[] {
    if (this.messageId) return [];
    this.messageId = `${this.ids}_${++this.messages}`;
    return [{ type: EventType.TEXT_MESSAGE_START, messageId: this.messageId, role: 'assistant' } as BaseEvent];
  }

  private closeText(): BaseEvent[] {
    if (!this.messageId) return [];
    const messageId = this.messageId;
    this.messageId = null;
    return [{ type: EventType.TEXT_MESSAGE_END, messageId } as BaseEvent];
  }

  private closeStep(): BaseEvent[] {
    if (!this.step) return [];
    const stepName = this.step;
    this.step = null;
    return [{ type: EventType.STEP_FINISHED, stepName } as BaseEvent];
  }
}
