// A drain at background.concurrency 1 on the embedded store: a run's end frees its worker at once
// and its commit waits for the next run's claim, so the two share one group-commit round (one
// fsync, one atomic batch) instead of the claim waiting for the end to be durable.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedOpenAI, type ScriptedOpenAI } from '../fixtures/scripted-openai.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { StoreError, type CommitOps, type WriteOp } from '../../src/store/store.js';
import { QueueClaimPass } from '../../src/store/repos/bg-runs.js';
import { api, directModel, waitRun, type Api } from './helpers.js';
import { waitFor } from '../helpers/wait.js';

let model: ScriptedOpenAI;
let server: TestServer;
let a: Api;

beforeAll(async () => {
  model = await startScriptedOpenAI();
  directModel(model);
  server = await startTestServer({ background: { poll_interval_ms: 50, concurrency: 1 } }, { modelUrl: model.url });
  a = api(server.url);
});

afterAll(async () => {
  await server.stop();
  server.cleanup();
  await model.close();
});

/**
 * The round a commit was written in, counted where it resolves: the commits of one group-commit
 * round resolve together, in one turn of the event loop, and a store writes one round at a time.
 */
function roundCounter(): () => number {
  let round = 0;
  let turnOpen = false;
  return () => {
    if (!turnOpen) {
      round++;
      turnOpen = true;
      setImmediate(() => (turnOpen = false));
    }
    return round;
  };
}

describe('draining at concurrency 1', () => {
  it("writes a run's end in the same store round as the next run's claim", async () => {
    const store = server.store as typeof server.store & { stats?: { groupCommitRounds: number } };
    if (!store.stats) return; // the embedded store only (AGENTD_TEST_STORE=postgres counts no rounds)
    // The round each lifecycle event was written in: the rounds counter when its commit resolved
    // (the commits of one round resolve together, before the next round can be written).
    const rounds = { claimed: new Set<number>(), completed: [] as number[] };
    const { commitWithEvents } = store;
    store.commitWithEvents = (ops, events) =>
      commitWithEvents.call(store, ops, events).then((r) => {
        const at = store.stats!.groupCommitRounds;
        for (const e of r.events) {
          if (e.event_type === 'background_run_claimed') rounds.claimed.add(at);
          if (e.event_type === 'background_run_completed') rounds.completed.push(at);
        }
        return r;
      });
    let ids: string[];
    try {
      expect(
        (await a.post('/background/tasks', { task_id: 'drain', schedule: { type: 'manual' }, query: 'just answer', overlap_policy: 'allow_parallel' })).status,
      ).toBe(200);
      const created = await Promise.all(Array.from({ length: 6 }, () => a.post('/background/tasks/drain/run', {})));
      ids = created.map((r) => (expect(r.status).toBe(200), r.body.run_id as string));
      for (const id of ids) expect((await waitRun(a, id)).status).toBe('completed');
    } finally {
      store.commitWithEvents = commitWithEvents;
    }
    expect(rounds.completed).toHaveLength(6);
    // Timing decides how many (a claim pass slower than the 5 ms wait misses it); before, none could.
    expect(rounds.completed.filter((r) => rounds.claimed.has(r)).length).toBeGreaterThan(0);
  });

  it("waits for a claim pass slower than its few ms: a run's end, in its agent run's final commit, shares the next run's claim round", async () => {
    const store = server.store;
    // A store other instances share (PostgreSQL): each run's end is folded into its agent run's
    // final commit, which waits for the next claim's write (write-join.ts, CarriedEvents.hold).
    // The embedded stores: the first test.
    if (!store.capabilities.sharedByInstances) return;
    // A slow queue read, as PostgreSQL's claim statement is on a loaded server (longer than the
    // join's 5 ms wait): before, each end went to the store alone and the claim in the round after.
    const { claimQueued } = QueueClaimPass.prototype;
    QueueClaimPass.prototype.claimQueued = async function (this: QueueClaimPass, limit: number) {
      await new Promise((r) => setTimeout(r, 25));
      return claimQueued.call(this, limit);
    };
    const roundNow = roundCounter();
    // Per round: the background runs written running (a claim) and completed.
    const byRound = new Map<number, { running: Set<string>; completed: Set<string> }>();
    // The runs whose completion was written in the commit of their agent run's record.
    const folded = new Set<string>();
    const watch = (ops: CommitOps): { wrapped: CommitOps; seen: Array<{ id: string; status: string }> } => {
      const seen: Array<{ id: string; status: string }> = [];
      const note = (list: WriteOp[]) => {
        for (const o of list) {
          const v = (o as { value?: { run?: { status?: string } } }).value;
          if (o.kind === 'bg_runs' && v?.run?.status) seen.push({ id: o.id, status: v.run.status });
          if (o.kind === 'bg_runs' && v?.run?.status === 'completed' && list.some((x) => x.kind === 'runs' && x.id === o.id)) folded.add(o.id);
        }
        return list;
      };
      return { wrapped: typeof ops === 'function' ? () => note(ops()) : note(ops), seen };
    };
    const landed = (seen: Array<{ id: string; status: string }>) => {
      const at = roundNow();
      const r = byRound.get(at) ?? { running: new Set<string>(), completed: new Set<string>() };
      byRound.set(at, r);
      for (const { id, status } of seen) if (status === 'running' || status === 'completed') r[status].add(id);
    };
    const { commit, commitWithEvents } = store;
    store.commit = (ops) => {
      const { wrapped, seen } = watch(ops);
      return commit.call(store, wrapped).then((r) => (landed(seen), r));
    };
    store.commitWithEvents = (ops, events) => {
      const { wrapped, seen } = watch(ops);
      return commitWithEvents.call(store, wrapped, events).then((r) => (landed(seen), r));
    };
    let ids: string[];
    try {
      const t = await a.post('/background/tasks', {
        task_id: 'slowpass',
        schedule: { type: 'manual' },
        query: 'just answer',
        overlap_policy: 'allow_parallel',
      });
      expect(t.status).toBe(200);
      // Queued in one request: every run is there before the first one ends.
      const r = await a.post('/background/tasks/slowpass/runs', { runs: Array.from({ length: 5 }, () => ({})) });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      ids = r.body.runs.map((x: { run: { run_id: string } }) => x.run.run_id);
      for (const id of ids) expect((await waitRun(a, id)).status).toBe('completed');
    } finally {
      store.commit = commit;
      store.commitWithEvents = commitWithEvents;
      QueueClaimPass.prototype.claimQueued = claimQueued;
    }
    const shared = ids.filter((id) => [...byRound.values()].some((r) => r.completed.has(id) && [...r.running].some((other) => other !== id)));
    // Every run's end is one commit with its agent run's (a first attempt's agent run takes its id).
    expect(ids.filter((id) => folded.has(id))).toEqual(ids);
    // Runs 1-4 end in the round of the next run's claim (run 5's end has no next claim), unless the
    // agent run's final update joined its previous write, still waiting for the store (then it
    // costs no round of its own either): timing decides how many; before, none could wait so long.
    expect(shared.length).toBeGreaterThan(0);
  });

  it("hands out, on a store whose claim passes hold rows (PostgreSQL), each queued run once: the free workers' rows and the one held ahead", async () => {
    const claims = server.store.capabilities.queueClaims;
    if (!claims) return; // the embedded stores hold nothing (one process owns the queue)
    // Rows each claim pass was handed (held from other instances until the pass ends).
    let handed = 0;
    const { claimQueued } = claims;
    claims.claimQueued = (q) =>
      claimQueued.call(claims, q).then((r) => {
        handed += r.items.length;
        return r;
      });
    try {
      const t = await a.post('/background/tasks', { task_id: 'holds', schedule: { type: 'manual' }, query: 'just answer', overlap_policy: 'allow_parallel' });
      expect(t.status).toBe(200);
      const r = await a.post('/background/tasks/holds/runs', { runs: Array.from({ length: 5 }, () => ({})) });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      for (const { run } of r.body.runs) expect((await waitRun(a, run.run_id)).status).toBe('completed');
    } finally {
      claims.claimQueued = claimQueued;
    }
    // At concurrency 1 the first pass is handed the run it claims and the one it holds ahead
    // (HeldAhead); each later pass claims the held one and is handed the next: every run once
    // (a page of 4 per pass, 14 in all, before passes asked for one per free worker).
    expect(handed).toBe(5);
  });
});

describe('starting before the claim lands', () => {
  it("sends the next run's model request while its claim's round is still being written, one model call at a time", async () => {
    const store = server.store;
    // On a shared store (PostgreSQL) too: the agent run then writes nothing before its claim lands (StartOptions.after).
    // A slow fsync: from `hold` on, every commit waits, in the order it was issued, until `go`.
    let go!: () => void;
    const gate = new Promise<void>((r) => (go = r));
    let holding = false;
    const { commit, commitWithEvents } = store;
    store.commit = (ops) => (holding ? gate.then(() => commit.call(store, ops)) : commit.call(store, ops));
    store.commitWithEvents = (ops, events) =>
      holding ? gate.then(() => commitWithEvents.call(store, ops, events)) : commitWithEvents.call(store, ops, events);
    let releaseFirst!: () => void;
    const firstAnswer = new Promise<void>((r) => (releaseFirst = r));
    try {
      const t = await a.post('/background/tasks', {
        task_id: 'early',
        schedule: { type: 'manual' },
        query: 'just answer',
        overlap_policy: 'allow_parallel',
        session_policy: { mode: 'run' },
      });
      expect(t.status).toBe(200);
      model.resetPeak();
      const before = model.requests.length;
      model.enqueue({ text: 'first', holdUntil: firstAnswer });
      const r = await a.post('/background/tasks/early/runs', { runs: [{}, {}] });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      const [first, second] = r.body.runs.map((x: { run: { run_id: string } }) => x.run.run_id as string);
      // The first run's model call is under way (its answer held); the second waits for a worker.
      await waitFor(() => model.requests.length > before, { what: "the first run's model request" });
      holding = true;
      releaseFirst();
      // The first run's end and the second's claim are issued and held: the second's agent run
      // has started anyway, and its model request arrives while nothing of that round is stored.
      await waitFor(() => model.requests.length > before + 1, { what: "the second run's model request while its claim is not stored" });
      // What a reader sees is what is stored: the second run is still queued, and its agent run (which
      // takes its id) is not stored yet.
      expect((await a.get(`/background/runs/${second}`)).body.status).toBe('queued');
      expect(await store.getRecord('runs', second)).toBeNull();
      go();
      expect((await waitRun(a, first)).status).toBe('completed');
      expect((await waitRun(a, second)).status).toBe('completed');
      // Concurrency 1: never two model calls at once.
      expect(model.maxInFlight()).toBe(1);
    } finally {
      go();
      store.commit = commit;
      store.commitWithEvents = commitWithEvents;
    }
  });
});

describe('an agent run that ends before its claim landed', () => {
  it("waits for that claim and the next one: its end, in its agent run's final commit, shares the next claim's round", async () => {
    const store = server.store;
    if (!store.capabilities.sharedByInstances) return; // there the claim lands before the agent run could end (first in, first out)
    // Every claim's commit is slow (30 ms, a loaded server), the model fast: each agent run ends
    // while its claim is in flight. Before, its end waited 5 ms for a claim that could not come
    // (the claim in flight counted as the worker's) and went to the store alone.
    const claimOf = (ops: CommitOps) =>
      Array.isArray(ops) && ops.some((o) => o.kind === 'bg_runs' && (o as { value?: { run?: { status?: string } } }).value?.run?.status === 'running');
    const roundNow = roundCounter();
    const claims = new Map<string, number>();
    const ends = new Map<string, number>();
    const { commitWithEvents } = store;
    store.commitWithEvents = (ops, events) => {
      const marks: Array<() => void> = [];
      const seen = (list: WriteOp[]) => {
        for (const o of list) {
          const status = (o as { value?: { run?: { status?: string } } }).value?.run?.status;
          if (o.kind === 'bg_runs' && status === 'running') marks.push(() => claims.set(o.id, roundNow()));
          if (o.kind === 'bg_runs' && status === 'completed' && list.some((x) => x.kind === 'runs')) marks.push(() => ends.set(o.id, roundNow()));
        }
        return list;
      };
      const landed = <T>(r: T) => (marks.forEach((m) => m()), r);
      // A claim's answer comes 30 ms after its round (the store is not held: other rounds go meanwhile).
      if (claimOf(ops))
        return commitWithEvents
          .call(store, seen(ops as WriteOp[]), events)
          .then(landed)
          .then((r) => new Promise<typeof r>((go) => setTimeout(() => go(r), 30)));
      return commitWithEvents.call(store, typeof ops === 'function' ? () => seen(ops()) : seen(ops), events).then(landed);
    };
    let ids: string[];
    try {
      const t = await a.post('/background/tasks', {
        task_id: 'slowclaim',
        schedule: { type: 'manual' },
        query: 'just answer',
        overlap_policy: 'allow_parallel',
        session_policy: { mode: 'run' },
      });
      expect(t.status).toBe(200);
      const r = await a.post('/background/tasks/slowclaim/runs', { runs: Array.from({ length: 5 }, () => ({})) });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      ids = r.body.runs.map((x: { run: { run_id: string } }) => x.run.run_id);
      for (const id of ids) expect((await waitRun(a, id)).status).toBe('completed');
    } finally {
      store.commitWithEvents = commitWithEvents;
    }
    // Every run's end is in its agent run's final commit; runs 1-4 end in a round with another run's
    // claim (run 5's end has no next claim), but for timing (a model slower than the claim).
    expect(ids.filter((id) => ends.has(id))).toEqual(ids);
    const paired = ids.filter((id) => [...claims].some(([other, at]) => other !== id && at === ends.get(id)));
    expect(paired.length).toBeGreaterThan(0);
  });
});

describe('a claim refused after its agent run started', () => {
  it('leaves nothing of that agent run stored on a shared store, and the run is claimed again and runs once', async () => {
    const store = server.store;
    if (!store.capabilities.sharedByInstances) return; // the embedded stores cancel it instead (AgentBridge.abandon)
    // Every `runs` op that reached the store, and the claims written (a row going running).
    const runOps: Array<{ op: string; id: string }> = [];
    const note = (list: WriteOp[]) => {
      for (const o of list) if (o.kind === 'runs') runOps.push({ op: o.op, id: o.id });
      return list;
    };
    let refuse = true;
    const before = model.requests.length;
    const { commitWithEvents } = store;
    store.commitWithEvents = (ops, events) => {
      const claim =
        Array.isArray(ops) &&
        ops.some((o) => {
          const run = (o as { value?: { run?: { status?: string; task_id?: string } } }).value?.run;
          return o.kind === 'bg_runs' && run?.status === 'running' && run.task_id === 'refused';
        });
      if (claim && refuse) {
        refuse = false;
        // Refused as if another instance's claim had won the row, once the agent run it started
        // asked the model: nothing of the claim is written.
        return waitFor(() => model.requests.length > before, { what: "the agent run's model request before its claim landed" }).then(() => {
          throw new StoreError('stale_version', 'bg_runs: another instance claimed it first');
        });
      }
      return commitWithEvents.call(store, typeof ops === 'function' ? () => note(ops()) : note(ops), events);
    };
    let id: string;
    try {
      const t = await a.post('/background/tasks', { task_id: 'refused', schedule: { type: 'manual' }, query: 'just answer', session_policy: { mode: 'run' } });
      expect(t.status).toBe(200);
      const r = await a.post('/background/tasks/refused/run', {});
      expect(r.status).toBe(200);
      id = r.body.run_id;
      const run = await waitRun(a, id);
      expect(run.status).toBe('completed');
      expect(run.attempt).toBe(1);
    } finally {
      store.commitWithEvents = commitWithEvents;
    }
    // Two model calls (the refused claim's, and the run's), one agent run created: the one of the
    // claim that landed, which completed.
    expect(model.requests.length - before).toBe(2);
    expect(runOps.filter((o) => o.id === id && o.op === 'create')).toHaveLength(1);
    const rec = await store.getRecord<{ status: string }>('runs', id);
    expect(rec?.value.status).toBe('completed');
  });
});

describe("an agent run's end carries its background run's", () => {
  it("creates an agent run whose model answers after 10 ms already ended, with its background run's completion, in one commit", async () => {
    const store = server.store;
    // A store other instances share creates every run at once (they must be able to read it).
    if (store.capabilities.sharedByInstances) return;
    // Each commit's record ops (op:kind:status).
    const commits: string[][] = [];
    const { commitWithEvents } = store;
    store.commitWithEvents = (ops, events) => {
      const seen: string[] = [];
      commits.push(seen);
      const note = (list: WriteOp[]) => {
        for (const o of list) {
          const v = (o as { value?: { status?: string; run?: { status?: string } } }).value;
          seen.push(`${o.op}:${o.kind}:${v?.status ?? v?.run?.status ?? ''}`);
        }
        return list;
      };
      return commitWithEvents.call(store, typeof ops === 'function' ? () => note(ops()) : note(ops), events);
    };
    try {
      // The model's answer comes 40 ms after its request: past a POST /run's 10 ms creating-write
      // window (CREATE_FOLD_MS), within a background agent run's (src/runtime/create-fold.ts).
      model.enqueue(() => ({ text: 'slow ok', holdUntil: new Promise((r) => setTimeout(r, 40)) }));
      expect((await a.post('/background/tasks', { task_id: 'slow-model', schedule: { type: 'manual' }, query: 'just answer' })).status).toBe(200);
      const run = await a.post('/background/tasks/slow-model/run', {});
      expect(run.status).toBe(200);
      expect((await waitRun(a, run.body.run_id)).status).toBe('completed');
    } finally {
      store.commitWithEvents = commitWithEvents;
    }
    const creating = commits.filter((c) => c.some((o) => o.startsWith('create:runs:')));
    expect(creating).toHaveLength(1);
    expect(creating[0]).toContain('create:runs:completed');
    expect(creating[0]).toContain('update:bg_runs:completed');
  });

  it("writes a failed agent run and its background run's failure in one commit", async () => {
    const store = server.store;
    // Each commit's record statuses (kind:status) and the lifecycle events it appended.
    const commits: Array<{ statuses: string[]; events: string[] }> = [];
    const { commitWithEvents } = store;
    store.commitWithEvents = (ops, events) => {
      const seen = { statuses: [] as string[], events: [] as string[] };
      commits.push(seen);
      const note = (list: WriteOp[]) => {
        for (const o of list) {
          const v = (o as { value?: { status?: string; run?: { status?: string } } }).value;
          seen.statuses.push(`${o.kind}:${v?.status ?? v?.run?.status ?? ''}`);
        }
        return list;
      };
      const wrapped: CommitOps = typeof ops === 'function' ? () => note(ops()) : note(ops);
      return commitWithEvents.call(store, wrapped, events).then((r) => {
        for (const e of r.events) seen.events.push(e.event_type);
        return r;
      });
    };
    try {
      expect((await a.post('/background/tasks', { task_id: 'fails', schedule: { type: 'manual' }, query: 'FAIL now' })).status).toBe(200);
      const run = await a.post('/background/tasks/fails/run', {});
      expect(run.status).toBe(200);
      expect((await waitRun(a, run.body.run_id)).status).toBe('failed');
    } finally {
      store.commitWithEvents = commitWithEvents;
    }
    const end = commits.find((c) => c.statuses.includes('runs:failed'));
    expect(end?.statuses).toContain('bg_runs:failed');
    expect(end?.events).toContain('background_run_failed');
  });
});
