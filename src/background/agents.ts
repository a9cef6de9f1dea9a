// Background agents (docs/contract.md §1 background rows): the registry of the agent specs that
// background tasks run with (the served agent is registered as the default one), each spec built
// when registered so one that cannot run is refused then. BackgroundManager delegates to this.
import { AgentSpecError, adminOnlyFields, isServedAgentSpec } from '../agent/agent-spec.js';
import { domainError, notFound, RequestValidationError } from '../errors.js';
import { isRefusal, swallow } from '../telemetry/swallowed.js';
import type { PreparedAgent } from '../agent/agent-registry.js';
import type { BackgroundAgentRegistrationRequest, BackgroundAgentSpec } from '../schemas/background.js';
import { isStoreError } from '../store/store.js';
import type { RunEngine } from './engine.js';
import type { BackgroundDeps } from './host-types.js';
import type { BgRunRow } from './types.js';
import type { AgentRow } from '../agent/agent-row.js';
import { relativeWorkspace } from './workspace.js';
import { basename, isAbsolute, relative, sep } from 'node:path';
import type { core } from 'zod';
import { repos } from '../store/repos/index.js';
import { scanPage } from '../runtime/list-scan.js';
import { GLOBAL_SCOPE, type TenantScope } from '../runtime/tenancy.js';
import { bgIdOf, bgKey, bgTenantOf, tenantField } from './tenancy.js';

const iso = (ms: number) => new Date(ms).toISOString();

export class BackgroundAgents {
  constructor(
    private readonly deps: BackgroundDeps,
    private readonly engine: RunEngine,
  ) {}

  private get cfg() {
    return this.deps.config.background;
  }

  private now(): number {
    return this.deps.clock.now();
  }

  private servedAgentSpec(agentId: string): BackgroundAgentSpec {
    const a = this.deps.config.agent;
    return {
      agent_id: agentId,
      name: a.name,
      system_instruction: a.system_instruction || null,
      agent_config: { max_steps: a.max_steps },
      model_config: { provider: a.model.provider, model: a.model.model },
      workspace_config: { root: '.' },
      local_tools_ref: a.tools.local ?? null,
      mcp_tools: a.tools.mcp.map((m) => ({ name: m.name })),
      metadata: { served_agent: true },
    };
  }

  async ensureDefaultAgent(): Promise<void> {
    const id = this.cfg.agent_id;
    const existing = await repos(this.deps.store).bgAgents.get<AgentRow>(id);
    const at = iso(this.now());
    if (existing && !isServedAgentSpec(existing.value)) {
      // Older versions let a request give this row a spec of its own; it never runs (the registry
      // serves this id as the served agent), and the row is put back so answers say so too.
      const row: AgentRow = { ...this.servedAgentSpec(id), created_at: existing.value.created_at, updated_at: at };
      await repos(this.deps.store)
        .bgAgents.update<AgentRow>(id, row, existing.version)
        .catch(swallow('background.restore_default_agent', { agent_id: id }));
      return;
    }
    if (existing) return;
    try {
      await repos(this.deps.store).bgAgents.create<AgentRow>(id, { ...this.servedAgentSpec(id), created_at: at, updated_at: at });
    } catch (err) {
      if (!isStoreError(err, 'conflict')) throw err;
    }
  }

  /**
   * `caller`: the role of the key (null when auth is off: every caller may do everything), the
   * tenant the request acts in, and the key's own tenant (`keyTenant`; null: a global key). What a
   * spec may reach is checked against the config when it is built (src/agent/agent-spec.ts).
   */
  async registerAgent(
    body: BackgroundAgentRegistrationRequest,
    caller: { role: string | null; tenant?: string | null; keyTenant?: string | null },
  ): Promise<AgentRow> {
    const clientId = body.agent_id ?? body.spec?.agent_id ?? this.cfg.agent_id;
    // The served agent's row stands for the config's agent; over HTTP it is only re-registered as
    // such, never given a spec (which would send its tasks, prompt and key wherever the spec says).
    if (body.spec && clientId === this.cfg.agent_id) throw domainError('AGT_ERR_SERVED_AGENT_RESERVED', [clientId]);
    // A tenant key's agent lives in the tenant's namespace; a global key's is shared (tenancy.ts).
    const agentId = bgKey(caller.tenant, clientId);
    if (body.spec && isServedAgentSpec(body.spec)) {
      throw new RequestValidationError('body', [specIssue(['metadata', 'served_agent'], 'set only on rows registered without a spec', 'value_error')], body);
    }
    const needsAdmin = body.spec ? adminOnlyFields(body.spec) : [];
    // A tools module is the operator's code, run in the service: a tenant's admin administers its
    // tenant, not the service, so only a global admin key may name one (docs/agents.md).
    if (caller.keyTenant && needsAdmin.length > 0) throw domainError('AGT_ERR_TENANT_TOOLS_MODULE', [caller.keyTenant, needsAdmin.join(', ')]);
    const admin = caller.role === null || (caller.role === 'admin' && !caller.keyTenant);
    if (!admin && needsAdmin.length > 0) throw domainError('AGT_ERR_AGENT_SPEC_NEEDS_ADMIN', [caller.role ?? '', needsAdmin.join(', ')]);
    const spec: BackgroundAgentSpec = body.spec ? { ...withoutTenant(body.spec), agent_id: agentId } : this.servedAgentSpec(agentId);
    const at = iso(this.now());
    const existing = await repos(this.deps.store).bgAgents.get<AgentRow>(agentId);
    if (existing && !body.replace) throw domainError('AGT_ERR_BACKGROUND_AGENT_EXISTS', [clientId], { detail: 'pass replace: true to replace it' });
    // Built now, so a spec that cannot run is refused here (422 naming the field), not at its first run.
    const prepared = await this.prepareAgent(spec, body, admin);
    const row: AgentRow = { ...spec, created_at: existing?.value.created_at ?? at, updated_at: at, ...(body.spec && admin ? { admin_registered: true } : {}) };
    try {
      if (existing) await repos(this.deps.store).bgAgents.update<AgentRow>(agentId, row, existing.version);
      else await repos(this.deps.store).bgAgents.create<AgentRow>(agentId, row);
    } catch (err) {
      if (prepared) this.deps.agents?.discard(prepared);
      if (isStoreError(err, 'conflict') || isStoreError(err, 'stale_version'))
        throw domainError('AGT_ERR_CONCURRENT_UPDATE', [`background agent '${clientId}'`], { detail: 'read it and try again' });
      throw err;
    }
    if (prepared) this.deps.agents?.install(agentId, at, prepared);
    return this.publicAgent(row);
  }

  private async prepareAgent(spec: BackgroundAgentSpec, body: unknown, privileged: boolean): Promise<PreparedAgent | null> {
    if (!this.deps.agents) return null;
    try {
      return await this.deps.agents.prepare(spec, privileged);
    } catch (err) {
      if (!(err instanceof AgentSpecError)) throw err;
      // The answer quotes the value at each path: a key sent in model_config.api_key is not echoed.
      const shown = structuredClone(body) as { spec?: { model_config?: Record<string, unknown> | null } };
      if (shown.spec?.model_config && 'api_key' in shown.spec.model_config) shown.spec.model_config.api_key = '[REDACTED]';
      throw new RequestValidationError(
        'body',
        err.problems.map((p) => specIssue(p.path, p.message, p.type ?? 'value_error')),
        shown,
      );
    }
  }

  /**
   * The agents `scope` may run and read: a tenant's own and the shared ones (a registry of agent
   * specs is small: a tenant's page is read through the whole list, src/runtime/list-scan.ts).
   */
  async listAgents(
    q: { limit: number; cursor?: string },
    scope: TenantScope = GLOBAL_SCOPE,
  ): Promise<{ agents: AgentRow[]; total: number; next_cursor: string | null }> {
    const repo = repos(this.deps.store).bgAgents;
    const match = scope.all ? null : (row: AgentRow) => sharedOrOwn(scope, row.agent_id);
    const page = await scanPage<AgentRow>((lq) => repo.list<AgentRow>(lq), { cursor: q.cursor, limit: q.limit, order: 'asc', match });
    const total = scope.all ? await repo.count() : await this.countVisible(scope);
    return { agents: page.items.map((a) => this.publicAgent(a)), total, next_cursor: page.next_cursor };
  }

  /** How many agents `scope` may run and read (its own and the shared ones). */
  async countVisible(scope: TenantScope): Promise<number> {
    const repo = repos(this.deps.store).bgAgents;
    let n = 0;
    let cursor: string | null = null;
    do {
      const page: Awaited<ReturnType<typeof repo.list<AgentRow>>> = await repo.list<AgentRow>({ cursor, limit: 1000 });
      for (const i of page.items) if (scope.all || sharedOrOwn(scope, i.value.agent_id)) n++;
      cursor = page.next_cursor;
    } while (cursor);
    return n;
  }

  /**
   * The stored key of the agent `agentId` names for `tenant`: the tenant's own agent of that id,
   * else the shared one; 404 when neither exists (another tenant's agent is not seen).
   */
  async resolveKey(agentId: string, tenant: string | null): Promise<string> {
    const repo = repos(this.deps.store).bgAgents;
    if (tenant && (await repo.get(bgKey(tenant, agentId)))) return bgKey(tenant, agentId);
    if (await repo.get(agentId)) return agentId;
    throw notFound('background agent', agentId);
  }

  async getAgent(agentId: string, scope: TenantScope = GLOBAL_SCOPE): Promise<AgentRow> {
    const key = await this.resolveKey(agentId, scope.tenant);
    const rec = await repos(this.deps.store).bgAgents.get<AgentRow>(key);
    if (!rec) throw notFound('background agent', agentId);
    return this.publicAgent(rec.value);
  }

  /** A tenant deletes its own agents; a shared one only a global key (403). */
  async deleteAgent(clientId: string, force: boolean, tenant: string | null = null): Promise<{ status: 'deleted' }> {
    const agentId = await this.resolveKey(clientId, tenant);
    if (tenant && bgTenantOf(agentId) !== tenant) throw domainError('AGT_ERR_TENANT_SHARED_AGENT', [clientId]);
    const rec = await repos(this.deps.store).bgAgents.get<AgentRow>(agentId);
    if (!rec) throw notFound('background agent', clientId);
    const active = await repos(this.deps.store).bgRuns.list<BgRunRow>({ index: { name: 'agent_active', value: agentId }, limit: 1000 });
    if (active.items.length > 0 && !force) {
      throw domainError('AGT_ERR_BACKGROUND_AGENT_IN_USE', [agentId, active.items.length], {
        detail: 'pass force=true to delete it anyway (its runs in flight are cancelled)',
      });
    }
    for (const r of active.items)
      await this.engine.operator.cancel(r.id, 'agent deleted').catch(swallow('background.delete_agent_cancel', { run_id: r.id, agent_id: agentId }, isRefusal));
    await repos(this.deps.store).bgAgents.delete(agentId);
    this.deps.agents?.evict(agentId);
    return { status: 'deleted' };
  }

  /**
   * A row as answered: no server path in it, nor the admin mark. The default agent's row once
   * held the absolute workspace root (shown relative to the workspace root); a tools module is
   * shown relative to the agents.tools_dirs folder that holds it, else by its file name (the
   * served agent's agent.tools.local). The stored row keeps the path: building the agent needs it.
   */
  private publicAgent(row: AgentRow): AgentRow {
    const { admin_registered: _mark, ...stored } = row;
    void _mark;
    const a: AgentRow = { ...stored, agent_id: bgIdOf(stored.agent_id), ...tenantField(stored.agent_id) };
    const root = (a.workspace_config as { root?: unknown } | null | undefined)?.root;
    const ref = a.local_tools_ref;
    let shown = a;
    if (typeof root === 'string' && isAbsolute(root)) {
      shown = { ...shown, workspace_config: { ...a.workspace_config, root: relativeWorkspace(this.cfg.workspace_root, root) || '.' } };
    }
    if (typeof ref === 'string' && isAbsolute(ref)) shown = { ...shown, local_tools_ref: this.toolsModuleName(ref) };
    return shown;
  }

  private toolsModuleName(file: string): string {
    for (const dir of this.deps.config.agents.tools_dirs) {
      const rel = relative(dir, file);
      if (rel && !rel.startsWith('..') && !isAbsolute(rel)) return rel.split(sep).join('/');
    }
    return basename(file);
  }
}

/** Whether an agent keyed `key` is the tenant's own or shared (registered by a global key). */
function sharedOrOwn(scope: TenantScope, key: string): boolean {
  const t = bgTenantOf(key);
  return t === null || t === scope.tenant;
}

/** A spec as stored: its tenant is the registering key's (the key's namespace), never the body's. */
function withoutTenant(spec: BackgroundAgentSpec): BackgroundAgentSpec {
  const { tenant: _t, ...rest } = spec;
  void _t;
  return rest;
}

/** A 422 item at `spec.<path>`; `type` is the item's type (`not_allowed`, `too_large`, `value_error`). */
function specIssue(path: Array<string | number>, message: string, type: string): core.$ZodIssue {
  return { code: 'custom', path: ['spec', ...path], message, input: undefined, params: { type } } as unknown as core.$ZodIssue;
}
