// The background manager (docs/contract.md §1 background rows, §7): agents, tasks, schedules, runs
// and the ticker. Routes call only this class; it composes the task scheduler (schedules, task
// actors, dispatch) and the run engine (run actors, claims, leases, attempts, events, workspaces).
import { registerMachine } from '../runtime/machines-info.js';
import type { AnyStateMachine } from 'xstate';
import { BACKGROUND_RUN_MACHINE_VERSION, backgroundRunMachine } from '../../machines/background-run.machine.js';
import { TASK_MACHINE_VERSION, taskMachine } from '../../machines/task.machine.js';
import { domainError, notFound } from '../errors.js';
import { swallow } from '../telemetry/swallowed.js';
import type { BackgroundRun, BackgroundTaskBulkRunItem, BackgroundTaskRunRequest } from '../schemas/background.js';
import type { BackgroundTaskBulkRunResponse } from '../schemas/background-answers.js';
import { RunEngine } from './engine.js';
import { queueBulk } from './bulk-trigger.js';
import type { BackgroundDeps } from './host-types.js';
import { TaskScheduler } from './scheduler.js';
import { BackgroundAgents } from './agents.js';
import { BackgroundRunQueries, publicRun, runWaitTimeout } from './run-queries.js';
import { isSharedStore } from '../store/changes.js';
import { ACTIVE, ALL_STATUSES, TERMINAL, taskStatusKey } from './types.js';
import { repos } from '../store/repos/index.js';
import { QueuedRunBound } from './queue-bound.js';
import { TriggerDebouncer } from './debounce.js';
import { bgIdOf, bgTenantOf } from './tenancy.js';
import { BackgroundTasks } from './tasks.js';
import type { OperatorActions } from './operator-actions.js';
import { GLOBAL_SCOPE, type TenantScope } from '../runtime/tenancy.js';

export type { BackgroundDeps } from './host-types.js';

registerMachine(backgroundRunMachine as unknown as AnyStateMachine, BACKGROUND_RUN_MACHINE_VERSION);
registerMachine(taskMachine as unknown as AnyStateMachine, TASK_MACHINE_VERSION);

/** How often an instance of a shared store compares every task with the store (lost notifications). */
const TASK_RESYNC_MS = 15_000;
/** How often the retention sweep counts every task's ended runs, not only those of tasks with a run ended since the last sweep. */
const FULL_COUNT_EVERY_MS = 3_600_000;

export class BackgroundManager {
  readonly engine: RunEngine;
  readonly scheduler: TaskScheduler;
  /** The agent registry (agents.ts): routes call it directly. */
  readonly agents: BackgroundAgents;
  /** The read side of runs (run-queries.ts): routes call it directly. */
  readonly runs: BackgroundRunQueries;
  /** Task edits and reads (tasks.ts): routes call it directly. */
  readonly tasks: BackgroundTasks;
  /** Cancel and resume of a run (operator-actions.ts, the engine's): routes call it directly. */
  readonly operator: OperatorActions;
  private ticker: NodeJS.Timeout | null = null;
  private retentionTimer: NodeJS.Timeout | null = null;
  /** When the retention sweep last counted every task's ended runs (FULL_COUNT_EVERY_MS). */
  private lastFullCount = 0;
  private sweeping: Promise<number> | null = null;
  private tickCount = 0;
  private maintaining = false;
  private initialized = false;
  private running = false;
  private resyncTimer: NodeJS.Timeout | null = null;
  /** Debounced manual triggers (debounce.ts). */
  private readonly debouncer: TriggerDebouncer;
  /** background.max_queued_runs, checked by runTask (POST /background/tasks/{id}/run). */
  private readonly queueBound: QueuedRunBound;
  /**
   * Told after every task edit this process wrote (create, patch, delete, pause, resume): on a
   * shared store the cluster link tells the other instances' schedulers (src/runtime/cluster.ts).
   */
  onTaskEdited: ((taskId: string) => void) | null = null;

  constructor(private readonly deps: BackgroundDeps) {
    this.engine = new RunEngine(deps);
    this.scheduler = new TaskScheduler(deps, this.engine);
    this.agents = new BackgroundAgents(deps, this.engine);
    this.runs = new BackgroundRunQueries(deps, this.engine);
    this.tasks = new BackgroundTasks(deps, this.scheduler, this.agents, this.engine, (taskId) => this.onTaskEdited?.(taskId));
    this.operator = this.engine.operator;
    // A window's end is a `not_before`, which the claimer judges on the lease clock (the store's on
    // PostgreSQL: src/lease-clock.ts), so the window is measured on it too.
    this.debouncer = new TriggerDebouncer(deps.store, deps.leases, this.scheduler, () => this.queueBound.admit());
    this.queueBound = new QueuedRunBound(
      () => this.cfg.max_queued_runs,
      () => repos(deps.store).bgRuns.count({ name: 'status', value: 'queued' }),
    );
  }

  private get cfg() {
    return this.deps.config.background;
  }

  private now(): number {
    return this.deps.clock.now();
  }

  // ---------------------------------------------------------------- lifecycle

  /**
   * Registers the default agent (config background.agent_id) when missing, loads every task,
   * recovers runs a previous process left held, and starts the ticker.
   */
  async start(): Promise<void> {
    await this.agents.ensureDefaultAgent();
    await this.scheduler.load();
    const claim = this.cfg.enabled;
    await this.engine.start({ claim });
    this.initialized = true;
    if (!claim) return;
    // Runs that ended before this start (a crash before their sweep): the first sweep counts every task loaded.
    this.engine.retention.countAtNextSweep(this.scheduler.tasks.keys());
    this.lastFullCount = this.now();
    this.running = true;
    this.scheduler.due.start();
    const poll = this.cfg.poll_interval_ms;
    // Lease checks need not run every tick: every lease/4 (at least 1 s) finds a lapsed lease in time.
    const maintainEvery = Math.max(1, Math.round(Math.max(1000, (this.cfg.lease_seconds * 1000) / 4) / poll));
    this.ticker = setInterval(() => {
      this.scheduler.due.dispatchDue();
      void this.engine.claimer.claimPass();
      if (++this.tickCount % maintainEvery === 0 && !this.maintaining) {
        this.maintaining = true;
        void this.engine.claimer
          .maintenance()
          .catch(swallow('background.maintenance'))
          .finally(() => (this.maintaining = false));
      }
    }, poll);
    this.ticker.unref();
    this.retentionTimer = setInterval(() => void this.sweepRetention(), this.cfg.run_retention.sweep_interval_seconds * 1000);
    this.retentionTimer.unref();
    if (isSharedStore(this.deps.store)) {
      // Task edits of other instances arrive as notifications; this catches any that were lost.
      this.resyncTimer = setInterval(
        () => void this.scheduler.resyncAll().catch((err) => this.deps.logger.warn({ err: String(err) }, 'task resync failed')),
        TASK_RESYNC_MS,
      );
      this.resyncTimer.unref();
    }
  }

  /**
   * One pass of background.run_retention (also what the timer runs); resolves with the number of
   * runs deleted. A pass already under way is joined, not doubled.
   */
  sweepRetention(): Promise<number> {
    if (this.sweeping) return this.sweeping;
    const r = this.cfg.run_retention;
    const { scheduler } = this;
    // A sweep counts the runs of the tasks whose runs ended since the last one; once an hour every
    // task, in case an end was not seen here (one written by another instance that then died).
    if (this.now() - this.lastFullCount >= FULL_COUNT_EVERY_MS) {
      this.engine.retention.countAtNextSweep(scheduler.tasks.keys());
      this.lastFullCount = this.now();
    }
    this.sweeping = this.engine.retention
      .sweepRetention({
        maxAgeMs: r.max_age_days * 86_400_000,
        maxPerTask: r.max_runs_per_task,
        isTask: (taskId) => scheduler.tasks.has(taskId),
        // An occurrence record is what stops a replay; it may go once the schedule moved past it
        // (or the task is gone: a re-created task starts a new revision, so new occurrence ids).
        occurrenceDone: (run) => {
          if (!scheduler.tasks.has(run.task_id)) return true;
          const consumed = scheduler.consumedUpTo(run.task_id);
          return consumed !== null && run.due_at !== null && Date.parse(run.due_at) <= consumed;
        },
      })
      .then(
        (n) => {
          if (n > 0) this.deps.logger.info({ runs: n }, 'background run retention deleted ended runs');
          return n;
        },
        (err: unknown) => {
          this.deps.logger.warn({ err: String(err) }, 'background run retention failed');
          return 0;
        },
      )
      .finally(() => {
        this.sweeping = null;
      });
    return this.sweeping;
  }

  /** Stops dispatching and claiming; runs in hand go on until close() (graceful shutdown). */
  async stop(): Promise<void> {
    this.running = false;
    if (this.ticker) clearInterval(this.ticker);
    this.ticker = null;
    if (this.retentionTimer) clearInterval(this.retentionTimer);
    this.retentionTimer = null;
    if (this.resyncTimer) clearInterval(this.resyncTimer);
    this.resyncTimer = null;
    this.scheduler.stop();
    this.engine.claimer.stop();
  }

  async close(): Promise<void> {
    await this.stop();
    await this.sweeping; // the store closes after this
    await this.scheduler.close();
    await this.engine.close();
  }

  private requireRunning(): void {
    if (!this.running) {
      throw domainError(
        'AGT_ERR_BACKGROUND_UNAVAILABLE',
        [this.cfg.enabled ? 'the background manager is not running (starting or shutting down)' : 'background tasks are disabled (config background.enabled)'],
        { headers: { 'retry-after': '5' } },
      );
    }
  }

  /** POST /background/tasks/{id}/runs: one manual run per item (bulk-trigger.ts). */
  async runTaskBulk(taskId: string, items: BackgroundTaskBulkRunItem[]): Promise<BackgroundTaskBulkRunResponse> {
    this.requireRunning();
    const task = this.scheduler.tasks.get(taskId) ?? (await this.tasks.getTask(taskId));
    if (!task.enabled) throw notFound('enabled background task', bgIdOf(taskId));
    const { store } = this.deps;
    return queueBulk(
      { store, scheduler: this.scheduler, engine: this.engine, queueBound: this.queueBound, workspaceRoot: this.cfg.workspace_root },
      taskId,
      items,
    );
  }

  /**
   * POST /background/tasks/{id}/run: a manual run through the task actor (so the overlap policy
   * applies). With `wait`, answers when the run ends or pauses for a person, or throws the 504
   * run-wait-timeout body after server.request_timeout_seconds (the run goes on).
   * `opts.run_id`: the id the run gets (an Idempotency-Key reserved it); `opts.onQueued` is called
   * once the run exists, before a `wait` (the route then marks the key done).
   */
  async runTask(
    taskId: string,
    body: BackgroundTaskRunRequest,
    opts: { run_id?: string; onQueued?: (run: BackgroundRun) => Promise<void> } = {},
  ): Promise<BackgroundRun> {
    this.requireRunning();
    const task = this.scheduler.tasks.get(taskId) ?? (await this.tasks.getTask(taskId));
    if (!task.enabled) throw notFound('enabled background task', bgIdOf(taskId));
    const window = body.debounce_seconds ? body.debounce_seconds * 1000 : null;
    if (window === null) await this.queueBound.admit(); // a debounced trigger admits only a new window's run
    // The job decides and issues the write; the write itself is awaited outside the task's job.
    const dispatched = await this.scheduler.taskJob(taskId, async () => {
      const current = this.scheduler.tasks.get(taskId);
      if (!current || !current.enabled) throw notFound('enabled background task', bgIdOf(taskId));
      if (window !== null) return { done: Promise.resolve(await this.debouncer.trigger(current, body.query ?? null, window, opts.run_id)) };
      return this.scheduler.dispatchManual(current, body.query ?? null, opts.run_id);
    });
    const run = await dispatched.done;
    if (!run) throw notFound('enabled background task', bgIdOf(taskId));
    // Answer once the run's creation events are stored too, as before the append was pipelined.
    await this.engine.creation.appended(run.run_id);
    await opts.onQueued?.(publicRun(this.cfg.workspace_root, run));
    if (!body.wait || TERMINAL.has(run.status)) return publicRun(this.cfg.workspace_root, run);
    const budget = this.deps.config.server.request_timeout_seconds;
    const settled = await this.engine.waiters.waitSettled(run.run_id, budget * 1000);
    if (settled) return publicRun(this.cfg.workspace_root, settled);
    const current = await this.engine.get(run.run_id).catch(() => run);
    throw runWaitTimeout(current, bgIdOf(taskId), budget);
  }

  // ---------------------------------------------------------------- status

  /** GET /background/status: a tenant's counts are of its own agents, tasks and runs (and the shared agents it may run). */
  async status(scope: TenantScope = GLOBAL_SCOPE) {
    const { store } = this.deps;
    const { bgRuns, bgTasks, bgAgents } = repos(store);
    const tenant = scope.all ? null : (scope.tenant ?? '');
    const status_counts: Record<string, number> = {};
    const counts = await Promise.all(
      ALL_STATUSES.map((s) => bgRuns.count(tenant === null ? { name: 'status', value: s } : { name: 'tenant_status', value: taskStatusKey(tenant, s) })),
    );
    ALL_STATUSES.forEach((s, i) => (status_counts[s] = counts[i]));
    return {
      running: this.running,
      initialized: this.initialized,
      worker_id: this.deps.workerId,
      lease_seconds: this.cfg.lease_seconds,
      agents: tenant === null ? await bgAgents.count() : await this.agents.countVisible(scope),
      tasks: await bgTasks.count(tenant === null ? undefined : { name: 'tenant', value: tenant }),
      runs: await bgRuns.count(tenant === null ? undefined : { name: 'tenant', value: tenant }),
      active_runs: ACTIVE.reduce((n, s) => n + status_counts[s], 0),
      status_counts,
      skipped_occurrences: this.scheduler.skippedOccurrences(tenant === null ? undefined : (taskId) => bgTenantOf(taskId) === tenant),
    };
  }
}
