// Idempotency-Key.
//
// A key is remembered per caller (the API key's name, or `anonymous` when auth is off) for
// `idempotency.ttl_seconds`, in the store (record kind `idempotency`), so it holds across a restart
// and across instances sharing a store. The record is written BEFORE the work starts:
//
//  - routes that start a run (POST /run, /run/sync, /background/tasks/{id}/run) reserve the run id
//    in the record; the run is then started with exactly that id. A retry finds the run by that id
//    and answers with it. A crash between the record and the run leaves a record whose run does not
//    exist: the retry takes the record over (compare-and-swap on its version) and starts the run
//    with the reserved id, so there is never a second run, and never none.
//  - decision routes (approvals, budget, cancel) store their answer in the record once done; a
//    retry gets that answer. A crash in between leaves a `pending` record that the retry takes
//    over and executes again (the decision itself refuses to be taken twice).
//
// The same key with a different request (method, path or body) is 422. Keys of one caller never
// reach another's record: the caller is part of the record id.
import { createHash } from 'node:crypto';
import type { Clock } from '../clock.js';
import { HttpValidationFailure, domainError } from '../errors.js';
import { isStoreError, type Page, type Store, type Versioned } from '../store/store.js';
import { repos } from '../store/repos/index.js';
import { casUpdate, CasExhaustedError } from '../store/cas.js';
import { swallow } from '../telemetry/swallowed.js';
import type { AppLogger } from '../telemetry/logger.js';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
/** Longest key accepted (Stripe's limit); printable ASCII only. */
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
export const IDEMPOTENCY_KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

/** How long a claim by another live process is respected before a retry takes the record over. */
const CLAIM_STALE_MS = 30_000;
/** Expired records deleted per sweep at most (the next sweep goes on). */
const SWEEP_MAX = 10_000;

export interface IdempotencyValue {
  /** Who sent it: the API key's name or `anonymous`. */
  principal: string;
  /** SHA-256 of the key (the key itself is not kept). */
  key_sha256: string;
  /** operationId of the route. */
  operation: string;
  /** SHA-256 of method, path and canonical body. */
  request_sha256: string;
  /** The run (or background run) reserved for this request, for routes that start one. */
  target_id: string | null;
  state: 'pending' | 'done';
  /** The process working on it while pending. */
  claim: { worker: string; at: string } | null;
  /** The stored answer of a decision route. */
  response: { status_code: number; body: unknown } | null;
  created_at: string;
  expires_at: string;
}

export interface IdempotencyRequest {
  principal: string;
  key: string;
  operation: string;
  method: string;
  /** The request path as matched (ids included). */
  path: string;
  /** The validated body (defaults filled in). */
  body: unknown;
}

/** JSON with object keys sorted, so `{a,b}` and `{b,a}` are the same request. */
export function canonicalJson(v: unknown): string {
  if (v === undefined) return 'null';
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  const keys = Object.keys(v as Record<string, unknown>)
    .filter((k) => (v as Record<string, unknown>)[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k])}`).join(',')}}`;
}

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

export function recordIdOf(principal: string, key: string): string {
  return `idem_${sha256(`${principal}\u0000${key}`).slice(0, 48)}`;
}

export function requestHashOf(r: Pick<IdempotencyRequest, 'method' | 'path' | 'body'>): string {
  return sha256(`${r.method}\u0000${r.path}\u0000${canonicalJson(r.body ?? null)}`);
}

/** The key of a request, or null without the header. A bad key is a 422 (loc header). */
export function keyOfHeaders(headers: Record<string, unknown>): string | null {
  const raw = headers[IDEMPOTENCY_HEADER];
  if (raw === undefined) return null;
  const key = Array.isArray(raw) ? raw[0] : raw;
  if (typeof key !== 'string' || !IDEMPOTENCY_KEY_PATTERN.test(key)) {
    throw new HttpValidationFailure([
      {
        loc: ['header', IDEMPOTENCY_HEADER],
        msg: `Idempotency-Key must be 1 to ${MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII characters`,
        type: 'idempotency_key_invalid',
      },
    ]);
  }
  return key;
}

function reused(operation: string): HttpValidationFailure {
  return new HttpValidationFailure([
    {
      loc: ['header', IDEMPOTENCY_HEADER],
      msg: `this Idempotency-Key was already used with a different request (${operation} or another body); use a new key for a new request`,
      type: 'idempotency_key_reused',
    },
  ]);
}

export interface IdempotencyOptions {
  store: Store;
  clock: Clock;
  workerId: string;
  ttlSeconds: number;
  /** False on a single-process store: a claim by any other worker is a dead process's. */
  sharedStore: boolean;
  logger?: AppLogger;
}

/** What startOnce answers: the run was started now (`started`), or it already existed. */
export type StartOnce<S> = { fresh: true; target_id: string; started: S } | { fresh: false; target_id: string };

export class Idempotency {
  /** Requests with the same record id are handled one at a time in this process. */
  private readonly locks = new Map<string, Promise<unknown>>();
  private sweepTimer: NodeJS.Timeout | null = null;

  constructor(private readonly o: IdempotencyOptions) {}

  private async locked<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(id) ?? Promise.resolve();
    const run = prev.then(fn, fn);
    // The lock's tail only orders the next holder; `run` itself rejects to this holder's caller.
    const tail = run.catch(() => undefined);
    this.locks.set(id, tail);
    void tail.then(() => {
      if (this.locks.get(id) === tail) this.locks.delete(id);
    });
    return run;
  }

  private now(): number {
    return this.o.clock.now();
  }

  /**
   * The record of a request: created (pending, claimed by us) when there is none or it expired;
   * 422 when it exists for a different request. `created`: this call made it.
   */
  private async acquire(req: IdempotencyRequest, targetId: () => string | null): Promise<{ rec: Versioned<IdempotencyValue>; created: boolean }> {
    const id = recordIdOf(req.principal, req.key);
    const request_sha256 = requestHashOf(req);
    const attempt = async (): Promise<{ rec: Versioned<IdempotencyValue>; created: boolean }> => {
      const rec = await repos(this.o.store).idempotency.get<IdempotencyValue>(id);
      if (rec && Date.parse(rec.value.expires_at) > this.now()) {
        if (rec.value.request_sha256 !== request_sha256 || rec.value.operation !== req.operation) throw reused(rec.value.operation);
        return { rec, created: false };
      }
      const nowMs = this.now();
      const value: IdempotencyValue = {
        principal: req.principal,
        key_sha256: sha256(req.key),
        operation: req.operation,
        request_sha256,
        target_id: targetId(),
        state: 'pending',
        claim: { worker: this.o.workerId, at: new Date(nowMs).toISOString() },
        response: null,
        created_at: new Date(nowMs).toISOString(),
        expires_at: new Date(nowMs + this.o.ttlSeconds * 1000).toISOString(),
      };
      // An expired record is replaced; its creation order moves to now (the sweep walks by it).
      if (rec) await repos(this.o.store).idempotency.delete(id, rec.version);
      return { rec: await repos(this.o.store).idempotency.create(id, value), created: true };
    };
    try {
      // A concurrent request created, replaced or deleted the record first: read it again.
      return await casUpdate(attempt, { attempts: 5, retryOn: ['conflict', 'stale_version', 'not_found'] });
    } catch (err) {
      if (err instanceof CasExhaustedError) throw domainError('AGT_ERR_IDEMPOTENCY_KEY_IN_FLIGHT', [], { headers: { 'retry-after': '1' } });
      throw err;
    }
  }

  /** True when a pending record's claim may be taken over (its owner is gone or too slow). */
  private claimable(rec: Versioned<IdempotencyValue>): boolean {
    const c = rec.value.claim;
    if (!c) return true;
    if (c.worker === this.o.workerId) return true; // we hold the lock: our own earlier attempt failed
    if (!this.o.sharedStore) return true; // single process: another worker id is a dead process
    return this.now() - Date.parse(c.at) > CLAIM_STALE_MS;
  }

  private async takeOver(rec: Versioned<IdempotencyValue>): Promise<Versioned<IdempotencyValue>> {
    if (!this.claimable(rec)) {
      throw domainError('AGT_ERR_IDEMPOTENCY_KEY_IN_FLIGHT', [], { headers: { 'retry-after': '1' } });
    }
    try {
      return await repos(this.o.store).idempotency.update(
        rec.id,
        { ...rec.value, claim: { worker: this.o.workerId, at: new Date(this.now()).toISOString() } },
        rec.version,
      );
    } catch (err) {
      if (isStoreError(err, 'stale_version')) throw domainError('AGT_ERR_IDEMPOTENCY_KEY_IN_FLIGHT', [], { headers: { 'retry-after': '1' } });
      throw err;
    }
  }

  /**
   * For routes that start a run: starts it once per key. `exists(id)` says whether the run with the
   * reserved id was created; `start(id)` creates it with that id and resolves once it exists. When
   * `start` throws (busy, shutting down, bad input found late), the record is deleted so that a
   * retry starts afresh.
   */
  async startOnce<S>(
    req: IdempotencyRequest,
    newTargetId: () => string,
    exists: (id: string) => Promise<boolean>,
    start: (id: string) => Promise<S>,
  ): Promise<StartOnce<S>> {
    return this.locked(recordIdOf(req.principal, req.key), async () => {
      let { rec, created } = await this.acquire(req, newTargetId);
      const target = rec.value.target_id;
      if (!target) throw reused(rec.value.operation);
      if (!created) {
        if (rec.value.state === 'done' || (await exists(target))) return { fresh: false, target_id: target };
        rec = await this.takeOver(rec); // a crash (or a failed start) between the record and the run
      }
      let started: S;
      try {
        started = await start(target);
      } catch (err) {
        await repos(this.o.store)
          .idempotency.delete(rec.id)
          .catch(swallow('idempotency.release_key', { key_id: rec.id }));
        throw err;
      }
      await repos(this.o.store)
        .idempotency.update(rec.id, { ...rec.value, state: 'done', claim: null }, rec.version)
        .catch((e: unknown) => {
          this.o.logger?.warn({ err: String(e) }, 'idempotency record not marked done');
        });
      return { fresh: true, target_id: target, started };
    });
  }

  /**
   * For decision routes: runs `exec` once per key and keeps its answer; a retry gets the same
   * answer. An error is not kept: the record is deleted and the error answered.
   */
  async respondOnce<T>(req: IdempotencyRequest, exec: () => Promise<T>): Promise<T> {
    return this.locked(recordIdOf(req.principal, req.key), async () => {
      let { rec, created } = await this.acquire(req, () => null);
      if (!created) {
        if (rec.value.state === 'done' && rec.value.response) return rec.value.response.body as T;
        rec = await this.takeOver(rec);
      }
      let body: T;
      try {
        body = await exec();
      } catch (err) {
        await repos(this.o.store)
          .idempotency.delete(rec.id)
          .catch(swallow('idempotency.release_key', { key_id: rec.id }));
        throw err;
      }
      // Stored as JSON (what the client got), so a replay answers the same bytes.
      const stored = JSON.parse(JSON.stringify(body ?? null)) as unknown;
      await repos(this.o.store)
        .idempotency.update(rec.id, { ...rec.value, state: 'done', claim: null, response: { status_code: 200, body: stored } }, rec.version)
        .catch((e: unknown) => this.o.logger?.warn({ err: String(e) }, 'idempotency answer not stored'));
      return body;
    });
  }

  /**
   * Deletes expired records, oldest first (records are listed in creation order and share one
   * TTL, so the walk stops at the first one still valid). Returns how many.
   */
  async sweep(): Promise<number> {
    let deleted = 0;
    let cursor: string | null = null;
    const now = this.now();
    while (deleted < SWEEP_MAX) {
      const page: Page<IdempotencyValue> = await repos(this.o.store).idempotency.list<IdempotencyValue>({ cursor, limit: 500 });
      for (const r of page.items) {
        if (Date.parse(r.value.expires_at) > now) return deleted;
        await repos(this.o.store)
          .idempotency.delete(r.id, r.version)
          .then(
            () => deleted++,
            () => undefined,
          );
      }
      if (!page.next_cursor) break;
      cursor = page.next_cursor;
    }
    return deleted;
  }

  startSweeper(intervalSeconds: number): void {
    const tick = () => {
      void this.sweep().catch((err: unknown) => this.o.logger?.warn({ err: String(err) }, 'idempotency sweep failed'));
    };
    tick();
    this.sweepTimer = setInterval(tick, intervalSeconds * 1000);
    this.sweepTimer.unref();
  }

  stop(): void {
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    this.sweepTimer = null;
  }
}

// The value type of kind `idempotency` for the typed repositories (src/store/repos/values.ts).
declare module '../store/repos/values.js' {
  interface RecordValues {
    idempotency: IdempotencyValue;
  }
}
