import { describe, it, expect, beforeEach, afterEach } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BudgetLedger, BudgetLedgerError, type LedgerEntryValue } from '../../src/agent/budget-ledger.js';
import { estimateCostUsd, modelCallReservation, modelCallUsage } from '../../src/agent/pricing.js';
import type { BudgetsConfig } from '../../machines/policies/budget.js';
import { ManualClock } from '../../src/clock.js';
import { MemoryStore } from '../../src/store/memory.js';
import { LevelStore } from '../../src/store/level.js';
import { isStoreError, type Store, type Versioned, type WriteOp } from '../../src/store/store.js';

/** Seeded PRNG (mulberry32): the hammer's amounts are random but the same on every run. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Wraps a store: checks after every successful commit that no ledger entry it wrote is over its
 * capacity ("never overspend" at every step, not only at the end) and counts CAS conflicts.
 */
function watched(inner: Store): { store: Store; conflicts: () => number; violations: string[] } {
  let conflicts = 0;
  const violations: string[] = [];
  const store = Object.create(inner) as Store;
  // Widen the read-to-write window to a macrotask, so writers in "other processes" really
  // interleave between a read and its commit even on the in-memory store.
  store.getRecords = async <T>(kind: Parameters<Store['getRecords']>[0], ids: string[]) => {
    const out = await inner.getRecords<T>(kind, ids);
    await new Promise((resolve) => setImmediate(resolve));
    return out;
  };
  store.commit = async (ops: WriteOp[]) => {
    try {
      const out = await inner.commit(ops);
      for (const rec of out) {
        const v = (rec as Versioned<Partial<LedgerEntryValue>> | null)?.value;
        if (v && typeof v.spent === 'number' && v.spent + v.reserved! > v.limit! + v.granted!) {
          violations.push(`${v.key}|${v.meter}: spent ${v.spent} + reserved ${v.reserved} > ${v.limit} + ${v.granted}`);
        }
      }
      return out;
    } catch (e) {
      if (isStoreError(e, 'stale_version') || isStoreError(e, 'conflict')) conflicts++;
      throw e;
    }
  };
  return { store, conflicts: () => conflicts, violations };
}

const T0 = '2026-11-05T12:00:00Z';
const who = (i: number | string, over: Partial<{ session_id: string; agent_id: string }> = {}) => ({
  run_id: `run_${i}`,
  session_id: 's_1',
  agent_id: 'assistant',
  ...over,
});

const adapters: Array<[string, () => Promise<{ store: Store; cleanup: () => Promise<void> }>]> = [
  [
    'MemoryStore',
    async () => {
      const store = new MemoryStore();
      await store.open();
      return { store, cleanup: () => store.close() };
    },
  ],
  [
    'LevelStore',
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'agentd-ledger-'));
      const store = new LevelStore({ path: dir, sync: false });
      await store.open();
      return {
        store,
        cleanup: async () => {
          await store.close();
          await rm(dir, { recursive: true, force: true });
        },
      };
    },
  ],
];

describe.each(adapters)('BudgetLedger on %s', (_name, make) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  let clock: ManualClock;
  beforeEach(async () => {
    ({ store, cleanup } = await make());
    clock = new ManualClock(Date.parse(T0));
  });
  afterEach(async () => {
    await cleanup();
  });

  it('200 concurrent runs on one session budget never overspend', async () => {
    const LIMIT = 10_000;
    const config: BudgetsConfig = { session: [{ meter: 'tokens', limit: LIMIT }] };
    const w = watched(store);
    // Four ledgers on one store behave like four processes: their in-process locks do not see each
    // other, so only the store's compare-and-swap keeps the sum right.
    const ledgers = [0, 1, 2, 3].map(() => new BudgetLedger(w.store, config, clock, { maxAttempts: 1000, maxBackoffMs: 2 }));
    const rand = rng(20261105);
    const plans = Array.from({ length: 200 }, () => {
      const worst = 50 + Math.floor(rand() * 151);
      return { worst, actual: Math.floor(worst * (0.3 + 0.7 * rand())) };
    });

    const results = await Promise.all(
      plans.map(async (p, i) => {
        const ledger = ledgers[i % ledgers.length];
        const r = await ledger.reserve({ reservation_id: `res_${i}`, ...who(i), amounts: { tokens: p.worst } });
        if (!r.ok) return { i, r };
        await new Promise((resolve) => setImmediate(resolve)); // the "model call": let others interleave
        const s = await ledger.settle(r.reservation, { tokens: p.actual });
        expect(s.applied).toBe(true);
        return { i, r };
      }),
    );

    const entry = (await ledgers[0].getEntry('session:s_1:total', 'tokens'))!;
    const succeeded = results.filter((x) => x.r.ok);
    const failed = results.filter((x) => !x.r.ok);
    expect(w.violations).toEqual([]);
    expect(entry.reserved).toBe(0);
    expect(entry.holds).toEqual({});
    expect(entry.spent).toBe(succeeded.reduce((n, x) => n + plans[x.i].actual, 0));
    expect(entry.spent).toBeLessThanOrEqual(LIMIT + entry.granted);
    // the worst cases add up to ~25,000, so the limit must have refused some and admitted many
    expect(failed.length).toBeGreaterThan(0);
    expect(succeeded.length).toBeGreaterThan(50);
    for (const { i, r } of failed) {
      if (r.ok) continue;
      expect(r.on_exhausted).toBe('pause');
      expect(r.shortfall).toMatchObject({ key: 'session:s_1:total', scope: 'session', meter: 'tokens', limit: LIMIT, needed: plans[i].worst });
      expect(r.shortfall.shortfall).toBeGreaterThan(0);
      expect(r.shortfall.shortfall).toBe(r.shortfall.used + r.shortfall.needed - r.shortfall.limit);
      expect(r.shortfall.used).toBeLessThanOrEqual(LIMIT);
    }
    expect(w.conflicts()).toBeGreaterThan(0); // the CAS path really ran
    // every reservation record is gone: nothing left for a recovery to release
    expect(await store.countRecords('budget_ledger', { name: 'reservation_run', value: 'run_0' })).toBe(0);
  });

  it('concurrent runs over overlapping run/session/agent/application keys stay consistent (all-or-none)', async () => {
    const config: BudgetsConfig = {
      run: [{ meter: 'tokens', limit: 400 }],
      session: [{ meter: 'tokens', limit: 1_500 }],
      agent: [{ meter: 'tokens', limit: 2_500 }],
      application: [
        { meter: 'tokens', limit: 4_000 },
        { meter: 'model_calls', limit: 40 },
      ],
    };
    const w = watched(store);
    const ledgers = [0, 1].map(() => new BudgetLedger(w.store, config, clock, { maxAttempts: 1000, maxBackoffMs: 2 }));
    const rand = rng(7);
    const sessions = ['s_a', 's_b', 's_c', 's_d', 's_e'];
    const agents = ['alpha', 'beta'];
    const runs = Array.from({ length: 60 }, (_, i) => ({
      id: who(i, { session_id: sessions[i % 5], agent_id: agents[i % 2] }),
      steps: Array.from({ length: 3 }, () => 50 + Math.floor(rand() * 150)),
    }));
    await Promise.all(
      runs.map(async (run, i) => {
        const ledger = ledgers[i % 2];
        for (const [step, worst] of run.steps.entries()) {
          const r = await ledger.reserve({ reservation_id: `${run.id.run_id}:${step}`, ...run.id, amounts: { tokens: worst, model_calls: 1 } });
          if (!r.ok) return;
          await new Promise((resolve) => setImmediate(resolve));
          await ledger.settle(r.reservation, { tokens: Math.floor(worst / 2), model_calls: 1 });
        }
      }),
    );
    expect(w.violations).toEqual([]);
    const get = async (key: string, meter: 'tokens' | 'model_calls' = 'tokens') => (await ledgers[0].getEntry(key, meter)) ?? { spent: 0, reserved: 0 };
    const app = await get('application:default:total');
    const sum = async (keys: string[]) => {
      let n = 0;
      for (const k of keys) {
        const e = await get(k);
        n += e.spent;
        expect(e.reserved).toBe(0);
      }
      return n;
    };
    // every settled call was counted on all of its keys or on none
    expect(app.spent).toBeGreaterThan(0);
    expect(await sum(sessions.map((s) => `session:${s}:total`))).toBe(app.spent);
    expect(await sum(agents.map((a) => `agent:${a}:total`))).toBe(app.spent);
    expect(await sum(runs.map((r) => `run:${r.id.run_id}:total`))).toBe(app.spent);
    const calls = await get('application:default:total', 'model_calls');
    expect(calls.spent).toBeLessThanOrEqual(40);
    expect(calls.reserved).toBe(0);
  });

  it('a failed check on one key writes none', async () => {
    const config: BudgetsConfig = {
      run: [{ meter: 'tokens', limit: 1000 }],
      session: [{ meter: 'tokens', limit: 1000 }],
      agent: [{ meter: 'tokens', limit: 1000 }],
      application: [{ meter: 'tokens', limit: 100, on_exhausted: 'terminate' }],
    };
    const ledger = new BudgetLedger(store, config, clock);
    const r = await ledger.reserve({ reservation_id: 'r1', ...who(1), amounts: { tokens: 150 } });
    expect(r).toEqual({
      ok: false,
      on_exhausted: 'terminate',
      shortfall: { key: 'application:default:total', scope: 'application', meter: 'tokens', limit: 100, used: 0, needed: 150, shortfall: 50 },
    });
    expect((await store.listRecords('budget_ledger')).items).toEqual([]);
    const ok = await ledger.reserve({ reservation_id: 'r2', ...who(1), amounts: { tokens: 60 } });
    expect(ok.ok).toBe(true);
    const again = await ledger.reserve({ reservation_id: 'r3', ...who(1), amounts: { tokens: 60 } });
    expect(again.ok).toBe(false);
    const entries = await ledger.entriesForRun(who(1));
    expect(entries.map((e) => [e.key, e.reserved])).toEqual([
      ['run:run_1:total', 60],
      ['session:s_1:total', 60],
      ['agent:assistant:total', 60],
      ['application:default:total', 60],
    ]);
  });

  it('grant raises capacity, creates a missing entry, and is idempotent by grant_id', async () => {
    const ledger = new BudgetLedger(store, { session: [{ meter: 'tokens', limit: 100 }] }, clock);
    const big = await ledger.reserve({ reservation_id: 'big', ...who(1), amounts: { tokens: 130 } });
    expect(big.ok === false && big.shortfall.shortfall).toBe(30);
    expect(await ledger.getEntry('session:s_1:total', 'tokens')).toBeNull();

    const v = await ledger.grant('session:s_1:total', 'tokens', 30, { grant_id: 'budgetreq_1' });
    expect(v).toMatchObject({ key: 'session:s_1:total', limit: 100, granted: 30, spent: 0, reserved: 0, remaining: 130 });
    await ledger.grant('session:s_1:total', 'tokens', 30, { grant_id: 'budgetreq_1' }); // replay
    expect((await ledger.getEntry('session:s_1:total', 'tokens'))!.granted).toBe(30);

    const r = await ledger.reserve({ reservation_id: 'big', ...who(1), amounts: { tokens: 130 } });
    expect(r.ok).toBe(true);
    const next = await ledger.reserve({ reservation_id: 'one', ...who(1), amounts: { tokens: 1 } });
    expect(next.ok === false && next.shortfall).toMatchObject({ limit: 130, used: 130, needed: 1, shortfall: 1 });
    await ledger.grant('session:s_1:total', 'tokens', 5);
    expect((await ledger.reserve({ reservation_id: 'one', ...who(1), amounts: { tokens: 1 } })).ok).toBe(true);

    await expect(ledger.grant('session:s_1:2026-11', 'tokens', 5)).rejects.toMatchObject({ code: 'unknown_budget' });
    await expect(ledger.grant('session:s_1:total', 'cost_usd', 5)).rejects.toBeInstanceOf(BudgetLedgerError);
    await expect(ledger.grant('nonsense', 'tokens', 5)).rejects.toMatchObject({ code: 'unknown_budget' });
    await expect(ledger.grant('session:s_1:total', 'tokens', 0)).rejects.toMatchObject({ code: 'invalid_amount' });
  });

  it('reserve, settle and release are idempotent under replay', async () => {
    const ledger = new BudgetLedger(store, { session: [{ meter: 'tokens', limit: 1000 }] }, clock);
    const req = { reservation_id: 'run_1:1:0', ...who(1), amounts: { tokens: 200 } };
    const a = await ledger.reserve(req);
    const b = await ledger.reserve(req);
    expect(a.ok && !a.replayed).toBe(true);
    expect(b.ok && b.replayed && b.reservation).toEqual(a.ok && a.reservation);
    expect(await ledger.getEntry('session:s_1:total', 'tokens')).toMatchObject({ reserved: 200, holds: { 'run_1:1:0': 200 } });

    expect((await ledger.settle('run_1:1:0', { tokens: 120 })).applied).toBe(true);
    expect((await ledger.settle('run_1:1:0', { tokens: 120 })).applied).toBe(false);
    expect((await ledger.release('run_1:1:0')).applied).toBe(false);
    expect(await ledger.getEntry('session:s_1:total', 'tokens')).toMatchObject({ reserved: 0, spent: 120, holds: {} });

    const c = await ledger.reserve({ ...req, reservation_id: 'run_1:1:1' });
    expect((await ledger.release(c.ok ? c.reservation : 'x')).applied).toBe(true);
    expect((await ledger.release('run_1:1:1')).applied).toBe(false);
    expect((await ledger.settle('run_1:1:1', { tokens: 50 })).applied).toBe(false);
    expect(await ledger.getEntry('session:s_1:total', 'tokens')).toMatchObject({ reserved: 0, spent: 120 });
  });

  it('releaseRun drops every hold of a dead attempt, and only that run', async () => {
    const ledger = new BudgetLedger(store, { session: [{ meter: 'tokens', limit: 1000 }], agent: [{ meter: 'model_calls', limit: 10 }] }, clock);
    await ledger.reserve({ reservation_id: 'x1', ...who('x'), amounts: { tokens: 100, model_calls: 1 } });
    await ledger.reserve({ reservation_id: 'x2', ...who('x'), amounts: { tokens: 50 } });
    await ledger.reserve({ reservation_id: 'y1', ...who('y'), amounts: { tokens: 70, model_calls: 1 } });
    expect(await ledger.releaseRun('run_x')).toBe(2);
    expect(await ledger.releaseRun('run_x')).toBe(0);
    expect(await ledger.getEntry('session:s_1:total', 'tokens')).toMatchObject({ reserved: 70, spent: 0, holds: { y1: 70 } });
    expect(await ledger.getEntry('agent:assistant:total', 'model_calls')).toMatchObject({ reserved: 1, holds: { y1: 1 } });
  });

  it('settle counts an actual above the hold, and charges the hold for a meter it was not told', async () => {
    const ledger = new BudgetLedger(
      store,
      {
        session: [
          { meter: 'tokens', limit: 100 },
          { meter: 'model_calls', limit: 10 },
        ],
      },
      clock,
    );
    const r = await ledger.reserve({ reservation_id: 'r', ...who(1), amounts: { tokens: 50, model_calls: 1 } });
    await ledger.settle(r.ok ? r.reservation : 'r', { tokens: 130 });
    const [calls, tokens] = await ledger
      .entriesForRun(who(1))
      .then((es) => [es.find((e) => e.meter === 'model_calls')!, es.find((e) => e.meter === 'tokens')!]);
    expect(tokens).toMatchObject({ spent: 130, reserved: 0, remaining: -30 });
    expect(calls).toMatchObject({ spent: 1, reserved: 0, remaining: 9 });
    const next = await ledger.reserve({ reservation_id: 'r2', ...who(1), amounts: { tokens: 1 } });
    expect(next.ok === false && next.shortfall).toMatchObject({ used: 130, shortfall: 31 });
  });

  it('day and month windows key by UTC period; settle hits the period it reserved in', async () => {
    const config: BudgetsConfig = {
      agent: [
        { meter: 'tokens', limit: 100, window: 'day' },
        { meter: 'tokens', limit: 1000, window: 'month' },
      ],
    };
    const ledger = new BudgetLedger(store, config, clock);
    clock.set('2026-11-30T23:59:00Z');
    const late = await ledger.reserve({ reservation_id: 'late', ...who(1), amounts: { tokens: 90 } });
    expect(late.ok && late.reservation.holds.map((h) => h.key)).toEqual(['agent:assistant:2026-11-30', 'agent:assistant:2026-11']);
    clock.set('2026-12-01T00:01:00Z'); // after midnight: a new day and a new month
    const early = await ledger.reserve({ reservation_id: 'early', ...who(2), amounts: { tokens: 90 } });
    expect(early.ok).toBe(true);
    await ledger.settle('late', { tokens: 80 });
    expect(await ledger.getEntry('agent:assistant:2026-11-30', 'tokens')).toMatchObject({ spent: 80, reserved: 0, window: 'day', period: '2026-11-30' });
    expect(await ledger.getEntry('agent:assistant:2026-11', 'tokens')).toMatchObject({ spent: 80, reserved: 0, window: 'month' });
    expect(await ledger.getEntry('agent:assistant:2026-12-01', 'tokens')).toMatchObject({ reserved: 90 });
    const views = await ledger.entriesForRun(who(3));
    expect(views).toEqual([
      { scope: 'agent', meter: 'tokens', window: 'day', key: 'agent:assistant:2026-12-01', limit: 100, granted: 0, spent: 0, reserved: 90, remaining: 10 },
      { scope: 'agent', meter: 'tokens', window: 'month', key: 'agent:assistant:2026-12', limit: 1000, granted: 0, spent: 0, reserved: 90, remaining: 910 },
    ]);
    // the day is full but yesterday's budget does not count today
    expect((await ledger.reserve({ reservation_id: 'x', ...who(3), amounts: { tokens: 11 } })).ok).toBe(false);
    clock.set('2026-12-02T00:00:00Z');
    expect((await ledger.reserve({ reservation_id: 'x', ...who(3), amounts: { tokens: 11 } })).ok).toBe(true);
  });

  it('warns once when usage crosses warn_at, in the same commit', async () => {
    const ledger = new BudgetLedger(store, { session: [{ meter: 'tokens', limit: 100, warn_at: 0.5 }] }, clock);
    const r1 = await ledger.reserve({ reservation_id: 'a', ...who(1), amounts: { tokens: 40 } });
    expect(r1.ok && r1.warnings).toEqual([]);
    const r2 = await ledger.reserve({ reservation_id: 'b', ...who(1), amounts: { tokens: 20 } });
    expect(r2.ok && r2.warnings).toEqual([
      {
        key: 'session:s_1:total',
        scope: 'session',
        meter: 'tokens',
        window: 'total',
        limit: 100,
        granted: 0,
        spent: 0,
        reserved: 60,
        ratio: 0.6,
        warn_at: 0.5,
      },
    ]);
    expect((await ledger.getEntry('session:s_1:total', 'tokens'))!.warned).toBe(true);
    await ledger.release('b');
    await ledger.release('a');
    const r3 = await ledger.reserve({ reservation_id: 'c', ...who(1), amounts: { tokens: 90 } });
    expect(r3.ok && r3.warnings).toEqual([]);

    // a settle whose actual overruns the hold can cross too
    const other = new BudgetLedger(store, { session: [{ meter: 'tokens', limit: 100 }] }, clock);
    const s = await other.reserve({ reservation_id: 'd', ...who(2, { session_id: 's_2' }), amounts: { tokens: 10 } });
    expect(s.ok && s.warnings).toEqual([]);
    expect((await other.settle('d', { tokens: 85 })).warnings.map((x) => x.key)).toEqual(['session:s_2:total']);
  });

  it('does nothing when nothing covers the meters asked for', async () => {
    const ledger = new BudgetLedger(store, { session: [{ meter: 'tool_calls', limit: 1 }] }, clock);
    const r = await ledger.reserve({ reservation_id: 'z', ...who(1), amounts: { tokens: 1e9 } });
    expect(r).toMatchObject({ ok: true, reservation: { holds: [] } });
    expect((await ledger.settle('z', { tokens: 5 })).applied).toBe(false);
    expect((await store.listRecords('budget_ledger')).items).toEqual([]);
    expect(await new BudgetLedger(store, undefined, clock).entriesForRun(who(1))).toEqual([]);
    await expect(ledger.reserve({ reservation_id: 'n', ...who(1), amounts: { tokens: -1 } })).rejects.toMatchObject({ code: 'invalid_amount' });
  });

  it('enforces cost_usd from pricing', async () => {
    const pricing = { 'gpt-x': { input_per_million_usd: 2, output_per_million_usd: 8 } };
    const ledger = new BudgetLedger(store, { run: [{ meter: 'cost_usd', limit: 0.01 }] }, clock);
    const worst = modelCallReservation(pricing, 'gpt-x', { input_tokens: 1000, max_output_tokens: 500 });
    expect(worst).toEqual({ amounts: { tokens: 1500, cost_usd: 0.006, model_calls: 1 }, priced: true });
    const r1 = await ledger.reserve({ reservation_id: 'c1', ...who(1), amounts: worst.amounts });
    await ledger.settle(r1.ok ? r1.reservation : 'c1', modelCallUsage(pricing, 'gpt-x', { input_tokens: 1000, output_tokens: 100 }).amounts);
    expect((await ledger.getEntry('run:run_1:total', 'cost_usd'))!.spent).toBeCloseTo(0.0028, 12);
    // 0.0028 spent + 0.006 held fits in 0.01; a third worst case does not
    expect((await ledger.reserve({ reservation_id: 'c2', ...who(1), amounts: worst.amounts })).ok).toBe(true);
    const r3 = await ledger.reserve({ reservation_id: 'c3', ...who(1), amounts: worst.amounts });
    expect(r3.ok === false && r3.shortfall.meter).toBe('cost_usd');
    expect(r3.ok === false && r3.shortfall.shortfall).toBeCloseTo(0.0048, 12);
  });
});

describe('pricing', () => {
  it('prices input and output per million tokens; an unknown model is 0 and unpriced', () => {
    const pricing = { m: { input_per_million_usd: 3, output_per_million_usd: 15 } };
    expect(estimateCostUsd(pricing, 'm', { input_tokens: 1_000_000, output_tokens: 2_000_000 })).toEqual({ cost_usd: 33, priced: true });
    expect(estimateCostUsd(pricing, 'm', { input_tokens: 1, output_tokens: 0 })).toEqual({ cost_usd: 0.000003, priced: true });
    expect(estimateCostUsd(pricing, 'other', { input_tokens: 1000, output_tokens: 1000 })).toEqual({ cost_usd: 0, priced: false });
    expect(estimateCostUsd(undefined, 'm', { input_tokens: 1, output_tokens: 1 }).priced).toBe(false);
    expect(estimateCostUsd(pricing, 'toString', { input_tokens: 1, output_tokens: 1 }).priced).toBe(false);
    expect(modelCallReservation(undefined, 'm', { input_tokens: 10, max_output_tokens: 20 })).toEqual({
      amounts: { tokens: 30, cost_usd: 0, model_calls: 1 },
      priced: false,
    });
  });
});
