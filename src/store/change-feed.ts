// The change feed's interface (what a store that several processes share offers, src/store/store.ts
// `changes`), apart from its implementations in src/store/changes.ts so that the store interface
// and the implementations do not import each other.
/** Channels agentd uses. Payloads are small JSON texts (PostgreSQL caps a NOTIFY payload at 8000 bytes). */
export const CHANGE_CHANNELS = {
  /** Events were appended: `{ o: instance, f: first cursor, l: last cursor }`. */
  events: 'agentd_events',
  /** A request for the owner of a live run: `{ o: instance, type: 'cancel' | 'bg_cancel', run_id }`. */
  control: 'agentd_control',
  /** A task or its schedule row changed: `{ o: instance, task_id }`. */
  tasks: 'agentd_tasks',
  /** A run's inbox was written (a steer, an interrupt request): `{ r: run_id }` (src/runtime/run-inbox.ts). */
  inbox: 'agentd_inbox',
  /** A concurrency key's slot freed, or a provider key was paused: `{ k: key }` / `{ p: provider key, u: until ms }` (src/flow/). */
  flow: 'agentd_flow',
} as const;
export type ChangeChannel = (typeof CHANGE_CHANNELS)[keyof typeof CHANGE_CHANNELS];

/** Largest payload a notification may carry (PostgreSQL's limit is 8000 bytes; keep a margin). */
export const MAX_CHANGE_PAYLOAD = 7900;

/**
 * The feed as it is now: `generation` counts its connections (a new one after every reconnect:
 * what was sent while it was down is lost), `sinceMs` is when this one started listening
 * (performance.now()). A listener that must not miss a notification compares generations.
 */
export interface FeedState {
  generation: number;
  sinceMs: number;
}

/**
 * What announces a round of event appends (StoreChanges.announceAppends): given the events of the
 * round, the notification's text before and after the round's cursor range, or null for none.
 */
export type AppendAnnouncer = (events: Array<Record<string, unknown>>) => { head: string; tail: string } | null;

export interface StoreChanges {
  /** Calls `fn` with the payload of every notification on `channel` (this process's own included). Returns the unsubscribe. */
  subscribe(channel: ChangeChannel, fn: (payload: string) => void): () => void;
  /** Sends a notification to every subscriber of every process. Never throws: a lost hint is covered by the sweeps. */
  notify(channel: ChangeChannel, payload: string): Promise<void>;
  /** Called with `true` each time the feed (re)connects: notifications sent while it was down are lost, so listeners catch up. */
  onReconnect(fn: () => void): () => void;
  /**
   * Optional: the store announces this process's event appends itself, on CHANGE_CHANNELS.events, in
   * the transaction that stores them (PostgreSQL: the group commit's round, src/store/pg-writer.ts),
   * so an announcement costs no transaction of its own: its payload is `head`, the round's cursor
   * range as `["first","last"]`, then `tail` (`announce`'s answer for the round's events). True when
   * the store does (the caller then sends no event notifications of its own); null stops it.
   */
  announceAppends?(announce: AppendAnnouncer | null): boolean;
  /** Null while the feed is not listening (connecting, reconnecting, closed): notifications may be missed. */
  listening(): FeedState | null;
  close(): Promise<void>;
}
