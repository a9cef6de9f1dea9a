// Budget arithmetic (docs/contract.md §5). Pure: time comes in as `nowMs`, nothing here touches the
// store. The ledger (src/agent/budget-ledger.ts) reads entries, asks these functions, and writes.

export const BUDGET_METERS = ['cost_usd', 'tokens', 'model_calls', 'tool_calls'] as const;
export type BudgetMeter = (typeof BUDGET_METERS)[number];

/** Order matters: it is the order entries are listed and checked (narrowest first). */
export const BUDGET_SCOPES = ['run', 'session', 'eval', 'agent', 'tenant', 'application'] as const;
export type BudgetScope = (typeof BUDGET_SCOPES)[number];

export const BUDGET_WINDOWS = ['total', 'day', 'month'] as const;
export type BudgetWindow = (typeof BUDGET_WINDOWS)[number];

export type OnExhausted = 'pause' | 'terminate';

export const DEFAULT_WARN_AT = 0.8;
export const DEFAULT_APPLICATION_ID = 'default';

/**
 * Floating-point slack for `cost_usd` sums (0.1 + 0.2 style noise must not turn an exact fit into
 * a shortfall). Far below a cent, so it cannot hide real overspend; integer meters are unaffected.
 */
export const AMOUNT_EPSILON = 1e-9;

export interface BudgetLimit {
  meter: BudgetMeter;
  limit: number;
  /** Default `total`. */
  window?: BudgetWindow;
  /** Default `pause`. */
  on_exhausted?: OnExhausted;
  /** Fraction of the limit (plus grants) at which `budget_warning` fires once. Default 0.8. */
  warn_at?: number;
}

export interface BudgetsConfig {
  run?: BudgetLimit[];
  session?: BudgetLimit[];
  agent?: BudgetLimit[];
  /** Per tenant (docs/multi-tenant.md): covers the runs of a tenant's keys; a run without a tenant has none. */
  tenant?: BudgetLimit[];
  /** Per evaluation (docs/debugging.md): covers the replay runs of one evaluation; other runs have none. */
  eval?: BudgetLimit[];
  application?: BudgetLimit[];
  /** Identity of the application scope. Default `default`. */
  application_id?: string;
}

/** What a run is: the identities its covering budgets are keyed by. */
export interface BudgetSubject {
  run_id: string;
  session_id: string;
  agent_id: string;
  /** The run's tenant; absent or null: no tenant budget covers the run. */
  tenant?: string | null;
  /** The evaluation whose item the run is a replay of; absent or null: no eval budget covers the run. */
  eval_id?: string | null;
  /** Picks the `day` / `month` window the run falls in (UTC). */
  nowMs: number;
}

/** One (ledger key, meter) budget that covers a run. */
export interface CoveringBudget {
  /** `<scope>:<identity>:<period>`, e.g. `session:s_1:total`, `agent:assistant:2026-11`. */
  key: string;
  /** Store record id of the entry: `<key>|<meter>`. */
  id: string;
  scope: BudgetScope;
  identity: string;
  meter: BudgetMeter;
  window: BudgetWindow;
  /** `total`, `YYYY-MM-DD` (day) or `YYYY-MM` (month), UTC. */
  period: string;
  limit: number;
  on_exhausted: OnExhausted;
  warn_at: number;
}

/** The four numbers the arithmetic needs. */
export interface LedgerAmounts {
  limit: number;
  granted: number;
  spent: number;
  reserved: number;
}

export type MeterAmounts = Partial<Record<BudgetMeter, number>>;

export interface BudgetShortfall {
  key: string;
  scope: BudgetScope;
  meter: BudgetMeter;
  /** Effective capacity: configured limit plus everything granted so far. */
  limit: number;
  /** spent + reserved. */
  used: number;
  /** What the refused reservation asked for. */
  needed: number;
  /** used + needed - limit: the smallest grant that lets the reservation through. */
  shortfall: number;
}

export type CheckEntry = LedgerAmounts & {
  key: string;
  scope: BudgetScope;
  meter: BudgetMeter;
  on_exhausted?: OnExhausted;
};

export type CheckResult = { ok: true } | { ok: false; shortfall: BudgetShortfall; index: number };

/** `total`, `YYYY-MM-DD` or `YYYY-MM` of the UTC instant `nowMs`. */
export function windowPeriod(window: BudgetWindow, nowMs: number): string {
  if (window === 'total') return 'total';
  // new Date(ms) is deterministic (no clock read), so it is fine in a pure module.
  const iso = new Date(nowMs).toISOString();
  return window === 'day' ? iso.slice(0, 10) : iso.slice(0, 7);
}

export function ledgerKey(scope: BudgetScope, identity: string, period: string): string {
  return `${scope}:${identity}:${period}`;
}

export function ledgerRecordId(key: string, meter: BudgetMeter): string {
  return `${key}|${meter}`;
}

const DAY_RE = /^\d{4}-\d{2}-\d{2}$/;
const MONTH_RE = /^\d{4}-\d{2}$/;

/**
 * Splits a ledger key. The scope never contains `:` and the period never does, so the identity is
 * everything between the first and the last `:` (session ids like `background:a:t` stay whole).
 */
export function parseLedgerKey(key: string): { scope: BudgetScope; identity: string; period: string; window: BudgetWindow } | null {
  const first = key.indexOf(':');
  const last = key.lastIndexOf(':');
  if (first <= 0 || last <= first) return null;
  const scope = key.slice(0, first);
  const identity = key.slice(first + 1, last);
  const period = key.slice(last + 1);
  if (!(BUDGET_SCOPES as readonly string[]).includes(scope) || identity === '') return null;
  const window: BudgetWindow | null = period === 'total' ? 'total' : DAY_RE.test(period) ? 'day' : MONTH_RE.test(period) ? 'month' : null;
  if (window === null) return null;
  return { scope: scope as BudgetScope, identity, period, window };
}

function identityOf(scope: BudgetScope, config: BudgetsConfig, s: Omit<BudgetSubject, 'nowMs'>): string {
  switch (scope) {
    case 'run':
      return s.run_id;
    case 'session':
      return s.session_id;
    case 'agent':
      return s.agent_id;
    case 'tenant':
      return s.tenant ?? '';
    case 'eval':
      return s.eval_id ?? '';
    case 'application':
      return config.application_id ?? DEFAULT_APPLICATION_ID;
  }
}

/**
 * Every budget covering a run, narrowest scope first, config order within a scope. Two limits on
 * the same (key, meter) would share one ledger entry; the stricter one (smaller limit) wins, so a
 * duplicated config line can only tighten a budget, never loosen it.
 */
export function coveringBudgets(config: BudgetsConfig | undefined, subject: BudgetSubject): CoveringBudget[] {
  if (!config) return [];
  const out: CoveringBudget[] = [];
  const byId = new Map<string, number>();
  for (const scope of BUDGET_SCOPES) {
    if (scope === 'tenant' && !subject.tenant) continue;
    if (scope === 'eval' && !subject.eval_id) continue;
    const identity = identityOf(scope, config, subject);
    for (const l of config[scope] ?? []) {
      const window = l.window ?? 'total';
      const period = windowPeriod(window, subject.nowMs);
      const key = ledgerKey(scope, identity, period);
      const id = ledgerRecordId(key, l.meter);
      const entry: CoveringBudget = {
        key,
        id,
        scope,
        identity,
        meter: l.meter,
        window,
        period,
        limit: l.limit,
        on_exhausted: l.on_exhausted ?? 'pause',
        warn_at: l.warn_at ?? DEFAULT_WARN_AT,
      };
      const seen = byId.get(id);
      if (seen === undefined) {
        byId.set(id, out.length);
        out.push(entry);
      } else if (entry.limit < out[seen].limit) {
        out[seen] = entry;
      }
    }
  }
  return out;
}

/** The configured limit line for a parsed key and meter (used when a grant must create an entry). */
export function findLimit(config: BudgetsConfig | undefined, scope: BudgetScope, window: BudgetWindow, meter: BudgetMeter): BudgetLimit | null {
  let best: BudgetLimit | null = null;
  for (const l of config?.[scope] ?? []) {
    if (l.meter === meter && (l.window ?? 'total') === window && (best === null || l.limit < best.limit)) best = l;
  }
  return best;
}

/** Problems a config loader should report (one message each); empty when the config is sound. */
export function budgetConfigProblems(config: BudgetsConfig | undefined): string[] {
  const problems: string[] = [];
  if (!config) return problems;
  for (const scope of BUDGET_SCOPES) {
    (config[scope] ?? []).forEach((l, i) => {
      const at = `budgets.${scope}[${i}]`;
      if (!(BUDGET_METERS as readonly string[]).includes(l.meter)) problems.push(`${at}.meter: unknown meter '${String(l.meter)}'`);
      if (!Number.isFinite(l.limit) || l.limit < 0) problems.push(`${at}.limit: must be a finite number >= 0`);
      if (l.window !== undefined && !(BUDGET_WINDOWS as readonly string[]).includes(l.window))
        problems.push(`${at}.window: unknown window '${String(l.window)}'`);
      if (l.on_exhausted !== undefined && l.on_exhausted !== 'pause' && l.on_exhausted !== 'terminate')
        problems.push(`${at}.on_exhausted: must be pause or terminate`);
      if (l.warn_at !== undefined && !(l.warn_at > 0 && l.warn_at <= 1)) problems.push(`${at}.warn_at: must be in (0, 1]`);
    });
    const seen = new Set<string>();
    for (const l of config[scope] ?? []) {
      const k = `${l.meter}/${l.window ?? 'total'}`;
      if (seen.has(k)) problems.push(`budgets.${scope}: more than one limit for meter ${l.meter} window ${l.window ?? 'total'} (the smallest applies)`);
      seen.add(k);
    }
  }
  return problems;
}

export const capacity = (e: LedgerAmounts): number => e.limit + e.granted;
export const usedOf = (e: LedgerAmounts): number => e.spent + e.reserved;
/** limit + granted - spent - reserved. Negative when a settled actual overran its hold. */
export const remainingOf = (e: LedgerAmounts): number => e.limit + e.granted - e.spent - e.reserved;

/**
 * Checks a reservation of `amounts` against every entry whose meter it names. A meter needing 0
 * never fails (a call that needs none of a meter is not stopped by that meter). Among several
 * shortfalls the first `terminate` one is reported, else the first: pausing for a grant on one
 * key is pointless when another key would end the run anyway.
 */
export function checkReserve(entries: CheckEntry[], amounts: MeterAmounts): CheckResult {
  let first: { shortfall: BudgetShortfall; index: number } | null = null;
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    const needed = amounts[e.meter];
    if (needed === undefined || needed <= 0) continue;
    const rem = remainingOf(e);
    if (needed - rem <= AMOUNT_EPSILON) continue;
    const used = usedOf(e);
    const limit = capacity(e);
    const found = {
      shortfall: { key: e.key, scope: e.scope, meter: e.meter, limit, used, needed, shortfall: used + needed - limit },
      index: i,
    };
    if (e.on_exhausted === 'terminate') return { ok: false, ...found };
    if (first === null) first = found;
  }
  return first === null ? { ok: true } : { ok: false, ...first };
}

/** (spent + reserved) / (limit + granted); Infinity when something is used of a zero capacity. */
export function usageRatio(e: LedgerAmounts): number {
  const cap = capacity(e);
  const used = usedOf(e);
  if (cap <= 0) return used > 0 ? Infinity : 0;
  return used / cap;
}

/** True when usage moved from below `warn_at` to at or above it. */
export function crossesWarn(before: LedgerAmounts, after: LedgerAmounts, warnAt: number = DEFAULT_WARN_AT): boolean {
  return usageRatio(before) < warnAt && usageRatio(after) >= warnAt;
}
