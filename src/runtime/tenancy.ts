// Tenants (docs/multi-tenant.md, docs/contract.md §18): every record a tenant key makes carries the
// tenant, and every id a client chooses lives in the tenant's own namespace. The namespace is the
// store key: `tenant` + U+001F + the id. No client id can hold U+001F (SafeId and BackgroundId refuse
// control characters), so no id of one namespace can spell a key of another, and ids without a
// tenant keep their plain key (records stored before tenants existed read as they did).

const SEPARATOR = '\u001f';

/** The store key of a client-chosen id in `tenant`'s namespace (the id itself without a tenant). */
export function tenantKey(tenant: string | null | undefined, id: string): string {
  return tenant ? `${tenant}${SEPARATOR}${id}` : id;
}

/** The client's id of a store key made by tenantKey (the key itself when it names no tenant). */
export function idOfTenantKey(key: string): string {
  const at = key.indexOf(SEPARATOR);
  return at < 0 ? key : key.slice(at + 1);
}

/**
 * A concurrency key in the run's tenant (docs/flow-control.md): two tenants naming the same key
 * have a queue and slots each, so one's backlog or lower limit never reaches the other, and a
 * queue position counts only its own runs. Records hold this key; answers show idOfTenantKey's.
 */
export function keyInTenant<C extends { key: string }>(c: C, tenant: string | null | undefined): C {
  return tenant ? { ...c, key: tenantKey(tenant, c.key) } : c;
}

/**
 * The ids every event of a run carries in its metadata (RunHost.emit and the events emitted
 * beside a live run): the client's agent and task ids (a tenant's are keys inside, bgKey below)
 * and the run's tenant, which every read of a tenant filters on. Spread it last, so no other
 * field can name another tenant.
 */
export function runEventIds(r: { run_id: string; session_id: string; agent_id: string; task_id: string | null; tenant?: string | null }) {
  return {
    run_id: r.run_id,
    session_id: r.session_id,
    agent_id: bgIdOf(r.agent_id),
    task_id: r.task_id === null ? null : bgIdOf(r.task_id),
    ...(r.tenant ? { tenant: r.tenant } : {}),
  };
}

/** The store key of a run's session: its session id in the run's tenant. */
export const sessionKeyOf = (r: { tenant?: string | null; session_id: string }): string => tenantKey(r.tenant, r.session_id);

/**
 * Who is asking, for reads: `tenant` is the namespace the caller acts in (null: none), `all` that
 * the caller sees every tenant's records (a global key without `x-agentd-tenant`).
 */
export interface TenantScope {
  readonly tenant: string | null;
  readonly all: boolean;
}

/** The scope of a request without auth, or of a global key without the header: everything. */
export const GLOBAL_SCOPE: TenantScope = { tenant: null, all: true };

/** Whether a record stamped `tenant` (absent: none) is visible in `scope`. */
export function visibleIn(scope: TenantScope, tenant: string | null | undefined): boolean {
  return scope.all || (tenant ?? null) === scope.tenant;
}

// Background task and agent ids (src/background/tenancy.ts): `<tenant>~<id>`, readable in folder names.
const BG_SEPARATOR = '~';

/** The background key of a client-chosen task or agent id in `tenant`'s namespace. */
export function bgKey(tenant: string | null | undefined, id: string): string {
  return tenant ? `${tenant}${BG_SEPARATOR}${id}` : id;
}

/** The tenant of a background key (null: none). */
export function bgTenantOf(key: string): string | null {
  const at = key.indexOf(BG_SEPARATOR);
  return at < 0 ? null : key.slice(0, at);
}

/** The client's id of a background key. */
export function bgIdOf(key: string): string {
  const at = key.indexOf(BG_SEPARATOR);
  return at < 0 ? key : key.slice(at + 1);
}
