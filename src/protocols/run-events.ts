// One run as a stream of what happened, for the protocol adapters (src/protocols/*): the same run
// POST /run starts (src/http/runs.ts), its stored telemetry events in order, its live text deltas
// (only for a run this request started: deltas are never stored), then how it settled. An adapter
// turns these into its own frames; it keeps no run state of its own.
import { newId } from '../ids.js';
import { RunStream } from '../runtime/run-stream.js';
import type { RunRecord } from '../runtime/run-record.js';
import type { SessionPolicy } from '../runtime/runs.js';
import type { StartOptions } from '../runtime/run-types.js';
import type { StoredEvent } from '../store/store.js';
import { repos } from '../store/repos/index.js';
import { tenantKey } from '../runtime/tenancy.js';
import type { AppDeps } from '../http/deps.js';
import type { SseChannel, SseFrame } from '../http/sse.js';
import { isRefusal, swallow } from '../telemetry/swallowed.js';

export type RunItem =
  | { kind: 'event'; event: StoredEvent }
  | { kind: 'delta'; text: string }
  /** The run ended or waits for a person (its record says which). */
  | { kind: 'settled'; record: RunRecord }
  /** The service failed (the run could not be followed to its end). */
  | { kind: 'failed'; message: string };

// The RunStream's own frames for how the run settled (no telemetry event type starts with '#').
const SETTLED = '#settled';
const FAILED = '#failed';

export interface StartRunInput {
  query: string;
  session_id: string | null;
  agent_id?: string | null;
  session_policy?: SessionPolicy;
  /** The run whose turn this one replaces (a regenerated answer: StartOptions.replaces_run_id). */
  replaces_run_id?: string;
  /** A run id reserved for it (an Idempotency-Key's); default: a new one. */
  run_id?: string;
  /** The request's concurrency key and priority (flowOfHeaders: src/protocols/flow-headers.ts). */
  concurrency?: StartOptions['concurrency'];
  priority?: number;
  /** The tenant the request acts in (src/http/tenancy.ts tenantOf): the run and its session are its. */
  tenant?: string | null;
  /** StartOptions.context: the client application's context for this run (AG-UI `context`). */
  context?: string;
  /** StartOptions.metadata: stored on the run (AG-UI `state`, `forwardedProps` when small). */
  metadata?: Record<string, unknown>;
}

export interface StartedRunItems {
  run_id: string;
  session_id: string;
  trace_id: string;
  /** Items go to `sink` from now on (those that came before first): call it after the adapter's own first frame. */
  open(sink: (item: RunItem) => void): void;
  /** Stops delivering items (the reader went away); the run goes on. */
  detach(): void;
}

/**
 * Starts a run as POST /run does and hands `sink` its items in order: events and deltas as they
 * happen (deltas after the events emitted before them: src/runtime/run-stream.ts), then one
 * `settled` or `failed`. Resolves once the run exists; rejects (with the domain error) when it
 * was not started, before any item went out.
 */
export async function startRunItems(deps: AppDeps, input: StartRunInput): Promise<StartedRunItems> {
  const { runtime } = deps;
  const run_id = input.run_id ?? newId('run');
  const stream = new RunStream();
  stream.forRun(run_id);
  let detached = false;
  const unsubscribe = runtime.bus.subscribe({ run_id }, (ev) => stream.event(ev));
  const detach = (): void => {
    detached = true;
    unsubscribe();
    stream.drop();
  };
  let started;
  try {
    started = await runtime.runs.start(input.query, input.session_id, {
      run_id,
      run_id_is_new: input.run_id === undefined,
      ...(input.agent_id != null ? { agent_id: input.agent_id } : {}),
      ...(input.session_policy ? { session_policy: input.session_policy } : {}),
      ...(input.replaces_run_id ? { replaces_run_id: input.replaces_run_id } : {}),
      ...(input.concurrency ? { concurrency: input.concurrency } : {}),
      ...(input.priority !== undefined ? { priority: input.priority } : {}),
      ...(input.tenant ? { tenant: input.tenant } : {}),
      ...(input.context ? { context: input.context } : {}),
      ...(input.metadata ? { metadata: input.metadata } : {}),
      onDelta: (text, sequence, afterEvent) => stream.delta(text, sequence, afterEvent),
    });
  } catch (err) {
    unsubscribe();
    throw err;
  }
  // Frames wait in the RunStream until the adapter has sent its own first frame and opens it.
  const open = (sink: (item: RunItem) => void): void =>
    stream.open((f) => {
      if (detached) return;
      if (f.event === 'delta') sink({ kind: 'delta', text: (f.data as { text: string }).text });
      else if (f.event === SETTLED) sink({ kind: 'settled', record: f.data as RunRecord });
      else if (f.event === FAILED) sink({ kind: 'failed', message: String(f.data) });
      else sink({ kind: 'event', event: f.data as StoredEvent });
    });
  void started.settled.then(
    (record) => {
      unsubscribe();
      stream.releaseAll();
      stream.push({ event: SETTLED, data: record });
    },
    (err: unknown) => {
      unsubscribe();
      stream.push({ event: FAILED, data: String((err as Error)?.message ?? err) });
    },
  );
  return { run_id, session_id: started.session_id, trace_id: started.trace_id, open, detach };
}

export interface FollowOptions {
  /** Only events after this cursor (null: from the run's first event). */
  after: string | null;
  /**
   * The run has settled only once its trace differs from this one (a decision's resume starts a
   * new trace segment): a decided run still reads `awaiting_*` until its resume claims it.
   */
  settledAfterTrace?: string | null;
  signal: AbortSignal;
}

const settled = (r: RunRecord, afterTrace: string | null | undefined): boolean =>
  r.status !== 'running' && (afterTrace == null || r.trace_id !== afterTrace || r.status === 'cancelled' || r.status === 'failed');

/**
 * Follows a stored run on whichever instance it executes: its events from the store (after
 * `after`), live as they are published, then one `settled` (or `failed`). `sink` may return a
 * promise to pace the reading. Bounded by server.request_timeout_seconds: past it, `failed`.
 */
export async function followRunItems(deps: AppDeps, runId: string, opts: FollowOptions, sink: (item: RunItem) => void | Promise<void>): Promise<void> {
  const { runtime, store } = deps;
  const deadline = Date.now() + deps.config.server.request_timeout_seconds * 1000;
  let wake: (() => void) | null = null;
  const unsubscribe = runtime.bus.subscribe({ run_id: runId }, () => wake?.());
  const offSettled = runtime.runs.onSettled((r) => {
    if (r.run_id === runId) wake?.();
  });
  const onAbort = (): void => wake?.();
  opts.signal.addEventListener('abort', onAbort, { once: true });
  let after = opts.after;
  const drain = async (): Promise<boolean> => {
    for (;;) {
      const page = await store.readEvents({ filters: { run_id: runId }, after, limit: 200 });
      for (const event of page.events) {
        if (opts.signal.aborted) return false;
        after = event.cursor;
        await sink({ kind: 'event', event });
      }
      if (!page.next_cursor || page.events.length === 0) return !opts.signal.aborted;
    }
  };
  try {
    for (;;) {
      if (!(await drain())) return;
      const rec = await repos(store).runs.get<RunRecord>(runId);
      if (!rec) return void (await sink({ kind: 'failed', message: `run ${runId} no longer exists` }));
      if (settled(rec.value, opts.settledAfterTrace)) {
        // Its events were stored before the record said so: one more read has them all.
        if (!(await drain())) return;
        return void (await sink({ kind: 'settled', record: rec.value }));
      }
      if (Date.now() > deadline) return void (await sink({ kind: 'failed', message: `run ${runId} is still running; follow it at GET /runs/${runId}` }));
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 1000);
        wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      wake = null;
    }
  } catch (err) {
    if (!opts.signal.aborted) await sink({ kind: 'failed', message: String((err as Error)?.message ?? err) });
  } finally {
    unsubscribe();
    offSettled();
    opts.signal.removeEventListener('abort', onAbort);
  }
}

/** The cursor of the run's last stored event (null: none yet): what a decision's stream follows after. */
export async function lastEventCursor(deps: AppDeps, runId: string): Promise<string | null> {
  let after: string | null = null;
  for (;;) {
    const page = await deps.store.readEvents({ filters: { run_id: runId }, after, limit: 1000 });
    if (page.events.length > 0) after = page.events[page.events.length - 1].cursor;
    if (!page.next_cursor || page.events.length === 0) return after;
  }
}

/**
 * The session's newest run that `match` accepts, on any instance (the store's session index,
 * oldest first: every page is read). The session id is `tenant`'s (the index holds the session
 * keys of src/runtime/tenancy.ts): another tenant's session of that id is not read.
 */
export async function lastRunOfSession(
  deps: AppDeps,
  sessionId: string,
  match: (r: RunRecord) => boolean,
  tenant: string | null = null,
): Promise<RunRecord | null> {
  let cursor: string | null = null;
  let found: RunRecord | null = null;
  for (;;) {
    const page: { items: Array<{ value: RunRecord }>; next_cursor: string | null } = await repos(deps.store).runs.list<RunRecord>({
      index: { name: 'session_id', value: tenantKey(tenant, sessionId) },
      cursor,
      limit: 200,
    });
    for (const item of page.items) if (match(item.value)) found = item.value;
    if (!page.next_cursor) return found;
    cursor = page.next_cursor;
  }
}

export interface FollowToChannel {
  /** Tag of swallowed failures (`ai_sdk`, `ag_ui`). */
  protocol: string;
  /** Frames before the run's items (the protocol's own opening). */
  first: SseFrame[];
  /** The protocol's frames for one item of the run. */
  framesOf(item: RunItem): Iterable<SseFrame>;
  /** A frame after the last item, however the follow ended (the AI SDK's `[DONE]`). */
  last?: SseFrame;
  /** Closing the stream cancels the run (as closing POST /run does); else it only detaches. */
  cancelOnClose: boolean;
  after: string | null;
  settledAfterTrace: string | null;
}

/**
 * A stored run (on any instance) on an open SSE channel, from `o.after` until it settles: the
 * streamed chat protocols' answer to a decision and to a reconnect. The follow stops when the
 * reader goes or is dropped (src/http/sse.ts) and at shutdown (Runtime.trackStream).
 */
export async function followOnChannel(deps: AppDeps, ch: SseChannel, run: Pick<RunRecord, 'run_id'>, o: FollowToChannel): Promise<void> {
  const abort = new AbortController();
  ch.onDropped(() => abort.abort());
  ch.onClientClose(() => {
    abort.abort();
    if (o.cancelOnClose)
      void deps.runtime.runs.cancel(run.run_id, { onlyIfLive: true }).catch(swallow(`${o.protocol}.cancel_on_client_close`, { run_id: run.run_id }, isRefusal));
  });
  const untrack = deps.runtime.trackStream(() => abort.abort());
  for (const f of o.first) ch.push(f);
  const write = async (item: RunItem): Promise<void> => {
    for (const f of o.framesOf(item)) {
      const room = ch.send(f);
      if (room) await room;
    }
  };
  void followRunItems(deps, run.run_id, { after: o.after, settledAfterTrace: o.settledAfterTrace, signal: abort.signal }, write)
    .catch(swallow(`${o.protocol}.follow`, { run_id: run.run_id }))
    .finally(() => {
      untrack();
      if (o.last) ch.push(o.last);
      ch.close();
    });
  await ch.run();
}
