import { randomFillSync } from 'node:crypto';
import { customAlphabet } from 'nanoid';

// Ids are `<prefix>_<nanoid>` (docs/contract.md §0). The alphabet avoids `-` and `_` so the
// prefix separator stays unambiguous and ids are safe in paths and store keys.
const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';

export type IdPrefix =
  | 'run'
  | 'approval'
  | 'budgetreq'
  | 'trace'
  | 'span'
  | 'event'
  | 'attempt'
  | 'outcome'
  | 'worker'
  | 'session'
  | 'req'
  | 'bgrun'
  | 'call'
  | 'steer'
  | 'interrupt'
  /** An evaluation over past runs (src/runtime/evals/). */
  | 'eval'
  /** A message or text part a protocol adapter names (src/protocols/). */
  | 'msg';

// newId draws its 21 characters by nanoid's rule for this alphabet (customAlphabet: a random byte
// from 248 up is skipped, so every character is equally likely), from a pool of crypto random bytes
// each used once (as nanoid's), and writes them with the prefix into one buffer read out as one
// string: customAlphabet builds its id a character at a time (21 strings) and takes a view of its
// pool per draw, about 0.6 KB per id, and a drained background run makes some twenty ids (events,
// spans, attempts).
const ID_CHARS = 21;
const CODES = Buffer.from(ALPHABET, 'latin1');
const CUTOFF = 256 - (256 % ALPHABET.length);
const pool = Buffer.allocUnsafe(4096);
let poolAt = pool.length;
const idBuffer = Buffer.allocUnsafe(64);

export function newId(prefix: IdPrefix): string {
  const at = idBuffer.write(prefix, 0, 'latin1');
  idBuffer[at] = 0x5f; // '_'
  for (let n = 0; n < ID_CHARS;) {
    if (poolAt === pool.length) {
      randomFillSync(pool);
      poolAt = 0;
    }
    const b = pool[poolAt++];
    if (b < CUTOFF) idBuffer[at + 1 + n++] = CODES[b % ALPHABET.length];
  }
  return idBuffer.toString('latin1', 0, at + 1 + ID_CHARS);
}

// Request ids are made on every HTTP request, where nanoid's random draw is a measurable share of
// a cheap route; they name a request in logs and need to be unique, not unguessable.
// So: a random per-process part (as long as nanoid's, enough for ids from many processes not to
// collide) and a counter, 21 characters after the prefix like every other id.
const requestIdBase = customAlphabet(ALPHABET, 11)();
let requestCounter = 0;

/** `req_<11 random characters of this process><10 base-36 digits of a counter>`. */
export function newRequestId(): string {
  requestCounter = (requestCounter + 1) % 36 ** 10;
  return `req_${requestIdBase}${requestCounter.toString(36).padStart(10, '0')}`;
}
