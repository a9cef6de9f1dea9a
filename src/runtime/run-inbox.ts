// A run's inbox (issue 14 item 2): steer messages and interrupt requests that people send to a
// run, kept durably in one record per run (kind `run_inbox`) until the run reaches a step
// boundary and takes them (machines/run.machine.ts, state `boundary`).
//
// Only the HTTP side writes the inbox (compare-and-swap appends); the run only reads it. What the
// run took is remembered in its own saved context (`steered`, `interrupt_handled`), saved in the
// same snapshot as the conversation the messages joined, so a read replayed after a crash skips
// what was already delivered and delivers what was not: exactly once, without a second write.
import type { InboxMessage, InboxRead } from '../../machines/run.machine.js';
import { conflict, domainError } from '../errors.js';
import { newId } from '../ids.js';
import type { Store } from '../store/store.js';
import { casUpdate, CasExhaustedError } from '../store/cas.js';
import { repos } from '../store/repos/index.js';
import { swallow } from '../telemetry/swallowed.js';

/** Most steer messages one run accepts over its life (the record stays small and bounded). */
export const MAX_STEERS_PER_RUN = 100;

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

  constructor(
    private readonly store: Store,
    private readonly now: () => string,
  ) {
    this.shared = store.capabilities.sharedByInstances;
  }

  /** The run's inbox may hold messages (resumed or recovered runs: an earlier process may have written it). */
  mark(runId: string): void {
    this.maybe.add(runId);
  }

  /** A run that ended: forget the hint (its record stays, for the record). */
  forget(runId: string): void {
    this.maybe.delete(runId);
  }

  /**
   * Whether the run's inbox may hold something: always on a store other processes share; else
   * only once this process wrote it, or it is a resumed or recovered run. False: a read would
   * find nothing, so the run machine skips it (guard `inboxMaybe`).
   */
  mayHold(runId: string): boolean {
    return this.shared || this.maybe.has(runId);
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
    this.maybe.add(runId);
    try {
      await casUpdate(
        async () => {
          const cur = await repos(this.store).runInbox.get<InboxValue>(runId);
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

// The value type of kind `run_inbox` for the typed repositories (src/store/repos/values.ts).
declare module '../store/repos/values.js' {
  interface RecordValues {
    run_inbox: InboxValue;
  }
}
