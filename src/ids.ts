import { customAlphabet } from 'nanoid';

// Ids are `<prefix>_<nanoid>` (docs/contract.md §0). The alphabet avoids `-` and `_` so the
// prefix separator stays unambiguous and ids are safe in paths and store keys.
const nano = customAlphabet('0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', 21);

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

export function newId(prefix: IdPrefix): string {
  return `${prefix}_${nano()}`;
}

// Request ids are made on every HTTP request, where nanoid's random draw is a measurable share of
// a cheap route; they name a request in logs and need to be unique, not unguessable.
// So: a random per-process part (as long as nanoid's, enough for ids from many processes not to
// collide) and a counter, 21 characters after the prefix like every other id.
const requestIdBase = nano().slice(0, 11);
let requestCounter = 0;

/** `req_<11 random characters of this process><10 base-36 digits of a counter>`. */
export function newRequestId(): string {
  requestCounter = (requestCounter + 1) % 36 ** 10;
  return `req_${requestIdBase}${requestCounter.toString(36).padStart(10, '0')}`;
}
