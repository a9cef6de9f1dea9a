// A run's inbox: steer messages and interrupt requests that people send to a
// run, kept durably in one record per run (kind `run_inbox`) until the run reaches a step
// boundary and takes them (machines/run.machine.ts, state `boundary`).
//
// Only the HTTP side writes the inbox (compare-and-swap appends); the run only reads it. What the
// run took is remembered in its own saved context (`steered`, `interrupt_handled`), saved in the
// same snapshot as the conversation the messages joined, so a read replayed after a crash skips
// what was already delivered and delivers what was not: exactly once, without a second write.
//
// Most runs are never steered, so a boundary skips the read when it knows the inbox is empty
// (mayHold). On a store several instances share, the writer of an inbox (any instance) notifies
// on the change feed (channel `inbox`), sent as its write is queued (a notification earlier than
// the write only makes a read early: the flag stays set for the run's life); a run's instance, listening without a break since before the run
// could be steered, so hears of every inbox write of the run, and reads only the inboxes it heard
// of. Whenever that cannot be known (the feed reconnecting, or reconnected since the run was first
// seen or just before) it reads, as every boundary did before.
import type { InboxMessage, InboxRead } from '../../machines/run.machine.js';
import { domainError } from '../errors.js';
import { newId } from '../ids.js';
import { CHANGE_CHANNELS, type StoreChanges } from '../store/change-feed.js';
import type { Store } from '../store/store.js';
import { casUpdate, CasExhaustedError } from '../store/cas.js';
import { repos } from '../store/repos/index.js';
import { swallow } from '../telemetry/swallowed.js';

/** Most steer messages one run accepts over its life (the record stays small and bounded). */
export const MAX_STEERS_PER_RUN = 100;

/**
 * A run first seen this soon after the change feed (re)connected reads its inbox at every
 * boundary: it may have become steerable (status `running`) while the feed was down, and a
 * notification of that time is lost. A run's first boundary follows its start by milliseconds;
 * this margin is far wider.
 */
export const FEED_SETTLE_MS = 10_000;

/**
 * Most inbox writes remembered for runs this process has not seen at a step boundary (shared
 * store). Every instance hears every steer, and most are for runs other instances host, which
 * never end here (forget): without a bound that set would grow for the process's life. The
 * oldest is dropped first; a run of this process is first seen milliseconds after it started,
 * long before 10,000 other steers could be heard.
 */
export const MAX_EARLY_HINTS = 10_000;

export interface SteerEntry {
  message_id: string;
  sender: string;
  /** As the sender wrote it. */
  message: string;
  queued_at: string;
}

export interface InboxValue {
  run_id: string;
  messages: SteerEntry[];
  /** The newest interrupt request; the run stops once for each id. */
  interrupt: { interrupt_id: string; requested_at: string; requested_by: string | null } | null;
  updated_at: string;
}

/**
 * The user message the model reads for a steer: from the named sender, marked as arriving while
 * the agent worked. Never a system message, so a steer cannot speak with the operator's voice.
 */
export function frameSteer(sender: string, message: string): string {
  return `[Message from ${sender}, sent while you were working on this request]\n${message}`;
}

export class RunInbox {
  /**
   * Runs that may have something in their inbox, as far as this process knows. On a store only
   * one process can open (LevelDB, memory), every write goes through this process, so a run not
   * in the set has an empty inbox and its boundaries need no read. Resumed and recovered runs
   * are added (their inbox may hold what an earlier process accepted).
   */
  private readonly maybe = new Set<string>();
  private readonly shared: boolean;
  /** Shared store: the feed generation each run was first seen in (a different one now: it may have missed a notification). */
  private readonly seen = new Map<string, number>();
  /** Shared store: runs written to before this process saw them at a boundary (bounded, oldest first). */
  private readonly early = new Set<string>();
  private feed: StoreChanges | null = null;

  constructor(
    private readonly store: Store,
    private readonly now: () => string,
  ) {
    this.shared = store.capabilities.sharedByInstances;
    // Now, before any run of this process can be steered: a notification nobody hears is lost.
    this.changes();
  }

  /** The store's change feed, subscribed to the `inbox` channel at once (or on first use, when the store was opened later). */
  private changes(): StoreChanges | null {
    if (!this.feed && this.store.changes) {
      this.feed = this.store.changes;
      this.feed.subscribe(CHANGE_CHANNELS.inbox, (payload) => {
        const runId = runOf(payload);
        if (runId) this.hint(runId);
      });
    }
    return this.feed;
  }

  /** The run's inbox may hold messages (resumed or recovered runs: an earlier process may have written it). */
  mark(runId: string): void {
    this.maybe.add(runId);
  }

  /**
   * A run this process is about to create (RunStarter.start, before its creating write is issued).
   * On a shared store whose feed listens now, the run is seen now, in the feed's current
   * generation, without the settling margin (FEED_SETTLE_MS): every write to its inbox comes after
   * a read that found the run stored (RunDecisions.steer, interrupt), so after this moment, and a
   * notification committed while the feed listens reaches it. A reconnect since is a new
   * generation, and the run reads from then on as any (mayHold).
   */
  born(runId: string): void {
    if (!this.shared || this.seen.has(runId)) return;
    const state = this.changes()?.listening() ?? null;
    if (state) this.seen.set(runId, state.generation);
  }

  /** A run that ended: forget the hint (its record stays, for the record). */
  forget(runId: string): void {
    this.maybe.delete(runId);
    this.seen.delete(runId);
    this.early.delete(runId);
  }

  /** The run's inbox was written (here, or heard on the change feed). */
  private hint(runId: string): void {
    // One process owns the store, or a run seen here: it ends here, and forget() drops it.
    if (!this.shared || this.seen.has(runId) || this.maybe.has(runId)) {
      this.maybe.add(runId);
      return;
    }
    this.early.delete(runId); // re-inserted: the newest goes last
    this.early.add(runId);
    if (this.early.size > MAX_EARLY_HINTS) this.early.delete(this.early.values().next().value as string);
  }

  /**
   * Whether the run's inbox may hold something: once this process wrote it or heard (change feed)
   * that another did, or it is a resumed or recovered run; on a shared store also whenever the
   * feed cannot vouch for having heard everything (see the header). False: a read would find
   * nothing, so the run machine skips it (guard `inboxMaybe`).
   */
  mayHold(runId: string): boolean {
    if (this.maybe.has(runId)) return true;
    if (!this.shared) return false;
    if (this.early.delete(runId)) {
      this.maybe.add(runId);
      return true;
    }
    const state = this.changes()?.listening() ?? null;
    if (!state) return true;
    const gen = this.seen.get(runId);
    if (gen === undefined) {
      if (performance.now() - state.sinceMs < FEED_SETTLE_MS) {
        this.maybe.add(runId);
        return true;
      }
      this.seen.set(runId, state.generation);
      return false;
    }
    if (gen === state.generation) return false;
    // The feed reconnected since: what was sent meanwhile is lost, so this run reads from now on.
    this.maybe.add(runId);
    return true;
  }

  /** What the run has not taken yet, framed for the model. */
  async read(runId: string, steered: readonly string[], interruptHandled: string | null): Promise<InboxRead> {
    if (!this.mayHold(runId)) return { messages: [], interrupt_id: null };
    const rec = await repos(this.store).runInbox.get<InboxValue>(runId);
    if (!rec) return { messages: [], interrupt_id: null };
    const messages: InboxMessage[] = rec.value.messages
      .filter((m) => !steered.includes(m.message_id))
      .map((m) => ({ message_id: m.message_id, content: frameSteer(m.sender, m.message) }));
    const id = rec.value.interrupt?.interrupt_id ?? null;
    return { messages, interrupt_id: id !== null && id !== interruptHandled ? id : null };
  }

  async get(runId: string): Promise<InboxValue | null> {
    return (await repos(this.store).runInbox.get<InboxValue>(runId))?.value ?? null;
  }

  /** Appends a steer message; 409 once the run has had MAX_STEERS_PER_RUN. */
  async queueSteer(runId: string, sender: string, message: string): Promise<SteerEntry> {
    const entry: SteerEntry = { message_id: newId('steer'), sender, message, queued_at: this.now() };
    await this.change(runId, (v) => {
      if (v.messages.length >= MAX_STEERS_PER_RUN) throw domainError('AGT_ERR_STEER_LIMIT', [runId, MAX_STEERS_PER_RUN]);
      return { ...v, messages: [...v.messages, entry] };
    });
    return entry;
  }

  /** Takes a queued message back (the run ended before it reached a boundary). */
  async withdrawSteer(runId: string, messageId: string): Promise<void> {
    await this.change(runId, (v) => ({ ...v, messages: v.messages.filter((m) => m.message_id !== messageId) })).catch(
      swallow('run_inbox.withdraw_steer', { run_id: runId, message_id: messageId }),
    );
  }

  /** Asks the run to stop at its next step boundary; returns the request's id. */
  async requestInterrupt(runId: string, by: string | null): Promise<string> {
    const interrupt = { interrupt_id: newId('interrupt'), requested_at: this.now(), requested_by: by };
    await this.change(runId, (v) => ({ ...v, interrupt }));
    return interrupt.interrupt_id;
  }

  private async change(runId: string, f: (v: InboxValue) => InboxValue): Promise<void> {
    this.hint(runId);
    try {
      await casUpdate(
        async () => {
          const cur = await repos(this.store).runInbox.get<InboxValue>(runId);
          // Sent as the write below is queued: an instance hears of it no later than about when
          // the write commits (the run keeps reading from then on).
          void this.changes()?.notify(CHANGE_CHANNELS.inbox, JSON.stringify({ r: runId }));
          if (!cur) {
            const value = f({ run_id: runId, messages: [], interrupt: null, updated_at: this.now() });
            await repos(this.store).runInbox.create(runId, { ...value, updated_at: this.now() });
          } else {
            const value = f(cur.value);
            await repos(this.store).runInbox.update(runId, { ...value, updated_at: this.now() }, cur.version);
          }
        },
        { retryOn: ['stale_version', 'conflict'] },
      );
    } catch (err) {
      if (err instanceof CasExhaustedError) throw domainError('AGT_ERR_CONCURRENT_UPDATE', [`the inbox of run ${runId}`]);
      throw err;
    }
  }
}

/** The run id of an `inbox` notification, or null. */
function runOf(payload: string): string | null {
  try {
    const msg = JSON.parse(payload) as { r?: unknown };
    return typeof msg.r === 'string' ? msg.r : null;
  } catch {
    return null;
  }
}

// The value type of kind `run_inbox` for the typed repositories (src/store/repos/values.ts).
declare module '../store/repos/values.js' {
  interface RecordValues {
    run_inbox: InboxValue;
  }
}
