// The waterfall a first-time user sees (issue 34, "a step ends before it starts"): with the built-in
// demo model streaming with a per-chunk delay, as `agentd serve --demo` does, every span of a run
// that calls a tool ends at or after it starts, child spans lie inside their parent, and the steps
// follow each other in order. Read over HTTP from GET /telemetry/runs/{id}/trace.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DemoModel } from '../../src/agent/model/demo.js';
import { TraceResponse, type TraceSpan } from '../../src/schemas/index.js';
import { getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';

const t = (iso: string | null): number => Date.parse(iso ?? '');

describe('demo model trace', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({}, { model: new DemoModel({ chunkDelayMs: 3 }) });
  });
  afterAll(async () => {
    await s?.stop();
    s?.cleanup();
  });

  it('every span ends at or after its start, inside its parent, and steps come in order', async () => {
    // Two runs: the first is a new session's first run (its first events are held with the
    // creating write), the second calls the clock tool, so the trace has two steps.
    for (const query of ['hello there', 'What time is it?']) {
      const done = (await postJson(`${s.url}/run/sync`, { query, session_id: 'demo-trace' })).body;
      expect(done.status, JSON.stringify(done)).toBe('success');
      const { trace } = TraceResponse.parse((await getJson(`${s.url}/telemetry/runs/${done.run_id}/trace`)).body);
      const byId = new Map<string, TraceSpan>(trace.spans.map((sp) => [sp.span_id, sp]));
      for (const span of trace.spans) {
        expect(span.ended_at, span.name).not.toBeNull();
        expect(t(span.ended_at), `${span.name} ends before it starts`).toBeGreaterThanOrEqual(t(span.started_at));
        const parent = span.parent_span_id ? byId.get(span.parent_span_id) : undefined;
        if (parent) {
          expect(t(span.started_at), `${span.name} starts before its ${parent.name}`).toBeGreaterThanOrEqual(t(parent.started_at));
          expect(t(span.ended_at), `${span.name} ends after its ${parent.name}`).toBeLessThanOrEqual(t(parent.ended_at));
        }
      }
      const steps = trace.spans.filter((sp) => sp.name === 'agent.step').sort((a, b) => t(a.started_at) - t(b.started_at));
      expect(steps.length).toBeGreaterThanOrEqual(query.includes('time') ? 2 : 1);
      for (let i = 1; i < steps.length; i++) expect(t(steps[i].started_at)).toBeGreaterThanOrEqual(t(steps[i - 1].ended_at));
      if (query.includes('time')) expect(trace.spans.some((sp) => sp.name === 'tool.call')).toBe(true);
      // A model call's span is at least as long as the call the model host timed (2 ms: both are
      // read at ms precision a moment apart). Stamped when stored, a new run's held first events
      // read as later than they happened and the span as shorter than its own duration_ms.
      const timed = [...trace.events]
        .sort((a, b) => (a.sequence ?? 0) - (b.sequence ?? 0))
        .filter((e) => e.event_type === 'model_response')
        .map((e) => e.duration_ms ?? 0);
      const calls = trace.spans.filter((sp) => sp.name === 'model.call').sort((a, b) => t(a.started_at) - t(b.started_at));
      expect(calls.length).toBe(timed.length);
      calls.forEach((sp, i) => expect(sp.duration_ms!, 'model.call span shorter than the call').toBeGreaterThanOrEqual(timed[i] - 2));
      const events = [...trace.events].sort((a, b) => (a.sequence ?? 0) - (b.sequence ?? 0));
      for (let i = 1; i < events.length; i++) expect(t(events[i].timestamp)).toBeGreaterThanOrEqual(t(events[i - 1].timestamp));
    }
  });
});
