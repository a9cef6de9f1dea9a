// The store part of concurrency keys (docs/flow-control.md): one small record per key in use
// (kind meta, id `flow_key:<key>`) listing the runs admitted under it. A take is the store's
// atomic holders op (src/store/holders-op.ts: refused at the limit; a new run's rides in its
// creating commit, keyTakeOp), a run's release rides in its end commit (keyReleaseOp), other
// releases and hand-overs are compare-and-set writes; so on a
// store several instances share the limit holds across all of them (docs/contract.md §3.4). The
// record is deleted when its last holder lets go, so idle keys cost nothing.
import { keyHasRoom, takeKeySlot, type KeyHolder } from '../../machines/policies/flow.js';
import { casUpdate } from '../store/cas.js';
import { repos } from '../store/repos/index.js';
import { StoreError, isStoreError, type Store, type WriteOp } from '../store/store.js';

export interface KeySlotsValue {
  key: string;
  holders: KeyHolder[];
}

const idOf = (key: string): string => `flow_key:${key}`;

/**
 * The op that gives `runId`'s slot of `key` back inside another commit (a run's end or park on a
 * shared store: src/runtime/run-host.ts), instead of a compare-and-set round of its own.
 */
export function keyReleaseOp(store: Store, key: string, runId: string): WriteOp {
  return repos(store).meta.holdersOp(idOf(key), { remove: [runId] });
}

/** The op that takes a slot of `key` for `runId` inside a commit: the store refuses the commit ('full') at the limit. */
export function keyTakeOp(store: Store, key: string, runId: string, limit: number, now: number): WriteOp {
  return repos(store).meta.holdersOp(idOf(key), { add: { run_id: runId, since: now, limit }, fields: { key } });
}

// CAS losses on a hot key are expected (every admission and release of the key writes it): a
// longer loop than the default, with short pauses.
const CAS = { attempts: 50, baseDelayMs: 1, maxDelayMs: 20, retryOn: ['stale_version', 'conflict', 'not_found'] as const };

/** Where a key's holders live: a store record (several instances) or this process's memory (an embedded store). */
export interface KeyHolders {
  holders(key: string): Promise<KeyHolder[]>;
  take(key: string, limit: number, runId: string, now: number): Promise<boolean>;
  release(key: string, runId: string): Promise<boolean>;
  prune(key: string, dead: (holders: KeyHolder[]) => Promise<Set<string>>): Promise<number>;
  /** Lets go of `from`'s slot and gives it to `to` in the same write (a freed slot handed to the next waiter). */
  handOver(key: string, from: string, to: { run_id: string; limit: number }, now: number): Promise<HandOver>;
}

/** `held`: `from` held a slot (and let go of it); `took`: `to` holds one now. */
export interface HandOver {
  held: boolean;
  took: boolean;
}

/**
 * One key's holders in memory: by run id, in the order they took their slots, and how many of
 * them hold each limit (the lowest wins: machines/policies/flow.ts keyHasRoom). A take, a release
 * and a look for room cost the same however many runs hold the key (no list copied or scanned:
 * at concurrency 32 on one key that was a copy of 32 holders per admission).
 */
class HeldKey {
  readonly runs = new Map<string, KeyHolder>();
  /** limit -> holders admitted under it (a key sees one or a few distinct limits). */
  private readonly limits = new Map<number, number>();

  lowest(): number | null {
    let low: number | null = null;
    for (const l of this.limits.keys()) if (low === null || l < low) low = l;
    return low;
  }

  add(h: KeyHolder & { limit: number }): void {
    this.runs.set(h.run_id, h);
    this.limits.set(h.limit, (this.limits.get(h.limit) ?? 0) + 1);
  }

  remove(runId: string): boolean {
    const h = this.runs.get(runId);
    if (!h) return false;
    this.runs.delete(runId);
    const n = (this.limits.get(h.limit!) ?? 1) - 1;
    if (n === 0) this.limits.delete(h.limit!);
    else this.limits.set(h.limit!, n);
    return true;
  }
}

/**
 * An embedded store has one process: the holders are kept in memory, with no store round per
 * admission (a compare-and-set per run on one hot key's record cost a LevelDB round each, and 32
 * runs of one key raced for it). After a restart, the runs still `running` with a key take their
 * slots again before anything queued is admitted (RunFlow.recoverQueued). takeNow and releaseNow
 * answer in the caller's turn: a key with room costs a run no promise (RunFlow.startKeyed).
 */
export class MemoryKeySlots implements KeyHolders {
  private readonly byKey = new Map<string, HeldKey>();

  holders(key: string): Promise<KeyHolder[]> {
    const held = this.byKey.get(key);
    return Promise.resolve(held ? [...held.runs.values()] : []);
  }

  /** take, in this turn. */
  takeNow(key: string, limit: number, runId: string, now: number): boolean {
    let held = this.byKey.get(key);
    if (held?.runs.has(runId)) return true;
    if (!keyHasRoom(held?.runs.size ?? 0, limit, held ? held.lowest() : null)) return false;
    if (!held) this.byKey.set(key, (held = new HeldKey()));
    held.add({ run_id: runId, since: now, limit });
    return true;
  }

  take(key: string, limit: number, runId: string, now: number): Promise<boolean> {
    return Promise.resolve(this.takeNow(key, limit, runId, now));
  }

  /** release, in this turn. */
  releaseNow(key: string, runId: string): boolean {
    const held = this.byKey.get(key);
    if (!held?.remove(runId)) return false;
    if (held.runs.size === 0) this.byKey.delete(key);
    return true;
  }

  release(key: string, runId: string): Promise<boolean> {
    return Promise.resolve(this.releaseNow(key, runId));
  }

  handOver(key: string, from: string, to: { run_id: string; limit: number }, now: number): Promise<HandOver> {
    if (!this.releaseNow(key, from)) return Promise.resolve({ held: false, took: false });
    return Promise.resolve({ held: true, took: this.takeNow(key, to.limit, to.run_id, now) });
  }

  async prune(key: string, dead: (holders: KeyHolder[]) => Promise<Set<string>>): Promise<number> {
    const held = this.byKey.get(key);
    if (!held?.runs.size) return 0;
    const gone = await dead([...held.runs.values()]);
    let n = 0;
    for (const id of gone) if (this.releaseNow(key, id)) n++;
    return n;
  }
}

export class KeySlots implements KeyHolders {
  constructor(private readonly store: Store) {}

  /** The runs holding `key` now (empty when nobody does). */
  async holders(key: string): Promise<KeyHolder[]> {
    const rec = await repos(this.store).meta.get<KeySlotsValue>(idOf(key));
    return rec?.value.holders ?? [];
  }

  /**
   * Takes a slot of `key` for `runId` if fewer than `limit` runs hold it (true), else nothing
   * (false): one commit of a holders op (src/store/holders-op.ts), no read-modify-write loop; the
   * store refuses it ('full') when the key is at its limit, whoever wrote last.
   */
  async take(key: string, limit: number, runId: string, now: number): Promise<boolean> {
    try {
      await this.store.commit([keyTakeOp(this.store, key, runId, limit, now)]);
      return true;
    } catch (err) {
      if (err instanceof StoreError && err.code === 'full') return false;
      throw err;
    }
  }

  /** Lets go of `runId`'s slot of `key` (nothing when it holds none). Returns whether it held one. */
  release(key: string, runId: string): Promise<boolean> {
    return this.drop(key, (h) => h.run_id === runId);
  }

  /** Drops every holder `dead` says is gone (a run that ended without letting go: a crash between its end and its release). */
  async prune(key: string, dead: (holders: KeyHolder[]) => Promise<Set<string>>): Promise<number> {
    const holders = await this.holders(key);
    if (holders.length === 0) return 0;
    const gone = await dead(holders);
    if (gone.size === 0) return 0;
    let n = 0;
    await this.drop(key, (h) => {
      const out = gone.has(h.run_id);
      if (out) n++;
      return out;
    });
    return n;
  }

  /** One compare-and-set of the key's record: `from` out, `to` in when the key then has room. */
  handOver(key: string, from: string, to: { run_id: string; limit: number }, now: number): Promise<HandOver> {
    const meta = repos(this.store).meta;
    return casUpdate(async () => {
      const cur = await meta.get<KeySlotsValue>(idOf(key));
      if (!cur) return { held: false, took: false };
      const rest = cur.value.holders.filter((h) => h.run_id !== from);
      if (rest.length === cur.value.holders.length) return { held: false, took: false };
      const decision = takeKeySlot(rest, to.limit, to.run_id, now);
      const holders = decision.take ? decision.holders : rest;
      try {
        if (holders.length === 0) await meta.delete(idOf(key), cur.version);
        else await meta.update(idOf(key), { key, holders }, cur.version);
      } catch (err) {
        if (isStoreError(err, 'not_found')) return { held: false, took: false };
        throw err;
      }
      return { held: true, took: decision.take };
    }, CAS);
  }

  private drop(key: string, out: (h: KeyHolder) => boolean): Promise<boolean> {
    const meta = repos(this.store).meta;
    return casUpdate(async () => {
      const cur = await meta.get<KeySlotsValue>(idOf(key));
      if (!cur) return false;
      const holders = cur.value.holders.filter((h) => !out(h));
      if (holders.length === cur.value.holders.length) return false;
      try {
        if (holders.length === 0) await meta.delete(idOf(key), cur.version);
        else await meta.update(idOf(key), { key, holders }, cur.version);
      } catch (err) {
        if (isStoreError(err, 'not_found')) return false;
        throw err;
      }
      return true;
    }, CAS);
  }
}
