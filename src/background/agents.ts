// Background agents (decisions.md §1 background rows): the registry of the agent specs that
// background tasks run with (the served agent is registered as the default one), each spec built
// when registered so one that cannot run is refused then. BackgroundManager delegates to this.
import { AgentSpecError } from '../agent/agent-spec.js';
import { domainError, notFound, RequestValidationError } from '../errors.js';
import { isRefusal, swallow } from '../telemetry/swallowed.js';
import type { PreparedAgent } from '../runtime/agent-registry.js';
import type { BackgroundAgentRegistrationRequest, BackgroundAgentSpec } from '../schemas/background.js';
import { isStoreError } from '../store/store.js';
import type { BackgroundDeps, RunEngine } from './engine.js';
import type { AgentRow, BgRunRow } from './types.js';
import { relativeWorkspace } from './workspace.js';
import { basename, isAbsolute, relative, sep } from 'node:path';
import type { core } from 'zod';
import { repos } from '../store/repos/index.js';

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
    if (await repos(this.deps.store).bgAgents.get(id)) return;
    const at = iso(this.now());
    try {
      await repos(this.deps.store).bgAgents.create<AgentRow>(id, { ...this.servedAgentSpec(id), created_at: at, updated_at: at });
    } catch (err) {
      if (!isStoreError(err, 'conflict')) throw err;
    }
  }

  async registerAgent(body: BackgroundAgentRegistrationRequest): Promise<AgentRow> {
    const agentId = body.agent_id ?? body.spec?.agent_id ?? this.cfg.agent_id;
    const spec: BackgroundAgentSpec = body.spec ? { ...body.spec, agent_id: agentId } : this.servedAgentSpec(agentId);
    const at = iso(this.now());
    const existing = await repos(this.deps.store).bgAgents.get<AgentRow>(agentId);
    if (existing && !body.replace) throw domainError('AGT_ERR_BACKGROUND_AGENT_EXISTS', [agentId], { detail: 'pass replace: true to replace it' });
    // Built now, so a spec that cannot run is refused here (422 naming the field), not at its first run.
    const prepared = await this.prepareAgent(spec, body);
    const row: AgentRow = { ...spec, created_at: existing?.value.created_at ?? at, updated_at: at };
    try {
      if (existing) await repos(this.deps.store).bgAgents.update<AgentRow>(agentId, row, existing.version);
      else await repos(this.deps.store).bgAgents.create<AgentRow>(agentId, row);
    } catch (err) {
      if (prepared) this.deps.agents?.discard(prepared);
      if (isStoreError(err, 'conflict') || isStoreError(err, 'stale_version'))
        throw domainError('AGT_ERR_CONCURRENT_UPDATE', [`background agent '${agentId}'`], { detail: 'read it and try again' });
      throw err;
    }
    if (prepared) this.deps.agents?.install(agentId, at, prepared);
    return this.publicAgent(row);
  }

  private async prepareAgent(spec: BackgroundAgentSpec, body: unknown): Promise<PreparedAgent | null> {
    if (!this.deps.agents) return null;
    try {
      return await this.deps.agents.prepare(spec);
    } catch (err) {
      if (!(err instanceof AgentSpecError)) throw err;
      // The answer quotes the value at each path: a key sent in model_config.api_key is not echoed.
      const shown = structuredClone(body) as { spec?: { model_config?: Record<string, unknown> | null } };
      if (shown.spec?.model_config && 'api_key' in shown.spec.model_config) shown.spec.model_config.api_key = '[REDACTED]';
      throw new RequestValidationError(
        'body',
        err.problems.map(
          (p) =>
            ({
              code: 'custom',
              path: ['spec', ...p.path],
              message: p.message,
              input: undefined,
            }) as unknown as core.$ZodIssue,
        ),
        shown,
      );
    }
  }

  async listAgents(q: { limit: number; cursor?: string }): Promise<{ agents: AgentRow[]; total: number; next_cursor: string | null }> {
    const page = await repos(this.deps.store).bgAgents.list<AgentRow>({ cursor: q.cursor ?? null, limit: q.limit });
    const total = await repos(this.deps.store).bgAgents.count();
    return { agents: page.items.map((i) => this.publicAgent(i.value)), total, next_cursor: page.next_cursor };
  }

  async getAgent(agentId: string): Promise<AgentRow> {
    const rec = await repos(this.deps.store).bgAgents.get<AgentRow>(agentId);
    if (!rec) throw notFound('background agent', agentId);
    return this.publicAgent(rec.value);
  }

  async deleteAgent(agentId: string, force: boolean): Promise<{ status: 'deleted' }> {
    const rec = await repos(this.deps.store).bgAgents.get<AgentRow>(agentId);
    if (!rec) throw notFound('background agent', agentId);
    const active = await repos(this.deps.store).bgRuns.list<BgRunRow>({ index: { name: 'agent_active', value: agentId }, limit: 1000 });
    if (active.items.length > 0 && !force) {
      throw domainError('AGT_ERR_BACKGROUND_AGENT_IN_USE', [agentId, active.items.length], {
        detail: 'pass force=true to delete it anyway (its runs in flight are cancelled)',
      });
    }
    for (const r of active.items)
      await this.engine.cancel(r.id, 'agent deleted').catch(swallow('background.delete_agent_cancel', { run_id: r.id, agent_id: agentId }, isRefusal));
    await repos(this.deps.store).bgAgents.delete(agentId);
    this.deps.agents?.evict(agentId);
    return { status: 'deleted' };
  }

  /**
   * A row as answered: no server path in it. The default agent's row once held the absolute
   * workspace root (shown relative to the workspace root); a tools module is shown relative to
   * the agents.tools_dirs folder that holds it, else by its file name (the served agent's
   * agent.tools.local). The stored row keeps the path: building the agent needs it.
   */
  private publicAgent(a: AgentRow): AgentRow {
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
