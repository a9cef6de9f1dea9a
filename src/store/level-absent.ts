// Keys of the LevelDB store known absent without a disk read (src/store/level-cache.ts prefetch).
//
// A run that names a session reads, before it starts, the session's row and the counters of its
// runs and traces by session id (docs/architecture.md "Few store rounds per run"). A chat
// protocol names a new session on every conversation (the chat id, the thread id), so that read
// is nearly always of keys that do not exist, and at concurrency 1 the run waits for its trip
// through libuv's pool. This process is the only one that writes the directory (LevelStore holds
// its lock), so a Bloom filter of the keys under a few prefixes, filled by one scan after open
// and by every batch as it lands (LevelWriter.land, where the caches learn it too), answers
// "surely absent" for a new session's keys. A "maybe" is read as before; a key deleted stays a
// "maybe" (only a wasted read). Until the scan has finished, every key is a "maybe".
import { end, recordKey, seqPrefix, type Db } from './level-keys.js';

/** Bits of the filter: 1 MiB; with 4 probes about 2 % false "maybe" at a million keys, far less below. */
const BITS_LOG2 = 23;
const PROBES = 4;

export class AbsentKeys {
  private readonly bits = new Uint32Array(1 << (BITS_LOG2 - 5));
  private ready = false;

  private readonly prefixes: string[];

  /** `rows`: the kinds whose rows are watched; `counters`: key prefixes of watched counters. */
  constructor(private readonly watched: { rows: readonly string[]; counters: readonly string[] }) {
    this.prefixes = [...watched.rows.map((kind) => recordKey(kind, '')), ...watched.counters];
  }

  /** The scan after open has finished: `absent` can answer true from now on. */
  get built(): boolean {
    return this.ready;
  }

  /** True only when `key` is under a watched prefix and surely not stored. */
  absent(key: string): boolean {
    if (!this.ready || !this.watches(key)) return false;
    let [h, step] = hashes(key);
    for (let i = 0; i < PROBES; i++, h = (h + step) >>> 0) {
      const bit = h & ((1 << BITS_LOG2) - 1);
      if ((this.bits[bit >>> 5] & (1 << (bit & 31))) === 0) return true;
    }
    return false;
  }

  /** A key written (or found) on disk. */
  learn(key: string): void {
    if (!this.watches(key)) return;
    let [h, step] = hashes(key);
    for (let i = 0; i < PROBES; i++, h = (h + step) >>> 0) {
      const bit = h & ((1 << BITS_LOG2) - 1);
      this.bits[bit >>> 5] |= 1 << (bit & 31);
    }
  }

  /**
   * Learns every stored key under the watched prefixes, then answers. The filter exists before the
   * store's first write, and whatever lands during the scan is learnt by land() as well: a key may
   * be learnt twice, never missed.
   */
  async build(db: Db): Promise<void> {
    // Rows by their kind's creation-order keys (s\0<kind>\0<seq> -> id, written and deleted in the
    // same batch as the row): a session's row holds its whole conversation, too much to scan.
    for (const kind of this.watched.rows) {
      const p = seqPrefix(kind);
      for await (const id of db.values({ gte: p, lt: end(p) })) this.learn(recordKey(kind, id));
    }
    for (const p of this.watched.counters) for await (const key of db.keys({ gte: p, lt: end(p) })) this.learn(key);
    this.ready = true;
  }

  private watches(key: string): boolean {
    for (const p of this.prefixes) if (key.startsWith(p)) return true;
    return false;
  }
}

/** Two 32-bit hashes of `key` (FNV-1a and a multiplicative one), for double hashing; the step is odd. */
function hashes(key: string): [number, number] {
  let a = 0x811c9dc5;
  let b = 0x9747b28c;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
    b ^= b >>> 15;
  }
  return [a >>> 0, (b | 1) >>> 0];
}
