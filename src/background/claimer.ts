// The claimer: the claim loop (queued runs by priority, then oldest first, while this process has free workers,
// under the overlap policy of their task) and recovery (lapsed leases, dead owners, due retries,
// parked runs whose decision came). What it claims is hosted by the engine (engine.ts).
import { randomUUID } from 'node:crypto';
import type { AgentSettled, BackgroundRunEvent } from '../../machines/background-run.machine.js';
import { canClaim } from '../../machines/policies/overlap.js';
import { newId } from '../ids.js';
import type { BackgroundRunStatus } from '../schemas/background.js';
import type { Page, Versioned } from '../store/store.js';
import { isSharedStore } from '../store/changes.js';
import { repos, type Repos } from '../store/repos/index.js';
import { HeldAhead, QueuedRunBuffer, queueRank, type BgRunRepo } from '../store/repos/bg-runs.js';
import { HELD, taskStatusKey, type BgRunRow } from './types.js';
import type { AttemptTimers } from './attempt-timers.js';
import { indexQueuedRuns } from './queue-order.js';
import type { BackgroundDeps, Handle, SendResult, TimerRef } from './host-types.js';

const iso = (ms: number) => new Date(ms).toISOString();

/** How long a shared store holds the rows a claim pass was handed: a pass ends in milliseconds; a dead one's rows are free after this. */
const CLAIM_HOLD_MS = 10_000;

/**
 * The buffer of queued runs (QueuedRunBuffer) is listed from the head of the queue again at least
 * this often: a drain lists the queue a few times a second instead of once per claimed run.
 */
const QUEUE_BUFFER_MAX_AGE_MS = 1_000;

/**
 * Queued rows a claim pass on a store that holds what it hands out (PostgreSQL) holds beyond its
 * free workers (HeldAhead, src/store/repos/bg-runs.ts): one at concurrency 1, so the statement that
 * finds the next run is never between two runs; a quarter of the workers, at most 10, above (a
 * batch per statement, as pg-boss's batchSize).
 */
const claimAheadFor = (concurrency: number): number => Math.min(10, Math.max(1, Math.ceil(concurrency / 4)));

/** What the claimer needs of the engine that hosts the runs. */
export interface ClaimerHost {
  handles: ReadonlyMap<string, Handle>;
  handle(runId: string, known?: Versioned<BgRunRow>): Promise<Handle | Versioned<BgRunRow> | null>;
  maybeRelease(h: Handle): void;
  statusOf(h: Handle): BackgroundRunStatus;
  send(runId: string, event: BackgroundRunEvent, opts?: { durable?: boolean; known?: Versioned<BgRunRow> }): Promise<SendResult>;
  heldCount(): number;
  /** The workspace mirror's backlog is at its bound: claim nothing until it has room (it kicks). */
  mirrorFull(): boolean;
  countActive(taskId: string): Promise<number>;
  /** A running row's agent run, if it already ended or parked (RECOVER carries it; agent-bridge.ts). */
  agentSettledOf(row: BgRunRow): Promise<AgentSettled | null>;
  timers: AttemptTimers;
  leaseMs(): number;
  /** Its task's concurrency key (task-keys.ts): a slot taken (true), or the key is full (false). */
  takeKey(run: BgRunRow['run']): Promise<boolean>;
  releaseKey(run: BgRunRow['run']): void;
  /** This process is the store's only writer, which takes commits first in, first out (not a shared store). */
  ownsStore(): boolean;
  /** Calls `fn` with the commit once the run's queued row write is handed to the store (RunHosts.whenIssued); false when none is queued. */
  whenIssued(h: Handle, fn: (landed: Promise<unknown>) => void): boolean;
  /** A run recovered running holds its key's slot again (an embedded store's holders died with the process). */
  retakeKey(run: BgRunRow['run']): Promise<void>;
}

export class Claimer {
  /** Claims and recoveries under way: they count as held runs (heldCount). */
  claimingNow = 0;
  private claimPassRunning = false;
  private claimAgain = false;
  private kickPending = false;
  private wakeTimer: TimerRef | null = null;
  private wakeAt = Infinity;
  /** This process claims and recovers runs (false before start and after stopClaiming). */
  accepting = false;
  /** indexQueuedRuns ran (queue-order.ts). */
  private queueIndexed = false;

  private readonly runs: BgRunRepo;
  private readonly meta: Repos['meta'];
  /**
   * The queued runs earlier passes listed (a store this process owns; see QueuedRunBuffer): a pass
   * reads them again by id instead of listing the queue per claimed run. Dropped on any doubt.
   */
  private readonly queued = new QueuedRunBuffer();
  /** Rows held ahead of the free workers on a store that holds what it hands out (claim ahead). */
  private readonly ahead = new HeldAhead();
  /** The release of the rows held ahead when claiming stopped (close() waits for it). */
  private releasing: Promise<void> = Promise.resolve();
  /**
   * Runs whose claim this process handed to the store and that are not yet known landed to every
   * pass (claim() answers once issued on a store it owns): the queued version each claim CASes
   * on. A pass whose read began before a claim landed may see that run still queued at that
   * version, perhaps after its handle was already released (its end landed too): it must not
   * claim it again (a doomed CAS, and an agent run started for nothing). An id leaves at the start
   * of the first pass after its claim landed or failed, so this holds at most the claims in flight.
   */
  private readonly issuedFrom = new Map<string, { version: number; taskId: string }>();
  private settledClaims: string[] = [];

  constructor(
    private readonly deps: BackgroundDeps,
    private readonly host: ClaimerHost,
  ) {
    ({ bgRuns: this.runs, meta: this.meta } = repos(deps.store));
  }

  /**
   * A run came back to the queue (claimed, retrying or waiting -> queued): it keeps its old place,
   * which may lie inside what the buffer holds, so the next pass lists the queue from its head.
   */
  requeued(): void {
    this.queued.drop();
    this.ahead.reordered();
  }

  /** A queued run left the queue by this process's write (its hold ended with it): it is no longer held ahead. */
  left(runId: string): void {
    this.ahead.forget(runId);
  }

  /**
   * A claim pass is under way or about to start, or a claim waits for its row write to land (a
   * shared store: the pass after it goes then, Claimer.claim): a claim's row write may be on its
   * way (write-join.ts waits for it).
   */
  get passing(): boolean {
    return this.claimPassRunning || this.kickPending;
  }

  /**
   * A new run was queued: a claim pass soon (at `atMs`, its `not_before`, if later). One of higher
   * priority than the buffer's last row sorts inside the buffer, which is then listed again.
   */
  arrived(run: BgRunRow['run'], atMs?: number): void {
    this.queued.arrived(queueRank(run.priority));
    this.ahead.reordered(queueRank(run.priority));
    this.kick(atMs);
  }

  /** Stop claiming (the wake-up timer too). */
  stop(): void {
    this.queued.drop();
    this.accepting = false;
    if (this.wakeTimer) this.host.timers.clearTimer(this.wakeTimer);
    this.wakeTimer = null;
    this.wakeAt = Infinity;
    this.releaseAhead();
  }

  /** Resolves once the rows held ahead went back to the queue (after stop()). */
  released(): Promise<void> {
    return this.releasing;
  }

  private releaseAhead(): void {
    if (this.ahead.size === 0) return;
    const next = this.runs.releaseAhead(this.ahead).catch((err: unknown) => {
      // Their holds lapse by themselves (CLAIM_HOLD_MS): another instance takes them then.
      this.deps.logger.warn({ err: String(err) }, 'could not release the queued runs held ahead');
    });
    this.releasing = Promise.all([this.releasing, next]).then(() => undefined);
  }

  /**
   * Asks for a claim pass soon (coalesced); with `atMs`, also at that instant (a `not_before`),
   * on the lease clock: the clock a pass judges `not_before` and its holds on.
   */
  kick(atMs?: number): void {
    if (!this.accepting) return;
    if (atMs !== undefined && atMs > this.deps.leases.now()) {
      this.wakeAtLatest(atMs);
      return;
    }
    if (this.kickPending) return;
    this.kickPending = true;
    setImmediate(() => {
      this.kickPending = false;
      void this.claimPass();
    });
  }

  private wakeAtLatest(atMs: number): void {
    if (atMs >= this.wakeAt && this.wakeTimer) return;
    if (this.wakeTimer) this.host.timers.clearTimer(this.wakeTimer);
    this.wakeAt = atMs;
    this.wakeTimer = this.host.timers.setTimer(
      () => {
        this.wakeTimer = null;
        this.wakeAt = Infinity;
        this.kick();
      },
      Math.max(0, atMs - this.deps.leases.now()),
    );
  }

  /**
   * Claims queued runs, higher priority first, then oldest first, while this process has free workers
   * (background.concurrency). queue_next and cancel_previous runs wait for their task per canClaim.
   */
  async claimPass(): Promise<void> {
    if (!this.accepting) return;
    if (this.claimPassRunning) {
      this.claimAgain = true;
      return;
    }
    this.claimPassRunning = true;
    try {
      do {
        this.claimAgain = false;
        await this.claimOnce();
      } while (this.claimAgain && this.accepting);
    } catch (err) {
      this.queued.drop();
      this.deps.logger.error({ err: String(err) }, 'claim pass failed');
    } finally {
      this.claimPassRunning = false;
    }
  }

  private async claimOnce(): Promise<void> {
    // Passes run one at a time: every read of this one begins after those claims settled.
    for (const id of this.settledClaims) this.issuedFrom.delete(id);
    this.settledClaims = [];
    const concurrency = this.deps.config.background.concurrency;
    if (this.host.heldCount() >= concurrency || this.host.mirrorFull()) return;
    // Which queued rows are due (`not_before`) and until when this pass holds the rows it is handed
    // (a shared store's advisory claim holds) are judged on the lease clock (src/lease-clock.ts),
    // the store's clock on PostgreSQL, as leases are: instances whose clocks disagree still agree
    // on when a row is due and when another instance's hold lapsed.
    const now = this.deps.leases.now();
    // The buffer's order holds only as long as every way back to the queue is reported
    // (requeued()): a bounded age makes one that is not cost at most QUEUE_BUFFER_MAX_AGE_MS.
    const since = this.queued.since;
    if (since !== null && now - since > QUEUE_BUFFER_MAX_AGE_MS) this.queued.drop();
    // Due queued rows in queue order (priority, then oldest first); on a shared store each page is held for this pass, so another
    // instance's claimer takes other rows (BgRunRepo.claimPass). A pass that throws leaves its
    // holds to lapse (CLAIM_HOLD_MS).
    this.ahead.max = claimAheadFor(concurrency);
    const pass = this.runs.claimPass(now, CLAIM_HOLD_MS, this.queued, this.ahead);
    const blockedTasks = new Set<string>();
    const fullKeys = new Set<string>();
    // Claims of one pass are written concurrently (they share a store round), not one round each:
    // claim() counts itself in heldCount at once, so the pass stops at the free worker count.
    const claims: Array<Promise<boolean>> = [];
    scan: do {
      // Rows are parsed whole, so a pass with few free workers reads a small page first.
      const free = concurrency - this.host.heldCount();
      // (At concurrency 1 a page of 16 cost 16 row parses per claim; most were never looked at.)
      // A buffered pass reads one row per free worker (the row cache answers; a row not claimable
      // just costs another call), and lists the queue in larger pages when it walks past the buffer.
      // A store that holds what it hands out (PostgreSQL) hands out only due rows: one per free
      // worker, as the buffer; more were held and released again for nothing (two row updates
      // each, and rows another instance's claimer could have taken meanwhile).
      const limit = pass.buffered || pass.holds ? Math.min(100, Math.max(1, free)) : Math.min(100, Math.max(4, free * 2));
      for (const item of await pass.claimQueued(limit)) {
        const { run, internal } = item.value;
        if (this.host.handles.has(run.run_id)) continue;
        const from = this.issuedFrom.get(run.run_id);
        if (from !== undefined && item.version <= from.version) continue;
        const policy = internal.overlap_policy;
        let gate: Handle['gate'] = null;
        if (policy === 'queue_next' || policy === 'cancel_previous') {
          if (blockedTasks.has(run.task_id)) continue;
          // A claim of the task this process issued may not have landed yet: the store's counts
          // below would not show it. The task is busy.
          if ([...this.issuedFrom.values()].some((c) => c.taskId === run.task_id)) {
            blockedTasks.add(run.task_id);
            continue;
          }
          // Shared store: the gate is read BEFORE the count, and the claim CASes it; a claim that
          // committed after this read moves the gate (and this claim fails), one that committed
          // before it is in the count.
          if (isSharedStore(this.deps.store)) {
            const id = taskGateId(run.task_id);
            const g = await this.meta.get(id);
            gate = { id, version: g ? g.version : null };
          }
          const active = await this.host.countActive(run.task_id);
          let oldest = true;
          if (policy === 'queue_next') {
            const first = await this.runs.list({
              index: { name: 'task_status', value: taskStatusKey(run.task_id, 'queued') },
              limit: 1,
            });
            oldest = first.items[0]?.id === run.run_id;
          }
          // One claim per such task per pass: after it the task is busy anyway.
          blockedTasks.add(run.task_id);
          if (!canClaim(policy, active, oldest)) continue;
        }
        // Its key full: it stays queued, in its place, for a pass after a slot frees (task-keys.ts).
        if (run.concurrency && (fullKeys.has(run.concurrency.key) || !(await this.host.takeKey(run)))) {
          fullKeys.add(run.concurrency.key);
          continue;
        }
        pass.taken(run.run_id);
        // A claim that answered once issued and then did not land (claim()): the same doubt.
        const lost = () => {
          this.queued.drop();
          this.host.releaseKey(run);
        };
        claims.push(
          this.claim(run.run_id, item, gate, lost)
            .catch((err: unknown) => {
              this.deps.logger.warn({ bg_run_id: run.run_id, err: String(err) }, 'could not claim a background run');
              return false;
            })
            .then((ok) => {
              if (!ok) {
                this.host.releaseKey(run);
                pass.untaken(run.run_id);
              }
              return ok;
            }),
        );
        if (this.host.heldCount() >= concurrency || !this.accepting || this.host.mirrorFull()) break scan;
      }
    } while (!pass.done);
    // Claim ahead: the rows of the passes to come are held while this pass's claims are written.
    const topUp = this.accepting ? pass.topUp().catch((err: unknown) => this.deps.logger.warn({ err: String(err) }, 'could not hold queued runs ahead')) : null;
    // A claim that did not happen leaves a row the buffer no longer lists, maybe still queued: doubt.
    if ((await Promise.all(claims)).includes(false)) this.queued.drop();
    await topUp;
    await pass.release();
    // Claiming stopped while this pass held rows ahead: they go back too.
    if (!this.accepting) this.releaseAhead();
    if (pass.nextDueAt !== null) this.wakeAtLatest(pass.nextDueAt);
  }

  /**
   * CLAIM then START, written as ONE row write: a CAS on the queued version, so of two workers
   * exactly one wins. `known` is the row the claim pass just read (saves a read; a stale one loses
   * the CAS). On a shared store the claim answers once the write landed, and the agent run starts
   * only then; on a store this process alone writes, first in, first out, both happen once the
   * write is handed to the store (AgentBridge.logic), so the next pass (the next run's claim, which
   * the previous run's end waits to share a round with: write-join.ts) does not wait for this
   * round's fsync; a write refused after that calls `lost` (the run was not claimed after all).
   */
  async claim(runId: string, known?: Versioned<BgRunRow>, gate: Handle['gate'] = null, lost: () => void = () => undefined): Promise<boolean> {
    this.claimingNow++;
    try {
      const loaded = await this.host.handle(runId, known);
      if (loaded === null || !('actor' in loaded)) return false;
      const h = loaded;
      h.gate = gate;
      h.sends++;
      try {
        const actor = h.actor!;
        const now = this.deps.clock.now();
        const claimEv: BackgroundRunEvent = {
          type: 'CLAIM',
          at: iso(now),
          worker_id: this.deps.workerId,
          lease_token: `lease_${randomUUID()}`,
          lease_expires_at: this.deps.leases.expiresAt(this.host.leaseMs()),
        };
        if (!this.accepting || actor.getSnapshot().status !== 'active' || !actor.getSnapshot().can(claimEv)) return false;
        actor.send(claimEv);
        actor.send({ type: 'START', at: iso(now), attempt_id: newId('attempt') });
        const issued = this.host.ownsStore() ? await this.issued(h) : null;
        if (issued) {
          this.issuedFrom.set(runId, { version: h.row.version, taskId: h.row.value.run.task_id });
          const settled = () => this.settledClaims.push(runId);
          issued.landed.then(settled, () => (settled(), lost()));
          return !h.dead;
        }
        await h.chain;
        // Claimed, whatever came after: an agent run started before its claim landed
        // (AgentBridge.logic) may have ended already, its end folded into the actor (RunHosts.foldInto).
        const status = this.host.statusOf(h);
        // That end freed no worker while this claim was counted (claimingNow): the next pass goes
        // now, so the end's commit (held for the next claim, write-join.ts) shares that claim's round.
        if (!HELD.has(status)) this.kick();
        return !h.dead && status !== 'queued';
      } finally {
        h.sends--;
        this.host.maybeRelease(h);
      }
    } finally {
      this.claimingNow--;
    }
  }

  /** The run's queued row write (the claim's) once it is handed to the store, with its landing; null if it never was (the copy was dropped first). */
  private issued(h: Handle): Promise<{ landed: Promise<unknown> } | null> {
    return new Promise((resolve) => {
      if (!this.host.whenIssued(h, (landed) => resolve({ landed }))) return resolve(null);
      void h.chain.then(() => resolve(null));
    });
  }

  // ---------------------------------------------------------------- recovery and due retries

  /**
   * Finds runs whose lease lapsed (or, with `ownersDead`, every held run not in this process) and
   * recovers them (claimed -> queued; running -> the next attempt continues the same agent run),
   * and requeues retries whose time came. Cheap: only claimed/running/retrying rows are read on
   * every pass. A run waiting for a person needs nothing here: the decision's commit requeues it
   * (AgentBridge.decided).
   */
  async maintenance(opts: { ownersDead?: boolean } = {}): Promise<void> {
    const now = this.deps.clock.now();
    // Before the first claim pass: runs queued by an agentd without the claim-order index get it.
    if (!this.queueIndexed) {
      const n = await indexQueuedRuns(this.deps.store, iso(now));
      this.queueIndexed = true;
      if (n > 0) this.deps.logger.info({ rows: n }, 'queued background runs indexed in claim order');
    }
    for (const status of ['claimed', 'running'] as const) {
      await this.forEachRow(status, async (row) => {
        const { run } = row.value;
        const h = this.host.handles.get(run.run_id);
        if (h && !h.dead) return; // held by this process and alive
        const lapsed = this.deps.leases.lapsed(run.lease_expires_at);
        if (!lapsed && !opts.ownersDead) return;
        if (!this.accepting) return;
        // The agent run may have ended (or parked) before the owner could record it: RECOVER
        // carries what it read, and the machine settles the run from it instead of recovering.
        const agent = status === 'running' ? await this.host.agentSettledOf(row.value) : null;
        const t = this.deps.clock.now();
        this.claimingNow++;
        try {
          // Running on: it keeps its key's slot, before a claim pass could hand it to a queued run
          // (a recovery that does not go on running lets go of it with its write: task-keys.ts).
          if (status === 'running') await this.host.retakeKey(run);
          const recovered = await this.host.send(
            run.run_id,
            {
              type: 'RECOVER',
              at: iso(t),
              worker_id: this.deps.workerId,
              lease_token: `lease_${randomUUID()}`,
              lease_expires_at: this.deps.leases.expiresAt(this.host.leaseMs()),
              attempt_id: newId('attempt'),
              previous_owner: run.lease_owner,
              agent,
            },
            { durable: true },
          );
          if (recovered.accepted && !agent) this.deps.metrics.recovered('background', lapsed ? 'lapsed_lease' : 'owner_dead');
        } finally {
          this.claimingNow--;
        }
      });
    }
    await this.forEachRow('retrying', async (row) => {
      const at = row.value.internal.retry_at ? Date.parse(row.value.internal.retry_at) : now;
      if (!this.host.timers.hasRetry(row.id)) this.host.timers.armRetry(row.id, at);
    });
  }

  private async forEachRow(status: BackgroundRunStatus, fn: (row: Versioned<BgRunRow>) => Promise<void>): Promise<void> {
    let cursor: string | null = null;
    do {
      const page: Page<BgRunRow> = await this.runs.list({
        index: { name: 'status', value: status },
        cursor,
        limit: 200,
      });
      for (const row of page.items) {
        try {
          await fn(row);
        } catch (err) {
          this.deps.logger.warn({ bg_run_id: row.id, err: String(err) }, 'background maintenance step failed');
        }
      }
      cursor = page.next_cursor;
    } while (cursor);
  }
}

/** The record a one-at-a-time task's claims CAS on a shared store (kind `meta`). */
function taskGateId(taskId: string): string {
  return `bg_task_gate|${taskId}`;
}
