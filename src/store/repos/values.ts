// The value type of each record kind. The store knows none of them (it is the bottom layer): the
// layer that owns a kind's shape declares it by augmenting this interface beside the type, e.g.
//
//   declare module '../store/repos/values.js' { interface RecordValues { runs: RunRecord } }
//
// so every repository of that kind is typed without the store importing anything above it. A kind
// nobody declared reads as `unknown` (callers then name the type, as with the raw Store).
import type { RecordKind } from '../store.js';

export interface RecordValues {}

export type ValueOf<K extends RecordKind> = K extends keyof RecordValues ? RecordValues[K] : unknown;
