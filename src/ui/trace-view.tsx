// All of a run on one timeline: every segment's spans (a run that paused for a person has one
// trace per segment), the waits between them as labelled gaps, and a drawer with one span's detail.
import { useState } from 'preact/hooks';
import { fmtTime } from './runs.js';

/** Screen share of one wait on the time axis: a wait of days must not squash the work to nothing. */
const GAP_PCT = 6;

interface Axis {
  /** Position (0-100) of an instant inside segment i. */
  at(i: number, ms: number): number;
  total: number;
}

/** A piecewise axis: each segment gets its share of the width by duration, each wait a fixed gap. */
function axis(segments: any[], now: number): Axis {
  const bounds = segments.map((t) => {
    const starts = (t.spans ?? []).map((s: any) => Date.parse(s.started_at));
    const ends = (t.spans ?? []).map((s: any) => (s.ended_at ? Date.parse(s.ended_at) : now));
    const a = Math.min(Date.parse(t.started_at), ...starts);
    const b = Math.max(t.ended_at ? Date.parse(t.ended_at) : now, ...ends, a + 1);
    return [a, b] as const;
  });
  const work = bounds.reduce((n, [a, b]) => n + (b - a), 0) || 1;
  const room = 100 - GAP_PCT * (segments.length - 1);
  const offsets: number[] = [];
  let x = 0;
  for (const [a, b] of bounds) {
    offsets.push(x);
    x += ((b - a) / work) * room + GAP_PCT;
  }
  return {
    at: (i, t) => offsets[i] + ((Math.min(Math.max(t, bounds[i][0]), bounds[i][1]) - bounds[i][0]) / work) * room,
    total: work,
  };
}

const fmtMs = (ms: number | null | undefined): string =>
  ms === null || ms === undefined ? '…' : ms < 1000 ? `${ms} ms` : ms < 120_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 60_000)} min`;

/** "alice approved clock (edited arguments) at 12:00:01", one line per decision of a wait. */
function decisionText(d: any): string {
  const who = d.approver ?? 'nobody yet';
  const what =
    d.kind === 'approval' ? `${d.subject}${d.edited_arguments ? ' (edited arguments)' : ''}` : `budget ${d.subject}${d.amount ? ` +${d.amount}` : ''}`;
  const verb = d.decision === 'used' ? 'approved' : d.decision;
  const when = d.decided_at ? ` at ${fmtTime(d.decided_at)}` : '';
  const note = d.note ? `: "${d.note}"` : '';
  return d.decision === 'pending' ? `${what}: waiting for a decision` : `${who} ${verb} ${what}${when}${note}`;
}

function depthMap(spans: any[]): (s: any) => number {
  const depth = new Map<string, number>();
  const byId = new Map(spans.map((s) => [s.span_id, s]));
  const depthOf = (s: any): number => {
    if (depth.has(s.span_id)) return depth.get(s.span_id)!;
    const p = s.parent_span_id ? byId.get(s.parent_span_id) : undefined;
    const d = p && p !== s ? Math.min(depthOf(p) + 1, 10) : 0;
    depth.set(s.span_id, d);
    return d;
  };
  return depthOf;
}

/** The run's segments and waits (GET /telemetry/runs/{id}/trace); a lone trace is one segment. */
export function RunTimeline({ view }: { view: any }) {
  const segments: any[] = view.segments ?? [view.trace ?? view];
  const waits: any[] = view.waits ?? [];
  const [open, setOpen] = useState<{ seg: number; span: string } | null>(null);
  if (segments.every((t) => (t.spans ?? []).length === 0)) return <p class="muted">No spans.</p>;
  const now = Date.now();
  const ax = axis(segments, now);
  const end = (s: any) => (s.ended_at ? Date.parse(s.ended_at) : now);
  const rows: any[] = [];
  segments.forEach((t, i) => {
    const spans: any[] = [...(t.spans ?? [])].sort((a, b) => Date.parse(a.started_at) - Date.parse(b.started_at));
    const depthOf = depthMap(spans);
    if (segments.length > 1) {
      rows.push(
        <tr class="segment" key={`seg-${t.trace_id}`}>
          <td colSpan={5} class="muted">
            segment {i + 1} <span class="mono">{t.trace_id}</span> · {t.status}
          </td>
        </tr>,
      );
    }
    for (const s of spans) {
      const a = s.attributes ?? {};
      const tokens = a['gen_ai.usage.input_tokens'] !== undefined ? `${a['gen_ai.usage.input_tokens']}/${a['gen_ai.usage.output_tokens'] ?? 0}` : '';
      const cost = a['agentd.estimated_cost_usd'];
      const left = ax.at(i, Date.parse(s.started_at));
      const width = Math.max(ax.at(i, end(s)) - left, 0.5);
      const label = a['gen_ai.tool.name'] ?? a['gen_ai.request.model'] ?? '';
      const selected = open?.seg === i && open.span === s.span_id;
      rows.push(
        <tr
          class={`span${selected ? ' selected' : ''}`}
          key={`${t.trace_id}-${s.span_id}`}
          data-span={s.span_id}
          onClick={() => setOpen(selected ? null : { seg: i, span: s.span_id })}
        >
          <td style={{ paddingLeft: `${depthOf(s) * 14 + 4}px` }}>
            {s.name} <span class="muted">{String(label)}</span>
          </td>
          <td>{s.duration_ms ?? '…'}</td>
          <td>{tokens}</td>
          <td>{typeof cost === 'number' ? `$${cost.toFixed(6)}` : ''}</td>
          <td class="bar-col">
            <div class={`bar b-${s.status}`} style={{ marginLeft: `${left}%`, width: `${width}%` }} title={`${s.status} ${s.duration_ms ?? ''} ms`} />
          </td>
        </tr>,
      );
    }
    const w = waits.find((x) => x.after_trace_id === t.trace_id);
    if (w) {
      const left = ax.at(i, Date.parse(w.started_at));
      const width = i + 1 < segments.length ? GAP_PCT : 100 - left;
      rows.push(
        <tr class="wait" key={`wait-${t.trace_id}`}>
          <td colSpan={4}>
            <strong>{w.ended_at ? `waited ${fmtMs(w.duration_ms)} for a person` : 'waiting for a person'}</strong>
            {w.decisions.map((d: any) => (
              <div class="decision" key={d.id}>
                {decisionText(d)}
              </div>
            ))}
          </td>
          <td class="bar-col">
            <div
              class="gap"
              style={{ marginLeft: `${left}%`, width: `${width}%` }}
              title={`${fmtTime(w.started_at)} → ${w.ended_at ? fmtTime(w.ended_at) : 'now'}`}
            />
          </td>
        </tr>,
      );
    }
  });
  const openSeg = open ? segments[open.seg] : null;
  const openSpan = openSeg ? (openSeg.spans ?? []).find((s: any) => s.span_id === open!.span) : null;
  return (
    <>
      <table class="waterfall">
        <thead>
          <tr>
            <th>span</th>
            <th>ms</th>
            <th>tokens</th>
            <th>cost</th>
            <th class="bar-col">
              timeline ({fmtMs(ax.total)} of work{segments.length > 1 ? `, ${segments.length} segments` : ''})
            </th>
          </tr>
        </thead>
        <tbody>{rows}</tbody>
      </table>
      {view.earlier_segments_omitted && <p class="muted">Older segments are left out (more than 100).</p>}
      {openSpan && <SpanDrawer span={openSpan} trace={openSeg} onClose={() => setOpen(null)} />}
    </>
  );
}

const json = (v: unknown): string => (typeof v === 'string' ? v : JSON.stringify(v, null, 2));

/** The events of a span, the policy check folded into a tool call included (telemetry.md). */
function spanEvents(span: any, trace: any): any[] {
  const ids = new Set([span.span_id, span.attributes?.['agentd.policy.span_id']].filter(Boolean));
  const rootId = trace.events?.[0]?.span_id;
  return (trace.events ?? []).filter((e: any) => ids.has(e.span_id ?? rootId));
}

function Section({ title, value, cls }: { title: string; value: unknown; cls: string }) {
  if (value === null || value === undefined) return null;
  return (
    <>
      <h4>{title}</h4>
      <pre class={cls}>{json(value)}</pre>
    </>
  );
}

/**
 * One span in detail: timing, tokens, cost, error, and what its events recorded (as stored:
 * redacted, and truncated past 64 KB, like every event).
 */
export function SpanDrawer({ span, trace, onClose }: { span: any; trace: any; onClose: () => void }) {
  const a = span.attributes ?? {};
  const evs = spanEvents(span, trace);
  const first = (type: string) => evs.find((e) => e.event_type === type);
  const call = first('model_call');
  const response = first('model_response');
  const toolCall = first('tool_call');
  const toolEnd = first('tool_result') ?? first('tool_error');
  const errors = evs.filter((e) => e.error).map((e) => ({ event: e.event_type, ...e.error }));
  return (
    <aside class="drawer" id="span-drawer" role="dialog" aria-label={`span ${span.name}`}>
      <div class="row">
        <h3>
          {span.name} <span class="muted">{String(a['gen_ai.tool.name'] ?? a['gen_ai.request.model'] ?? '')}</span>
        </h3>
        <span class={`status s-${span.status === 'error' ? 'failed' : span.status === 'ok' ? 'completed' : 'running'}`}>{span.status}</span>
        <span class="grow" />
        <button id="span-drawer-close" onClick={onClose}>
          Close
        </button>
      </div>
      <table class="facts">
        <tbody>
          <tr>
            <th>span</th>
            <td class="mono">{span.span_id}</td>
          </tr>
          <tr>
            <th>timing</th>
            <td class="timing">
              {fmtTime(span.started_at)} → {span.ended_at ? fmtTime(span.ended_at) : 'open'} ({fmtMs(span.duration_ms)})
            </td>
          </tr>
          {a['gen_ai.usage.input_tokens'] !== undefined && (
            <tr>
              <th>tokens</th>
              <td class="tokens">
                {a['gen_ai.usage.input_tokens']} in / {a['gen_ai.usage.output_tokens'] ?? 0} out
              </td>
            </tr>
          )}
          {typeof a['agentd.estimated_cost_usd'] === 'number' && (
            <tr>
              <th>cost</th>
              <td class="cost">${a['agentd.estimated_cost_usd'].toFixed(6)}</td>
            </tr>
          )}
          {a['agentd.policy.decision'] && (
            <tr>
              <th>policy</th>
              <td>{String(a['agentd.policy.decision'])}</td>
            </tr>
          )}
        </tbody>
      </table>
      {errors.length > 0 && <Section title="Error" value={errors.length === 1 ? errors[0] : errors} cls="span-error error" />}
      {call && <Section title={promptTitle(call.input)} value={call.input} cls="span-prompt" />}
      {response && <Section title="Completion" value={response.output} cls="span-completion" />}
      {toolCall && <Section title="Arguments" value={toolCall.input} cls="span-arguments" />}
      {toolEnd && (
        <Section title={toolEnd.event_type === 'tool_error' ? 'Result (error)' : 'Result'} value={toolEnd.output ?? toolEnd.error} cls="span-result" />
      )}
      <h4>Events</h4>
      <table class="events">
        <tbody>
          {evs.map((e) => (
            <tr key={e.event_id}>
              <td class="mono">{e.event_type}</td>
              <td>{fmtTime(e.timestamp)}</td>
              <td>{e.duration_ms !== null && e.duration_ms !== undefined ? `${e.duration_ms} ms` : ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </aside>
  );
}

/** The model_call input holds `prompt` (the newest messages that fit) and `prompt_omitted` (earlier ones left out). */
function promptTitle(input: unknown): string {
  const omitted = input && typeof input === 'object' ? (input as { prompt_omitted?: unknown }).prompt_omitted : undefined;
  return typeof omitted === 'number' && omitted > 0 ? `Prompt (the ${omitted} earliest messages left out for size)` : 'Prompt (every message the model saw)';
}
