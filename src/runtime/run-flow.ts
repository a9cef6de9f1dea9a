// Concurrency keys for the run service (docs/flow-control.md, docs/contract.md §3.4). A run that
// names a key (StartOptions.concurrency) takes one of the key's slots before it starts; over the
// limit it is stored `queued` (durable: it keeps its place across a restart) and waits in this
// process's ConcurrencyQueue (src/flow/concurrency.ts) for a slot, then for a run slot without a
// deadline, and only then starts: its first write replaces the queued record (a cancel meanwhile
// fences that write off). A run without a key never comes here (no read, no write: the fast path).
import { idOfTenantKey, keyInTenant } from './tenancy.js';
import { admissionOrder, resolveConcurrency, type ConcurrencyRequest } from '../../machines/policies/flow.js';
import { domainError } from '../errors.js';
import { ConcurrencyQueue } from '../flow/concurrency.js';
import { keyReleaseOp } from '../flow/key-slots.js';
import { newId } from '../ids.js';
import { isSharedStore } from '../store/changes.js';
import { repos } from '../store/repos/index.js';
import { isStoreError, type Versioned } from '../store/store.js';
import { reportSwallowed } from '../telemetry/swallowed.js';
import type { RunKernel } from './run-kernel.js';
import { TERMINAL_RUN_STATUSES, newRunRecord, runIndexes, type RunRecord } from './run-record.js';
import { iso, type StartOptions, type StartedRun } from './run-types.js';

/** RunStarter.start; `heldKey`: a key slot taken in memory for `opts.run_id`, which a failed start gives back (releaseHeld). */
type Start = (query: string, sessionId: string | null | undefined, opts: StartOptions, heldKey?: string) => Promise<StartedRun>;

const DEFAULT_MAX_QUEUED = 10_000;

export class RunFlow {
  readonly queue: ConcurrencyQueue;
  /** Runs whose slot went back when their end was stored (their onSettled has nothing left to do). */
  private readonly releasedAtEnd = new Set<string>();
  /** Per key, the start of the run admitted last (admit: admitted runs start in their order). */
  private readonly starting = new Map<string, Promise<void>>();

  constructor(
    private readonly kernel: RunKernel,
    private readonly start: Start,
  ) {
    const { store, clock, settings } = kernel.deps;
    this.queue = new ConcurrencyQueue(store, clock, {
      pollMs: settings.flow?.poll_ms,
      deadHolders: (ids) => this.deadHolders(ids),
      onError: (site, err) => reportSwallowed(site, err),
    });
    // A run lets go of its key when it ends or parks for a person, whoever hosted it (a recovered
    // run too): its record names the key.
    // The slot goes on as soon as the end is stored (onEnded), not after the run's last events and
    // history writes (onSettled, the fallback for ends that do not pass through a run host).
    kernel.onEnded((record, keyReleased) => {
      if (!record.concurrency) return;
      this.releasedAtEnd.add(record.run_id);
      // Gone with the end's commit (a shared store): only the waiters are to be told.
      if (keyReleased) this.queue.released(record.concurrency.key);
      else if (!this.queue.releaseNow(record.concurrency.key, record.run_id)) void this.release(record.concurrency.key, record.run_id);
    });
    kernel.onSettled((record) => {
      if (this.releasedAtEnd.delete(record.run_id)) return;
      if (record.concurrency && record.status !== 'queued') void this.release(record.concurrency.key, record.run_id);
    });
  }

  private get deps() {
    return this.kernel.deps;
  }

  /** The limit `request` runs under: a config rule wins (machines/policies/flow.ts). */
  resolve(request: ConcurrencyRequest): ConcurrencyRequest {
    return resolveConcurrency(request, this.deps.settings.flow?.concurrency ?? []);
  }

  release(key: string, runId: string): Promise<void> {
    return this.queue.release(key, runId).catch((err) => reportSwallowed('flow.release', err, { run_id: runId }));
  }

  /** Gives back a slot startKeyed took in memory for a run whose start then failed: in this turn when nobody here waits on the key. */
  releaseHeld(key: string, runId: string): void {
    if (!this.queue.releaseNow(key, runId)) void this.release(key, runId);
  }

  /**
   * start() of a run with a concurrency key (`request`, as named): at once when the key has room,
   * else stored `queued`. On an embedded store a key with room costs the run nothing more than its
   * record's `concurrency`: its slot is taken in this turn (no promise, no copy of its options
   * when neither a config rule nor a tenant changes the key), and given back the same way at its
   * end (the onEnded above) or by a start that fails (RunStarter.start's `heldKey`: no promise
   * here to catch it).
   */
  startKeyed(query: string, sessionId: string | null | undefined, opts: StartOptions, request: ConcurrencyRequest): Promise<StartedRun> {
    // Config rules match the key the client named; the slots are its tenant's (keyInTenant).
    const concurrency = keyInTenant(this.resolve(request), opts.tenant);
    const run_id = opts.run_id ?? newId('run');
    const now = this.queue.tryTakeNow(concurrency.key, concurrency.limit, run_id);
    if (now) {
      const keyed = opts.run_id === run_id && opts.concurrency === concurrency ? opts : { ...opts, run_id, concurrency };
      return this.start(query, sessionId, keyed, concurrency.key);
    }
    return this.startOrQueue(query, sessionId, { ...opts, run_id, concurrency, priority: opts.priority ?? 0 }, concurrency, now === null);
  }

  /** startKeyed past its embedded store's fast path: a shared store's take (`shared`), else the run is queued. */
  private async startOrQueue(
    query: string,
    sessionId: string | null | undefined,
    keyed: StartOptions & { run_id: string; priority: number },
    concurrency: ConcurrencyRequest,
    shared: boolean,
  ): Promise<StartedRun> {
    const { run_id, priority } = keyed;
    if (shared) {
      // A shared store: the take rides in the run's creating commit (a holders op), refused at the
      // limit; no commit of its own (docs/flow-control.md). Nobody waiting here goes first.
      if (this.queue.waitingOn(concurrency.key) === 0) {
        try {
          return await this.start(query, sessionId, { ...keyed, takeSlotInCreate: concurrency });
        } catch (err) {
          if (!isStoreError(err, 'full')) {
            await this.release(concurrency.key, run_id);
            throw err;
          }
        }
      }
    }
    // An agent that does not exist is a 404 now, as for a run that starts at once, not a run
    // stored queued that fails when its turn comes.
    if (keyed.agent_id !== undefined) (await this.kernel.acquireAgent(keyed.agent_id)).release();
    const max = this.deps.settings.flow?.max_queued ?? DEFAULT_MAX_QUEUED;
    const waiting = await repos(this.deps.store).runs.count({ name: 'status', value: 'queued' });
    if (waiting >= max) throw domainError('AGT_ERR_RUN_QUEUE_FULL', [waiting], { headers: { 'retry-after': '5' } });
    const record = await this.enqueue(query, sessionId ?? newId('session'), keyed, concurrency, priority);
    keyed.onAccepted?.({ run_id, session_id: record.value.session_id });
    if (keyed.onQueued) {
      const position = (await this.position(record.value).catch(() => null)) ?? this.queue.localPosition(run_id) ?? 1;
      keyed.onQueued({ run_id, key: idOfTenantKey(concurrency.key), position });
    }
    return {
      run_id,
      session_id: record.value.session_id,
      trace_id: record.value.trace_id,
      queued: true,
      // Its id is stored now (the queued record): not new to the store when it starts.
      settled: this.admit(record.value, { ...keyed, onAccepted: undefined, onQueued: undefined, run_id_is_new: false }),
    };
  }

  /** Stores the run `queued` (durable before its id goes out) and puts it in this process's queue. */
  private async enqueue(
    query: string,
    session_id: string,
    opts: StartOptions & { run_id: string },
    concurrency: ConcurrencyRequest,
    priority: number,
  ): Promise<Versioned<RunRecord>> {
    const { clock, settings, workerId } = this.deps;
    const nowMs = clock.now();
    const record: RunRecord = {
      ...newRunRecord({
        run_id: opts.run_id,
        session_id,
        agent_name: settings.agent_name,
        agent_id: opts.agent_id ?? settings.agent_id,
        kind: opts.kind ?? 'sync',
        task_id: opts.task_id ?? null,
        query,
        trace_id: newId('trace'),
        now: iso(nowMs),
        // A queued run is its tenant's from the start (lists, counts, the 404 of another tenant's id).
        tenant: opts.tenant ?? null,
        metadata: opts.metadata ?? null,
        lease_seconds: settings.lease_seconds,
        lease_expires_at: null,
        owner: workerId,
      }),
      status: 'queued',
      machine_state: 'queued',
      heartbeat_at: null,
      concurrency,
      priority,
      queue: { key: concurrency.key, limit: concurrency.limit, priority, enqueued_at: nowMs },
    };
    const runs = repos(this.deps.store).runs;
    if (!this.deps.store.capabilities.ordersKeyWaiters) return runs.create(opts.run_id, record, runIndexes(record));
    // A store that hands freed slots to the key's waiters itself: the key's record is locked by
    // this commit (a holders op that changes nothing), so a release committing meanwhile either
    // comes first (and this run's pump then finds the slot free) or comes after and sees this run
    // waiting; without it, a release that looked for waiters just before this commit would hand
    // the slot to nobody while the pump read the key still full, leaving the run to the poll.
    const [created] = await this.deps.store.commit([
      runs.createOp(opts.run_id, record, runIndexes(record)),
      keyReleaseOp(this.deps.store, concurrency.key, opts.run_id),
    ]);
    return created as Versioned<RunRecord>;
  }

  /**
   * Waits for the queued run's slot, then a run slot, then starts it from its stored record.
   * Resolves with the run's last record (cancelled while queued: the cancelled one). Never rejects.
   */
  private async admit(queued: RunRecord, opts: StartOptions): Promise<RunRecord> {
    const q = queued.queue!;
    const run_id = queued.run_id;
    const outcome = await this.queue.wait({ run_id, key: q.key, limit: q.limit, priority: q.priority, enqueued_at: q.enqueued_at });
    if (outcome === 'dropped') return this.kernel.get(run_id);
    const admitted_at = this.deps.clock.now();
    // Runs of one key admitted back to back (two slots freed at once) start in the order they were
    // admitted: the key's FIFO holds up to the model. On an embedded store each waits until the one
    // before it has spawned its actor (StartOptions.onSpawned), whose way to the model has no store
    // round; not until start() returns, which waits for that run's first commit: a run that ended
    // before it (a fast model) held the next one a whole fsync round (the flow bench's p99). On a
    // shared store the way to the model has store rounds, and the next run could overtake it
    // (test/flow/concurrency FIFO on PostgreSQL): it waits for start() to return, as before.
    const before = this.starting.get(q.key);
    let started!: () => void;
    const mine = new Promise<void>((r) => (started = r));
    this.starting.set(q.key, mine);
    let slot: (() => void) | null = null;
    try {
      if (before) await before;
      const shared = isSharedStore(this.deps.store);
      slot = await this.kernel.slots.acquire({ priority: q.priority, deadline: false });
      const rec = await repos(this.deps.store).runs.get<RunRecord>(run_id);
      if (!rec || rec.value.status !== 'queued') {
        // Cancelled (or taken by another instance) while it waited for a run slot.
        slot();
        await this.release(q.key, run_id);
        return rec?.value ?? queued;
      }
      const run = await this.start(rec.value.query, rec.value.session_id, {
        ...opts,
        run_id,
        queued: rec,
        slot,
        onSpawned: shared ? undefined : started,
        admitted_at,
      });
      started();
      return await run.settled;
    } catch (err) {
      // start() let go of the run slot; the key's slot is ours to give back.
      await this.release(q.key, run_id);
      // Shutting down: the run stays stored `queued`, and the next start queues it again.
      if (this.kernel.closing) return queued;
      const now = await repos(this.deps.store)
        .runs.get<RunRecord>(run_id)
        .catch(() => null);
      if (now && now.value.status !== 'queued') return now.value;
      return this.failQueued(run_id, err);
    } finally {
      started();
      if (this.starting.get(q.key) === mine) this.starting.delete(q.key);
    }
  }

  /** A queued run that could not start (its agent is gone, the store failed): stored failed, not left queued for ever. */
  private async failQueued(runId: string, err: unknown): Promise<RunRecord> {
    reportSwallowed('flow.start_queued', err, { run_id: runId });
    const rec = await repos(this.deps.store)
      .runs.get<RunRecord>(runId)
      .catch(() => null);
    if (!rec) return { run_id: runId, status: 'failed' } as RunRecord;
    if (rec.value.status !== 'queued') return rec.value;
    const now = iso(this.deps.clock.now());
    const failed: RunRecord = {
      ...rec.value,
      status: 'failed',
      termination_reason: 'internal_error',
      error: { type: 'InternalServerError', message: String((err as Error)?.message ?? err) },
      owner: null,
      ended_at: now,
      updated_at: now,
    };
    return repos(this.deps.store)
      .runs.update(runId, failed, rec.version, runIndexes(failed))
      .then((r) => r.value)
      .catch(() => failed);
  }

  /** A queued run cancelled here: out of this process's queue (other instances find it cancelled when its turn comes). */
  dropped(runId: string): void {
    this.queue.drop(runId);
  }

  /** Whether the run waits in this process's queue. */
  isWaiting(runId: string): boolean {
    return this.queue.isWaiting(runId);
  }

  /**
   * The 1-based place of a queued run among every queued run of its key, in admission order
   * (priority, then arrival), across instances: read from the store's `flow_key` index. A run the
   * store handed a slot that has not started yet still counts (it reads `queued` until it starts).
   */
  async position(r: RunRecord): Promise<number | null> {
    if (r.status !== 'queued' || !r.queue) return null;
    // A store that orders the waiters itself goes by priority, then creation (the seq), not by
    // the enqueue times of instances' clocks: positions say the same.
    const byClock = !this.deps.store.capabilities.ordersKeyWaiters;
    const me = { run_id: r.run_id, priority: r.queue.priority, enqueued_at: byClock ? r.queue.enqueued_at : 0, seq: 0 };
    let ahead = 0;
    let cursor: string | null = null;
    let mySeq = Number.POSITIVE_INFINITY;
    const others: Array<{ priority: number; enqueued_at: number; seq: number; run_id: string }> = [];
    do {
      const page: { items: Versioned<RunRecord>[]; next_cursor: string | null } = await repos(this.deps.store).runs.list<RunRecord>({
        index: { name: 'flow_key', value: r.queue.key },
        cursor,
        limit: 1000,
      });
      for (const { seq, value } of page.items) {
        if (value.status !== 'queued' || !value.queue) continue;
        if (value.run_id === r.run_id) mySeq = seq;
        else others.push({ run_id: value.run_id, priority: value.queue.priority, enqueued_at: byClock ? value.queue.enqueued_at : 0, seq });
      }
      cursor = page.next_cursor;
    } while (cursor);
    me.seq = mySeq;
    for (const o of others) if (admissionOrder(o, me) < 0) ahead++;
    return ahead + 1;
  }

  /**
   * Queued runs that no caller waits for any more (the process that queued them stopped): put
   * back in this process's queue, in their order. At start-up on an embedded store every queued
   * run is such; on a shared store, those whose owner stopped beating (`ownerBeats`), each taken
   * over first by a compare-and-set of its owner, so only one instance takes it.
   */
  async recoverQueued(opts: { startup?: boolean } = {}): Promise<number> {
    const shared = isSharedStore(this.deps.store);
    if (!opts.startup && !shared) return 0;
    if (!shared) await this.retakeRunningSlots();
    let cursor: string | null = null;
    const found: Versioned<RunRecord>[] = [];
    do {
      const page: { items: Versioned<RunRecord>[]; next_cursor: string | null } = await repos(this.deps.store).runs.list<RunRecord>({
        index: { name: 'status', value: 'queued' },
        cursor,
        limit: 1000,
      });
      for (const item of page.items) if (item.value.queue && !this.queue.isWaiting(item.value.run_id)) found.push(item);
      cursor = page.next_cursor;
    } while (cursor);
    const dead = shared ? await this.deadOwners(found) : null;
    let n = 0;
    for (const item of found) {
      let r = item.value;
      if (dead) {
        if (r.owner === this.deps.workerId || !dead.has(r.owner ?? '')) continue;
        const taken = await repos(this.deps.store)
          .runs.update(r.run_id, { ...r, owner: this.deps.workerId, updated_at: iso(this.deps.clock.now()) }, item.version, runIndexes(r))
          .catch(() => null); // another instance took it first, or it was cancelled
        if (!taken) continue;
        r = taken.value;
      }
      n++;
      void this.admit(r, {
        kind: r.kind,
        task_id: r.task_id,
        ...(r.agent_id !== this.deps.settings.agent_id ? { agent_id: r.agent_id } : {}),
        ...(r.tenant ? { tenant: r.tenant } : {}),
        ...(r.metadata ? { metadata: r.metadata } : {}),
        concurrency: r.concurrency ?? null,
        priority: r.priority ?? 0,
      });
    }
    return n;
  }

  /**
   * Embedded store, at start-up: the key slots live in memory, so the runs still `running` with a
   * key (they died holding it; recovery resumes them) take theirs again before a queued run is
   * admitted, and the limit holds across the crash. (A run stopped by a graceful shutdown let go
   * of its slot, as a parked run does, and is resumed without it.)
   */
  private async retakeRunningSlots(): Promise<void> {
    let cursor: string | null = null;
    do {
      const page: { items: Versioned<RunRecord>[]; next_cursor: string | null } = await repos(this.deps.store).runs.list<RunRecord>({
        index: { name: 'status', value: 'running' },
        cursor,
        limit: 1000,
      });
      for (const { value: r } of page.items) {
        // No limit check: it held the slot before the crash.
        if (r.concurrency) await this.queue.slots.take(r.concurrency.key, Number.MAX_SAFE_INTEGER, r.run_id, this.deps.clock.now());
      }
      cursor = page.next_cursor;
    } while (cursor);
  }

  /**
   * On a shared store, an instance with runs waiting here writes when it last beat (kind meta,
   * `flow_instance:<worker id>`, an unchecked write every lease/3); the others take its queued
   * runs over once it has not beaten for two leases. Nothing is written while nothing waits here.
   */
  startBeating(): void {
    if (!isSharedStore(this.deps.store) || this.beatTimer) return;
    // A first look at once (start-up): the queued runs of an instance that stopped (markStopped)
    // or died long ago are taken over now, not a lease later.
    void this.recoverQueued().catch((err) => reportSwallowed('flow.takeover', err));
    const everyMs = Math.max(100, Math.floor((this.deps.settings.lease_seconds * 1000) / 3));
    this.beatTimer = setInterval(() => {
      if (this.kernel.closing) return;
      if (this.queue.size > 0) void this.beat();
      // Every few beats, look for queued runs of instances that stopped.
      if (++this.beats % 3 === 0) void this.recoverQueued().catch((err) => reportSwallowed('flow.takeover', err));
    }, everyMs);
    this.beatTimer.unref();
  }

  stopBeating(): void {
    if (this.beatTimer) clearInterval(this.beatTimer);
    this.beatTimer = null;
  }

  /**
   * Graceful shutdown on a shared store with runs queued here: this instance says it stopped (its
   * beat at 0), so another instance, or this one restarted, takes those runs over at once instead
   * of after two leases without a beat (deadOwners); a crash still takes the two leases.
   */
  async markStopped(): Promise<void> {
    if (!isSharedStore(this.deps.store) || this.queue.size === 0) return;
    const meta = repos(this.deps.store).meta;
    await this.deps.store
      .commit([meta.updateOp(`flow_instance:${this.deps.workerId}`, { beat_at: 0, stopped: true }, null)])
      .catch((err) => reportSwallowed('flow.mark_stopped', err));
  }

  private beatTimer: NodeJS.Timeout | null = null;
  private beats = 0;

  private beat(): Promise<void> {
    const meta = repos(this.deps.store).meta;
    return this.deps.store
      .commit([meta.updateOp(`flow_instance:${this.deps.workerId}`, { beat_at: this.deps.clock.now() }, null)])
      .then(() => undefined)
      .catch((err) => reportSwallowed('flow.beat', err));
  }

  /** Owners of `runs` that stopped beating: no beat for two leases (or none ever, and the run is older than that). */
  private async deadOwners(runs: Versioned<RunRecord>[]): Promise<Set<string>> {
    const now = this.deps.clock.now();
    const lapse = 2 * this.deps.settings.lease_seconds * 1000;
    const oldest = new Map<string, number>();
    for (const { value: r } of runs) {
      if (!r.owner || r.owner === this.deps.workerId) continue;
      const at = Date.parse(r.updated_at);
      oldest.set(r.owner, Math.min(oldest.get(r.owner) ?? at, at));
    }
    const owners = [...oldest.keys()];
    const beats = await repos(this.deps.store).meta.getMany<{ beat_at: number }>(owners.map((o) => `flow_instance:${o}`));
    const dead = new Set<string>();
    owners.forEach((o, i) => {
      const beat = beats[i]?.value.beat_at ?? null;
      if (beat !== null ? now - beat > lapse : now - oldest.get(o)! > lapse) dead.add(o);
    });
    return dead;
  }

  /** Holders of a full key whose runs ended: their slots were never given back (a crash between the end and the release). */
  private async deadHolders(ids: string[]): Promise<Set<string>> {
    const recs = await repos(this.deps.store).runs.getMany<RunRecord>(ids);
    const dead = new Set<string>();
    ids.forEach((id, i) => {
      const r = recs[i];
      if (r && TERMINAL_RUN_STATUSES.has(r.value.status)) dead.add(id);
    });
    return dead;
  }
}
