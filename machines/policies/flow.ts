// Flow control decisions (docs/flow-control.md): which concurrency limit a run's key gets, the
// order waiting runs are admitted in, and the GCRA arithmetic of a model provider's rate limit.
// Pure: times arrive as arguments; src/flow/ keeps the state and does the store writes.

/** A concurrency key as a request or a task names it. */
export interface ConcurrencyRequest {
  key: string;
  limit: number;
}

/** `flow.concurrency` in the config: every key starting with `key_prefix` gets at most `limit`. */
export interface ConcurrencyRule {
  key_prefix: string;
  limit: number;
}

/**
 * The limit a key runs under (docs/contract.md §3.4): the longest matching config rule wins over
 * the request's limit; without one, the request's. A key already held with a lower limit keeps the
 * lower one (`held`: the limit stored with the key), so between requests the lowest limit wins.
 * Nothing changing it: `request` itself (a keyed run's options are then not copied per run:
 * src/runtime/run-flow.ts startKeyed).
 */
export function resolveConcurrency(request: ConcurrencyRequest, rules: readonly ConcurrencyRule[], held: number | null = null): ConcurrencyRequest {
  let rule: ConcurrencyRule | null = null;
  for (const r of rules) if (request.key.startsWith(r.key_prefix) && (!rule || r.key_prefix.length > rule.key_prefix.length)) rule = r;
  if (rule) return { key: request.key, limit: rule.limit };
  if (held === null || held >= request.limit) return request;
  return { key: request.key, limit: held };
}

/** A waiting run as the admission order sees it. */
export interface WaitingEntry {
  run_id: string;
  /** −100..100; higher goes first. */
  priority: number;
  /** Arrival order (enqueue time in ms, then a tie-breaking counter): equal priorities are FIFO. */
  enqueued_at: number;
  seq: number;
}

/** Negative when `a` is admitted before `b`: higher priority first, then arrival order. */
export function admissionOrder(a: WaitingEntry, b: WaitingEntry): number {
  if (a.priority !== b.priority) return b.priority - a.priority;
  if (a.enqueued_at !== b.enqueued_at) return a.enqueued_at - b.enqueued_at;
  return a.seq - b.seq;
}

/** Inserts `entry` into `list` (kept in admission order) after every entry that goes before it; returns its index. */
export function insertInOrder<T extends WaitingEntry>(list: T[], entry: T): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (admissionOrder(list[mid]!, entry) <= 0) lo = mid + 1;
    else hi = mid;
  }
  list.splice(lo, 0, entry);
  return lo;
}

/** A key's holders as stored: the runs admitted under it. */
export interface KeyHolder {
  run_id: string;
  /** When the slot was taken (ms): a holder whose run cannot be read is dropped only after a grace. */
  since: number;
  /** The limit the holder was admitted under (absent in records written before it was kept). */
  limit?: number;
}

export type SlotDecision = { take: true; holders: KeyHolder[] } | { take: false };

/**
 * Whether a key that `held` runs hold, the lowest limit they were admitted under being
 * `lowestHeld` (null: none, or none recorded one), has room for a newcomer asking for `limit`.
 * Between requests naming different limits for one key, the lowest wins: the key is full once it
 * holds as many runs as the lowest limit among the newcomer's and its holders'. Constant time:
 * src/flow/key-slots.ts MemoryKeySlots keeps the count and the limits per key, not a list to scan.
 */
export function keyHasRoom(held: number, limit: number, lowestHeld: number | null): boolean {
  return held < (lowestHeld !== null && lowestHeld < limit ? lowestHeld : limit);
}

/** keyHasRoom for a key's stored holders list (a shared store's record): `runId` already holding is let in. */
export function holdersHaveRoom(holders: readonly KeyHolder[], limit: number, runId: string): boolean {
  let lowest: number | null = null;
  for (const h of holders) {
    if (h.run_id === runId) return true;
    if (h.limit !== undefined && (lowest === null || h.limit < lowest)) lowest = h.limit;
  }
  return keyHasRoom(holders.length, limit, lowest);
}

/**
 * Whether `runId` may take a slot of a key held by `holders` under `limit` (already holding: yes,
 * unchanged), and the holders list then (a new list: the caller writes it back).
 */
export function takeKeySlot(holders: readonly KeyHolder[], limit: number, runId: string, now: number): SlotDecision {
  if (!holdersHaveRoom(holders, limit, runId)) return { take: false };
  if (holders.some((h) => h.run_id === runId)) return { take: true, holders: [...holders] };
  return { take: true, holders: [...holders, { run_id: runId, since: now, limit }] };
}

/** Longest key a run may name (ConcurrencySpec in src/schemas/runs.ts). */
const MAX_KEY_LENGTH = 256;

/**
 * A background task's key for one of its runs: `{metadata.<field>}` replaced by the task's
 * metadata field (a string, number or boolean); a field it lacks (or of another type) stays as
 * written, so such runs still share one key and its limit. Cut at 256 characters.
 */
export function renderTaskKey(template: string, metadata: Readonly<Record<string, unknown>>): string {
  const key = template.replace(/\{metadata\.([A-Za-z0-9_-]+)\}/g, (whole, field: string) => {
    const v = metadata[field];
    return typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean' ? String(v) : whole;
  });
  return key.slice(0, MAX_KEY_LENGTH);
}

// ---------------------------------------------------------------- model-provider rate limits (GCRA)

/**
 * A provider key's budget as the generic cell rate algorithm sees it: `tat` is the theoretical
 * arrival time of the next unit (ms). A request of `cost` units at `now` conforms when
 * `tat - burst <= now`; it then moves `tat` to `max(tat, now) + cost * interval`.
 */
export interface GcraLimit {
  /** Milliseconds per unit (60,000 / per-minute rate). */
  intervalMs: number;
  /** How far ahead of `now` the tat may run: the burst, in ms of allowance. */
  burstMs: number;
}

/**
 * The limit for `perMinute` units: one unit every 60 000 / perMinute ms and no burst beyond the
 * call itself (docs/contract.md §3.4 allows up to a tenth of a second's allowance plus one; none is
 * taken, so at 600/min the calls are 100 ms apart and no 1 s window, sliding, admits more than 10).
 */
export function gcraLimit(perMinute: number): GcraLimit {
  return { intervalMs: 60_000 / perMinute, burstMs: 0 };
}

export type GcraDecision = { ok: true; tat: number } | { ok: false; waitMs: number };

/**
 * One GCRA decision: a call conforms when `tat - burst <= now`, and then moves the tat by its cost.
 * A cost larger than a minute's allowance still conforms once the tat has come (never waits for
 * ever); the calls after it wait for what it took.
 */
export function gcraTake(tat: number, now: number, cost: number, limit: GcraLimit): GcraDecision {
  if (tat - limit.burstMs <= now) return { ok: true, tat: Math.max(tat, now) + cost * limit.intervalMs };
  return { ok: false, waitMs: Math.ceil(tat - limit.burstMs - now) };
}

/** Units of the budget in use at `now` (for the bucket-level gauge): 0 when idle. */
export function gcraLevel(tat: number, now: number, limit: GcraLimit): number {
  return Math.max(0, tat - now) / limit.intervalMs;
}
