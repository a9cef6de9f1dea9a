// Telemetry through HTTP: event filters, replayable streams with Last-Event-ID, live follow,
// traces per run segment, 404s.
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { eventually, getJson, postJson, startTestServer, type TestServer } from '../helpers/server.js';
import { readSse, type Frame } from '../helpers/sse.js';
import { waitForEvent } from '../helpers/wait.js';
import { EventsResponse, TraceResponse, TracesListResponse } from '../../src/schemas/index.js';

const TOOLS = join(import.meta.dirname, '../fixtures/run-tools.mjs');
let model: ScriptedOpenAI;
let server: TestServer;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  server = await startTestServer(
    { agent: { tools: { local: TOOLS, builtin: [] } }, governance: { rules: [{ tools: ['ledger_*'], effect: 'ask' }] } },
    { modelUrl: model.url },
  );
});
afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
});
beforeEach(() => {
  model.reset();
  model.setDefault((req) => (req.messages.at(-1)?.role === 'tool' ? { text: 'done' } : { text: 'hello' }));
});

/** Reads frames from a stream until `stop` says so, then aborts the connection. */
async function collect(url: string, stop: (f: Frame, all: Frame[]) => boolean, headers: Record<string, string> = {}): Promise<Frame[]> {
  const controller = new AbortController();
  const res = await fetch(url, { headers, signal: controller.signal });
  const frames: Frame[] = [];
  try {
    for await (const f of readSse(res)) {
      frames.push(f);
      if (stop(f, frames)) break;
    }
  } finally {
    controller.abort();
  }
  return frames;
}

describe('GET /telemetry/events', () => {
  it('returns only events matching every filter, with cursor pagination', async () => {
    model.enqueue({ tool_calls: [{ name: 'echo', arguments: { text: 'x' } }] });
    const a = (await postJson(`${server.url}/run/sync`, { query: 'a', session_id: 'tel-a' })).body;
    const b = (await postJson(`${server.url}/run/sync`, { query: 'b', session_id: 'tel-b' })).body;

    const byRun = EventsResponse.parse((await getJson(`${server.url}/telemetry/events?run_id=${a.run_id}`)).body);
    expect(byRun.count).toBeGreaterThan(5);
    expect(byRun.events.every((e) => e.metadata?.run_id === a.run_id)).toBe(true);

    const bySession = EventsResponse.parse((await getJson(`${server.url}/telemetry/events?session_id=tel-b`)).body);
    expect(bySession.session_id).toBe('tel-b');
    expect(bySession.events.every((e) => e.metadata?.session_id === 'tel-b')).toBe(true);

    const byTrace = (await getJson(`${server.url}/telemetry/events?trace_id=${b.trace_id}`)).body;
    expect(byTrace.events.every((e: { trace_id: string }) => e.trace_id === b.trace_id)).toBe(true);

    const types = (await getJson(`${server.url}/telemetry/events?run_id=${a.run_id}&event_type=tool_call&event_type=final_answer`)).body;
    expect(types.events.map((e: { event_type: string }) => e.event_type).sort()).toEqual(['final_answer', 'tool_call']);

    const none = (await getJson(`${server.url}/telemetry/events?run_id=${a.run_id}&session_id=tel-b`)).body;
    expect(none.count).toBe(0);

    const page1 = (await getJson(`${server.url}/telemetry/events?run_id=${a.run_id}&limit=3`)).body;
    expect(page1.count).toBe(3);
    const page2 = (await getJson(`${server.url}/telemetry/events?run_id=${a.run_id}&limit=1000&cursor=${page1.next_cursor}`)).body;
    expect(page2.count).toBe(byRun.count - 3);
    expect(page2.events[0].cursor > page1.events[2].cursor).toBe(true);

    expect((await getJson(`${server.url}/telemetry/events?limit=5000`)).status).toBe(422);
  });
});

describe('event streams', () => {
  it('replays a session, then resumes exactly after Last-Event-ID with nothing missed or repeated', async () => {
    const session = 'tel-stream';
    await postJson(`${server.url}/run/sync`, { query: 'one', session_id: session });
    const stored = (await getJson(`${server.url}/telemetry/events?session_id=${session}`)).body.events;
    const first = await collect(`${server.url}/telemetry/events/stream?session_id=${session}`, (_f, all) => all.filter((x) => x.id).length >= 3);
    expect(first[0]).toMatchObject({ event: 'session', data: { session_id: session, status: 'streaming' } });
    const seen = first.filter((f) => f.id);
    expect(seen.map((f) => f.id)).toEqual(stored.slice(0, 3).map((e: { cursor: string }) => e.cursor));

    const rest = await collect(`${server.url}/events/${session}`, (_f, all) => all.filter((x) => x.id).length >= stored.length - 3, {
      'last-event-id': seen.at(-1)!.id!,
    });
    expect(rest.filter((f) => f.id).map((f) => f.id)).toEqual(stored.slice(3).map((e: { cursor: string }) => e.cursor));
  });

  it('follows a run live', async () => {
    const session = 'tel-live';
    // The stream is open (its headers arrived) before the run starts, so its events come live.
    const controller = new AbortController();
    const res = await fetch(`${server.url}/telemetry/events/stream?session_id=${session}`, { signal: controller.signal });
    const run = (await postJson(`${server.url}/run/sync`, { query: 'live', session_id: session })).body;
    const frames: Frame[] = [];
    try {
      await waitForEvent(readSse(res), (f) => (frames.push(f), f.event === 'final_answer'), { what: 'final_answer' });
    } finally {
      controller.abort();
    }
    const types = frames.filter((f) => f.id).map((f) => f.event);
    expect(types[0]).toBe('user_message');
    expect(types.at(-1)).toBe('final_answer');
    expect(frames.filter((f) => f.id).every((f) => f.data.metadata.run_id === run.run_id)).toBe(true);
    expect(frames.some((f) => f.event === 'delta')).toBe(false); // deltas are never stored or replayed
  });

  it('requires session_id', async () => {
    expect((await getJson(`${server.url}/telemetry/events/stream`)).status).toBe(422);
  });
});

describe('traces', () => {
  it('builds a trace with spans for a run, and gives a paused-and-resumed run two linked traces', async () => {
    model.enqueue({ tool_calls: [{ name: 'ledger_append', arguments: { entry: 'e' } }] });
    const paused = (await postJson(`${server.url}/run/sync`, { query: 'needs approval', session_id: 'tel-trace' })).body;
    expect(paused.status).toBe('awaiting_approval');
    const firstTrace = TraceResponse.parse((await getJson(`${server.url}/telemetry/runs/${paused.run_id}/trace`)).body);
    expect(firstTrace.trace.trace_id).toBe(paused.trace_id);
    expect(firstTrace.summary.status).toBe('suspended');

    await postJson(`${server.url}/runs/${paused.run_id}/approvals/${paused.approvals[0].approval_id}`, { decision: 'approve', approver: 'x' });
    const done = await eventually(async () => {
      const v = (await getJson(`${server.url}/runs/${paused.run_id}`)).body;
      return v.status === 'completed' ? v : null;
    });
    expect(done.trace_ids).toHaveLength(2);
    const latest = TraceResponse.parse((await getJson(`${server.url}/telemetry/runs/${paused.run_id}/trace`)).body);
    expect(latest.trace.trace_id).toBe(done.trace_ids[1]);
    expect(latest.trace.parent_trace_id).toBe(done.trace_ids[0]);
    expect(latest.summary.status).toBe('completed');
    const resumed = latest.trace.events.find((e) => e.event_type === 'run_resumed')!;
    expect(resumed.metadata).toMatchObject({ cause: 'approval', trigger: 'explicit' });
    const names = new Set(latest.trace.spans.map((s) => s.name));
    for (const n of ['agent.run', 'agent.step', 'model.call', 'tool.batch', 'tool.call']) expect(names).toContain(n);
    // Every span but the root has a parent inside the trace.
    const ids = new Set(latest.trace.spans.map((s) => s.span_id));
    expect(latest.trace.spans.filter((s) => s.parent_span_id && !ids.has(s.parent_span_id))).toEqual([]);

    const exact = TraceResponse.parse((await getJson(`${server.url}/telemetry/traces/${done.trace_ids[0]}`)).body);
    expect(exact.trace.trace_id).toBe(done.trace_ids[0]);
    const bySession = (await getJson(`${server.url}/telemetry/sessions/tel-trace/trace`)).body;
    expect(bySession.trace.trace_id).toBe(done.trace_ids[1]);
    const alias = (await getJson(`${server.url}/events/tel-trace/trace?run_id=${paused.run_id}`)).body;
    expect(alias.trace.trace_id).toBe(done.trace_ids[1]);
    const list = TracesListResponse.parse((await getJson(`${server.url}/telemetry/traces?run_id=${paused.run_id}`)).body);
    expect(list.traces.map((t) => t.trace_id).sort()).toEqual([...done.trace_ids].sort());
  });

  it('stamps each event when it happens, so a span is never shorter than the work it timed', async () => {
    // A run's first events wait with its creating write before they are stored; stamped then, the
    // model call's start would read as later than it was and its span as shorter than its own
    // duration_ms (a step that "ends before it starts" on the waterfall).
    model.enqueue({ text: 'one two three four', chunkDelayMs: 15 });
    const done = (await postJson(`${server.url}/run/sync`, { query: 'slow words', session_id: 'tel-stamp' })).body;
    expect(done.status).toBe('success');
    const { trace } = TraceResponse.parse((await getJson(`${server.url}/telemetry/runs/${done.run_id}/trace`)).body);
    const events = [...trace.events].sort((a, b) => (a.sequence ?? 0) - (b.sequence ?? 0));
    for (let i = 1; i < events.length; i++) expect(Date.parse(events[i].timestamp)).toBeGreaterThanOrEqual(Date.parse(events[i - 1].timestamp));
    const call = events.find((e) => e.event_type === 'model_call')!;
    const response = events.find((e) => e.event_type === 'model_response')!;
    expect(response.duration_ms).toBeGreaterThanOrEqual(45);
    // 2 ms: the call is stamped a moment after the model's timer starts, both at ms precision.
    expect(Date.parse(response.timestamp) - Date.parse(call.timestamp)).toBeGreaterThanOrEqual(response.duration_ms! - 2);
    for (const span of trace.spans) expect(Date.parse(span.ended_at!)).toBeGreaterThanOrEqual(Date.parse(span.started_at));
  });

  it('answers 404 for unknown trace, run and session ids', async () => {
    for (const path of ['/telemetry/traces/trace_nope', '/telemetry/runs/run_nope/trace', '/telemetry/sessions/nope/trace', '/events/nope/trace']) {
      const res = await getJson(`${server.url}${path}`);
      expect(res.status, path).toBe(404);
      expect(res.body.error).toBe('NotFound');
    }
  });
});

describe('retention', () => {
  it('deletes events older than telemetry.retention_days at start-up, index entries included', async () => {
    const { tempDir: mk } = await import('../helpers/server.js');
    const dataDir = mk();
    const first = await startTestServer({}, { dataDir });
    // Backdate: an event from 40 days ago and one from now, written straight to the store.
    const old = new Date(Date.now() - 40 * 86_400_000).toISOString();
    await first.store.appendEvents([
      { event_id: 'event_old', event_type: 'user_message', timestamp: old, trace_id: 'trace_old', run_id: 'run_old', session_id: 'retained' },
      {
        event_id: 'event_new',
        event_type: 'user_message',
        timestamp: new Date().toISOString(),
        trace_id: 'trace_new',
        run_id: 'run_new',
        session_id: 'retained',
      },
    ]);
    await first.stop();
    const second = await startTestServer({ telemetry: { retention_days: 30 } }, { dataDir });
    try {
      const left = await eventually(async () => {
        const r = (await getJson(`${second.url}/telemetry/events?session_id=retained`)).body;
        return r.count === 1 ? r : null;
      });
      expect(left.events[0].event_id).toBe('event_new');
      expect((await getJson(`${second.url}/telemetry/events?run_id=run_old`)).body.count).toBe(0);
    } finally {
      await second.stop();
      second.cleanup();
    }
  });
});
