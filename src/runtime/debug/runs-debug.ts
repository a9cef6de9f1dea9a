// Inspecting a run at any step, forking it there, replaying it against a variant (docs/contract.md
// §3.4-3.5, docs/debugging.md). A checkpoint is a prefix length of the run's conversation plus
// the machine state, kept with the run's snapshot (machines/policies/checkpoints.ts); a fork or a
// replay is a new run started from a conversation this builds, with its origin kept beside its
// snapshot so a process that continues it after a crash knows what it is.
import type { Snapshot } from 'xstate';
import type { ChatMessage } from '../../../machines/model-types.js';
import type { Checkpoint } from '../../../machines/policies/checkpoints.js';
import { canonicalArguments, type RecordedCall, type ReplayTools } from '../../../machines/policies/replay-match.js';
import type { RunContext } from '../../../machines/run.machine.js';
import { domainError, HttpValidationFailure, notFound } from '../../errors.js';
import { repos } from '../../store/repos/index.js';
import type { Store } from '../../store/store.js';
import { TERMINAL_RUN_STATUSES, WAITING_RUN_STATUSES, type RunRecord } from '../run-record.js';
import type { SnapshotValue, StartedRun, StartOptions } from '../run-types.js';
import type { ReplayVariant, RunOrigin } from './origin.js';

/** The part of RunService a fork or replay starts its run with. */
export interface RunStarter {
  start(query: string, sessionId: string | null | undefined, opts?: StartOptions): Promise<StartedRun>;
}

export interface ForkEdits {
  user_message?: string;
  tool_results?: Record<string, string>;
  append_messages?: Array<{ role: 'user' | 'assistant'; content: string }>;
}

export interface ReplayRequest {
  variant: ReplayVariant;
  tools?: ReplayTools;
  from_checkpoint?: string | null;
  session_id?: string | null;
  /** Set by an evaluation: the replay is its item's. */
  eval_id?: string;
  /** A caller-chosen run id (an evaluation names its item's replay before starting it). */
  run_id?: string;
}

/** A run as stored: its record, its conversation (as the model saw it) and its checkpoints. */
export interface StoredRun {
  record: RunRecord;
  messages: ChatMessage[];
  history_length: number;
  checkpoints: readonly Checkpoint[];
  origin: RunOrigin | null;
}

export class RunsDebug {
  constructor(
    private readonly store: Store,
    private readonly runs: RunStarter,
    /** config `runs.checkpoints`: off, runs keep none (a checkpoint asked of one is a 409, not a 404). */
    private readonly checkpointsOn = true,
  ) {}

  async read(runId: string): Promise<StoredRun> {
    const r = repos(this.store);
    const [rec, snap] = await Promise.all([r.runs.get<RunRecord>(runId), r.snapshots.get<SnapshotValue>(runId)]);
    if (!rec) throw notFound('run', runId);
    return storedRun(rec.value, snap?.value);
  }

  /** Several runs in two store reads (an evaluation reads the originals of its next items ahead); null: no such run. */
  async readMany(runIds: string[]): Promise<Array<StoredRun | null>> {
    const r = repos(this.store);
    const [recs, snaps] = await Promise.all([r.runs.getMany<RunRecord>(runIds), r.snapshots.getMany<SnapshotValue>(runIds)]);
    return recs.map((rec, i) => (rec ? storedRun(rec.value, snaps[i]?.value) : null));
  }

  async checkpoints(runId: string): Promise<{ run: StoredRun; checkpoints: readonly Checkpoint[] }> {
    const run = await this.read(runId);
    return { run, checkpoints: run.checkpoints };
  }

  /** One checkpoint and the conversation the model would see there (system instruction first). */
  async checkpoint(runId: string, checkpointId: string): Promise<{ run: StoredRun; checkpoint: Checkpoint; messages: ChatMessage[] }> {
    const run = await this.read(runId);
    const checkpoint = this.find(run, checkpointId);
    return { run, checkpoint, messages: run.messages.slice(0, checkpoint.message_count) };
  }

  /**
   * The run's checkpoint `checkpointId`. Not there: 409 AGT_ERR_CHECKPOINTS_OFF when the run kept
   * none because checkpoints were off (this server has them off, or the run paused or ended with
   * none: with them on, every pause and every end takes one), else 404.
   */
  private find(run: StoredRun, checkpointId: string): Checkpoint {
    const checkpoint = run.checkpoints.find((c) => c.checkpoint_id === checkpointId);
    if (checkpoint) return checkpoint;
    const status = run.record.status;
    const keptNone = run.checkpoints.length === 0 && (!this.checkpointsOn || TERMINAL_RUN_STATUSES.has(status) || WAITING_RUN_STATUSES.has(status));
    if (keptNone) throw domainError('AGT_ERR_CHECKPOINTS_OFF', [run.record.run_id]);
    throw notFound('checkpoint', checkpointId);
  }

  /** A new run that goes on from `checkpointId` with `edits`, in a new session unless one is named. */
  async fork(
    runId: string,
    body: { checkpoint_id: string; edits?: ForkEdits | null; session_id?: string | null },
    opts: StartOptions = {},
  ): Promise<StartedRun> {
    const { run, messages } = await this.checkpoint(runId, body.checkpoint_id);
    const { system, rest } = splitSystem(messages);
    const conversation = applyEdits(rest, body.edits ?? {});
    const query = body.edits?.user_message ?? lastUserText(conversation) ?? run.record.query;
    return this.runs.start(query, body.session_id ?? null, {
      ...opts,
      // A fork of a tenant's run is the tenant's (its session, its agent).
      ...(run.record.tenant ? { tenant: run.record.tenant } : {}),
      agent_id: run.record.agent_id,
      conversation,
      system_instruction: system,
      origin: { forked_from: { run_id: runId, checkpoint_id: body.checkpoint_id } },
    });
  }

  /**
   * The run re-asked of `variant` with the same inputs, from its start or a checkpoint. Its tool
   * calls are answered from the original's recorded calls (machines/policies/replay-match.ts).
   */
  async replay(runId: string, body: ReplayRequest, opts: StartOptions = {}, stored?: StoredRun): Promise<StartedRun> {
    // `stored`: the original as its caller read it already (an evaluation reads its next items' ahead).
    const run = stored ?? (await this.read(runId));
    let prefix: ChatMessage[];
    if (body.from_checkpoint) {
      const cp = this.find(run, body.from_checkpoint);
      prefix = run.messages.slice(0, cp.message_count);
    } else prefix = run.messages.slice(0, run.history_length + 1);
    const { system, rest } = splitSystem(prefix);
    const variant = body.variant;
    // Another agent answers with its own instruction unless the variant names one.
    const system_instruction = variant.system_instruction !== undefined ? variant.system_instruction : variant.agent_id ? undefined : system;
    const tools = body.tools ?? 'recorded';
    return this.runs.start(lastUserText(rest) ?? run.record.query, body.session_id ?? null, {
      ...opts,
      ...(body.run_id ? { run_id: body.run_id } : {}),
      // A replay of a tenant's run is the tenant's (its session, its agent, its evaluation).
      ...(run.record.tenant ? { tenant: run.record.tenant } : {}),
      agent_id: variant.agent_id ?? run.record.agent_id,
      conversation: dropDanglingCalls(rest),
      ...(system_instruction !== undefined ? { system_instruction } : {}),
      origin: {
        replay_of: { run_id: runId, variant },
        replay: { tools, recorded: recordedCalls(run) },
        ...(body.eval_id ? { eval_id: body.eval_id } : {}),
      },
    });
  }
}

function storedRun(record: RunRecord, snap: SnapshotValue | undefined): StoredRun {
  const ctx = (snap?.snapshot as (Snapshot<unknown> & { context?: RunContext }) | undefined)?.context;
  const messages = ctx?.messages ?? [];
  return {
    record,
    messages,
    history_length: ctx?.history_length ?? Math.max(0, messages.map((m) => m.role).indexOf('user')),
    checkpoints: snap?.checkpoints ?? [],
    origin: snap?.origin ?? null,
  };
}

function splitSystem(messages: ChatMessage[]): { system: string | null; rest: ChatMessage[] } {
  const first = messages[0];
  return first?.role === 'system' ? { system: first.content, rest: messages.slice(1) } : { system: null, rest: messages };
}

function lastUserText(messages: ChatMessage[]): string | null {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (m.role === 'user') return m.content;
  }
  return null;
}

/** Every tool call the run made, in order, with what the model was told (the snapshot's tool messages). */
export function recordedCalls(run: StoredRun): RecordedCall[] {
  const results = new Map<string, string>();
  for (const m of run.messages) if (m.role === 'tool') results.set(m.tool_call_id, m.content);
  const outcomes = new Map(run.record.tool_calls.map((c) => [c.tool_call_id, c.outcome ?? 'unknown'] as const));
  const out: RecordedCall[] = [];
  for (const m of run.messages) {
    if (m.role !== 'assistant' || !m.tool_calls) continue;
    for (const c of m.tool_calls) {
      const content = results.get(c.id);
      if (content === undefined) continue; // never answered (the run stopped before its batch ran)
      out.push({ tool_name: c.name, arguments_key: canonicalArguments(c.arguments), content, outcome: outcomes.get(c.id) ?? 'success' });
    }
  }
  return out;
}

/** A prefix that ends on tool calls nobody answered (a pause) is cut before them: the variant asks again. */
function dropDanglingCalls(messages: ChatMessage[]): ChatMessage[] {
  const last = messages[messages.length - 1];
  return last?.role === 'assistant' && last.tool_calls?.length ? messages.slice(0, -1) : messages;
}

/**
 * A checkpoint's conversation with a fork's edits: tool results replaced (or given, for calls the
 * checkpoint left unanswered: a pause), then `append_messages`, then `user_message`. A tool call
 * id the conversation does not hold, or a call left without a result, is a 422.
 */
function applyEdits(messages: ChatMessage[], edits: ForkEdits): ChatMessage[] {
  const given = new Map(Object.entries(edits.tool_results ?? {}));
  const used = new Set<string>();
  const out: ChatMessage[] = messages.map((m) => {
    if (m.role !== 'tool' || !given.has(m.tool_call_id)) return m;
    used.add(m.tool_call_id);
    return { ...m, content: given.get(m.tool_call_id)! };
  });
  // Calls of the last assistant message that have no result yet (the run paused before running them).
  const last = [...out].reverse().find((m) => m.role === 'assistant');
  const answered = new Set(out.filter((m) => m.role === 'tool').map((m) => (m as { tool_call_id: string }).tool_call_id));
  const open = last?.role === 'assistant' ? (last.tool_calls ?? []).filter((c) => !answered.has(c.id)) : [];
  const problems: Array<{ loc: Array<string | number>; msg: string; type: string }> = [];
  for (const c of open) {
    const content = given.get(c.id);
    if (content === undefined) {
      problems.push({ loc: ['body', 'edits', 'tool_results', c.id], msg: `the checkpoint has no result for tool call ${c.id}: give one`, type: 'missing' });
      continue;
    }
    used.add(c.id);
    out.push({ role: 'tool', tool_call_id: c.id, tool_name: c.name, content });
  }
  for (const id of given.keys()) {
    if (!used.has(id))
      problems.push({ loc: ['body', 'edits', 'tool_results', id], msg: `the checkpoint's conversation has no tool call ${id}`, type: 'value_error' });
  }
  if (problems.length) throw new HttpValidationFailure(problems);
  for (const m of edits.append_messages ?? []) out.push({ role: m.role, content: m.content });
  if (edits.user_message !== undefined) out.push({ role: 'user', content: edits.user_message });
  return out;
}
