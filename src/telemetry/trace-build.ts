// Building a run's trace view from its trace record and events (the derivation src/telemetry/traces.ts
// describes): events grouped by span_id, each span's name, status, times and attributes.
import type { EventInput } from '../store/store.js';
import {
  ENDING_EVENT_TYPES,
  ERROR_EVENT_TYPES,
  RUN_LEVEL_TYPES,
  spanNameForEventType,
  type SpanAttributes,
  type SpanStatus,
  type Trace,
  type TraceRecord,
  type TraceSpan,
  type TraceStatus,
} from './traces.js';

// Events come typed as the store's open EventInput; read the §8.1 fields defensively so a
// malformed or foreign event degrades the view instead of throwing in a GET handler.
const str = (v: unknown): string | null => (typeof v === 'string' && v.length > 0 ? v : null);
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const obj = (v: unknown): Record<string, unknown> | null => (v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null);
const meta = (e: EventInput): Record<string, unknown> => obj(e.metadata) ?? {};
const metaStr = (e: EventInput, ...keys: string[]): string | null => {
  const m = meta(e);
  for (const k of keys) {
    const v = str(m[k]);
    if (v !== null) return v;
  }
  return null;
};
const ctxField = (e: EventInput, field: 'run_id' | 'session_id' | 'task_id' | 'agent_id' | 'tenant'): string | null =>
  str((e as Record<string, unknown>)[field]) ?? metaStr(e, field);
const ms = (iso: string | null): number | null => {
  if (iso === null) return null;
  const t = Date.parse(iso);
  return Number.isNaN(t) ? null : t;
};
const maxIso = (a: string | null, b: string | null): string | null => {
  if (a === null) return b;
  if (b === null) return a;
  return (ms(a) ?? 0) >= (ms(b) ?? 0) ? a : b;
};

interface SpanGroup<E extends EventInput> {
  span_id: string;
  events: E[];
  span: TraceSpan;
  endedByEvent: boolean;
  hasError: boolean;
  errorEvent: E | null;
}

function compareEvents(a: EventInput, b: EventInput): number {
  const ca = str(a.cursor);
  const cb = str(b.cursor);
  if (ca !== null && cb !== null && ca !== cb) {
    if (ca.length !== cb.length) return ca.length - cb.length;
    return ca < cb ? -1 : 1;
  }
  const sa = num(a.sequence);
  const sb = num(b.sequence);
  if (sa !== null && sb !== null && sa !== sb) return sa - sb;
  return 0;
}

/**
 * Builds the trace view: the record, its spans (grouped by the events' span_id) and its events in
 * log order. Pure: no clock, so a running trace shows open spans with `ended_at: null`.
 */
export function buildTrace<R extends TraceRecord, E extends EventInput>(record: R, events: readonly E[]): Trace<R, E> {
  // Array.prototype.sort is stable, so events without cursor/sequence keep the given order.
  const ordered = [...events].sort(compareEvents);
  const rootSpanId = ordered.length > 0 ? str(ordered[0].span_id) : null;
  const groups = new Map<string, SpanGroup<E>>();

  for (const event of ordered) {
    // An event without a span belongs to the run itself.
    const spanId = str(event.span_id) ?? rootSpanId ?? `${record.trace_id}:root`;
    let group = groups.get(spanId);
    if (!group) {
      group = {
        span_id: spanId,
        events: [],
        span: {
          span_id: spanId,
          parent_span_id: null,
          name: 'agent.run',
          status: 'unset',
          started_at: event.timestamp,
          ended_at: null,
          duration_ms: null,
          attributes: {},
        },
        endedByEvent: false,
        hasError: false,
        errorEvent: null,
      };
      groups.set(spanId, group);
    }
    group.events.push(event);
  }

  const context = {
    run_id: record.run_id ?? firstOf(ordered, (e) => ctxField(e, 'run_id')),
    session_id: record.session_id ?? firstOf(ordered, (e) => ctxField(e, 'session_id')),
    task_id: record.task_id ?? firstOf(ordered, (e) => ctxField(e, 'task_id')),
    agent_id: record.agent_id ?? firstOf(ordered, (e) => ctxField(e, 'agent_id')),
    // The run's tenant (docs/multi-tenant.md): on the trace record, else on its events' metadata.
    tenant: str((record as { tenant?: unknown }).tenant) ?? firstOf(ordered, (e) => ctxField(e, 'tenant')),
  };
  const traceEnded = record.status !== 'running' && record.ended_at ? record.ended_at : null;

  // Pass 1: what each span's own events say.
  for (const group of groups.values()) {
    const { span, events: evs } = group;
    const isRoot = group.span_id === (rootSpanId ?? `${record.trace_id}:root`);
    span.name = nameSpan(evs, isRoot);
    span.parent_span_id = firstOf(evs, (e) => str(e.parent_span_id));
    for (const e of evs) {
      if (ERROR_EVENT_TYPES.has(e.event_type)) {
        group.hasError = true;
        group.errorEvent ??= e;
      }
      if (ENDING_EVENT_TYPES.has(e.event_type)) group.endedByEvent = true;
    }
    if (group.endedByEvent) span.ended_at = evs[evs.length - 1].timestamp;
    span.attributes = spanAttributes(span.name, evs, context, isRoot ? ordered : null);
    if (isRoot) {
      if (record.parent_trace_id) span.attributes['agentd.parent_trace_id'] = record.parent_trace_id;
      span.attributes['agentd.trace.status'] = record.status;
      span.ended_at = traceEnded ?? span.ended_at;
    }
    if (group.errorEvent) {
      const err = obj(group.errorEvent.error);
      span.attributes['error.type'] = str(err?.type) ?? group.errorEvent.event_type;
      const message = str(err?.message);
      if (message !== null) span.attributes['agentd.error.message'] = message;
    }
  }

  foldPolicySpans(groups);

  const rootGroup = rootSpanId !== null ? groups.get(rootSpanId) : groups.get(`${record.trace_id}:root`);
  const runEnd = rootGroup?.span.ended_at ?? traceEnded;

  // Pass 2: a step has no ending event; it lasts until the next step under the same parent
  // starts, or until the run ends.
  const stepsByParent = new Map<string, SpanGroup<E>[]>();
  for (const group of groups.values()) {
    if (group.span.name !== 'agent.step') continue;
    const key = group.span.parent_span_id ?? '';
    const list = stepsByParent.get(key) ?? [];
    list.push(group);
    stepsByParent.set(key, list);
  }
  for (const steps of stepsByParent.values()) {
    for (let i = 0; i < steps.length; i++) {
      const next = steps[i + 1];
      steps[i].span.ended_at = maxIso(steps[i].span.ended_at, next ? next.span.started_at : runEnd);
    }
  }

  // Pass 3: a span with no end of its own (a tool batch) ends with its last child, once all have.
  const children = new Map<string, SpanGroup<E>[]>();
  for (const group of groups.values()) {
    const parent = group.span.parent_span_id;
    if (parent === null || !groups.has(parent)) continue;
    const list = children.get(parent) ?? [];
    list.push(group);
    children.set(parent, list);
  }
  for (const group of groups.values()) {
    if (group.span.ended_at !== null) continue;
    const kids = children.get(group.span_id);
    if (!kids || kids.length === 0 || kids.some((k) => k.span.ended_at === null)) continue;
    let end: string | null = null;
    for (const k of kids) end = maxIso(end, k.span.ended_at);
    group.span.ended_at = maxIso(end, group.events[group.events.length - 1].timestamp);
    if (kids.some((k) => k.hasError)) group.hasError = true;
  }

  // Pass 4: a segment that is over (finished, suspended for a person, cancelled) closes what is
  // still open at its end, so exported spans always have an end time.
  const spans: TraceSpan[] = [];
  for (const group of groups.values()) {
    const { span } = group;
    if (span.ended_at === null && traceEnded !== null) span.ended_at = maxIso(traceEnded, span.started_at);
    const start = ms(span.started_at);
    const end = ms(span.ended_at);
    span.duration_ms = start !== null && end !== null ? Math.max(0, end - start) : null;
    span.status = spanStatus(group, group === rootGroup ? record.status : null);
    spans.push(span);
  }

  return { ...record, spans, events: ordered };
}

const POLICY_EVENT_TYPES: ReadonlySet<string> = new Set(['policy_request_created', 'policy_decision_allow', 'policy_decision_ask', 'policy_decision_deny']);

/**
 * One `tool.call` span per tool call. The runtime records a call's policy check (created, decided)
 * on a span of its own, before the tool batch starts, and its execution (`tool_call` …
 * `tool_result`/`tool_error`, or the `tool_error` of a denied or rejected call) on another: two
 * `tool.call` spans, so every tool call was exported twice. When both are in this trace, the
 * check folds into the execution span, which keeps its place under the batch and its timing, and
 * gains the decision, the error of a denial, and `agentd.policy.span_id` (where the check's
 * events point). A check whose execution is not in this trace (a call waiting for approval when
 * its segment was suspended) stays the call's span in this trace.
 */
function foldPolicySpans<E extends EventInput>(groups: Map<string, SpanGroup<E>>): void {
  const callId = (g: SpanGroup<E>): string | null => firstOf(g.events, (e) => metaStr(e, 'gen_ai.tool.call.id', 'tool_call_id', 'call_id'));
  const executions = new Map<string, SpanGroup<E>>();
  const checks: Array<[string, SpanGroup<E>]> = [];
  for (const group of groups.values()) {
    if (group.span.name !== 'tool.call') continue;
    const id = callId(group);
    if (id === null) continue;
    if (group.events.every((e) => POLICY_EVENT_TYPES.has(e.event_type))) checks.push([id, group]);
    else if (!executions.has(id)) executions.set(id, group);
  }
  for (const [id, check] of checks) {
    const exec = executions.get(id);
    if (!exec) continue;
    const attrs = exec.span.attributes;
    for (const [k, v] of Object.entries(check.span.attributes)) if (attrs[k] === undefined) attrs[k] = v;
    attrs['agentd.policy.span_id'] = check.span_id;
    if (check.hasError && !exec.hasError) {
      exec.hasError = true;
      exec.errorEvent = check.errorEvent;
    }
    groups.delete(check.span_id);
  }
}

function firstOf<T, V>(items: readonly T[], pick: (item: T) => V | null): V | null {
  for (const item of items) {
    const v = pick(item);
    if (v !== null) return v;
  }
  return null;
}

function nameSpan(events: readonly EventInput[], isRoot: boolean): TraceSpan['name'] {
  if (isRoot) return events[0].event_type.startsWith('background_') ? 'background.run' : 'agent.run';
  for (const e of events) {
    const name = spanNameForEventType(e.event_type);
    if (name !== null) return name;
  }
  const first = events[0].event_type;
  return RUN_LEVEL_TYPES.has(first) ? 'agent.run' : first;
}

function spanStatus(group: SpanGroup<EventInput>, traceStatus: TraceStatus | null): SpanStatus {
  if (traceStatus !== null) {
    if (group.hasError || traceStatus === 'failed' || traceStatus === 'timeout') return 'error';
    return traceStatus === 'completed' ? 'ok' : 'unset';
  }
  if (group.hasError) return 'error';
  // Closed only by the segment ending (e.g. a tool call still waiting for approval) is not "ok".
  if (group.endedByEvent) return 'ok';
  if (group.span.name === 'agent.step' || group.span.name === 'tool.batch') {
    return group.span.ended_at !== null ? 'ok' : 'unset';
  }
  return 'unset';
}

function addNumber(attrs: SpanAttributes, key: string, value: number | null): void {
  if (value === null) return;
  const prev = attrs[key];
  attrs[key] = (typeof prev === 'number' ? prev : 0) + value;
}

function spanAttributes(
  name: TraceSpan['name'],
  events: readonly EventInput[],
  context: { run_id: string | null; session_id: string | null; task_id: string | null; agent_id: string | null; tenant: string | null },
  /** For the root span: every event of the trace, to total the usage. */
  allEvents: readonly EventInput[] | null,
): SpanAttributes {
  const attrs: SpanAttributes = {};
  const set = (key: string, value: string | null): void => {
    if (value !== null) attrs[key] = value;
  };

  switch (name) {
    case 'model.call': {
      attrs['gen_ai.operation.name'] = 'chat';
      set(
        'gen_ai.request.model',
        firstOf(events, (e) => {
          const fromMeta = metaStr(e, 'gen_ai.request.model', 'request_model', 'model');
          if (fromMeta !== null) return fromMeta;
          const actor = obj(e.actor);
          return actor?.type === 'model' ? (str(actor.name) ?? str(actor.id)) : null;
        }),
      );
      // A model_response's `model` is the one the provider says answered.
      set(
        'gen_ai.response.model',
        firstOf(events, (e) => metaStr(e, 'gen_ai.response.model', 'response_model') ?? (e.event_type === 'model_response' ? metaStr(e, 'model') : null)),
      );
      set(
        'gen_ai.provider.name',
        firstOf(events, (e) => metaStr(e, 'gen_ai.provider.name', 'provider')),
      );
      set(
        'gen_ai.response.id',
        firstOf(events, (e) => (e.event_type === 'model_response' ? metaStr(e, 'gen_ai.response.id', 'response_id') : null)),
      );
      // The request's parameters, as the model_call event recorded them (run-effects.ts).
      const call = events.find((e) => e.event_type === 'model_call');
      if (call) {
        const maxTokens = num(meta(call).max_tokens);
        const temperature = num(meta(call).temperature);
        if (maxTokens !== null) attrs['gen_ai.request.max_tokens'] = maxTokens;
        if (temperature !== null) attrs['gen_ai.request.temperature'] = temperature;
      }
      // metadata survives `capture: metadata_only`; the output is where events before it had it.
      const finish = firstOf(events, (e) => metaStr(e, 'finish_reason') ?? (e.event_type === 'model_response' ? str(obj(e.output)?.finish_reason) : null));
      if (finish !== null) attrs['gen_ai.response.finish_reasons'] = [finish];
      break;
    }
    case 'tool.call': {
      attrs['gen_ai.operation.name'] = 'execute_tool';
      set(
        'gen_ai.tool.name',
        firstOf(events, (e) => {
          const fromMeta = metaStr(e, 'gen_ai.tool.name', 'tool_name', 'tool');
          if (fromMeta !== null) return fromMeta;
          // The runtime's tool actors are {type: 'tool', id: tool} and {type: 'mcp_server', id: tool, name: server}.
          const actor = obj(e.actor);
          if (actor?.type === 'mcp_server') return str(actor.id);
          return actor?.type === 'tool' ? (str(actor.name) ?? str(actor.id)) : null;
        }),
      );
      set(
        'gen_ai.tool.call.id',
        firstOf(events, (e) => metaStr(e, 'gen_ai.tool.call.id', 'tool_call_id', 'call_id')),
      );
      // Every agentd tool is declared to the model as a function and run by agentd on its behalf.
      attrs['gen_ai.tool.type'] = 'function';
      set(
        'agentd.mcp_server',
        firstOf(events, (e) => {
          const fromMeta = metaStr(e, 'mcp_server');
          if (fromMeta !== null) return fromMeta;
          const actor = obj(e.actor);
          return actor?.type === 'mcp_server' ? str(actor.name) : null;
        }),
      );
      for (const e of events) {
        if (e.event_type.startsWith('policy_decision_')) {
          attrs['agentd.policy.decision'] = e.event_type.slice('policy_decision_'.length);
        }
      }
      break;
    }
    case 'agent.run':
    case 'subagent.run': {
      attrs['gen_ai.operation.name'] = 'invoke_agent';
      if (name === 'agent.run') set('gen_ai.agent.id', context.agent_id);
      set(
        'gen_ai.agent.name',
        firstOf(events, (e) => {
          const fromMeta = name === 'subagent.run' ? metaStr(e, 'subagent', 'subagent_name', 'agent_name') : metaStr(e, 'agent_name');
          if (fromMeta !== null) return fromMeta;
          const actor = obj(e.actor);
          if (actor?.type !== 'agent') return null;
          // A run's final answer is signed with the agent's name (events stored before
          // user_message carried `agent_name`); a subagent's events with the subagent's.
          return str(actor.name) ?? (e.event_type === 'final_answer' || name === 'subagent.run' ? str(actor.id) : null);
        }),
      );
      if (allEvents !== null) {
        // The agent's model, as the semantic conventions ask of invoke_agent when known.
        const model = allEvents.filter((e) => e.event_type === 'model_call' || e.event_type === 'model_response');
        set(
          'gen_ai.provider.name',
          firstOf(model, (e) => metaStr(e, 'gen_ai.provider.name', 'provider')),
        );
        set(
          'gen_ai.request.model',
          firstOf(model, (e) => (e.event_type === 'model_call' ? metaStr(e, 'gen_ai.request.model', 'request_model', 'model') : null)),
        );
      }
      break;
    }
    case 'agent.step': {
      const step = firstOf(events, (e) => num(meta(e).step));
      if (step !== null) attrs['agentd.step'] = step;
      break;
    }
    case 'background.run': {
      const attempt = firstOf(events, (e) => num(meta(e).attempt));
      if (attempt !== null) attrs['agentd.attempt'] = attempt;
      break;
    }
  }

  // Usage and cost: a model span counts its own events; the root totals the whole segment.
  for (const e of allEvents ?? events) {
    const usage = obj(e.token_usage);
    if (usage && (allEvents === null || e.event_type === 'model_response')) {
      addNumber(attrs, 'gen_ai.usage.input_tokens', num(usage.input_tokens));
      addNumber(attrs, 'gen_ai.usage.output_tokens', num(usage.output_tokens));
    }
    if (allEvents === null || e.event_type === 'model_response') {
      addNumber(attrs, 'agentd.estimated_cost_usd', num(e.estimated_cost_usd));
    }
  }

  // The session is the conversation every GenAI operation of the run belongs to.
  if (attrs['gen_ai.operation.name'] !== undefined) set('gen_ai.conversation.id', context.session_id);
  set('agentd.run_id', context.run_id);
  set('agentd.session_id', context.session_id);
  set('agentd.task_id', context.task_id);
  set('agentd.agent_id', context.agent_id);
  set('agentd.tenant', context.tenant);
  return attrs;
}
