// What a RunHost (src/runtime/run-host.ts) needs of the run service's shared parts: named apart
// from RunKernel (src/runtime/run-kernel.ts), which makes the hosts and fills this interface, so
// neither module depends on the other both ways.
import type { AnyActorLogic } from 'xstate';
import type { CarriedWrite } from './persistence.js';
import type { RunInbox } from './run-inbox.js';
import type { RunRecord } from './run-record.js';
import type { SessionHistory } from './run-history.js';
import type { RunServiceDeps } from './run-types.js';
import type { SessionGate } from './session-gate.js';

export interface HostKernel {
  readonly deps: RunServiceDeps;
  readonly logic: AnyActorLogic;
  readonly closing: boolean;
  readonly history: SessionHistory;
  readonly inbox: RunInbox;
  readonly sessions: SessionGate;
  /** The hosts live in this process: a host takes itself out when it retires. */
  readonly live: { delete(runId: string): boolean };
  readonly finalFold: ((record: RunRecord) => CarriedWrite | null) | null;
  /** `keyReleased`: the run's concurrency slot went back in the end's own commit (a shared store). */
  notifyEnded(record: RunRecord, keyReleased?: boolean): void;
  notifySettled(record: RunRecord): void;
}
