// A session's conversation as runs change it: a completed run's turn appended (in the run's final
// store round, or the slow way after it), a rolled-back run's turn taken out, and the turn an
// interrupted run had reached carried over to the run that takes its place (session policies,
// docs/runs.md "Busy sessions").
import { sessionKeyOf } from './tenancy.js';
import type { ChatMessage } from '../agent/model/types.js';
import type { RunContext } from '../../machines/run.machine.js';
import type { Clock } from '../clock.js';
import { casUpdate, CasExhaustedError } from '../store/cas.js';
import type { Store, Versioned, WriteOp } from '../store/store.js';
import type { TelemetryEmitter } from './emitter.js';
import type { RunRecord } from './run-record.js';
import { countsOf, iso, type SessionValue, type SnapshotValue } from './run-types.js';
import { repos } from '../store/repos/index.js';

export class SessionHistory {
  constructor(private readonly deps: { store: Store; clock: Clock; telemetry: TelemetryEmitter }) {}

  /** What a completed run adds to its session: the turns it took over, its query, its answer. */
  private turnOf(record: RunRecord, prelude: ChatMessage[]): ChatMessage[] {
    return [...prelude, { role: 'user', content: this.deps.telemetry.redactText(record.query) }, { role: 'assistant', content: record.response ?? '' }];
  }

  /**
   * The create of a new session holding the completed run's first turn, as an op of the run's
   * final commit: for a session no other run can write meanwhile (StartOptions.session_is_private).
   */
  firstTurnOp(record: RunRecord, prelude: ChatMessage[]): WriteOp {
    const value = sessionOfFirstTurn(record, this.turnOf(record, prelude), record.updated_at);
    return { op: 'create', kind: repos(this.deps.store).sessions.kind, id: sessionKeyOf(record), value };
  }

  /**
   * The completed run's turn added to the session it read at its start (`cur`, null: none yet),
   * in one conditional write. True once written, false if it must be redone with appendHistory.
   */
  write(cur: Versioned<SessionValue> | null, record: RunRecord, prelude: ChatMessage[]): Promise<boolean> {
    if (cur?.value.run_ids.includes(record.run_id)) return Promise.resolve(true);
    const add = this.turnOf(record, prelude);
    const now = record.updated_at;
    const op: WriteOp = cur
      ? {
          op: 'update',
          kind: repos(this.deps.store).sessions.kind,
          id: sessionKeyOf(record),
          expectedVersion: cur.version,
          value: sessionWithTurn(cur.value, record.run_id, add, now),
        }
      : {
          op: 'create',
          kind: repos(this.deps.store).sessions.kind,
          id: sessionKeyOf(record),
          value: sessionOfFirstTurn(record, add, now),
        };
    return this.deps.store.commit([op]).then(
      () => true,
      () => false,
    );
  }

  /** The completed run's turn appended with a fresh read (a session changed meanwhile, or a resumed run). */
  async append(record: RunRecord, prelude: ChatMessage[] = []): Promise<void> {
    const { store, clock } = this.deps;
    const now = iso(clock.now());
    const add = this.turnOf(record, prelude);
    try {
      await casUpdate(
        async () => {
          const cur = await repos(store).sessions.get<SessionValue>(sessionKeyOf(record));
          if (!cur) {
            await repos(store).sessions.create<SessionValue>(sessionKeyOf(record), sessionOfFirstTurn(record, add, now));
            return;
          }
          if (cur.value.run_ids.includes(record.run_id)) return;
          await repos(store).sessions.update<SessionValue>(sessionKeyOf(record), sessionWithTurn(cur.value, record.run_id, add, now), cur.version);
        },
        { retryOn: ['stale_version', 'conflict'] },
      );
    } catch (err) {
      // A session that kept changing for every attempt: the turn is not added (as before).
      if (!(err instanceof CasExhaustedError)) throw err;
    }
  }

  /**
   * Session policy `rollback`: the cancelled run's turn leaves the session. A run cancelled in
   * time never added one; one that completed first (the race is short) is taken back out.
   */
  async rollbackTurn(sessionKey: string, runId: string, cur: Versioned<SessionValue> | null): Promise<Versioned<SessionValue> | null> {
    let latest = cur;
    try {
      return await casUpdate(async (i) => {
        if (i > 0) latest = await repos(this.deps.store).sessions.get<SessionValue>(sessionKey);
        if (!latest) return latest;
        const at = latest.value.run_ids.indexOf(runId);
        if (at < 0) return latest;
        const counts = countsOf(latest.value);
        const start = counts.slice(0, at).reduce((a, b) => a + b, 0);
        const value: SessionValue = {
          ...latest.value,
          messages: [...latest.value.messages.slice(0, start), ...latest.value.messages.slice(start + counts[at])],
          run_ids: latest.value.run_ids.filter((_, j) => j !== at),
          counts: counts.filter((_, j) => j !== at),
          updated_at: iso(this.deps.clock.now()),
        };
        return await repos(this.deps.store).sessions.update<SessionValue>(sessionKey, value, latest.version);
      });
    } catch (err) {
      if (err instanceof CasExhaustedError) return latest;
      throw err;
    }
  }

  /**
   * Session policy `interrupt`: the conversation the interrupted run had reached (its query, its
   * tool calls and results, steer messages it took), which the new run continues from.
   */
  async carryOver(runId: string): Promise<{ messages: ChatMessage[]; prelude: ChatMessage[] }> {
    const none = { messages: [], prelude: [] };
    const [rec, snap] = await Promise.all([repos(this.deps.store).runs.get<RunRecord>(runId), repos(this.deps.store).snapshots.get<SnapshotValue>(runId)]);
    if (!rec || rec.value.status !== 'interrupted' || !snap) return none;
    const ctx = (snap.value.snapshot as { context?: RunContext }).context;
    if (!ctx) return none;
    let from = ctx.history_length;
    if (from === undefined) {
      // v1 snapshot: the run's own turn starts at its query.
      from = ctx.messages.findLastIndex((m) => m.role === 'user' && m.content === ctx.query);
      if (from < 0) return none;
    }
    const messages = ctx.messages.slice(from).filter((m) => m.role !== 'system');
    return { messages, prelude: [{ role: 'user', content: this.deps.telemetry.redactText(rec.value.query) }] };
  }
}

/** A new session holding one run's turn (`add`: its messages). */
function sessionOfFirstTurn(record: RunRecord, add: ChatMessage[], now: string): SessionValue {
  return { session_id: record.session_id, messages: add, run_ids: [record.run_id], counts: [add.length], created_at: now, updated_at: now };
}

/** `cur` with one more run's turn at the end. */
function sessionWithTurn(cur: SessionValue, runId: string, add: ChatMessage[], now: string): SessionValue {
  return { ...cur, messages: [...cur.messages, ...add], run_ids: [...cur.run_ids, runId], counts: [...countsOf(cur), add.length], updated_at: now };
}
