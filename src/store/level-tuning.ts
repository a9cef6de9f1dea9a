// LevelDB's own options for the embedded store (src/store/level.ts opens the data directory with
// them). Both trade a little memory or read work for less work on LevelDB's compaction thread,
// which rewrites every byte the store writes once per level it moves down.

/**
 * LevelDB's memtable size (its default is 4 MB). Record keys hold random ids, so every table
 * flushed from the memtable overlaps every table of the next level, and each compaction rewrites
 * that whole level: the smaller the memtable, the more often. Measured with LevelDB's own
 * compaction statistics over a drain of 5,500 background runs (c=32, ~28 MB of live data): 4 MB
 * rewrote 418 MB at level 2 (26 s of the compaction thread), 8 MB 204 MB, 16 MB 112 MB, 32 MB
 * 57 MB (3 s). The cost: up to two memtables in memory (the full one is flushed while the next
 * fills), and a restart replays up to this much write-ahead log before the store opens (a few
 * hundred ms at most).
 */
const WRITE_BUFFER_BYTES = 32 * 1024 * 1024;

/**
 * LevelDB's table block size (its default is 4 KB). A block is the unit LevelDB compresses
 * (snappy): record rows and event bodies are JSON whose field names repeat from one row to the
 * next, so a bigger block compresses better, and every table byte saved is a byte the compaction
 * thread does not read, decompress, merge, compress and write again at each level. Measured over
 * a drain of 5,500 background runs (c=32, bulk-queued, LevelDB's compaction statistics; MB read /
 * written): 4 KB flushed 27 MB and compacted 63 / 65 MB (16.7 KB of table writes per run, 0.17 to
 * 0.20 ms of compaction-thread CPU per run); 16 KB 18 MB and 48 / 50 MB (12.4 KB, 0.15); 64 KB
 * 16 MB and 41 / 44 MB (10.9 KB, 0.13). The cost is on cold point reads (a read the block cache
 * misses decompresses a whole block): a few µs more per read at 16 KB, about twice that at 64 KB,
 * measured over 200,000 rows; most record reads here are answered by the write queue's row cache.
 * Turning compression off instead tripled the bytes and cost more (0.35 ms per run).
 */
const BLOCK_BYTES = 16 * 1024;

/** The options the data directory is opened with (keys and values are strings: level-keys.ts). */
export const LEVEL_OPTIONS = {
  keyEncoding: 'utf8',
  valueEncoding: 'utf8',
  writeBufferSize: WRITE_BUFFER_BYTES,
  blockSize: BLOCK_BYTES,
} as const;
