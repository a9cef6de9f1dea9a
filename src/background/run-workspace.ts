// The run workspace files of background runs (run.json, events.jsonl): the low-priority mirror
// of each run's lifecycle, its repair after a crash, and the removal of deleted runs' folders.
// The workspace is a mirror: the store is the truth, and a failure here never stops a run.
import { access } from 'node:fs/promises';
import { sep } from 'node:path';
import type { BackgroundRunContext } from '../../machines/background-run.machine.js';
import type { Config } from '../config.js';
import { domainError } from '../errors.js';
import type { BackgroundRun } from '../schemas/background.js';
import { DEFAULT_NAMESPACE_TEMPLATE } from '../schemas/background.js';
import { TERMINAL, WAITING, type BgRunRow, type LifecycleRecord, type TaskRow } from './types.js';
import { bgIdOf, publicLifecycleLine, publicRunIds } from './tenancy.js';
import { absoluteWorkspace, relativeWorkspace, FolderRemover, workspaceOf } from './workspace.js';
import { MirrorQueue, lastMirroredSequence, mirroredRunMatches, mirrorRun } from './workspace-mirror.js';
import type { AppLogger } from '../telemetry/logger.js';

/** How long run.json / events.jsonl may trail a run that goes on (one that ends or pauses is written at once). */
const MIRROR_DELAY_MS = 200;
/**
 * How long a queued run's folder waits before it is made: a run claimed within it gets its folder
 * and files made once (with its claim). Measured without it: a drain of 1,500 runs queued at once
 * at concurrency 1 made each folder when its run was queued and run.json again when it ran.
 */
const QUEUED_MIRROR_DELAY_MS = 5000;
/**
 * The most folders the mirror may have waiting before the claimer takes no more runs. Creating a
 * run's folder and files costs more than the run itself on some filesystems (about 1.6 ms of CPU
 * per folder on the benchmark VM's ext4), so under a sustained drain the mirror fell behind
 * without bound (6,000 runs ended with 866 folders written, the rest in memory). Folders of runs
 * still queued do not count (see `mirror`). Claiming resumes once the backlog is down to three
 * quarters of this (claims go on as the mirror writes).
 */
export const MIRROR_BACKLOG_MAX = 256;

/** mirror()'s answer for a step with nothing to write. */
const NOTHING: Promise<unknown> = Promise.resolve();

export interface RunWorkspacesDeps {
  config: Config;
  logger: AppLogger;
  /** Lifecycle events of a run as stored in telemetry (the repair reads the lines it lacks). */
  storedLifecycle(runId: string): Promise<Array<{ sequence: number; event: Record<string, unknown> }>>;
  /** The mirror's backlog, full before (mirrorFull), is down to three quarters: claiming may resume. */
  onMirrorRoom?: () => void;
  /**
   * Set on a shared store (several instances, one workspace root): reads a run's row, so a queued
   * run's late step is dropped once another instance moved the run on (`mirror`).
   */
  shared?: { row(runId: string): Promise<BgRunRow | null>; workerId: string };
}

export class RunWorkspaces {
  /** Workspace folders this process created (mkdir once per run, not once per transition). */
  private readonly madeDirs = new Set<string>();
  /** The claimer was told the mirror is full; it is told again once the backlog is down to three quarters. */
  private mirrorWasFull = false;
  /** Runs this process deleted: a lifecycle step still on its way must not make their folder again (bounded). */
  private readonly deletedRuns = new Set<string>();
  /** Removed workspace trees: renamed into the trash at once, `rm -r` in the background. */
  private readonly remover: FolderRemover;
  /** Runs whose workspace this process has checked, or is checking, after picking them up (repairWorkspace). */
  private readonly workspacesChecked = new Map<string, Promise<void>>();
  /** Tasks whose refused workspace template was reported (once per task per process). */
  private readonly warnedTemplates = new Set<string>();
  /**
   * Workspace files are written in a low-priority lane (8 folders at a time, handed to the
   * writer's thread in one message when they are ready together); a step of a run that goes on
   * waits up to MIRROR_DELAY_MS for the next ones to join it.
   */
  private readonly mirrors = new MirrorQueue(
    8,
    MIRROR_DELAY_MS,
    (dir, err) => {
      this.madeDirs.delete(dir);
      // The workspace is a mirror: a full disk must not stop the run.
      this.deps.logger.warn({ workspace_path: dir, err: String(err) }, 'could not write the run workspace files');
    },
    () => {
      if (this.mirrorWasFull && this.mirrors.backlog <= (MIRROR_BACKLOG_MAX * 3) / 4) {
        this.mirrorWasFull = false;
        this.deps.onMirrorRoom?.();
      }
    },
    QUEUED_MIRROR_DELAY_MS,
    // run.json shows the client's task and agent ids, as answers do (tenancy.ts).
    (run) => publicRunIds(run as BackgroundRun),
  );

  constructor(private readonly deps: RunWorkspacesDeps) {
    this.remover = new FolderRemover(deps.config.background.workspace_root, (err) =>
      this.deps.logger.warn({ err: String(err) }, 'could not remove a background workspace folder'),
    );
  }

  /** Start-up: folders left in the trash by a previous process are removed. */
  sweepTrash(): void {
    this.remover.sweepTrash();
  }

  /**
   * True while the mirror has MIRROR_BACKLOG_MAX folders or more waiting: the claimer takes no
   * new runs (their files would only queue up in memory), and is kicked once it is down to three quarters.
   */
  mirrorFull(): boolean {
    if (this.mirrors.backlog < MIRROR_BACKLOG_MAX) return false;
    this.mirrorWasFull = true;
    return true;
  }

  /** Folders waiting for the mirror (or being written), as counted for MIRROR_BACKLOG_MAX. */
  get mirrorBacklog(): number {
    return this.mirrors.backlog;
  }

  /** Every waiting mirror step is written now (engine close: a shutdown must not wait out the delays). */
  hurryMirror(): void {
    this.mirrors.hurry();
  }

  /** The run's waiting mirror steps are written now (a waiter heard it settled, maybe on another instance). */
  hurryRun(run: BackgroundRun): void {
    try {
      this.mirrors.hurryDir(this.dirOf(run));
    } catch {
      // outside the root: never written
    }
  }

  /** Engine close: waits for the mirror's last writes (then stops its writer thread) and the background removals. */
  async drain(): Promise<void> {
    await this.mirrors.close();
    await this.remover.drain();
  }

  /** Deleted by this process: a lifecycle step still on its way must not make its folder again. */
  isDeleted(runId: string): boolean {
    return this.deletedRuns.has(runId);
  }

  /** A run's row was deleted by this process. */
  deleted(runId: string): void {
    this.workspacesChecked.delete(runId);
    if (this.deletedRuns.size >= 50_000) this.deletedRuns.clear(); // a bound: a late step after that only remakes a folder
    this.deletedRuns.add(runId);
  }

  /**
   * The run's workspace, relative to the workspace root (answers never show server paths). A task
   * stored before templates were confined may hold one that now resolves outside its namespace:
   * its runs get the default template instead (and a warning), never the folder it named.
   */
  workspaceFor(task: TaskRow, run_id: string): string {
    const ids = { agent_id: task.agent_id, task_id: task.task_id, run_id };
    const allowShared = this.deps.config.background.workspace.allow_shared_namespaces;
    const r = workspaceOf(task.workspace_policy.namespace_template, ids, allowShared);
    if ('rel' in r) return r.rel;
    if (!this.warnedTemplates.has(task.task_id)) {
      this.warnedTemplates.add(task.task_id);
      this.deps.logger.warn({ task_id: task.task_id, problem: r.problem }, "the task's workspace template is refused; its runs use the default template");
    }
    const fallback = workspaceOf(DEFAULT_NAMESPACE_TEMPLATE, ids, false);
    if ('rel' in fallback) return fallback.rel;
    throw domainError('AGT_ERR_WORKSPACE_UNAVAILABLE', [task.task_id, fallback.problem]);
  }

  /** The absolute folder of a run's workspace (throws when a stored path would leave the root). */
  dirOf(run: BackgroundRun): string {
    return absoluteWorkspace(this.deps.config.background.workspace_root, run.workspace_path);
  }

  /**
   * Hands a step's lines and run.json to the mirror lane. Resolves once they are written (or will
   * not be); never rejects. Not an async function: the lane's own promise is the answer, shared by
   * the steps merged into one folder write (no wrapper promise per step).
   */
  mirror(ctx: BackgroundRunContext, lifecycle: LifecycleRecord[], rewriteRunJson: boolean, last: boolean): Promise<unknown> {
    if (this.deletedRuns.has(ctx.run.run_id)) return NOTHING;
    let dir: string;
    try {
      dir = this.dirOf(ctx.run);
    } catch (err) {
      this.deps.logger.warn({ bg_run_id: ctx.run.run_id, err: String(err) }, 'the run workspace is outside the workspace root; not written');
      return NOTHING;
    }
    // The files show the client's task and agent ids, as answers do (tenancy.ts).
    const lines = ctx.internal.write_events_jsonl ? lifecycle.map(publicLifecycleLine) : [];
    // The run as stored: the queue keeps a folder's newest only and shows it when it writes it
    // (showRun below), so the steps merged into a later one make no copy of it.
    const run = ctx.internal.write_run_json && rewriteRunJson ? ctx.run : null;
    if (lines.length === 0 && !run) return NOTHING;
    const makeDir = !this.madeDirs.has(dir);
    if (last) this.madeDirs.delete(dir);
    else this.madeDirs.add(dir);
    const status = ctx.run.status;
    // A queued run's first lines do not count toward MIRROR_BACKLOG_MAX: holding back the claimer
    // would not stop them (POST /background/tasks/{id}/run makes them), only the runs that would
    // drain the queue.
    const seq = lifecycle.at(-1)?.sequence;
    const stillDue = status === 'queued' && this.deps.shared && seq !== undefined ? () => this.queuedStepDue(ctx.run.run_id, seq) : undefined;
    return this.mirrors.write(dir, lines, run, makeDir, TERMINAL.has(status) || WAITING.has(status), status !== 'queued', stillDue);
  }

  /**
   * A queued run's step waits QUEUED_MIRROR_DELAY_MS. On a shared store another instance may
   * claim the run meanwhile (its first load writes the lines it finds missing, repairWorkspace),
   * run it and write its end: the late step, written then, moved run.json back to `queued` and
   * repeated the queued line. So it is written only while the row is where the step left it, or
   * this process holds the run (it claimed it while the step waited).
   */
  private async queuedStepDue(runId: string, seq: number): Promise<boolean> {
    const shared = this.deps.shared!;
    const row = await shared.row(runId);
    if (!row || this.deletedRuns.has(runId)) return false;
    return row.event_seq === seq || row.run.lease_owner === shared.workerId;
  }

  /**
   * True when the run's workspace files show the row: events.jsonl holds its every line and
   * run.json its status, attempt and lease generation (or the run writes neither). A waiter on a
   * shared store asks this before it answers for a run another instance ended (waiters.ts). Also
   * true when the run has no folder here at all: the instance that claimed it writes its folder
   * when it first loads it (repairWorkspace), before the claim, so on a shared workspace root the
   * folder exists by the time the run ends; none means this root is not the one it is written to
   * (a per-instance workspace_root, docs/operations.md), and there is nothing to wait for.
   */
  async shows(row: BgRunRow): Promise<boolean> {
    const { run, internal } = row;
    if (run.status === 'skipped' || (!internal.write_events_jsonl && !internal.write_run_json)) return true;
    let dir: string;
    try {
      dir = this.dirOf(run);
    } catch {
      return true; // never written (mirror)
    }
    const shown =
      (!internal.write_events_jsonl || (await lastMirroredSequence(dir)) >= row.event_seq) &&
      (!internal.write_run_json || (await mirroredRunMatches(dir, run)));
    return (
      shown ||
      !(await access(dir).then(
        () => true,
        () => false,
      ))
    );
  }

  /**
   * The workspace mirror trails a live run (up to MIRROR_DELAY_MS), so a crash can leave
   * events.jsonl short of lines the store holds; the run's next lines would then leave a gap in
   * `sequence`. A run this process did not write last (start-up, a lapsed lease) gets the missing
   * lines appended from its stored lifecycle, in order, and run.json rewritten, before it goes on.
   * Never while this process still has a mirror step of the folder pending (it would double lines).
   */
  async repairWorkspace(row: BgRunRow): Promise<void> {
    const { run, internal } = row;
    if (run.status === 'skipped' || (!internal.write_events_jsonl && !internal.write_run_json) || this.deletedRuns.has(run.run_id)) return;
    let dir: string;
    try {
      dir = this.dirOf(run);
    } catch {
      return;
    }
    // A second caller (the start-up check and a load of the same run) waits for the first's repair.
    const checking = this.workspacesChecked.get(run.run_id);
    if (checking) return checking;
    if (!this.mirrors.idle(dir)) return;
    if (this.workspacesChecked.size >= 10_000) this.workspacesChecked.clear(); // a bound, not a cache: checking again is harmless
    const repair = this.repairFolder(row, dir);
    this.workspacesChecked.set(run.run_id, repair);
    // A repair that failed (a store read) is tried again by the next caller, not answered with the same failure.
    repair.catch(() => this.workspacesChecked.delete(run.run_id));
    return repair;
  }

  private async repairFolder(row: BgRunRow, dir: string): Promise<void> {
    const { run, internal } = row;
    let lines: object[] = [];
    if (internal.write_events_jsonl) {
      const have = await lastMirroredSequence(dir);
      if (have >= row.event_seq) {
        // The lines are complete. run.json is written after them (append, then write and
        // rename), so a crash in between leaves it one step behind. A live run's next step
        // rewrites it anyway; an ended run's is rewritten here when it does not show the run's
        // status, attempt and lease generation.
        if (!internal.write_run_json || !TERMINAL.has(run.status) || (await mirroredRunMatches(dir, run))) return;
        if (this.deletedRuns.has(run.run_id)) return; // deleted while its folder was read: writing would make it again
        this.deps.logger.warn({ bg_run_id: run.run_id }, 'rewriting a workspace run.json left behind by a crash');
        await mirrorRun(dir, [], publicRunIds(run), true).catch((err) =>
          this.deps.logger.warn({ bg_run_id: run.run_id, err: String(err) }, 'workspace repair failed'),
        );
        return;
      }
      const stored = (await this.deps.storedLifecycle(run.run_id)).filter((e) => e.sequence > have).sort((a, b) => a.sequence - b.sequence);
      const seen = new Set<number>();
      lines = stored
        .filter((e) => !seen.has(e.sequence) && seen.add(e.sequence))
        .map(({ sequence, event: e }) => {
          const m = (e.metadata ?? {}) as Record<string, unknown>;
          // The fields (and order) of a mirrored LifecycleRecord line: lifecycleOf without `data`.
          return {
            sequence,
            event: e.event_type,
            timestamp: m.lifecycle_timestamp ?? e.timestamp,
            run_id: m.run_id,
            task_id: typeof m.task_id === 'string' ? bgIdOf(m.task_id) : m.task_id,
            agent_id: typeof m.agent_id === 'string' ? bgIdOf(m.agent_id) : m.agent_id,
            status: m.status,
            attempt: m.attempt,
            worker_id: m.worker_id,
            lease_generation: m.lease_generation,
            ...(typeof m.tenant === 'string' ? { tenant: m.tenant } : {}),
          };
        });
      if (lines.length > 0) this.deps.logger.warn({ bg_run_id: run.run_id, from: have + 1, to: row.event_seq }, 'appending workspace lines lost by a crash');
    }
    if (this.deletedRuns.has(run.run_id)) return; // deleted while its folder was read: writing would make it again
    await mirrorRun(dir, lines, internal.write_run_json ? publicRunIds(run) : null, true).catch((err) =>
      this.deps.logger.warn({ bg_run_id: run.run_id, err: String(err) }, 'workspace repair failed'),
    );
  }

  /**
   * The folder that belongs to this run alone (absolute), or null: the run id is a segment of its
   * workspace path (the default template), so the folder up to that segment is its own. A template
   * without {run_id} shares one folder among runs: that is never removed for one run.
   */
  ownFolderOf(run: BackgroundRun): string | null {
    const rel = relativeWorkspace(this.deps.config.background.workspace_root, run.workspace_path);
    const segs = rel.split('/');
    const i = segs.indexOf(run.run_id);
    if (i < 0) return null;
    try {
      return absoluteWorkspace(this.deps.config.background.workspace_root, segs.slice(0, i + 1).join('/'));
    } catch {
      return null;
    }
  }

  async removeFolder(dir: string): Promise<void> {
    await this.mirrors.drop(dir);
    try {
      await this.remover.remove(dir);
    } catch (err) {
      this.deps.logger.warn({ err: String(err) }, 'could not remove a background workspace folder');
    }
    const prefix = dir.endsWith(sep) ? dir : dir + sep;
    for (const d of this.madeDirs) if (d === dir || d.startsWith(prefix)) this.madeDirs.delete(d);
  }
}
