// Model-provider rate limits (docs/flow-control.md, docs/contract.md §3.4). One budget per
// provider key (provider + base URL + model: two agents on one key share it), smoothed by GCRA
// (machines/policies/flow.ts): requests per minute and tokens per minute, each its own cell
// rate. A call takes its budget before it is sent (tokens estimated from the prompt and its
// max_output_tokens, corrected by the reported usage after); over the limit it waits, in
// priority order, never fails for it (its run's timeout aborts the wait).
//
// A provider's 429 with Retry-After (or x-ratelimit-reset-*) pauses the key for every run,
// configured limit or not. Where the store is shared by several instances, the budget and the
// pause live in one small record per key (kind meta, id `flow_rate:<key>`) written by
// compare-and-set, and a pause is also announced on the change feed's `flow` channel so that
// instances without a configured limit (which read nothing per call) learn it. On an embedded
// store the state lives in this process only: no store round per call.
import { gcraLevel, gcraLimit, gcraTake, insertInOrder, type GcraLimit, type WaitingEntry } from '../../machines/policies/flow.js';
import type { Clock } from '../clock.js';
import { casUpdate } from '../store/cas.js';
import { CHANGE_CHANNELS } from '../store/change-feed.js';
import { isSharedStore } from '../store/changes.js';
import { repos } from '../store/repos/index.js';
import type { Store } from '../store/store.js';

export interface RateLimitSpec {
  requests_per_minute?: number;
  tokens_per_minute?: number;
}

/** Why a call waited: its key's configured limit, or a provider's Retry-After. */
export type ThrottleReason = 'rate_limit' | 'retry_after';

export interface ThrottleNotice {
  waitMs: number;
  reason: ThrottleReason;
  /** When the call may go (ms since the epoch), as far as known now. */
  until: number;
}

interface RateState {
  req_tat: number;
  tok_tat: number;
  paused_until: number;
}

interface Waiter extends WaitingEntry {
  cost: number;
  signal?: AbortSignal;
  onThrottled?: (n: ThrottleNotice) => void;
  notified: boolean;
  resolve: () => void;
  reject: (err: unknown) => void;
}

interface KeyState {
  limits: { req: GcraLimit | null; tok: GcraLimit | null };
  /** The process's view (the whole truth on an embedded store). */
  state: RateState;
  waiting: Waiter[];
  pumping: boolean;
}

export interface RateLimiterOptions {
  /** Resolves after ms (rejects when `signal` aborts). Tests inject one. */
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Each admitted call (for metrics and tests: the moment agentd lets a call go). */
  onAdmit?: (key: string, waitedMs: number, throttled: boolean) => void;
  onError?: (site: string, err: unknown) => void;
}

const idOf = (key: string): string => `flow_rate:${key}`;
const CAS = { attempts: 50, baseDelayMs: 1, maxDelayMs: 10, retryOn: ['stale_version', 'conflict'] as const };

export class RateLimiter {
  private readonly keys = new Map<string, KeyState>();
  /** Pauses of keys without a configured limit (a 429 of a provider nobody limits). */
  private readonly pauses = new Map<string, number>();
  private seq = 0;
  private readonly shared: boolean;
  private unsubscribe: (() => void) | null = null;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly opts: RateLimiterOptions,
  ) {
    this.shared = isSharedStore(store);
    this.unsubscribe =
      store.changes?.subscribe(CHANGE_CHANNELS.flow, (payload) => {
        try {
          const p = JSON.parse(payload) as { p?: unknown; u?: unknown };
          if (typeof p.p === 'string' && typeof p.u === 'number') this.pauseHere(p.p, p.u);
        } catch {
          // not ours, or malformed: a hint only
        }
      }) ?? null;
  }

  close(): void {
    this.unsubscribe?.();
  }

  /** The key's pause end if it is paused now (the fast path of a call without a limit: one map read). */
  pausedUntil(key: string): number | null {
    const until = Math.max(this.pauses.get(key) ?? 0, this.keys.get(key)?.state.paused_until ?? 0);
    return until > this.clock.now() ? until : null;
  }

  /**
   * Waits until a call of `tokens` (estimated) may go on `key` under `limit` (null: only a pause
   * can hold it). Returns the correction to call with the tokens the call really used.
   */
  async admit(
    key: string,
    limit: RateLimitSpec | null,
    tokens: number,
    o: { priority?: number; signal?: AbortSignal; onThrottled?: (n: ThrottleNotice) => void } = {},
  ): Promise<(usedTokens: number) => void> {
    if (!limit || (!limit.requests_per_minute && !limit.tokens_per_minute)) {
      // No limit: only a provider's pause holds the call.
      for (let until = this.pausedUntil(key); until !== null; until = this.pausedUntil(key)) {
        const waitMs = until - this.clock.now();
        o.onThrottled?.({ waitMs, reason: 'retry_after', until });
        await this.opts.sleep(waitMs, o.signal);
      }
      this.opts.onAdmit?.(key, 0, false);
      return () => {};
    }
    const ks = this.keyState(key, limit);
    const started = this.clock.now();
    await new Promise<void>((resolve, reject) => {
      const w: Waiter = {
        run_id: '',
        priority: o.priority ?? 0,
        enqueued_at: started,
        seq: this.seq++,
        cost: Math.max(1, Math.ceil(tokens)),
        signal: o.signal,
        onThrottled: o.onThrottled,
        notified: false,
        resolve,
        reject,
      };
      insertInOrder(ks.waiting, w);
      o.signal?.addEventListener(
        'abort',
        () => {
          const i = ks.waiting.indexOf(w);
          if (i > 0) {
            ks.waiting.splice(i, 1);
            reject(o.signal!.reason ?? new Error('aborted'));
          }
          // the head is the pump's: its sleep rejects with the same signal
        },
        { once: true },
      );
      this.pump(key, ks);
    });
    const waited = this.clock.now() - started;
    this.opts.onAdmit?.(key, waited, waited > 0);
    const estimate = Math.max(1, Math.ceil(tokens));
    return (used) => {
      if (!ks.limits.tok || !Number.isFinite(used)) return;
      const delta = Math.ceil(used) - estimate;
      if (delta !== 0) void this.correct(key, ks, delta).catch((err) => this.opts.onError?.('flow.rate_correct', err));
    };
  }

  /** A provider answered 429 with a retry time: every call on `key` waits until `untilMs`, in every instance. */
  async pause(key: string, untilMs: number): Promise<void> {
    this.pauseHere(key, untilMs);
    if (!this.shared) return;
    void this.store.changes?.notify(CHANGE_CHANNELS.flow, JSON.stringify({ p: key, u: untilMs }));
    const ks = this.keys.get(key);
    if (ks)
      await this.write(key, (s) => ({ ...s, paused_until: Math.max(s.paused_until, untilMs) })).catch((err) => this.opts.onError?.('flow.rate_pause', err));
  }

  /** Units in use now, per key with a limit (the bucket-level gauge): requests and tokens. */
  levels(): Array<{ key: string; requests: number; tokens: number; paused: boolean }> {
    const now = this.clock.now();
    const limited = [...this.keys.entries()].map(([key, ks]) => ({
      key,
      requests: ks.limits.req ? gcraLevel(ks.state.req_tat, now, ks.limits.req) : 0,
      tokens: ks.limits.tok ? gcraLevel(ks.state.tok_tat, now, ks.limits.tok) : 0,
      paused: this.pausedUntil(key) !== null,
    }));
    // Keys without a limit show only while a provider's pause holds them.
    const paused = [...this.pauses.keys()].filter((k) => this.pausedUntil(k) !== null).map((key) => ({ key, requests: 0, tokens: 0, paused: true }));
    return [...limited, ...paused];
  }

  private pauseHere(key: string, untilMs: number): void {
    const ks = this.keys.get(key);
    if (ks) ks.state.paused_until = Math.max(ks.state.paused_until, untilMs);
    else this.pauses.set(key, Math.max(this.pauses.get(key) ?? 0, untilMs));
  }

  private keyState(key: string, limit: RateLimitSpec): KeyState {
    let ks = this.keys.get(key);
    const limits = {
      req: limit.requests_per_minute ? gcraLimit(limit.requests_per_minute) : null,
      tok: limit.tokens_per_minute ? gcraLimit(limit.tokens_per_minute) : null,
    };
    if (!ks) {
      ks = { limits, state: { req_tat: 0, tok_tat: 0, paused_until: this.pauses.get(key) ?? 0 }, waiting: [], pumping: false };
      this.pauses.delete(key);
      this.keys.set(key, ks);
    } else ks.limits = limits; // the newest configuration of the key wins
    return ks;
  }

  /** Lets the key's waiters go one at a time, each as soon as its budget allows. */
  private pump(key: string, ks: KeyState): void {
    if (ks.pumping) return;
    ks.pumping = true;
    void (async () => {
      try {
        while (ks.waiting.length > 0) {
          const head = ks.waiting[0]!;
          if (head.signal?.aborted) {
            ks.waiting.shift();
            head.reject(head.signal.reason ?? new Error('aborted'));
            continue;
          }
          let verdict: { ok: true } | { ok: false; waitMs: number; reason: ThrottleReason };
          try {
            verdict = await this.take(key, ks, head.cost);
          } catch (err) {
            // The store failed: the call goes (a limit is never a reason to fail a run) and the error is reported.
            this.opts.onError?.('flow.rate_take', err);
            verdict = { ok: true };
          }
          if (verdict.ok) {
            ks.waiting.shift();
            head.resolve();
            continue;
          }
          if (!head.notified || verdict.reason === 'retry_after') {
            head.notified = true;
            head.onThrottled?.({ waitMs: verdict.waitMs, reason: verdict.reason, until: this.clock.now() + verdict.waitMs });
          }
          try {
            await this.opts.sleep(verdict.waitMs, head.signal);
          } catch (err) {
            ks.waiting.shift();
            head.reject(err);
          }
        }
      } finally {
        ks.pumping = false;
      }
    })();
  }

  /** One admission decision for `cost` tokens (and one request): taken (state moved), or how long to wait. */
  private async take(key: string, ks: KeyState, cost: number): Promise<{ ok: true } | { ok: false; waitMs: number; reason: ThrottleReason }> {
    let verdict: { ok: true } | { ok: false; waitMs: number; reason: ThrottleReason } = { ok: true };
    const decide = (s: RateState): RateState | null => {
      const now = this.clock.now();
      if (s.paused_until > now) {
        verdict = { ok: false, waitMs: s.paused_until - now, reason: 'retry_after' };
        return null;
      }
      const req = ks.limits.req ? gcraTake(s.req_tat, now, 1, ks.limits.req) : null;
      const tok = ks.limits.tok ? gcraTake(s.tok_tat, now, cost, ks.limits.tok) : null;
      const wait = Math.max(req && !req.ok ? req.waitMs : 0, tok && !tok.ok ? tok.waitMs : 0);
      if (wait > 0) {
        verdict = { ok: false, waitMs: wait, reason: 'rate_limit' };
        return null;
      }
      verdict = { ok: true };
      return { req_tat: req?.ok ? req.tat : s.req_tat, tok_tat: tok?.ok ? tok.tat : s.tok_tat, paused_until: s.paused_until };
    };
    if (!this.shared) {
      const next = decide(ks.state);
      if (next) ks.state = next;
      return verdict;
    }
    await this.write(key, decide, ks);
    return verdict;
  }

  private async correct(key: string, ks: KeyState, deltaTokens: number): Promise<void> {
    const lim = ks.limits.tok;
    if (!lim) return;
    const move = (s: RateState): RateState => ({ ...s, tok_tat: Math.max(this.clock.now(), s.tok_tat + deltaTokens * lim.intervalMs) });
    if (!this.shared) {
      ks.state = move(ks.state);
      return;
    }
    await this.write(key, move, ks);
  }

  /** The shared record's CAS loop: `next` null leaves it as it is (the process's view still learns it). */
  private async write(key: string, next: (s: RateState) => RateState | null, ks = this.keys.get(key)): Promise<void> {
    const meta = repos(this.store).meta;
    await casUpdate(async () => {
      const cur = await meta.get<RateState>(idOf(key));
      const state = cur?.value ?? { req_tat: 0, tok_tat: 0, paused_until: 0 };
      const value = next(state);
      if (ks) ks.state = value ?? state;
      if (!value) return;
      if (cur) await meta.update(idOf(key), value, cur.version);
      else await meta.create(idOf(key), value);
    }, CAS);
  }
}
