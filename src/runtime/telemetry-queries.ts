import { notFound } from '../errors.js';
import type { OriginRoot } from '../telemetry/otlp-spans.js';
import { GLOBAL_SCOPE, bgIdOf, bgKey, tenantKey, visibleIn, type TenantScope } from './tenancy.js';
import { inTimeRange, scanPage, type ListOrder } from './list-scan.js';
import type { EventIndexField, EventInput, EventPage, EventQuery, Store, StoredEvent } from '../store/store.js';
import { resolveTraceLookup, summarizeTrace, type Trace, type TraceRecord, type TraceStatus } from '../telemetry/traces.js';
import { buildTrace } from '../telemetry/trace-build.js';
import { repos } from '../store/repos/index.js';
import { runWaits } from '../telemetry/run-timeline.js';
import type { RunRecord } from './run-record.js';

/** Segments a run trace answers, the newest kept: each is read whole, so the answer is bounded. */
const MAX_RUN_SEGMENTS = 100;

/** Reads of the telemetry log: events from store indexes, traces derived from a record + its events. */
export class TelemetryQueries {
  constructor(private readonly store: Store) {}

  async events(q: { filters: Partial<Record<EventIndexField, string | string[]>>; cursor?: string | null; limit: number }, scope: TenantScope = GLOBAL_SCOPE) {
    return readVisibleEvents(this.store, { filters: q.filters, after: q.cursor ?? null, limit: q.limit }, scope);
  }

  /**
   * `events`, each as its stored JSON text: the HTTP layer splices them into the answer unparsed.
   * A request acting in a tenant gets its tenant's events only (parsed to be filtered).
   */
  async eventsJson(
    q: { filters: Partial<Record<EventIndexField, string | string[]>>; cursor?: string | null; limit: number },
    scope: TenantScope = GLOBAL_SCOPE,
  ) {
    if (scope.all) return this.store.readEventsJson({ filters: q.filters, after: q.cursor ?? null, limit: q.limit });
    const page = await readVisibleEvents(this.store, { filters: q.filters, after: q.cursor ?? null, limit: q.limit }, scope);
    return { events: page.events.map((e) => JSON.stringify(e)), next_cursor: page.next_cursor };
  }

  /** Every stored event of a trace, in order. */
  private async traceEvents(traceId: string): Promise<StoredEvent[]> {
    const all: StoredEvent[] = [];
    let after: string | null = null;
    for (;;) {
      const page = await this.store.readEvents({ filters: { trace_id: traceId }, after, limit: 1000 });
      all.push(...page.events);
      if (!page.next_cursor) return all;
      after = page.next_cursor;
    }
  }

  /**
   * One exact trace. A trace with events but no stored record (a background run's lifecycle
   * trace) is described from its events.
   */
  async trace(traceId: string, scope: TenantScope = GLOBAL_SCOPE): Promise<{ summary: ReturnType<typeof summarizeTrace>; trace: Trace }> {
    const rec = await repos(this.store).traces.get<TraceRecord>(traceId);
    const events = await this.traceEvents(traceId);
    if (!rec && events.length === 0) throw notFound('trace', traceId);
    // Another tenant's trace is not found, as one that does not exist (docs/multi-tenant.md).
    if (!visibleIn(scope, rec ? (rec.value as { tenant?: string }).tenant : tenantOfEvent(events[0]))) throw notFound('trace', traceId);
    const record: TraceRecord = rec?.value ?? synthesize(traceId, events);
    const trace = buildTrace(record, events);
    return { summary: summarizeTrace(trace), trace };
  }

  /** The latest trace of a run or session (spec: one key exactly). */
  async latest(key: { trace_id?: string; run_id?: string; session_id?: string }, scope: TenantScope = GLOBAL_SCOPE) {
    const lookup = resolveTraceLookup(key);
    if (lookup.key === 'trace_id') return this.trace(lookup.value, scope);
    const missing = () => notFound(lookup.key === 'run_id' ? 'trace of run' : 'trace of session', lookup.value);
    // A session id is a key in the caller's tenant (the traces' session index holds keys).
    const indexValue = lookup.key === 'session_id' ? tenantKey(scope.tenant, lookup.value) : lookup.value;
    const page = await repos(this.store).traces.list<TraceRecord>({ index: { name: lookup.key, value: indexValue }, reverse: true, limit: 1 });
    if (page.items[0]) {
      if (!visibleIn(scope, (page.items[0].value as { tenant?: string }).tenant)) throw missing();
      return this.trace(page.items[0].id, scope);
    }
    // Background lifecycle traces have no record: fall back to the newest event of the key.
    const events = await this.store.readEvents({ filters: { [lookup.key]: lookup.value }, limit: 1000 });
    const last = events.events.filter((e) => visibleIn(scope, tenantOfEvent(e))).at(-1);
    if (!last?.trace_id) throw missing();
    return this.trace(last.trace_id, scope);
  }

  /**
   * All of a run: the latest segment as `latest` answers it (`summary`, `trace`), plus every
   * segment oldest first and the waits for a person between them, labelled from the run record's
   * decisions. A run with no trace record (a background run's lifecycle trace) is its one trace.
   */
  async runTrace(runId: string) {
    const page = await repos(this.store).traces.list<TraceRecord>({ index: { name: 'run_id', value: runId }, reverse: true, limit: MAX_RUN_SEGMENTS + 1 });
    if (page.items.length === 0) {
      const only = await this.latest({ run_id: runId });
      return { ...only, segments: [only.trace], waits: [], earlier_segments_omitted: false };
    }
    const records = page.items.slice(0, MAX_RUN_SEGMENTS).reverse();
    const segments: Trace[] = [];
    for (const item of records) segments.push(buildTrace(item.value as TraceRecord, await this.traceEvents(item.id)));
    const run = await repos(this.store).runs.get<RunRecord>(runId);
    const latest = segments.at(-1)!;
    return {
      summary: summarizeTrace(latest),
      trace: latest,
      segments,
      waits: runWaits(segments, run?.value ?? null),
      // Only whether there are more: counting them would read the whole index.
      earlier_segments_omitted: page.items.length > MAX_RUN_SEGMENTS,
    };
  }

  /**
   * The root span of the segment a resumed trace continues (its first event's span), for the OTLP
   * span link from one segment to the one before. Null for a first segment.
   */
  async previousSegmentRoot(trace: Pick<TraceRecord, 'parent_trace_id'>): Promise<{ trace_id: string; span_id: string } | null> {
    if (!trace.parent_trace_id) return null;
    const first = await this.store.readEvents({ filters: { trace_id: trace.parent_trace_id }, limit: 1 });
    const spanId = first.events[0]?.span_id;
    return typeof spanId === 'string' && spanId ? { trace_id: trace.parent_trace_id, span_id: spanId } : null;
  }

  /**
   * A fork's or replay's first segment: the root span of the first segment of the run it came
   * from (its `user_message` carries the origin: src/runtime/runs.ts), for the OTLP span link.
   */
  async originRoot(trace: { parent_trace_id?: string | null; events: ReadonlyArray<EventInput> }): Promise<OriginRoot | null> {
    if (trace.parent_trace_id) return null; // a later segment links to the one before it instead
    const meta = (trace.events[0]?.metadata ?? {}) as { forked_from?: { run_id?: unknown }; replay_of?: { run_id?: unknown }; eval_id?: unknown };
    const type = meta.forked_from ? 'forked_from' : meta.replay_of ? 'replay_of' : null;
    const runId = (meta.forked_from ?? meta.replay_of)?.run_id;
    if (!type || typeof runId !== 'string') return null;
    const first = await this.store.readEvents({ filters: { run_id: runId }, limit: 1 });
    const e = first.events[0];
    if (!e || typeof e.trace_id !== 'string' || typeof e.span_id !== 'string' || !e.span_id) return null;
    return { type, run_id: runId, trace_id: e.trace_id, span_id: e.span_id, ...(typeof meta.eval_id === 'string' ? { eval_id: meta.eval_id } : {}) };
  }

  /**
   * Trace summaries, newest first (order=asc: oldest first), a page at a time. One indexed filter
   * picks the store list; the others are applied while reading (list-scan.ts), so a page may be
   * short with a next_cursor when they match rarely.
   */
  async list(
    q: {
      run_id?: string;
      session_id?: string;
      task_id?: string;
      agent_id?: string;
      status?: TraceStatus;
      since?: string;
      until?: string;
      order?: ListOrder;
      limit: number;
      cursor?: string;
    },
    scope: TenantScope = GLOBAL_SCOPE,
  ) {
    const index = q.run_id
      ? { name: 'run_id', value: q.run_id }
      : q.session_id
        ? { name: 'session_id', value: tenantKey(scope.tenant, q.session_id) }
        : q.task_id
          ? // The index holds the task's key: a tenant's own task of that id (a global key's: the
            // no-tenant namespace, as GET /background/tasks/{id} answers it).
            { name: 'task_id', value: bgKey(scope.tenant, q.task_id) }
          : undefined;
    const match = (r: TraceRecord): boolean =>
      visibleIn(scope, (r as { tenant?: string }).tenant) &&
      (!q.status || r.status === q.status) &&
      (!q.session_id || r.session_id === q.session_id) &&
      // Records show the client's id (older ones held the key).
      (!q.task_id || (r.task_id !== null && bgIdOf(r.task_id) === q.task_id)) &&
      (!q.agent_id || r.agent_id === q.agent_id) &&
      inTimeRange(r.started_at, q);
    const filtered = Boolean(
      !scope.all || q.status || q.agent_id || q.since || q.until || (q.run_id && (q.session_id || q.task_id)) || (q.session_id && q.task_id),
    );
    const repo = repos(this.store).traces;
    const page = await scanPage<TraceRecord>((lq) => repo.list<TraceRecord>(lq), {
      index,
      cursor: q.cursor ?? null,
      limit: q.limit,
      order: q.order ?? 'desc',
      match: filtered ? match : null,
    });
    const summaries = [];
    for (const r of page.items) summaries.push(summarizeTrace(buildTrace(r, await this.traceEvents(r.trace_id))));
    return { traces: summaries, count: summaries.length, next_cursor: page.next_cursor };
  }
}

/** The tenant an event was stamped with (run-host.ts puts it in its metadata); null: none. */
export const tenantOfEvent = (e: StoredEvent | undefined): string | null => {
  const t = (e?.metadata as { tenant?: unknown } | undefined)?.tenant;
  return typeof t === 'string' ? t : null;
};

/**
 * A page of events `scope` may see. Another tenant's events are skipped; a page they emptied is
 * followed by the next, so an empty page means the end (a replay turns to following on one).
 */
export async function readVisibleEvents(store: Store, query: EventQuery, scope: TenantScope): Promise<EventPage> {
  if (scope.all) return store.readEvents(query);
  let after = query.after ?? null;
  for (;;) {
    const page = await store.readEvents({ ...query, after });
    const events = page.events.filter((e) => visibleIn(scope, tenantOfEvent(e)));
    if (events.length > 0 || !page.next_cursor) return { events, next_cursor: page.next_cursor };
    after = page.next_cursor;
  }
}

function synthesize(traceId: string, events: StoredEvent[]): TraceRecord {
  const first = events[0];
  const last = events.at(-1)!;
  const terminal = /_(completed|failed|timeout|cancelled|skipped)$/.exec(last.event_type)?.[1];
  const status: TraceStatus =
    terminal === 'completed' || terminal === 'skipped'
      ? 'completed'
      : terminal === 'failed'
        ? 'failed'
        : terminal === 'timeout'
          ? 'timeout'
          : terminal === 'cancelled'
            ? 'cancelled'
            : 'running';
  const meta = (first.metadata ?? {}) as Record<string, string | null>;
  return {
    trace_id: traceId,
    parent_trace_id: null,
    run_id: first.run_id ?? meta.run_id ?? null,
    session_id: first.session_id ?? meta.session_id ?? null,
    task_id: first.task_id ?? meta.task_id ?? null,
    agent_id: meta.agent_id ?? null,
    status,
    started_at: first.timestamp,
    ended_at: status === 'running' ? null : last.timestamp,
  };
}
