import { customAlphabet } from 'nanoid';

// Ids are `<prefix>_<nanoid>` (decisions.md preamble). The alphabet avoids `-` and `_` so the
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
  | 'interrupt';

export function newId(prefix: IdPrefix): string {
  return `${prefix}_${nano()}`;
}
